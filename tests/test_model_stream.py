"""The online model's batched bookkeeping (features and samples recorded a chunk at a time,
natively: csrc/cpu/model_stream.cpp) gives bit-identical answers to the per-access Python
rules it replaced, which this file keeps as the reference (``_OldFeatureStore``,
``_OldSampledHistory``, ``_old_replay``). About 25 s on one core."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lcr.predict import learned_config
from lcr.predict.features import FeatureConfig, FeatureStore
from lcr.predict.labels import SampledHistory
from lcr.traces import Trace, generate

pytest.importorskip("lightgbm")
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor  # noqa: E402
from lcr.predict.replayed import _trace_static, replay_model  # noqa: E402


# -- the per-access rules before the batched path (commit 5cd0b6d), kept as the reference --
class _OldFeatureStore(FeatureStore):
    def update(self, key, t, static=None):
        slot = self._slot.get(key)
        if slot is None:
            slot = self._old_new_slot(key)
            self._first_time[slot] = t
            delta = None
        else:
            delta = t - self._last_time[slot]
        self._last_time[slot] = t
        row = self._rows[slot]
        if self.config.mode == "compact":
            row[0] = t
            row[2] += 1
            if delta is not None:
                row[3] = delta
        else:
            lay = self._layout
            edcs = row[lay.edcs]
            if delta is not None:
                deltas = row[lay.deltas]
                deltas[1:] = deltas[:-1].copy()
                deltas[0] = delta
                edcs *= self._decay ** delta
            edcs += 1.0
            row[lay.count] += 1
            row[lay.age] = t - self._first_time[slot]
            if static is not None:
                row[lay.static:lay.static + len(static)] = static
        return row

    def _old_new_slot(self, key):
        slot = len(self._slot)
        if slot == len(self._rows):
            grown = np.full((2 * slot, self.width), np.nan)
            grown[:slot] = self._rows
            self._rows = grown
            self._last_time = np.concatenate([self._last_time, np.zeros(slot)])
            self._first_time = np.concatenate([self._first_time, np.zeros(slot)])
            self._key_of_slot = np.concatenate([self._key_of_slot, np.zeros(slot, dtype=np.int64)])
        row = self._rows[slot]
        row[:] = np.nan
        if self.config.mode == "compact":
            row[1] = key
            row[2] = 0
        else:
            row[self._layout.edcs] = 0.0
            row[self._layout.count] = 0
        self._slot[key] = slot
        self._key_of_slot[slot] = key
        return slot


class _OldSampledHistory(SampledHistory):
    def __init__(self, capacity, width, seed=0):
        super().__init__(capacity, width, seed)
        self._pending, self._random = {}, random.Random(seed)

    def observe(self, key, t, row):
        serial = self._pending.pop(key, None)
        if serial is not None and serial > self.total - self.capacity:
            i = serial % self.capacity
            self._interval[i] = t - self._times[i]
        if self.rate < 1.0 and self._random.random() >= self.rate:
            return
        i = self.total % self.capacity
        if self.total >= self.capacity:
            old = int(self._keys[i])
            if self._pending.get(old) == self.total - self.capacity:
                del self._pending[old]
        self._keys[i] = key
        self._times[i] = t
        self._rows[i] = row
        self._interval[i] = np.nan
        self._pending[key] = self.total
        self.total += 1


def _old_model(config: LightGBMConfig) -> LightGBMPredictor:
    """The online model running the old per-access rules."""
    model = LightGBMPredictor(config)
    model.features = _OldFeatureStore(config.features)
    model.histories = [_OldSampledHistory(config.window, model.features.width, config.seed)
                       for _ in model.histories]
    model.history = model.histories[0]
    return model


def _old_replay(trace: Trace, config: LightGBMConfig):
    """replay_model as it was: one observe per access, rows predicted in buffers per model."""
    model = _old_model(config)
    static = _trace_static(trace, config)
    n = len(trace)
    values, raw, boundary = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    buffered, rows, current = [], [], None

    def flush():
        if buffered and current is not None:
            at = np.asarray(buffered)
            out = current.raw(np.vstack(rows), config.num_threads)
            raw[at] = out
            values[at] = current.answers(out, at.astype(np.float64))
            boundary[at] = current.boundary
        buffered.clear()
        rows.clear()

    for t, key in enumerate(trace.keys.tolist()):
        model.observe(key, t, None if static is None else static[t])
        if model._model is not current:
            flush()
            current = model._model
        if current is not None:
            buffered.append(t)
            rows.append(model.features.matrix[model.features.slot_of(key)].copy())
    flush()
    return values, raw, boundary, model


def _small(config: LightGBMConfig, min_samples: int = 300) -> LightGBMConfig:
    from dataclasses import replace

    return replace(config, retrain_every=1_000, window=6_000, min_samples=min_samples)


def _traces():
    zipf = generate("zipf:requests=20000,keys=3000,alpha=0.9,seed=3")
    sized = Trace(zipf.keys, name="zipf-sized", sizes=(zipf.keys % 7 + 1).astype(np.int64))
    return [sized, generate("scan:requests=15000,hot_keys=800,alpha=0.8,scan_length=600,seed=2")]


# The weak model's first fit waits for min_samples past retrain_every (chunks sized by that).
@pytest.mark.parametrize("variant,min_samples", [("lightgbm", 300), ("lightgbm-weak", 2_500)])
def test_replay_answers_are_bit_identical_to_the_per_access_rules(variant, min_samples):
    for trace in _traces():
        capacity = max(1, trace.distinct_keys // 20)
        config = _small(learned_config(variant, 0, trace, capacity), min_samples)
        values, raw, boundary, old = _old_replay(trace, config)
        new = replay_model(trace, config)
        assert old.metrics["fits"] == new.fits > 3
        for name, before, now in (("values", values, new.values), ("raw", raw, new.raw),
                                  ("boundary", boundary, new.boundary)):
            assert np.array_equal(before, now, equal_nan=True), f"{trace.name} {variant}: {name} differ"
        # The state behind them, to the last bit (a feature's last bit rarely moves a split).
        model = LightGBMPredictor(config)
        model.observe_many(trace.keys, np.arange(len(trace)), _trace_static(trace, config))
        n = len(old.features)
        assert np.array_equal(old.features.matrix[:n], model.features.matrix[:n], equal_nan=True)
        for before, now in zip(old.histories, model.histories):
            for name in ("_keys", "_times", "_rows", "_interval"):
                assert np.array_equal(getattr(before, name), getattr(now, name), equal_nan=True), name


# -- the parts, fuzzed over random batch splits (120 examples each, ~10 s together) --------
def _split(n: int, cuts: list[int]) -> list[slice]:
    edges = sorted({0, n, *(c % (n + 1) for c in cuts)})
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


_accesses = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3)), min_size=1, max_size=120)


@settings(max_examples=120, deadline=None)
@given(accesses=_accesses, cuts=st.lists(st.integers(0, 200), max_size=6),
       mode=st.sampled_from(["full", "compact"]))
def test_feature_rows_in_batches_equal_one_by_one(accesses, cuts, mode):
    # The default EDC half-lives: x ** 2 and numpy's vector power differ in the last bit for one of them.
    config = FeatureConfig(mode=mode, n_deltas=3, static_fields=("size",) if mode == "full" else ())
    keys = np.array([k for k, _ in accesses], dtype=np.int64)
    times = np.cumsum([step for _, step in accesses]).astype(np.float64)  # steps of 0..3: deltas 0, 1, 2
    static = (keys % 5).astype(np.float64)[:, None] if mode == "full" else None
    old, new = _OldFeatureStore(config, initial_keys=2), FeatureStore(config, initial_keys=2)
    expected = np.array([old.update(int(k), float(t), None if static is None else static[i]).copy()
                         for i, (k, t) in enumerate(zip(keys, times))])
    got = np.vstack([new.update_many(keys[part], times[part], None if static is None else static[part])
                     for part in _split(len(keys), cuts)])
    assert np.array_equal(expected, got, equal_nan=True)
    n = len(old)
    assert np.array_equal(old.matrix[:n], new.matrix[:n], equal_nan=True)
    assert np.array_equal(old.last_times(), new.last_times()) and old._slot == new._slot


@settings(max_examples=120, deadline=None)
@given(keys=st.lists(st.integers(0, 9), min_size=1, max_size=150), cuts=st.lists(st.integers(0, 200), max_size=6),
       rate=st.sampled_from([1.0, 0.6, 0.2]), capacity=st.integers(2, 12))
def test_samples_in_batches_equal_one_by_one(keys, cuts, rate, capacity):
    keys = np.array(keys, dtype=np.int64)
    times = np.arange(len(keys), dtype=np.float64)
    rows = np.stack([times, keys.astype(np.float64)], axis=1)
    old, new = _OldSampledHistory(capacity, 2, seed=5), SampledHistory(capacity, 2, seed=5)
    old.rate = new.rate = rate
    for i in range(len(keys)):
        old.observe(int(keys[i]), float(times[i]), rows[i])
    for part in _split(len(keys), cuts):
        new.observe_many(keys[part], times[part], rows[part])
    assert old.total == new.total and len(old._pending) == len(new._pending)
    for name in ("_keys", "_times", "_rows", "_interval"):
        assert np.array_equal(getattr(old, name), getattr(new, name), equal_nan=True), name
    assert np.array_equal(old.ripe(len(keys), 3)[1], new.ripe(len(keys), 3)[1])


def test_observe_many_with_times_out_of_order_equals_observe_one_by_one():
    # Times behind the newest go one by one (a key's time never goes back): same state.
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, 3000)
    times = np.arange(3000) + rng.integers(5, 15, 3000)  # within 10 of in order
    config = LightGBMConfig(background=False, retrain_every=700, window=2000, min_samples=200, capacity=10)
    batched, single = LightGBMPredictor(config), LightGBMPredictor(config)
    assert batched.observe_many(keys, times)["observed"] == 3000
    for key, t in zip(keys.tolist(), times.tolist()):
        single.observe(key, t)
    counts = [{k: v for k, v in m.metrics.items() if k != "last_fit_seconds"} for m in (batched, single)]
    assert counts[0] == counts[1] and counts[0]["times_stale"] > 0 and counts[0]["fits"] >= 3
    n = len(single.features)
    assert np.array_equal(batched.features.matrix[:n], single.features.matrix[:n], equal_nan=True)
    probe = np.arange(50)
    assert np.array_equal(batched.predict(probe, 3000), single.predict(probe, 3000), equal_nan=True)
