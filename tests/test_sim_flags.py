"""Every bad `lcr sim` / `lcr sim-kv` flag or input: one line on stderr, exit 2, no
traceback, no hang, nothing written where it should not be."""
from __future__ import annotations

import gzip
import lzma
import subprocess
import sys

import numpy as np
import pytest

from lcr.cli import main

LOOP = "loop:requests=100,keys=10"
QA = "online_qa:conversations=20"


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    run.out = captured.out
    return code, captured.err.strip()


@pytest.mark.parametrize("argv,message", [
    (["sim", LOOP, "--seed", "-1"], "--seed must be a non-negative integer"),
    (["sim", LOOP, "--policies", ""], "--policies: give at least one policy"),
    (["sim", LOOP, "--policies", " , "], "--policies: give at least one policy"),
    (["sim", "zipf:requests=0"], "generator parameter 'requests' must be at least 1, got 0"),
    (["sim", "zipf:requests=1.5"], "generator parameter 'requests': expected int, got '1.5'"),
    (["sim", "zipf:requests=1e12"], "1,000,000,000,000 requests would need about"),
    (["sim", "zipf:alpha=nan"], "generator parameter 'alpha' must be finite"),
    (["sim", "scan:scan_every=0,scan_length=0"], "generator parameter 'scan_every' must be at least 1"),
    (["sim", "moe:top_k=99"], "top_k must be in 1..8"),
    (["sim", LOOP, "--cache", "1e30"], "--cache: '1e30' is more than 2^62 items"),
    (["sim", LOOP, "--cache", "inf"], "--cache: 'inf' gives no room"),
    (["sim", LOOP, "--limit", "0"], "--limit must be at least 1"),
    (["sim", LOOP, "--predictor", "lightgbm", "--noise", "0.5"], "--noise applies only to"),
    (["sim-kv", QA, "--cache-tokens", "5%", "--seed", "-1"], "--seed must be a non-negative integer"),
    (["sim-kv", QA, "--cache-tokens", "5%", "--policies", ""], "--policies: give at least one policy"),
    (["sim-kv", QA, "--cache-tokens", "1e30"], "--cache-tokens: '1e30' is more than 2^62 tokens"),
    (["sim-kv", QA, "--cache-tokens", "5%", "--limit", "0"], "--limit must be at least 1 (prompts)"),
    (["sim-kv", LOOP, "--cache-tokens", "5%", "--limit", "3"], "not a prefix-block trace"),
    (["sim-kv", "online_qa:turns_mean=0", "--cache-tokens", "5%"], "generator online_qa:"),
])
def test_bad_flags_give_one_line_and_exit_2(capsys, argv, message):
    code, err = run(capsys, *argv)
    assert code == 2, err
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("command", [["sim", LOOP], ["sim-kv", QA, "--cache-tokens", "5%"]])
def test_output_paths_are_checked_before_any_work(capsys, tmp_path, command):
    code, err = run(capsys, *command, "--plot", str(tmp_path))
    assert code == 2 and "is a directory; give a file name" in err
    assert not (tmp_path.parent / f"{tmp_path.name}.png").exists()  # matplotlib's DIR.png
    code, err = run(capsys, *command, "--plot", str(tmp_path / "plot"))
    assert code == 2 and "give a file name ending in .png" in err
    code, err = run(capsys, *command, "--json", "/proc/no/r.json")
    assert code == 2 and "--json /proc/no/r.json: cannot write there" in err
    assert run.out == ""  # refused before the sweep printed anything


def test_the_summary_line_names_the_format_read(capsys, tmp_path):
    keys = np.random.default_rng(0).integers(0, 300, 5000)
    path = tmp_path / "recs.trace.xz"
    path.write_bytes(lzma.compress(keys.astype(">i8").tobytes()))
    assert main(["sim", str(path), "--policies", "lru", "--cache", "10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# recs.trace.xz [int64-be (scarab), from content]: 5,000 requests, "
                          f"{len(np.unique(keys))} distinct keys")


def test_limit_counts_requests_on_mooncake(capsys, tmp_path):
    path = tmp_path / "m.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(20):
            f.write(f'{{"timestamp": {i}, "hash_ids": [{i}, {i + 1}, {i + 2}, {i + 3}, {i + 4}]}}\n')
    assert main(["sim", str(path), "--limit", "10", "--policies", "lru", "--cache", "2"]) == 0
    assert ": 10 requests," in capsys.readouterr().out
    assert main(["sim-kv", str(path), "--limit", "3", "--policies", "lru", "--cache-tokens", "100"]) == 0
    assert ": 3 requests," in capsys.readouterr().out


def test_corrupt_trace_through_the_real_command_line(tmp_path):
    path = tmp_path / "bad.trace.gz"
    path.write_bytes(gzip.compress(b"1\n2\n3\n" * 1000)[:-30])
    out = subprocess.run([sys.executable, "-m", "lcr", "sim", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "bad.trace.gz: cannot read" in out.stderr
