"""Trace formats that cannot silently lie: every ambiguous case is read right (with the
format named) or refused; ``limit`` counts requests in every reader; bad bytes give one
``LcrInputError`` line, never another exception."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import time

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from lcr.errors import LcrInputError
from lcr.traces import FORMATS, format_label, generate, read_trace
from lcr.traces.readers import ORACLE_GENERAL

from conftest import DATA


def base_keys() -> np.ndarray:
    """web07's keys when the shared data is here (the real case), else a Zipf stream."""
    path = DATA / "classic/cache2k_web07.trace.xz"
    if path.exists():
        return np.frombuffer(lzma.decompress(path.read_bytes()), dtype=">i4").astype(np.int64)
    return generate("zipf:requests=76118,keys=20484,alpha=0.8,seed=3").keys


def xz(path, data: bytes):
    path.write_bytes(lzma.compress(data))
    return path


def test_scarab_style_int64_trace_xz_is_read_as_int64_and_says_so(tmp_path):
    keys = base_keys()
    path = xz(tmp_path / "recs.trace.xz", keys.astype(">i8").tobytes())
    trace = read_trace(path)
    assert np.array_equal(trace.keys, keys) and len(trace) == len(keys)
    assert format_label(trace) == "int64-be (scarab), from content"
    # Named as the int32 stream, the telltale sign words refuse it instead of doubling it.
    with pytest.raises(LcrInputError, match="64-bit keys; pass --format int64-be"):
        read_trace(path, fmt="cache2k")
    assert np.array_equal(read_trace(path, fmt="scarab").keys, keys)


def test_cache2k_int32_trace_xz_is_still_int32(tmp_path):
    keys = base_keys()
    trace = read_trace(xz(tmp_path / "web.trace.xz", keys.astype(">i4").tobytes()))
    assert np.array_equal(trace.keys, keys) and trace.meta["format"] == "int32-be"


def test_little_endian_streams_are_named_little_endian(tmp_path):
    keys = base_keys()[:20_000]
    for dtype, name in (("<i4", "int32-le"), ("<i8", "int64-le")):
        trace = read_trace(xz(tmp_path / f"{name}.trace.xz", keys.astype(dtype).tobytes()))
        assert trace.meta["format"] == name and np.array_equal(trace.keys, keys)


def test_text_trace_xz_is_read_as_text(tmp_path):
    keys = base_keys()[:5000]
    path = xz(tmp_path / "lirs.trace.xz", "".join(f"{k}\n" for k in keys).encode())
    trace = read_trace(path)
    assert format_label(trace) == "text, from content" and np.array_equal(trace.keys, keys)
    with pytest.raises(LcrInputError, match="--format int32-be but the content is text"):
        read_trace(path, fmt="int32-be")


def test_undecidable_width_is_refused_naming_both(tmp_path):
    # 64-bit hashed keys with no reuse: no sign words, no repeats to look at.
    keys = np.random.default_rng(0).integers(-2**62, 2**62, 4000)
    with pytest.raises(LcrInputError, match=r"pass --format int32-be \(cache2k\) or int64-be \(scarab\)"):
        read_trace(xz(tmp_path / "hashes.trace.xz", keys.astype(">i8").tobytes()))


def test_multi_column_text_is_refused_naming_arc_and_adapt_size(tmp_path):
    path = tmp_path / "t.trace"
    path.write_text("1 5 0 0\n9 2 0 1\n")
    with pytest.raises(LcrInputError, match="pass --format arc or --format adapt_size"):
        read_trace(path)


