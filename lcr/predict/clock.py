"""The one time rule of the online model: which access times it takes, and at what time.

Times are the caches' own: logical access counters (what lcr's caches send, e.g. the
request index) or timestamps in one unit every client shares. The model reads times only
through differences (intervals, ages, decays), and a training sample is ripe once it is a
horizon older than the newest time. So one time far ahead would age every key at once and
ripen every sample early (one observation at t + 10^15 left the shared service with
nothing to fit until restart), and one behind a key's latest access would give a negative
interval (a NaN label). ``StreamClock`` keeps one clock, the newest time taken, and stamps
every access in the order they are taken in (J is ``max_jump``):

1. a negative time is refused (``times_negative``);
2. a time more than J past the clock is refused (``times_ahead``): the clock moves only
   in steps the stream itself makes, so one wrong value (a nanoseconds-for-seconds slip, a
   corrupted counter) cannot drag it; an accepted wrong step costs at most J;
3. a time more than J behind the clock is taken at the clock (``times_behind``): a client
   whose clock restarted, or lags far, still feeds the model, at the service's time;
4. a time at most J behind the clock is taken as it is: batches of several threads or
   clients arrive out of order by a little, and their times stay exact (the model then
   drops an access older than its key's latest, ``times_stale`` in ``LightGBMPredictor``:
   it can no longer be placed in that key's history, and taking it at the latest would
   teach a false "back at once");
5. otherwise the time is taken as it is and becomes the clock.

J (``DEFAULT_MAX_TIME_JUMP`` = 65,536) bounds both how far a time may lead the clock and
how far it may trail it and keep its own value. With access counters it is 65,536
accesses: far above the skew of clients that flush a few thousand observations at a
time, and small against the span the service's training window covers (2 horizons of 2
boundaries, 16 characteristic times of the cache, ~10^6 accesses for a 10^6-key service
sized at 5%). Timestamps with longer legitimate gaps (an idle minute in milliseconds) need
a larger J (``lcr serve-predictor --max-time-jump``).

A restarted clock is followed, not fought. When no time has moved the clock (rule 5)
for ``restart_after_s`` seconds (10) although batches kept coming, over at least two
batches, the stream has moved: the one client (or every client) restarted its clock from
0, or all its times jump. The clock then restarts from the next such batch
(``clock_restarts``), and the model forgets its per-key state, whose times belong to the
old clock, keeping its fitted trees. A restarted client among others that keep the clock
moving never triggers this: its times are taken at the clock (rule 3) until its own clock
catches up. A first batch, and one the clock restarts from, start the clock at the
earliest of its times within J of the batch's lower median, so a stray value in it cannot
place the clock. One batch alone (``batch()`` groups the slices of one request) never
restarts the clock, however long it is.

Not thread-safe: the owner serialises ``order`` and ``stamp`` (``LightGBMPredictor`` does,
under its observe lock).
"""
from __future__ import annotations

import contextlib
import time
from typing import NamedTuple

import numpy as np

from lcr.errors import LcrInputError

DEFAULT_MAX_TIME_JUMP = 1 << 16
DEFAULT_CLOCK_RESTART_S = 10.0
INT64_MAX = (1 << 63) - 1


class Taken(NamedTuple):
    """What ``StreamClock.order`` made of a batch of times."""

    mask: np.ndarray      # per input time: taken (True) or refused
    times: np.ndarray     # the taken times as stamped (int64, in order)
    restarted: bool       # the clock restarted from this batch: forget state of the old clock


class _Walk(NamedTuple):
    keep: np.ndarray
    stamped: np.ndarray
    advanced: bool   # some time was at or past the clock: the stream moved it
    behind: int
    ahead: int
    clock: int


def _walk(times: np.ndarray, clock: int, max_jump: int) -> _Walk:
    """Rules 2-5 over non-negative ``times`` from ``clock``."""
    before = np.maximum.accumulate(np.concatenate(([clock], times)))[:-1]  # the clock before each, if all are taken
    step = times - before  # both non-negative: no overflow
    if (np.abs(step) <= max_jump).all():  # nothing refused or far behind: the common case, vectorised
        return _Walk(np.ones(len(times), dtype=bool), times, bool((step >= 0).any()), 0, 0,
                     max(clock, int(times.max())))
    keep = np.zeros(len(times), dtype=bool)
    stamped, behind, ahead, advanced = [], 0, 0, False
    for i, t in enumerate(times.tolist()):
        if t - clock > max_jump:
            ahead += 1
            continue
        if clock - t > max_jump:
            behind += 1
            t = clock
        elif t >= clock:
            clock, advanced = t, True
        keep[i] = True
        stamped.append(t)
    return _Walk(keep, np.array(stamped, dtype=np.int64), advanced, behind, ahead, clock)


