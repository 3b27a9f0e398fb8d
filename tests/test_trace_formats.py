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
from lcr.traces import FORMATS, detect_format, format_label, generate, read_trace
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
    write_gz(tmp_path / "gcc.trace.gz", "".join(f"{'ls'[i % 2]} 0x{0x1fff0000 + 8 * k:08x} {i % 7}\n"
                                                for i, k in enumerate(keys)))
    out["address"] = (tmp_path / "gcc.trace.gz", 0x1fff0000 + 8 * keys)
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
    assert format_label(read_trace(samples["address"][0])) == "address, from content"


def test_no_other_format_is_detected_as_address(samples):
    for fmt, (path, _) in samples.items():
        if fmt == "address":
            continue
        try:
            assert detect_format(path) != "address", fmt
        except LcrInputError:  # refused (e.g. arc or adapt_size), never read as addresses
            pass


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
    ("op.trace", b"l 0x10 1\ns 0x18 0\nx 0x20 1\n", r"op\.trace:3: field 'op': expected l or s, got 'x'"),
    ("hex.trace", b"l 0x10 1\nl 0xZZ 1\n", r"hex\.trace:2: field 'address': expected 0x and 1 to 16 hex digits"),
    ("wide.trace", b"l 0x10 1\nl 0x1ffffffffffffffff 1\n", r"wide\.trace:2: field 'address'"),
    ("plain.trace", b"l 0x10 1\nl 16 1\n", r"plain\.trace:2: field 'address'"),
    ("count.trace", b"l 0x10 1\nl 0x20 many\n", r"count\.trace:2: field 'count': expected a non-negative integer"),
    ("short.trace", b"l 0x10 1\nl 0x20\n", r"short\.trace:2: expected 'op 0xADDRESS count'"),
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


# --- CPU address traces (Caffeine's parser/address) ---------------------------------

def as_int64(address: int) -> int:
    """A 64-bit address as the int64 key with the same bits (as the uint64 streams do)."""
    return address - (1 << 64) if address >= 1 << 63 else address


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(accesses=st.lists(st.tuples(st.sampled_from("ls"), st.integers(0, (1 << 64) - 1),
                                   st.integers(0, 10**6), st.sampled_from(["x", "X"]),
                                   st.booleans(), st.sampled_from([" ", "\t", "  "])),
                         min_size=1, max_size=40),
       packed=st.booleans())
def test_fuzzed_address_lines_read_back_their_addresses(tmp_path, accesses, packed):
    text = "".join(f"{op}{gap}0{x}{address:{'X' if upper else 'x'}}{gap}{count}\n"
                   for op, address, count, x, upper, gap in accesses)
    path = tmp_path / "fuzz.trace"
    path.write_bytes(gzip.compress(text.encode()) if packed else text.encode())
    trace = read_trace(path)  # detected from the first line
    assert trace.meta["format"] == "address"
    assert trace.keys.tolist() == [as_int64(a) for _, a, *_ in accesses]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(alphabet="ls0xX19fFg \t-*#,_+\u0663", max_size=24), max_size=10),
       fmt=st.sampled_from([None, "address"]))
def test_fuzzed_address_like_text_raises_only_lcr_input_errors(tmp_path, lines, fmt):
    path = tmp_path / "fuzz.trace"
    path.write_bytes("\n".join(lines).encode())
    try:
        trace = read_trace(path, fmt=fmt)
        assert trace.keys.dtype == np.int64 and len(trace) >= 1
    except LcrInputError as err:
        assert "\n" not in str(err)