def sample_files(tmp_path) -> dict[str, tuple[object, np.ndarray]]:
    """A small file of every format and the keys it holds (at least 40 requests each)."""
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 50, 60)
    out = {}
    for name in FORMATS:
        if name[0] in "iu":  # integer streams
            stream = FORMATS[name]
            path = tmp_path / f"{name}.bin.zst"
            path.write_bytes(zstandard.ZstdCompressor().compress(keys.astype(stream.dtype).tobytes()))
            out[name] = (path, keys)
    (tmp_path / "k.txt").write_text("*\n" + "".join(f"{k}\n" for k in keys))
    out["text"] = (tmp_path / "k.txt", keys)
    (tmp_path / "a.lis").write_text("".join(f"{k * 10} 3 0 {i}\n" for i, k in enumerate(keys[:20])))
    out["arc"] = (tmp_path / "a.lis", np.concatenate([np.arange(k * 10, k * 10 + 3) for k in keys[:20]]))
    (tmp_path / "w.tr").write_text("".join(f"{i} {k} {k + 100}\n" for i, k in enumerate(keys)))
    out["adapt_size"] = (tmp_path / "w.tr", keys)
    with gzip.open(tmp_path / "m.jsonl.gz", "wt") as f:
        for i in range(0, 60, 6):
            f.write(json.dumps({"timestamp": i, "hash_ids": keys[i:i + 6].tolist()}) + "\n")
    out["mooncake"] = (tmp_path / "m.jsonl.gz", keys)
    records = np.zeros(len(keys), dtype=ORACLE_GENERAL)
    records["obj_id"], records["next_vtime"] = keys, -1
    (tmp_path / "o.oracleGeneral.zst").write_bytes(zstandard.ZstdCompressor().compress(records.tobytes()))
    out["oracleGeneral"] = (tmp_path / "o.oracleGeneral.zst", keys)
    (tmp_path / "c.csv.bz2").write_bytes(bz2.compress(
        ("time,obj_id\n" + "".join(f"{i},{k}\n" for i, k in enumerate(keys))).encode()))
    out["csv"] = (tmp_path / "c.csv.bz2", keys)
    cats = lambda row: "\t".join(f"{k + 16 * f:08x}" for f, k in enumerate(row))  # noqa: E731
    (tmp_path / "c.tsv").write_text("".join("0" + "\t" * 13 + "\t" + cats(keys[r * 6:r * 6 + 6]) + "\n"
                                            for r in range(10)))
    out["criteo"] = (tmp_path / "c.tsv",
                     np.array([(f << 32) | (int(k) + 16 * f) for r in range(10)
                               for f, k in enumerate(keys[r * 6:r * 6 + 6])]))
    (tmp_path / "r.json").write_text(json.dumps({"expertsPerLayer": 50, "layers": 2,
                                                 "selections": [[[int(a)], [int(b)]] for a, b in keys.reshape(-1, 2)]}))
    out["moe-router"] = (tmp_path / "r.json", keys + np.tile([0, 50], 30))
    return out


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return sample_files(tmp_path_factory.mktemp("formats"))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_reads_its_keys_and_limit_counts_requests(samples, fmt):
    path, keys = samples[fmt]
    full = read_trace(path, fmt=fmt)
    assert np.array_equal(full.keys, keys)
    for limit in (1, 7, 37, len(keys), len(keys) + 5):
        cut = read_trace(path, fmt=fmt, limit=limit)
        assert len(cut) == min(limit, len(keys))
        assert np.array_equal(cut.keys, keys[:limit])


def test_criteo_keeps_each_lookups_field_as_its_table(samples):
    path, _ = samples["criteo"]
    fields = [f for _ in range(10) for f in range(6)]
    assert read_trace(path).tables.tolist() == fields
    assert read_trace(path, limit=8).tables.tolist() == fields[:8]


def test_limit_on_mooncake_counts_blocks_and_keeps_prompts_whole_where_it_can(samples):
    path, keys = samples["mooncake"]
    cut = read_trace(path, limit=10)
    assert len(cut) == 10 and cut.request_offsets.tolist() == [0, 6, 10]
    assert cut.meta["requests"] == 2
    prompts = read_trace(path).first_prompts(3)
    assert len(prompts) == 18 and prompts.meta["requests"] == 3


def test_names_settle_formats_only_where_unambiguous(samples):
    for fmt in ("mooncake", "oracleGeneral", "csv", "criteo", "moe-router", "arc"):
        assert read_trace(samples[fmt][0]).meta["format_from"] == "name"
    assert read_trace(samples["text"][0]).meta["format_from"] == "content"


def write_gz(path, text: str):
    with gzip.open(path, "wt") as f:
        f.write(text)
    return path


