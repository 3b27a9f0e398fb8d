"""`lcr bench sls`: the workloads, the timed loop and the predictor thread beside it."""
from __future__ import annotations

import json
import threading

import time

import numpy as np
import pytest

from lcr.cli import main


def test_bench_sls_cli_runs_on_cpu_and_writes_results(tmp_path, capsys):
    out = tmp_path / "sls.json"
    args = ["bench", "sls", "--table-rows", "3000", "--dim", "8", "--pooling", "5",
            "--batch-sizes", "16", "--cache-ratio", "0.05", "--policies", "lru,laru",
            "--predictor", "noisy:0.2", "--batches", "2", "--warmup", "1"]
    assert main([*args, "--json", str(out), "--plot", str(tmp_path / "sls.png")]) == 0
    text = capsys.readouterr().out
    assert "laru" in text and "embedding_bag" in text and "reduce ms" not in text
    results = json.loads(out.read_text())["results"]
    assert [r["policy"] for r in results] == ["embedding_bag", "lru", "laru"]
    assert all(r["samples_per_s"] > 0 and 0 <= r["hit_ratio"] <= 1 for r in results)
    assert all(r["stages_ms"] == {} for r in results)  # no per-stage syncs unless profiling
    assert (tmp_path / "sls.png").stat().st_size > 0
    assert main([*args, "--profile", "--json", str(out)]) == 0
    assert "reduce ms" in capsys.readouterr().out
    profiled = json.loads(out.read_text())["results"]
    assert set(profiled[1]["stages_ms"]) == {"query", "fetch", "insert", "reduce"}
    # the same decisions whether profiled or not: the predictor thread is one batch behind
    assert [r["hit_ratio"] for r in profiled] == [r["hit_ratio"] for r in results]
    assert main(["bench", "sls", "--predictor", "lightgbm-strong"]) == 2


def test_bench_sls_runs_dlrm_shaped_lookups(tmp_path, capsys):
    out = tmp_path / "dlrm.json"
    assert main(["bench", "sls", "--trace", "dlrm", "--table-rows", "20000", "--dim", "4",
                 "--batch-sizes", "32", "--cache-ratio", "0.01,0.03", "--policies", "lru",
                 "--batches", "3", "--warmup", "2", "--json", str(out)]) == 0
    lru = {r["cache_ratio"]: r["hit_ratio"] for r in json.loads(out.read_text())["results"]
           if r["policy"] == "lru"}
    assert 0 < lru[0.01] < lru[0.03] < 1  # a skewed stream: more cache, more hits
    capsys.readouterr()
    assert main(["bench", "sls", "--trace", f"dlrm:{tmp_path / 'none.txt'}"]) == 2
    assert "none.txt: cannot read" in capsys.readouterr().err


def test_the_batch_predictor_answers_one_batch_behind():
    """Batch i's answers are written before batch i + 2: the same decisions on every run,
    whatever the thread's speed."""
    from lcr.embedding.bench import BatchPredictor
    from lcr.embedding.predictions import TracePredictor

    lookups = np.array([5, 6, 5, 7, 8, 9, 6, 5], dtype=np.int64)
    values = np.arange(len(lookups), dtype=np.float64) * 10
    predictor = BatchPredictor(TracePredictor(values, 10))
    try:
        predictor.submit(lookups[:4], 0)
        assert predictor.collect() is None
        predictor.submit(lookups[4:], 4)
        keys, answers = predictor.collect()
        assert keys.tolist() == [5, 6, 7] and answers.tolist() == [20.0, 10.0, 30.0]
    finally:
        predictor.close()


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
    """Async mode: a model ten times slower than the loop costs the loop nothing; batches
    queued behind the one in progress are replaced by newer ones, never observed; collect
    hands over the newest answer only."""
    from lcr.embedding.bench import BatchPredictor

    model = _SlowModel(0.3)
    predictor = BatchPredictor(model, wait=False)
    try:
        began = time.perf_counter()
        answers = []
        for start in range(0, 50, 10):
            answers.append(predictor.collect())
            predictor.submit(np.arange(start, start + 10), start)
            model.started.wait(1)  # batch 0 in progress
        assert time.perf_counter() - began < 0.2 and answers == [None] * 5
        time.sleep(0.9)  # batch 0, then the newest (40): 10..30 were replaced unobserved
        keys, values = predictor.collect()
        assert model.observed == [0, 40] and keys.tolist() == list(range(40, 50))
        assert values.tolist() == [40.0] * 10 and predictor.collect() is None
        assert (predictor.seen, predictor.skipped) == (20, 30) and predictor.seen_share == 0.4
    finally:
        predictor.close()
    failing = BatchPredictor(_SlowModel(0.0, fail_at=0), wait=False)
    try:
        failing.submit(np.arange(3), 0)
        time.sleep(0.2)
        with pytest.raises(RuntimeError, match="model broke"):
            failing.collect()
    finally:
        failing.close()


def test_the_sync_batch_predictor_waits_for_a_slow_model():
    from lcr.embedding.bench import BatchPredictor

    model = _SlowModel(0.2)
    predictor = BatchPredictor(model)
    try:
        for start in range(0, 40, 10):
            predictor.submit(np.arange(start, start + 10), start)
            predictor.collect()
        assert model.observed[:3] == [0, 10, 20] and predictor.wait_s > 0.3
        assert predictor.skipped == 0
    finally:
        predictor.close()


def test_the_online_model_learns_on_the_predictor_thread():
    """--predictor lightgbm: the four-feature model observes every lookup at its trace
    position and, once fitted, predicts each row's next lookup."""
    from lcr.embedding.bench import BatchPredictor
    from lcr.embedding.predictions import OnlineModel
    from lcr.predict import learned_config
    from lcr.predict.lightgbm_model import LightGBMPredictor

    period = np.tile(np.arange(300, dtype=np.int64), 60)  # every row returns 300 lookups later
    predictor = BatchPredictor(OnlineModel(LightGBMPredictor(learned_config("lightgbm-compact", 0))))
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


def test_bench_sls_runs_predictive_policies_once_per_predictor_into_one_file(tmp_path, capsys):
    out = tmp_path / "sls.json"
    assert main(["bench", "sls", "--table-rows", "3000", "--dim", "4", "--pooling", "5",
                 "--batch-sizes", "16", "--cache-ratio", "0.05", "--policies", "lru,laru",
                 "--predictor", "oracle,noisy:1", "--batches", "2", "--warmup", "1",
                 "--json", str(out)]) == 0
    assert "laru/noisy:1" in capsys.readouterr().out
    results = json.loads(out.read_text())["results"]
    assert [(r["policy"], r["predictor"]) for r in results] == [
        ("embedding_bag", ""), ("lru", ""), ("laru", "oracle"), ("laru", "noisy:1")]
    from lcr.embedding.bench import markdown_table
    table = markdown_table(out).splitlines()
    assert [line.split(" | ")[1] for line in table[2:]] == ["embedding_bag", "lru", "laru/oracle", "laru/noisy:1"]
    assert main(["bench", "sls", "--predictor", "oracle,psychic"]) == 2
    assert "--predictor: 'psychic'" in capsys.readouterr().err
