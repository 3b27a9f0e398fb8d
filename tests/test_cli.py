"""`lcr sim` end to end, as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def lcr(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "lcr", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_sim_prints_a_table_and_writes_json_and_plot(tmp_path):
    out = lcr("sim", "zipf:requests=20000,keys=2000,alpha=0.9,seed=0", "--cache", "1%,5%",
              "--policies", "lru,opt,laru,fpb,hf,laru:mode=async", "--noise", "0,1",
              "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"))
    assert out.returncode == 0, out.stderr
    assert "hit ratio" in out.stdout and "cost ratio" in out.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    rows = {(r["policy"], r["capacity"], r["noise"]): r for r in doc["results"]}
    capacities = sorted({c for _, c, _ in rows})
    assert len(capacities) == 2 and len(doc["results"]) == 2 * (2 + 4 * 2)
    for k in capacities:
        assert rows[("laru", k, 0.0)]["misses"] == rows[("opt", k, None)]["misses"]
        assert rows[("laru:mode=async", k, 0.0)]["cost_ratio"] == 1.0
        assert rows[("fpb", k, 1.0)]["cost_ratio"] > rows[("lru", k, None)]["cost_ratio"]
    png = (tmp_path / "r.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("args,message", [
    (["--cache", "0"], "--cache: '0' gives no room"),
    (["--cache", "0%"], "--cache: '0%' gives no room"),
    (["--cache", "ten"], "--cache: 'ten' is neither a number nor a percentage"),
    (["--policies", "lru,belady2"], "unknown policy 'belady2'; valid: lru, opt, fpb"),
    (["--noise", "0,high"], "--noise: 'high' is not a number"),
    (["--policies", "laru:b=0.5"], "policy 'laru:b=0.5': laru needs b > 1"),
])
def test_sim_rejects_bad_arguments_in_one_line(args, message):
    out = lcr("sim", "loop:requests=100,keys=10", *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_sim_rejects_a_missing_trace_file(tmp_path):
    out = lcr("sim", str(tmp_path / "missing.jsonl"))
    assert out.returncode == 2 and "missing.jsonl: no such trace file" in out.stderr
    assert "Traceback" not in out.stderr


def test_python_dash_m_and_console_script_agree():
    out = lcr("--help")
    assert out.returncode == 0 and "sim" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["sim", "loop:requests=100,keys=10", "--bogus"], "lcr: error: unrecognized arguments: --bogus"),
    (["sim"], "lcr sim: error: the following arguments are required: trace"),
    (["sim-route", "gsp", "--seed", "x"], "lcr sim-route: error: argument --seed: invalid int value"),
    (["nope"], "lcr: error: argument command: invalid choice: 'nope'"),
    (["sim", "loop:requests=100,keys=10", "--polic", "lru"], "unrecognized arguments: --polic"),
])
def test_argparse_refusals_are_one_line_too(args, message):
    """Flags argparse itself refuses (unknown, missing, mistyped) get the same one line as
    lcr's own checks, not a usage block."""
    out = lcr(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