# --- the traces added to ../shared/data/classic: requests and distinct keys -----------
# As PROVENANCE.md states them, except where it counts newlines rather than keys: cs has
# 6,783 lines, two of them LIRS '*' markers; gli 6,016 lines, the last one blank; zigzag
# and backf end without a newline (wc -l says 52,000 and 8,999). Checked with a plain
# Python count of the non-blank, non-'*' lines.
NEW_SHARED = [("classic/address/gcc.trace.gz", "address", 515_683, 35_070),
              ("classic/address/gzip.trace.gz", "address", 481_044, 160_167),
              ("classic/address/swim.trace.gz", "address", 303_193, 22_605),
              ("classic/address/twolf.trace.gz", "address", 482_824, 7_354),
              ("classic/corda/trace_vaultservice.gz", "int64-be", 135_702, 90_468),
              ("classic/lirs/multi1.trace.gz", "text", 15_858, 2_606),
              ("classic/lirs/multi3.trace.gz", "text", 30_241, 7_454),
              ("classic/lirs/gli.trace.gz", "text", 6_015, 2_529),
              ("classic/lirs/cs.trace.gz", "text", 6_781, 1_409),
              ("classic/lirs/ps.trace.gz", "text", 10_448, 3_083),
              ("classic/lirs/zigzag.trace.gz", "text", 52_001, 2_001),
              ("classic/lirs/backf.trace.gz", "text", 9_000, 751)]


@pytest.mark.parametrize("relative,fmt,requests,distinct", NEW_SHARED, ids=[r[0].split("/")[-1] for r in NEW_SHARED])
def test_new_shared_traces_are_detected_and_read_whole(relative, fmt, requests, distinct):
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"{path} not present (shared data is optional)")
    trace = read_trace(path)
    assert (trace.meta["format"], trace.meta["format_from"]) == (fmt, "content")
    assert (len(trace), trace.distinct_keys) == (requests, distinct)


def test_gcc_keys_are_the_addresses_as_caffeine_reads_them():
    path = DATA / "classic/address/gcc.trace.gz"
    if not path.exists():
        pytest.skip(f"{path} not present (shared data is optional)")
    with gzip.open(path, "rt") as f:
        first = [int(next(f).split()[1], 16) for _ in range(100)]
    assert read_trace(path, limit=100).keys.tolist() == first  # the byte address, no line/page shift


# --- int64 keys without sign words (hashes, e.g. R3 Corda's vault-service trace) -----

def hashed_keys(requests: int = 60_000, distinct: int = 20_000, seed: int = 4) -> np.ndarray:
    """64-bit hashed keys reused Zipf-fashion: no 32-bit word is a sign word."""
    rng = np.random.default_rng(seed)
    names = rng.integers(-2**63, 2**63 - 1, distinct, dtype=np.int64)
    return names[generate(f"zipf:requests={requests},keys={distinct},alpha=0.8,seed={seed}").keys % distinct]


def test_hashed_int64_keys_with_reuse_are_read_as_int64(tmp_path):
    keys = hashed_keys()
    path = tmp_path / "vault.gz"
    path.write_bytes(gzip.compress(keys.astype(">i8").tobytes()))
    trace = read_trace(path)
    assert format_label(trace) == "int64-be (scarab), from content" and np.array_equal(trace.keys, keys)
    assert np.array_equal(read_trace(path, fmt="corda").keys, keys)
    # Named as int32, the key pairs refuse it instead of doubling it.
    with pytest.raises(LcrInputError, match="64-bit keys; pass --format int64-be"):
        read_trace(path, fmt="cache2k")


def test_int32_traces_with_only_even_repeats_are_not_taken_for_int64(tmp_path):
    rng = np.random.default_rng(5)
    # Two clients strictly alternating over disjoint keys: every repeat at an even
    # distance, but the words do not pair up into keys.
    words = np.empty(40_000, dtype=np.int64)
    words[0::2], words[1::2] = rng.integers(0, 3000, 20_000), rng.integers(10**6, 10**6 + 3000, 20_000)
    # A loop over an even number of keys: pairs, but one reuse distance, nothing else.
    loop = np.tile(rng.permutation(10**6)[:4000] + 7 * 10**8, 10)
    for name, keys in (("two-clients", words), ("loop", loop)):
        path = tmp_path / f"{name}.trace.gz"
        path.write_bytes(gzip.compress(keys.astype(">i4").tobytes()))
        with pytest.raises(LcrInputError, match="width the content does not settle"):
            read_trace(path)
        assert np.array_equal(read_trace(path, fmt="cache2k").keys, keys)
