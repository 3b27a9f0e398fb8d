"""LPC as SGLang's ``--cache-policy lpc`` (backend ``lcr-lpc``).

For each new request (once per rid: SGLang re-matches waiting requests every round)
the driver (``lcr.integrations.sglang.PolicyDriver``) calls ``ServingLPC.on_served_request``:

1. Text: the request's ids decoded by the scheduler's own tokenizer (``req.tokenizer``).
   SGLang 0.5.23's ``Req`` drops the client's text (its ``origin_input_text`` argument
   is not stored) and renders chat messages to ids, so the ids are the one source;
   decoding gives back the rendered prompt, role markers included.
2. Turns: the rendered prompt split at the chat template's role markers
   (``lcr.lpc.templates``; one turn, logged once, when no marker is found).
3. Features: ``lcr.lpc.features.turn_example``, the rule training uses, counted with
   the model's encoder tokenizer; then the model's P(conversation continues).
4. The request's nodes (the matched path, and what it inserts later, which the driver
   dates with the request) get LPC's key logit(p) + scale·t, t = the request's arrival
   on this server's clock in seconds; a node shared by several conversations keeps the
   largest key (``ContinuationKeys``, the same code ``lcr sim-kv`` runs).

No text, or a failing or backed-off predictor: the request gets the neutral logit, the
mean of the last predicted ones (``ServingKeys.neutral``; the prior before any), so a
request is not demoted or favoured for lack of a guess; during an outage all new
requests share it and order by recency among themselves. No model: every request gets
``prior``, and with one probability for every node the key orders by recency, i.e. LRU.
Failures and slow predictions are logged and back off for ``backoff_s``, so the
scheduler thread is never held by the predictor for long.

Only predictors without text features are served (LightGBM on turns + lengths,
``--features length``, the best measured; or the turns-only table): a MiniLM embedding
costs tens of ms to seconds per request on CPU (docs/lpc.md), on the scheduler's thread
between two batches, so such models are refused at launch.
"""
from __future__ import annotations

import functools
import logging
import time
from collections import OrderedDict, deque
from pathlib import Path

from lcr.errors import LcrInputError
from lcr.lpc.features import token_count, turn_example
from lcr.lpc.policy import LPC, SCALE, ContinuationKeys, logit
from lcr.lpc.templates import SPLITTERS, split_turns
from lcr.predict.backoff import Backoff

log = logging.getLogger("lcr.sglang")

_REMEMBERED = 4096  # requests whose (logit, arrival) are kept; the driver remembers as many rids
_COUNTED_TEXTS = 8192  # message texts whose token counts are kept
_NEUTRAL_OVER = 256  # predictions averaged for the neutral key of a request left without one
COUNTERS = ("lpc_requests_text", "lpc_requests_without_text",
            "lpc_requests_one_turn", "lpc_prediction_failures", "lpc_requests_backed_off",
            "lpc_predict_seconds")


class ServingKeys(ContinuationKeys):
    """``ContinuationKeys`` for a live server: each request's logit and arrival time are
    assigned as it arrives, keyed by the driver's request counter (the last
    ``_REMEMBERED``). A request never assigned has the prior and the current time.
    Not thread-safe: the scheduler thread drives it."""

    def __init__(self, *, scale: float = SCALE, prior: float = 0.5, clock=time.monotonic):
        super().__init__([], [], scale=scale, prior=prior)
        self.clock = clock
        self._start = clock()
        self._requests: OrderedDict[int, tuple[float, float]] = OrderedDict()
        self._recent: deque[float] = deque(maxlen=_NEUTRAL_OVER)

    def assign(self, now: int, probability: float | None) -> None:
        """Request ``now`` arrives with ``probability`` or, without one, the neutral logit."""
        if probability is None:
            lg = self.neutral()
        else:
            lg = logit(probability)
            self._recent.append(lg)
        self._requests[now] = (lg, self.clock() - self._start)
        if len(self._requests) > _REMEMBERED:
            self._requests.popitem(last=False)

    def neutral(self) -> float:
        """The logit of a request left without a prediction (no text, a failed or backed-off
        predictor): the mean of the last predicted ones, the prior before any. So such a
        request is neither kept nor dropped ahead of predicted ones for lack of a guess; with
        no predictions at all (no model, no text) every node has the prior: LRU's order."""
        return sum(self._recent) / len(self._recent) if self._recent else self.prior

    def _request(self, now: int) -> tuple[float, float]:
        known = self._requests.get(now)
        return known if known is not None else (self.prior, self.clock() - self._start)

    def request_logit(self, now: int) -> float:
        return self._request(now)[0]

    def seconds(self, now: int) -> float:
        return self._request(now)[1]


def encoder_tokenizer(model):
    """The tokenizer the model's lengths were counted with (its encoder's)."""
    from lcr.lpc.encoder import DEFAULT
    from lcr.lpc.workload import load_tokenizer

    if model.encoder in ("", DEFAULT):
        return load_tokenizer()
    return load_tokenizer(Path(model.encoder) / "tokenizer.json")


