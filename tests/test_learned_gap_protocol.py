"""benchmarks/learned_gap.py's protocol: the tuning/report split of the shared traces is
fixed by a rule that reads only the file names, covers every shared trace, and puts every
folder with two or more traces in both halves (a change to the split fails here); each
half is summarized apart, with the model's time per request measured without one-time
start-up costs."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lcr.traces import generate

from conftest import DATA

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "learned_gap.py"


@pytest.fixture(scope="module")
def gap():
    spec = importlib.util.spec_from_file_location("learned_gap", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Fixed before anything was measured on the new traces (2026-11-27); docs/traces.md lists the same.
TUNING = ["classic/cloudPhysicsIO.oracleGeneral.bin", "classic/cache2k_web07.trace.xz",
          "classic/lirs/multi2.trace.gz", "classic/lirs/sprite.trace.gz", "classic/lirs/2_pools.trace.gz",
          "embedding/criteo_kaggle_first999.tsv", "recsys/ml-100k.inter", "kv/mooncake_conversation_trace.jsonl",
          "classic/lirs/cpp.trace.gz", "classic/lirs/loop.trace.gz", "classic/lirs/scan.trace.gz"]
REPORT = [*(f"classic/address/{name}.trace.gz" for name in ("gcc", "gzip", "swim", "twolf")),
          "classic/corda/trace_vaultservice.gz",
          *(f"classic/lirs/{name}.trace.gz" for name in ("backf", "cs", "gli", "multi1", "multi3", "ps", "zigzag"))]


def test_the_split_is_the_fixed_one(gap):
    """Every trace a choice was made or checked on is tuning; only unseen ones report."""
    assert gap.HALVES == {**{t: "tuning" for t in TUNING}, **{t: "report" for t in REPORT}}
    assert sorted(gap.TRACES) == sorted(TUNING + REPORT)
    assert gap.split(list(reversed(gap.TRACES))) == gap.HALVES  # the listing order plays no part


def test_every_shared_classic_trace_is_in_the_benchmark(gap):
    classic = DATA / "classic"
    if not classic.exists():
        pytest.skip(f"{classic} not present (shared data is optional)")
    files = {str(p.relative_to(DATA)) for p in classic.rglob("*") if p.is_file()}
    files.discard("classic/cloudPhysicsIO.csv")  # the same trace as the .oracleGeneral.bin
    assert files <= set(gap.TRACES)


def run_benchmark(tmp_path, *args: str) -> dict:
    """One run, its model passes kept under tmp_path (not the user's cache)."""
    out = tmp_path / "gap.json"
    env = {**os.environ, "LCR_CACHE_DIR": str(tmp_path / "cache")}
    subprocess.run([sys.executable, str(BENCHMARK), "--variants", "weak", "--out", str(out), *args],
                   check=True, capture_output=True, timeout=300, cwd=BENCHMARK.parents[1], env=env)
    return json.loads(out.read_text())


# Without a warm-up the first cell also paid ~1 s of importing LightGBM: ~800 µs per
# request on 2,000 requests, against single-digit µs for the weak model.
FIRST_CELL_US = 100


def test_own_trace_cells_record_the_models_time_per_request(tmp_path):
    path = tmp_path / "zipf.txt"
    path.write_text("".join(f"{k}\n" for k in generate("zipf:requests=2000,keys=400,alpha=0.8,seed=2").keys))
    result = run_benchmark(tmp_path, "--trace", str(path))
    assert [r["half"] for r in result["rows"]] == ["yours"] * 3 and list(result["summary"]) == ["yours"]
    times = [r["model_us_per_request"]["weak"] for r in result["rows"]]
    assert 0 < times[0] < FIRST_CELL_US, times
    assert result["summary"]["yours"]["model_us_per_request"]["weak"] == pytest.approx(sum(times) / 3)
    # A rerun reads the three passes from disk: the same cells, times included, no new pass.
    passes = sorted((tmp_path / "cache" / "learned_gap").glob("*.npy"))
    assert len(passes) == 3
    again = run_benchmark(tmp_path, "--trace", str(path))
    assert again["rows"] == result["rows"]
    assert sorted((tmp_path / "cache" / "learned_gap").glob("*.npy")) == passes


def test_both_halves_run_and_are_summarized_apart(tmp_path, gap):
    if not (DATA / "classic/lirs/gli.trace.gz").exists():
        pytest.skip(f"{DATA} not present (shared data is optional)")
    result = run_benchmark(tmp_path, "--traces", "lirs/gli,lirs/sprite", "--max-requests", "1500")
    assert list(result["summary"]) == ["tuning", "report"] and result["halves"] == gap.HALVES
    assert {(r["trace"].split(".")[0], r["half"]) for r in result["rows"]} == {("sprite", "tuning"), ("gli", "report")}
    for half in ("tuning", "report"):
        assert result["summary"][half]["policies"]["laru+weak"]["cells"] == 3
    only = run_benchmark(tmp_path, "--traces", "lirs/gli,lirs/sprite", "--max-requests", "1500", "--half", "tuning")
    assert list(only["summary"]) == ["tuning"]
