"""Learned sweeps predict once: one pass per trace and predictor (and cache size, for the
model whose boundary is per size), shared by every policy, kept on disk by trace content
and settings, identical to computing it for every run."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lightgbm")

import lcr.predict.replayed as replayed_module  # noqa: E402
from lcr.sim import PolicySpec, run_one, run_sweep  # noqa: E402
from lcr.predict import PredictorSpec  # noqa: E402
from lcr.sim.predictions import PredictionCache, replay_predictor  # noqa: E402
from lcr.traces import generate  # noqa: E402

SPECS = [PolicySpec.parse(p) for p in ("lru", "laru", "fpb", "hf")]
SIZES = [40, 200, 600]


@pytest.fixture(scope="module")
def trace():
    return generate("zipf:requests=24000,keys=3000,alpha=0.9,seed=5")


@pytest.fixture
def passes(monkeypatch):
    """Records each call of the real pass function (it still runs): its model's capacity."""
    calls = []
    real = replayed_module.replayed_predictions

    def counted(trace, config, *args, **kwargs):
        calls.append(config.capacity)
        return real(trace, config, *args, **kwargs)

    monkeypatch.setattr(replayed_module, "replayed_predictions", counted)
    return calls


def outcome(results):
    return [(r.policy, r.capacity, r.misses, r.stats) for r in results]


@pytest.mark.parametrize("name, per_size", [("lightgbm", True), ("lightgbm-compact", False)])
def test_a_sweep_makes_one_pass_and_equals_a_pass_per_run(trace, passes, tmp_path, name, per_size):
    cache = PredictionCache(tmp_path)
    shared = run_sweep(trace, SPECS, SIZES, name, predictions=cache)
    # The classifier learns its boundary for each cache size: one pass per size, each for its size.
    assert passes == (SIZES if per_size else [None])
    assert cache.passes == len(passes) and cache.loaded == 0
    computed = cache.passes
    assert all(r.predictor == f"{name}:async" for r in shared if r.policy != "lru")

    passes.clear()
    separate = [run_one(trace, spec, size, f"{name}:async", predictions=PredictionCache("off"))
                for size in SIZES for spec in SPECS]
    assert len(passes) == 3 * 3  # the old way: every predictive run redoes the pass
    by_key = {(r.policy, r.capacity): r for r in separate}
    assert [(p, c, m, s) for p, c, m, s in outcome(shared)] == \
           [(p, c, by_key[p, c].misses, by_key[p, c].stats) for p, c, _, _ in outcome(shared)]

    # A rerun reads the passes from disk: none computed, the same results.
    passes.clear()
    again = PredictionCache(tmp_path)
    assert outcome(run_sweep(trace, SPECS, SIZES, name, predictions=again)) == outcome(shared)
    assert passes == [] and again.passes == 0 and again.loaded == computed


def test_passes_computed_in_worker_processes_are_the_same(trace, passes, tmp_path):
    """``jobs=2`` computes the per-size passes in two worker processes: same answers and
    results as one by one, stored and counted alike, and found by the next sweep."""
    serial = run_sweep(trace, SPECS, SIZES, "lightgbm", predictions=PredictionCache("off"))
    cache = PredictionCache(tmp_path)
    parallel = run_sweep(trace, SPECS, SIZES, "lightgbm", predictions=cache, jobs=2)
    assert outcome(parallel) == outcome(serial)
    assert cache.passes == len(SIZES) and cache.loaded == 0 and len(list(tmp_path.glob("*.npy"))) == len(SIZES)
    passes.clear()
    again = PredictionCache(tmp_path)
    assert outcome(run_sweep(trace, SPECS, SIZES, "lightgbm", predictions=again, jobs=2)) == outcome(serial)
    assert passes == [] and again.passes == 0 and again.loaded == len(SIZES)


def test_the_key_covers_trace_content_and_settings(trace, passes, tmp_path, monkeypatch):
    cache = PredictionCache(tmp_path)
    first = cache.get("lightgbm:async", trace)
    PredictionCache(tmp_path).get("lightgbm:async", trace, seed=1)       # other settings
    PredictionCache(tmp_path).get("lightgbm-compact:async", trace)       # other predictor
    PredictionCache(tmp_path).get("lightgbm:async;window=30000", trace)  # other schedule
    PredictionCache(tmp_path).get("lightgbm:async", trace, capacity=50)  # other cache size
    other = generate("zipf:requests=24000,keys=3000,alpha=0.9,seed=6")
    PredictionCache(tmp_path).get("lightgbm:async", other)               # other content
    assert len(passes) == 6
    same = generate("zipf:requests=24000,keys=3000,alpha=0.9,seed=5")    # same content, new object
    assert np.array_equal(PredictionCache(tmp_path).get("lightgbm:async", same), first, equal_nan=True)
    assert len(passes) == 6
    # A changed model setting (as a reworked predictor would bring) is a new pass.
    import dataclasses

    import lcr.predict

    real = lcr.predict.learned_config
    monkeypatch.setattr(lcr.predict, "learned_config",
                        lambda name, seed=0, trace=None, capacity=None: dataclasses.replace(
                            real(name, seed, trace, capacity), min_samples=999))
    PredictionCache(tmp_path).get("lightgbm:async", trace)
    assert len(passes) == 7


def test_the_key_covers_the_static_columns_the_model_reads(trace, passes, tmp_path):
    import dataclasses

    tables = [dataclasses.replace(trace, tables=(trace.keys % m).astype(np.int16)) for m in (2, 3)]
    answers = [PredictionCache(tmp_path).get("lightgbm:async", t) for t in tables]
    assert len(passes) == 2  # same keys, other tables: another pass
    assert not np.array_equal(answers[0], answers[1], equal_nan=True)
    PredictionCache(tmp_path).get("lightgbm:async", dataclasses.replace(trace, tables=(trace.keys % 2).astype(np.int16)))
    assert len(passes) == 2


def test_a_torn_cache_file_is_recomputed(trace, passes, tmp_path):
    expected = PredictionCache(tmp_path).get("lightgbm:async", trace)
    for path in tmp_path.glob("*.npy"):
        path.write_bytes(path.read_bytes()[:100])
    again = PredictionCache(tmp_path)
    assert np.array_equal(again.get("lightgbm:async", trace), expected, equal_nan=True)
    assert len(passes) == 2 and again.passes == 1


def test_learned_names_default_to_the_async_replay():
    for given, replayed in (("lightgbm", "lightgbm:async"), ("lightgbm-weak", "lightgbm-weak:async"),
                            ("lightgbm:sync", "lightgbm:sync"), ("oracle", "oracle"),
                            ("lightgbm:retrain_every=2500;window=80000",
                             "lightgbm:async;retrain_every=2500;window=80000")):
        assert replay_predictor(given) == PredictorSpec.parse(replayed)
        assert str(replay_predictor(given)) == replayed
