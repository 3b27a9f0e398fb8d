"""BatchPredictor (lcr.embedding.predictions): a model on its own thread beside lcr.sls,
sync (one batch behind, waiting) or async (never waiting, skipping what it has no time
for), and a model that fails costing the serving loop nothing but a warning."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import torch

import lcr
from lcr.embedding.cache import SlabHashCache
from lcr.embedding.predictions import BatchPredictor, TracePredictor


def test_the_batch_predictor_answers_one_batch_behind():
    """Batch i's answers are written before batch i + 2: the same decisions on every run,
    whatever the thread's speed."""
    lookups = np.array([5, 6, 5, 7, 8, 9, 6, 5], dtype=np.int64)
    values = np.arange(len(lookups), dtype=np.float64) * 10
    predictor = BatchPredictor(TracePredictor(values, 10), wait=True)
    try:
        predictor.submit(lookups[:4], 0)
        assert predictor.collect() is None
        predictor.submit(lookups[4:], 4)
        keys, answers = predictor.collect()
        assert keys.tolist() == [5, 6, 7] and answers.tolist() == [20.0, 10.0, 30.0]
    finally:
        predictor.close()


def _eventually(condition, timeout: float = 10.0) -> None:
    """Wait until the predictor's thread has done what ``condition`` asks (a loaded CI
    machine may take longer than any fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the predictor thread did not get there"
        time.sleep(0.01)


class _SlowModel:
    """Observing takes ``delay`` seconds; answers every key with the batch's start."""

    def __init__(self, delay, fail_at=None):
        self.delay, self.fail_at, self.observed = delay, fail_at, []
        self.started = threading.Event()

    def observe_batch(self, indices, start):
        self.started.set()
        time.sleep(self.delay)
        if start == self.fail_at:
            raise RuntimeError("model broke")
        self.observed.append(start)

    def predict(self, keys, now):
        return np.full(len(keys), float(self.observed[-1]))


def test_the_async_batch_predictor_never_waits_and_skips_what_it_has_no_time_for():
    """Async mode: a model far slower than the loop costs the loop nothing; batches
    queued behind the one in progress are replaced by newer ones, never observed; collect
    hands over the newest answer only."""
    model = _SlowModel(1.0)
    predictor = BatchPredictor(model, wait=False)
    try:
        in_calls, answers = 0.0, []
        for start in range(0, 50, 10):
            began = time.perf_counter()
            answers.append(predictor.collect())
            predictor.submit(np.arange(start, start + 10), start)
            in_calls += time.perf_counter() - began
            model.started.wait(5)  # batch 0 in progress
        assert in_calls < 0.2 and answers == [None] * 5
        _eventually(lambda: predictor.seen == 20)  # 0, then the newest (40): 10..30 replaced
        keys, values = predictor.collect()
        assert model.observed == [0, 40] and keys.tolist() == list(range(40, 50))
        assert values.tolist() == [40.0] * 10 and predictor.collect() is None
        assert (predictor.seen, predictor.skipped) == (20, 30) and predictor.seen_share == 0.4
        predictor.submit(np.arange(50, 60), 50)
        model.started.clear()
        model.started.wait(5)  # batch 50 in progress
        predictor.submit(np.arange(60, 70), 60)  # queued: close() drops it, counted
    finally:
        predictor.close()
    assert (predictor.seen, predictor.skipped) == (30, 40) and model.observed == [0, 40, 50]


def test_a_failing_model_costs_the_serving_loop_a_warning_per_outage(caplog):
    """The serving loop never sees the model's exception: one warning when the outage
    starts, one when the model answers again, and the failed batches counted; a benchmark
    (raise_errors) gets the exception instead."""
    model = _SlowModel(0.0, fail_at=10)
    with caplog.at_level(logging.WARNING, logger="lcr.embedding.predictions"), \
            BatchPredictor(model) as predictor:
        answers = []
        for start in range(0, 40, 10):
            if start == 20:  # a second failing batch in the same outage
                model.fail_at = 20
            predictor.submit(np.arange(start, start + 10), start)
            _eventually(lambda: predictor.seen == start + 10)
            answers.append(predictor.collect())
        assert [a is None for a in answers] == [False, True, True, False]
        assert predictor.failures == 2 and model.observed == [0, 30]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "model broke" in messages[0] and "again" in messages[1]
    with BatchPredictor(_SlowModel(0.0, fail_at=0), raise_errors=True) as failing:
        failing.submit(np.arange(3), 0)
        _eventually(lambda: failing.seen == 3)
        with pytest.raises(RuntimeError, match="model broke"):
            failing.collect()


