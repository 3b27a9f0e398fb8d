"""The LPC policies of ``lcr sim-kv`` on a chat trace (generator ``sharegpt:...``).

``lpc:model=PATH``         LPC with a trained predictor (``lcr lpc-train``)
``lpc:model=oracle``       LPC fed the truth (p = 1 if the conversation continues, else 0):
                           the paper's Oracle; ``lpc-oracle`` is the same
``laru-lpc:model=...``     LARU whose next-access predictor is LPC's probability
``invert=1``               flips every prediction (p -> 1 - p): the worst case
``scale=S``                decay rate per second (default 1e-2)
Other ``laru-lpc`` parameters go to LARU; its confidence rule defaults to ``balance``
(``lcr.kv.laru``): LPC's predictions are right on average but wrong on many single
conversations, which Algorithm 1's induced misses punish even while LPC is well ahead
of LRU; ``confidence=shadow`` gives ``laru``'s rule.
"""
from __future__ import annotations

from lcr.errors import LcrInputError
from lcr.kv.policies import RadixLARU
from lcr.kv.registry import RadixPolicy, Serving, register_policy
from lcr.lpc.policy import LPC, SCALE, ContinuationKeys, ContinuationNextAccess


def _chat_meta(workload) -> dict:
    meta = getattr(workload, "meta", None) or {}
    if "conversations" not in meta:
        raise LcrInputError(f"{workload.name}: LPC policies need a chat trace "
                            "(generator sharegpt:path=CHATS.jsonl)")
    return meta


def probabilities(workload, model: str) -> list[float]:
    """One probability per request, computed once per (workload, model)."""
    meta = _chat_meta(workload)
    cache = meta.setdefault("_lpc_probabilities", {})
    if model not in cache:
        if model == "oracle":
            cache[model] = [1.0 if c else 0.0 for c in meta["continues"]]
        else:
            from lcr.lpc.model import Classifier
            from lcr.lpc.train import request_probabilities

            cache[model] = request_probabilities(Classifier.load(model), meta)
    return cache[model]


def continuation_keys(workload, model: str, invert: bool, scale: float) -> ContinuationKeys:
    probs = probabilities(workload, str(model))
    if invert:
        probs = [1.0 - p for p in probs]
    return ContinuationKeys(probs, _chat_meta(workload)["times"], scale=scale)


def lpc_policy(workload, model: str | None = None, invert: int = 0, scale: float = SCALE) -> LPC:
    if model is None:
        raise LcrInputError("policy lpc needs model=PATH (from lcr lpc-train) or model=oracle")
    return LPC(continuation_keys(workload, model, bool(invert), scale))


def laru_lpc_policy(workload, model: str | None = None, invert: int = 0, scale: float = SCALE,
                    **laru_params) -> RadixLARU:
    if model is None:
        raise LcrInputError("policy laru-lpc needs model=PATH (from lcr lpc-train) or model=oracle")
    # LARU sees LPC's order; flipping is done on the probabilities, as for lpc.
    predictor = ContinuationNextAccess(continuation_keys(workload, model, bool(invert), scale))
    return RadixLARU(predictor, **{"confidence": "balance", **laru_params})


# Registered here, not in lcr.kv: the radix layer does not know LPC. Imported by the
# places that run these policies (``lcr sim-kv``, the SGLang integration).
register_policy(RadixPolicy(
    "lpc", lambda workload, pred, seed, **o: lpc_policy(workload, **o), (lpc_policy,),
    "LPC on a chat trace (model=PATH from lcr lpc-train, or model=oracle)", fixed=("workload",),
    serving=Serving("lcr.lpc.serving:serving_lpc")))
register_policy(RadixPolicy(
    "lpc-oracle", lambda workload, pred, seed, **o: lpc_policy(workload, "oracle", **o), (lpc_policy,),
    "LPC fed the truth (the paper's Oracle)", fixed=("workload", "model")))
register_policy(RadixPolicy(
    "laru-lpc", lambda workload, pred, seed, **o: laru_lpc_policy(workload, **o),
    (laru_lpc_policy, RadixLARU), "LARU whose predictor is LPC's probability", fixed=("workload", "predictor")))