def load_serving_model(path: str):
    """The model at ``path``, checked for serving: readable, without text features,
    and answering one prediction. Raises LcrInputError naming the file."""
    from lcr.lpc.model import Classifier

    model = Classifier.load(path)
    if model.uses_text:
        raise LcrInputError(f"lpc option model: a {model.kind} model on '{model.feature_set}' features needs "
                            "a sentence embedding per request, too slow for the scheduler thread; serve one "
                            "trained with `lcr lpc-train --model lightgbm --features length`", source=str(path))
    try:
        model.predict(None, [1], [[10, 0]])
    except Exception as err:  # noqa: BLE001 - a model that cannot answer is bad input
        raise LcrInputError(f"lpc option model: the model does not predict ({type(err).__name__}: {err})",
                            source=str(path)) from None
    return model


class RequestPredictor:
    """P(the request's conversation continues) from a served request, or None (prior).
    Not thread-safe: the scheduler thread drives it."""

    def __init__(self, model, *, splitter: str = "auto", budget_s: float = 0.02, backoff_s: float = 5.0,
                 tokenizer=None, clock=time.perf_counter):
        if splitter not in SPLITTERS:
            raise LcrInputError(f"lpc option splitter: unknown {splitter!r}; valid: {', '.join(SPLITTERS)}")
        self.model = model
        self.splitter = splitter
        self._backoff = Backoff("lpc prediction", timeout_s=budget_s, backoff_s=backoff_s,
                                fallback="requests get the neutral key (recency order)")
        self.tokenizer = tokenizer if tokenizer is not None else encoder_tokenizer(model)
        self.clock = clock
        self._count = functools.lru_cache(maxsize=_COUNTED_TEXTS)(functools.partial(token_count, self.tokenizer))
        self._count("warm up")  # the tokenizer's first call is slow
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._said_one_turn = False

    def text_of(self, req) -> str | None:
        ids, tokenizer = getattr(req, "origin_input_ids", None), getattr(req, "tokenizer", None)
        if ids is None or not len(ids) or tokenizer is None:  # e.g. --skip-tokenizer-init
            self.counts["lpc_requests_without_text"] += 1
            return None
        self.counts["lpc_requests_text"] += 1
        return tokenizer.decode(list(ids), skip_special_tokens=False)

    def features(self, req):
        """The request's ``Example`` (lcr.lpc.features), or None without text."""
        text = self.text_of(req)
        if text is None:
            return None
        turns = split_turns(text, self.splitter)
        if turns.template is None:
            self.counts["lpc_requests_one_turn"] += 1
            if not self._said_one_turn:
                self._said_one_turn = True
                log.warning("lcr lpc: no chat-template role markers in a request (splitter %s); "
                            "such requests count as one user turn", self.splitter)
        # A conversation re-sends its history every turn: count each text once.
        return turn_example(turns.users, turns.replies, len(turns.users) - 1, self.tokenizer,
                            self.model.budget, text=False, user_len=[self._count(u) for u in turns.users],
                            reply_len=[self._count(r) for r in turns.replies])

    def probability(self, req) -> float | None:
        started = self.clock()
        if self._backoff.shut(started):
            self.counts["lpc_requests_backed_off"] += 1
            return None
        try:
            ex = self.features(req)
            if ex is None:
                return None
            p = float(self.model.predict(None, [ex.turns], [[ex.prompt_tokens, ex.context_tokens]])[0])
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"probability {p} outside [0, 1]")
        except Exception as err:  # noqa: BLE001 - whatever breaks, serve on with the prior
            self.counts["lpc_prediction_failures"] += 1
            ended = self.clock()
            self._backoff.failed(ended, ended - started, f"{type(err).__name__}: {err}")
            return None
        ended = self.clock()
        self.counts["lpc_predict_seconds"] += ended - started
        self._backoff.answered(ended, ended - started)
        return p


class ServingLPC(LPC):
    """LPC fed by served requests (``on_served_request``); without a predictor, the prior."""

    def __init__(self, keys: ServingKeys, predictor: RequestPredictor | None = None):
        super().__init__(keys)
        self.request_predictor = predictor
        self.stats.extra.update(dict.fromkeys(COUNTERS, 0))

    def on_served_request(self, req, now: int) -> None:
        p = None
        if self.request_predictor is not None:
            p = self.request_predictor.probability(req)
            self.stats.extra.update(self.request_predictor.counts)
        self.keys.assign(now, p)


def serving_lpc(scale: float = SCALE, prior: float = 0.5, model: str | None = None, splitter: str = "auto",
                predict_budget_ms: float = 20.0,
                predict_backoff_s: float = 5.0) -> ServingLPC:
    if not 0 < float(prior) < 1:
        raise LcrInputError(f"lpc options: prior must be in (0, 1), got {prior}")
    if not float(scale) > 0:
        raise LcrInputError(f"lpc options: scale must be positive, got {scale}")
    predictor = None
    if model is not None:
        predictor = RequestPredictor(load_serving_model(model), splitter=splitter,
                                     budget_s=float(predict_budget_ms) / 1000, backoff_s=float(predict_backoff_s))
    return ServingLPC(ServingKeys(scale=float(scale), prior=float(prior)), predictor)