@pytest.mark.parametrize("name,content,message", [
    ("corrupt.trace.gz", b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage" * 10, "cannot read"),
    ("latin1.csv", "time,obj_id\n1,caf\xe9\n".encode("latin-1"), r"latin1\.csv:2: field 'obj_id': expected an integer"),
    ("binary.csv", b"obj_id\n\x00\xff\xfe\x01\n", r"binary\.csv:2: field 'obj_id'"),
    ("latin1.tsv", b"0" + b"\t" * 14 + b"caf\xe9\n", r"latin1\.tsv:1: field C1: expected a 32-bit hex"),
    ("huge.csv", b"obj_id\n" + b"1" * 140_000 + b"\n", r"huge\.csv:2: CSV: field larger than field limit"),
    ("big.txt", b"1\n99999999999999999999999\n", r"big\.txt:2: key: 99999999999999999999999 does not fit"),
    ("big.csv", b"obj_id\n1\n-99999999999999999999\n", r"big\.csv:3: field 'obj_id': -99999999999999999999 does not fit"),
    ("big.jsonl", b'{"hash_ids": [1, 99999999999999999999]}\n', r"big\.jsonl:1: field 'hash_ids': expected a list of 64-bit"),
    ("ts1.jsonl", b'{"timestamp": "noon", "hash_ids": [1]}\n', r"ts1\.jsonl:1: field 'timestamp': expected a finite number"),
    ("ts2.jsonl", b'{"timestamp": null, "hash_ids": [1]}\n', r"ts2\.jsonl:1: field 'timestamp'"),
    ("ts3.jsonl", b'{"timestamp": [1, 2], "hash_ids": [1]}\n', r"ts3\.jsonl:1: field 'timestamp'"),
    ("deep.jsonl", b"[" * 100_000 + b"\n", r"deep\.jsonl:1: (malformed JSON|field 'hash_ids')"),
    ("moe1.json", b'{"expertsPerLayer": 8, "layers": 2, "selections": [1, 2]}', r"moe1\.json: token 0: expected"),
    ("moe2.json", b'{"expertsPerLayer": 8, "layers": 2, "selections": {"a": 1}}', r"moe2\.json: field 'selections'"),
    ("moe3.json", b'{"expertsPerLayer": 8, "layers": 2, "selections": [[[1], [2, 3]]]}', r"moe3\.json: every layer"),
    ("moe4.json", b'{"expertsPerLayer": -8, "layers": 2, "selections": []}', r"moe4\.json: field 'expertsPerLayer'"),
    ("huge.lis", b"0 99999999999999\n", r"huge\.lis:1: count 99999999999999 is outside"),
])
def test_bad_bytes_give_one_line_naming_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(LcrInputError, match=message) as err:
        read_trace(path)
    assert "\n" not in str(err.value)


ALL_FORMATS = [None, *sorted(FORMATS)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=600), fmt=st.sampled_from(ALL_FORMATS),
       wrap=st.sampled_from(["plain", "gzip", "xz", "zstd", "torn-gzip"]),
       suffix=st.sampled_from([".trace", ".trace.xz", ".bin", ".csv", ".tsv", ".jsonl", ".json", ".lis", ""]))
def test_fuzzed_bytes_raise_only_lcr_input_errors(tmp_path, data, fmt, wrap, suffix):
    packed = {"plain": lambda b: b, "gzip": gzip.compress, "xz": lzma.compress,
              "zstd": zstandard.ZstdCompressor().compress,
              "torn-gzip": lambda b: gzip.compress(b)[:-5]}[wrap](data)
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(packed)
    start = time.perf_counter()
    try:
        trace = read_trace(path, fmt=fmt)
        assert len(trace) >= 1 and trace.keys.dtype == np.int64
    except LcrInputError as err:
        assert "\n" not in str(err)
    assert time.perf_counter() - start < 5


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(alphabet="0123456789-,{}[]\":. \tae*\x00\xe9", max_size=30), max_size=12),
       fmt=st.sampled_from(ALL_FORMATS))
def test_fuzzed_text_raises_only_lcr_input_errors(tmp_path, lines, fmt):
    path = tmp_path / "fuzz.txt"
    path.write_bytes("\n".join(lines).encode("utf-8", errors="replace"))
    try:
        read_trace(path, fmt=fmt)
    except LcrInputError as err:
        assert "\n" not in str(err)