class StreamClock:
    """The clock of one model's access stream (the rule above)."""

    def __init__(self, max_jump: int = DEFAULT_MAX_TIME_JUMP, restart_after_s: float = DEFAULT_CLOCK_RESTART_S,
                 wall=time.monotonic):
        if isinstance(max_jump, bool) or not isinstance(max_jump, int) or max_jump < 1:
            raise LcrInputError(f"max_time_jump must be an integer >= 1, got {max_jump!r}")
        if not (isinstance(restart_after_s, (int, float)) and restart_after_s > 0):
            raise LcrInputError(f"the clock's restart time must be > 0 seconds, got {restart_after_s!r}")
        self.max_jump, self.restart_after_s, self._wall = max_jump, restart_after_s, wall
        self.now: int | None = None  # the newest time taken; None before the first
        self._batch, self._grouped = 0, False
        self._stall: tuple[int, float] | None = None  # (batch, wall time) since which nothing moved the clock
        self.counters = {"times_behind": 0, "times_negative": 0, "times_ahead": 0, "clock_restarts": 0}

    @property
    def refused(self) -> int:
        return self.counters["times_negative"] + self.counters["times_ahead"]

    @contextlib.contextmanager
    def batch(self):
        """Calls of ``order`` inside are one batch (e.g. the slices of one request) to the
        restart rule: one batch alone, however long, never restarts the clock."""
        self._batch += 1
        self._grouped = True
        try:
            yield self
        finally:
            self._grouped = False

    def stamp(self, t: int) -> int | None:
        """One time (a batch of one): its stamped time, or None if refused."""
        clock = self.now
        if clock is not None and clock <= t and t - clock <= self.max_jump:  # rule 5, the common case
            self.now, self._stall = t, None
            if not self._grouped:
                self._batch += 1
            return t
        taken = self.order(np.array([t], dtype=np.int64))
        return int(taken.times[0]) if len(taken.times) else None

    def order(self, times: np.ndarray) -> Taken:
        """Stamp a batch of int64 times, in order (the rule above)."""
        if not self._grouped:
            self._batch += 1
        times = np.asarray(times, dtype=np.int64)
        valid = times >= 0
        self.counters["times_negative"] += int(len(times) - valid.sum())
        candidates = times[valid]
        if not len(candidates):
            return Taken(valid, candidates, False)
        walk = _walk(candidates, self._start(candidates) if self.now is None else self.now, self.max_jump)
        restarted = self._stalled(walk.advanced)
        if restarted:
            walk = _walk(candidates, self._start(candidates), self.max_jump)
            self.counters["clock_restarts"] += 1
        self.now = walk.clock
        self.counters["times_behind"] += walk.behind
        self.counters["times_ahead"] += walk.ahead
        mask = np.zeros(len(times), dtype=bool)
        mask[np.flatnonzero(valid)[walk.keep]] = True
        return Taken(mask, walk.stamped, restarted)

    def _start(self, times: np.ndarray) -> int:
        """Where the clock starts on a batch: its earliest time within ``max_jump`` of the
        batch's lower median (a few stray values cannot place it)."""
        middle = (len(times) - 1) // 2
        median = int(np.partition(times, middle)[middle])
        return int(times[np.abs(times - median) <= self.max_jump].min())

    def _stalled(self, advanced: bool) -> bool:
        """True when the clock should restart: this call moved nothing, and nothing has
        moved it since a batch before this one, ``restart_after_s`` or more ago."""
        if advanced:
            self._stall = None
            return False
        now = self._wall()
        if self._stall is None:
            self._stall = (self._batch, now)
            return False
        batch, since = self._stall
        if batch == self._batch or now - since < self.restart_after_s:
            return False
        self._stall = None
        return True


__all__ = ["DEFAULT_CLOCK_RESTART_S", "DEFAULT_MAX_TIME_JUMP", "StreamClock", "Taken"]
