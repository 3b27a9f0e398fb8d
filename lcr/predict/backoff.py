"""The serving path's one rule for a predictor that fails or is slow.

A call that raises, or answers later than ``timeout_s``, shuts the predictor out for
``backoff_s``: meanwhile its callers serve their fallback (LRU's victim, LPC's neutral
key) without asking, so a dead or hung predictor costs one timeout, not one per call.
One warning per outage, one when it answers again. Used by the KV policies' predictor
guard (``lcr.integrations.serving_predictor.GuardedPredictor``) and by LPC's request
predictor (``lcr.lpc.serving.RequestPredictor``); it lives with the predictors so both
layers reach it looking down.
"""
from __future__ import annotations

import logging

log = logging.getLogger("lcr.sglang")


class Backoff:
    """Not thread-safe: the scheduler thread that asks the predictor drives it."""

    def __init__(self, name: str, *, timeout_s: float, backoff_s: float, fallback: str):
        self.name = name
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.fallback = fallback  # what callers do meanwhile, for the warning
        self.backoffs = 0
        self._down_until = float("-inf")
        self._failing = False

    def shut(self, now: float) -> bool:
        """Whether a call starting at ``now`` must not be made."""
        return now < self._down_until

    def failed(self, now: float, elapsed: float, why: str) -> None:
        self._shut_out(now, f"failed ({why})" if why else "failed", elapsed)

    def answered(self, now: float, elapsed: float) -> None:
        if elapsed > self.timeout_s:
            self._shut_out(now, "was slow", elapsed)  # this answer is used; the next calls wait
        elif self._failing:
            self._failing = False
            log.warning("lcr: %s is answering again", self.name)

    def _shut_out(self, now: float, what: str, elapsed: float) -> None:
        self._down_until = now + self.backoff_s
        self.backoffs += 1
        if not self._failing:
            self._failing = True
            log.warning("lcr: %s %s (%.0f ms); %s for %g s", self.name, what, elapsed * 1e3, self.fallback,
                        self.backoff_s)
