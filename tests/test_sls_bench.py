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


def test_the_benchmarks_online_model_fits_at_most_once_per_batch():
    """Its answers are taken at the end of a batch: a fit every retrain_every lookups
    inside a larger batch is work the cache never sees."""
    from lcr.embedding.bench_cli import model_factory

    make = model_factory("lightgbm", np.arange(10), 10, 0.0, 0)
    small, large = make(128 * 50).model.config.retrain_every, make(2048 * 50).model.config.retrain_every
    assert small == 6400 and large == 102_400
    assert make(100).model.config.retrain_every == 5_000  # small batches keep the model's own schedule
