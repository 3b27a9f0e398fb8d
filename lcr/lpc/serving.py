"""LPC as SGLang's ``--cache-policy lpc`` (backend ``lcr-lpc``).

SGLang's radix cache hands lcr's policies node keys and a request counter, not the
conversation text, so this policy has no per-request probability: every request gets
``prior``, and with one probability for all nodes LPC's key logit(p) + scale·t_last
orders exactly by recency, i.e. the policy behaves as LRU. That is also its degraded
mode when a predictor fails. Feeding real probabilities needs the request text at the
driver (``lcr.integrations.sglang.PolicyDriver``); ``lcr sim-kv`` replays do have it.
"""
from __future__ import annotations

from lcr.errors import LcrInputError
from lcr.lpc.policy import LPC, SCALE, ContinuationKeys


def serving_lpc(scale: float = SCALE, prior: float = 0.5) -> LPC:
    if not 0 < float(prior) < 1:
        raise LcrInputError(f"lpc options: prior must be in (0, 1), got {prior}")
    if not float(scale) > 0:
        raise LcrInputError(f"lpc options: scale must be positive, got {scale}")
    # No request has a probability of its own: times are the driver's request counter.
    return LPC(ContinuationKeys([], [], scale=float(scale), prior=float(prior)))
