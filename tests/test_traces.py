"""Readers on every real format, generators, next-use, and clear errors on bad input."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from lcr.errors import LcrInputError
from lcr.traces import NEVER, generate, load_trace, next_use, next_use_reference, read_trace
from lcr.traces.readers import ORACLE_GENERAL

from conftest import data_file


@pytest.mark.parametrize("relative,requests,distinct", [
    ("kv/mooncake_conversation_trace.jsonl", 288_500, 182_790),
    ("classic/cloudPhysicsIO.oracleGeneral.bin", 113_872, 48_974),
    ("classic/cloudPhysicsIO.csv", 113_872, 48_974),
    ("classic/cache2k_web07.trace.xz", 76_118, 20_484),
    ("embedding/criteo_kaggle_first999.tsv", 22_873, None),
    ("moe/router-trace.v2.json", 215 * 6, 48),
    ("classic/lirs/2_pools.trace.gz", 100_000, None),  # 100,002 lines, two '*' markers
    ("classic/lirs/loop.trace.gz", 505_500, None),     # CRLF line ends
])
def test_real_traces_have_the_documented_shape(relative, requests, distinct):
    """Counts from shared/data/PROVENANCE.md."""
    trace = read_trace(data_file(relative))
    assert len(trace) == requests
    if distinct is not None:
        assert trace.distinct_keys == distinct


def test_mooncake_keeps_request_boundaries():
    trace = read_trace(data_file("kv/mooncake_conversation_trace.jsonl"))
    assert trace.meta["requests"] == 12_031 and len(trace.request_offsets) == 12_032
    first = json.loads(data_file("kv/mooncake_conversation_trace.jsonl").open().readline())
    assert trace.keys[: trace.request_offsets[1]].tolist() == first["hash_ids"]


def test_csv_and_binary_cloudphysics_agree_on_reuse():
    binary = read_trace(data_file("classic/cloudPhysicsIO.oracleGeneral.bin"))
    csv = read_trace(data_file("classic/cloudPhysicsIO.csv"))
    assert np.array_equal(binary.next_use, csv.next_use)


def test_next_use_matches_the_oracle_in_libcachesim_binary_traces():
    path = data_file("classic/cloudPhysicsIO.oracleGeneral.bin")
    records = np.fromfile(path, dtype=ORACLE_GENERAL)
    ours = read_trace(path).next_use
    assert np.array_equal(np.where(ours == NEVER, -1, ours + 1), records["next_vtime"])


@pytest.mark.parametrize("keys", [[], [5], [1, 1, 1], [3, 1, 3, 2, 1, 3], list(np.random.default_rng(0).integers(-50, 50, 5000))])
def test_native_next_use_equals_the_reference(keys):
    assert np.array_equal(next_use(keys), next_use_reference(keys))
    if keys == [3, 1, 3, 2, 1, 3]:
        assert next_use(keys).tolist() == [2, 4, 5, NEVER, NEVER, NEVER]


def test_moe_router_trace_is_layer_ordered_pages():
    trace = read_trace(data_file("moe/router-trace.v2.json"))
    layers = trace.keys // trace.meta["experts"]
    assert layers[:12].tolist() == [0, 1, 2, 3, 4, 5] * 2
    assert trace.meta["tokens"] == 215


def test_generators_are_seeded_and_shaped():
    a, b = generate("zipf:requests=50000,keys=1000,alpha=1.0,seed=1"), generate("zipf:requests=50000,keys=1000,alpha=1.0,seed=1")
    assert np.array_equal(a.keys, b.keys)
    assert not np.array_equal(a.keys, generate("zipf:requests=50000,keys=1000,alpha=1.0,seed=2").keys)
    counts = np.sort(np.bincount(a.keys))[::-1]
    assert counts[0] / counts[9] == pytest.approx(10.0, rel=0.25)  # Zipf(1): rank 1 vs rank 10
    assert generate("loop:requests=10,keys=4").keys.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    scan = generate("scan:requests=5000,hot_keys=100,scan_length=500,scan_every=2000")
    assert (scan.next_use[scan.keys >= 100] == NEVER).all()


def test_online_qa_matches_the_paper_parameters():
    trace = generate("online_qa:seed=0")
    requests = trace.meta["requests"]
    assert requests / 2000 == pytest.approx(3.63, rel=0.05)
    assert np.mean(trace.meta["input_lengths"]) == pytest.approx(3455, rel=0.1)
    # A conversation's later turns reuse all full blocks of its earlier prompt.
    offsets = trace.request_offsets
    prompts = [trace.keys[offsets[i]:offsets[i + 1]] for i in range(requests)]
    first_block = {}
    reused = 0
    for p in prompts:
        if len(p) > 1 and p[0] in first_block:
            reused += 1
        first_block.setdefault(p[0], p)
    assert reused > 0.5 * (requests - 2000)


def test_aibrix_sessions_share_system_prompts():
    trace = generate("aibrix:sessions=200,seed=1")
    offsets = trace.request_offsets
    first_blocks = {int(trace.keys[offsets[i]]) for i in range(len(offsets) - 1)}
    assert len(first_blocks) <= 8


def write(tmp_path, name, content, mode="w"):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(content)
    else:
        path.write_text(content) if mode == "w" else path.write_bytes(content)
    return path


@pytest.mark.parametrize("name,content,message", [
    ("bad.jsonl", '{"hash_ids": [1, 2]}\n{"hash_ids": [1, 2\n', r"bad\.jsonl:2: malformed JSON"),
    ("bad2.jsonl", '{"hash_ids": [1, 2]}\n{"hash_ids": "x"}\n', r"bad2\.jsonl:2: field 'hash_ids'"),
    ("keys.trace.gz", "1\n2\nthree\n", r"keys\.trace\.gz:3: key: expected an integer, got 'three'"),
    ("empty.txt", "\n\n", r"empty\.txt: trace is empty"),
    ("bad.csv", "time,op\n1,2\n", r"bad\.csv:1: header has no key column"),
    ("bad.tsv", "0\t1\n", r"bad\.tsv:1: expected 14\.\.40 tab-separated fields"),
])
def test_readers_reject_bad_input_in_one_line(tmp_path, name, content, message):
    path = write(tmp_path, name, content)
    with pytest.raises(LcrInputError, match=message) as err:
        read_trace(path)
    assert "\n" not in str(err.value)


def test_reader_errors_for_missing_files_unknown_formats_and_torn_records(tmp_path):
    with pytest.raises(LcrInputError, match="nope.bin: no such trace file"):
        read_trace(tmp_path / "nope.bin")
    path = write(tmp_path, "x.oracleGeneral.bin", b"\0" * 30, mode="wb")
    with pytest.raises(LcrInputError, match="not a multiple of the 24-byte"):
        read_trace(path)
    with pytest.raises(LcrInputError, match="unknown trace format 'parquet'"):
        read_trace(path, fmt="parquet")
    with pytest.raises(LcrInputError, match="unknown generator"):
        generate("zipfian:alpha=1")
    with pytest.raises(LcrInputError, match="expected float, got 'x'"):
        load_trace("zipf:alpha=x")


def test_lpc_registers_its_sharegpt_generator_and_traces_do_not_know_it():
    """lcr.traces imports nothing above it: LPC's chat replay is offered once lcr.lpc is
    imported (the lcr command always imports it). A name cannot be taken twice."""
    import subprocess
    import sys

    code = ("import lcr.traces as t; before = 'sharegpt' in t.GENERATORS\n"
            "try: t.load_trace('sharegpt:conversations=5')\n"
            "except ValueError as err: print(err)\n"
            "import lcr.lpc; print(before, 'sharegpt' in t.GENERATORS, t.is_generator_spec('sharegpt:half=eval'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    refused, registered = out.stdout.splitlines()
    assert registered.split() == ["False", "True", "True"], out.stderr
    assert "nor a generator 'sharegpt'" in refused and "sharegpt with lcr.lpc" in refused
    from lcr.traces import register_generator
    from lcr.traces.generators import GENERATORS, zipf

    register_generator("zipf", zipf)  # the same function again: nothing happens
    with pytest.raises(ValueError, match="'zipf' is already registered"):
        register_generator("zipf", lambda requests=1: None)
    assert GENERATORS["zipf"] is zipf