def test_the_sync_batch_predictor_waits_for_a_slow_model_and_observes_every_batch():
    """Sync mode waits for the batch before the last one; close() lets the thread observe
    every batch handed over (one in progress and one queued behind it) before it stops."""
    model = _SlowModel(0.2)
    predictor = BatchPredictor(model, wait=True)
    try:
        for start in range(0, 40, 10):
            predictor.submit(np.arange(start, start + 10), start)
            predictor.collect()
        assert model.observed[:3] == [0, 10, 20] and predictor.wait_s > 0.3
        predictor.submit(np.arange(40, 50), 40)  # queued behind 30, still in progress
    finally:
        predictor.close()
    assert model.observed == [0, 10, 20, 30, 40]
    assert (predictor.seen, predictor.skipped) == (50, 0)


def test_the_online_model_learns_on_the_predictor_thread():
    """--predictor lightgbm: the four-feature model observes every lookup at its trace
    position and, once fitted, predicts each row's next lookup."""
    from lcr.embedding.predictions import OnlineModel
    from lcr.predict import learned_config
    from lcr.predict.lightgbm_model import LightGBMPredictor

    period = np.tile(np.arange(300, dtype=np.int64), 60)  # every row returns 300 lookups later
    predictor = BatchPredictor(OnlineModel(LightGBMPredictor(learned_config("lightgbm-compact", 0))), wait=True)
    try:
        for start in range(0, len(period), 1000):
            predictor.submit(period[start:start + 1000], start)
            answer = predictor.collect()
        keys, values = answer  # the batch at 16,000..16,999: every row once or more
        last = 16_999 - (16_999 - keys) % 300  # each key's last lookup up to 16,999
        assert np.median(np.abs(values - (last + 300))) < 30
        assert predictor.work_s > 0
    finally:
        predictor.close()




def test_sls_with_a_sync_batch_predictor_makes_the_decisions_of_predictions_written_by_hand():
    """lcr.sls(..., predictor=BatchPredictor(model, wait=True)) writes batch i's answers
    before batch i + 2 and hands each batch's lookups over at positions now, now + 1, ...:
    the same cache as a loop that predicts each batch itself and writes the answers two
    batches later."""
    rng = np.random.default_rng(3)
    lookups = rng.zipf(1.3, 4000).astype(np.int64) % 500
    oracle = TracePredictor(np.arange(len(lookups)) + rng.integers(1, 900, len(lookups)), 500)
    by_hand = TracePredictor(oracle.values, 500)
    table = torch.arange(500 * 4, dtype=torch.float32).reshape(500, 4)
    store = lcr.HostStore(table, pin=False)
    threaded, manual = (SlabHashCache(2, 4, policy="laru") for _ in range(2))
    answers = []
    with BatchPredictor(oracle, wait=True) as predictor:
        for start in range(0, len(lookups), 200):
            batch = torch.from_numpy(lookups[start:start + 200])
            offsets = torch.arange(0, 200, 20)
            lcr.sls(threaded, store, batch, offsets, predictor=predictor, now=start)
            if len(answers) >= 2:
                manual.set_predictions(*answers[-2])
            lcr.sls(manual, store, batch, offsets)
            by_hand.observe_batch(batch.numpy(), start)
            keys = np.unique(batch.numpy())
            answers.append((keys, by_hand.predict(keys, start + 200)))
    assert predictor.seen == len(lookups)  # close() waited for the last batches
    assert threaded.cached_keys() == manual.cached_keys()
    assert (threaded.hits, threaded.misses) == (manual.hits, manual.misses)
    for name in vars(threaded.meta):
        assert torch.equal(getattr(threaded.meta, name), getattr(manual.meta, name)), name


def test_set_predictions_keeps_the_last_value_of_a_key_given_twice():
    cache = SlabHashCache(1, 2, policy="laru")
    store = lcr.HostStore(torch.zeros(10, 2), pin=False)
    lcr.sls(cache, store, torch.tensor([1, 2, 3]), torch.tensor([0]))
    cache.set_predictions(np.array([2, 1, 2, 3, 2]), np.array([5.0, 6.0, 7.0, 8.0, 9.0]))
    other = SlabHashCache(1, 2, policy="laru")
    lcr.sls(other, store, torch.tensor([1, 2, 3]), torch.tensor([0]))
    other.set_predictions(np.array([1, 2, 3]), np.array([6.0, 9.0, 8.0]))
    for name in vars(cache.meta):
        assert torch.equal(getattr(cache.meta, name), getattr(other.meta, name)), name
