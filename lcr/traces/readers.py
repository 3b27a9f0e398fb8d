"""Readers for the trace formats people already have, by name or detected.

Each reader turns a file into a ``Trace`` or raises ``LcrInputError`` with a one-line
message naming the file, the line (text formats) and the problem. ``limit`` always
counts requests, i.e. entries of the returned trace (keys looked up), whatever a line
or record holds (an ARC line expands to many, a Mooncake line is a prompt of blocks).

Every binary integer format names its width and byte order (``int32-be`` ...); the
names users know from Caffeine's simulator and libCacheSim are aliases of them. Where
the name of a file does not settle its format, ``lcr.traces.detect`` reads the content.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from lcr.errors import LcrInputError
from lcr.traces import detect
from lcr.traces.files import READ_ERRORS, compression, open_binary, read_prefix
from lcr.guards import check_memory
from lcr.traces.moe import routing_trace
from lcr.traces.trace import Trace

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank, non-comment line; undecodable bytes become
    U+FFFD so that they fail as a named field on a numbered line."""
    with io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if line and not line.startswith("#"):
                yield number, line


def _integer(text: str, path: Path, line: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise LcrInputError(f"{what}: expected an integer, got {text[:40]!r}",
                            source=str(path), line=line) from None
    if not INT64_MIN <= value <= INT64_MAX:
        raise LcrInputError(f"{what}: {text[:40]} does not fit in a signed 64-bit key",
                            source=str(path), line=line)
    return value


def read_text(path: Path, limit: int | None = None) -> Trace:
    """One integer key per line: the LIRS traces (Caffeine's ``lirs`` parser, where a line
    holding only ``*`` is a marker with no key, skipped) and libCacheSim's ``txt`` traces."""
    keys = []
    for number, line in _lines(path):
        if line == "*":
            continue
        keys.append(_integer(line.split()[0], path, number, "key"))
        if limit is not None and len(keys) >= limit:
            break
    return Trace(np.array(keys, dtype=np.int64), path.name)


def read_address(path: Path, limit: int | None = None) -> Trace:
    """CPU memory-address traces (the UCSD CSE 240A SPEC traces that Caffeine's simulator
    ships under ``parser/address``): lines ``op 0xADDRESS count``, op ``l`` (load) or ``s``
    (store). The key is the byte address itself, as Caffeine's ``AddressTraceReader`` takes
    it (no cache-line or page shift; op and count are checked, not used). Addresses of up
    to 64 bits keep their bits as the int64 key, as the uint64 streams do."""
    keys = []
    for number, line in _lines(path):
        match = detect.ADDRESS_LINE.fullmatch(line)
        if match is None:
            raise LcrInputError(_address_fault(line.split()), source=str(path), line=number)
        keys.append(int(match["address"], 16))
        if limit is not None and len(keys) >= limit:
            break
    return Trace(np.array(keys, dtype=np.uint64).view(np.int64), path.name)


def _address_fault(fields: list[str]) -> str:
    """Which field of a line that is not ``detect.ADDRESS_LINE`` is wrong."""
    if len(fields) != 3:
        return f"expected 'op 0xADDRESS count', got {len(fields)} fields"
    op, address, count = fields
    if op not in ("l", "s"):
        return f"field 'op': expected l or s, got {op[:20]!r}"
    if not detect.HEX_ADDRESS.fullmatch(address):
        return f"field 'address': expected 0x and 1 to 16 hex digits, got {address[:40]!r}"
    return f"field 'count': expected a non-negative integer, got {count[:40]!r}"


#: An ARC line may name at most this many blocks (a guard against a corrupt count).
ARC_MAX_RUN = 1 << 24


def read_arc(path: Path, limit: int | None = None) -> Trace:
    """The ARC paper's traces (Megiddo and Modha, FAST'03; Caffeine's ``arc`` parser):
    lines ``start count [ignored ...]`` requesting blocks start .. start + count - 1."""
    runs, total = [], 0
    for number, line in _lines(path):
        fields = line.split()
        if len(fields) < 2:
            raise LcrInputError("expected 'start count ...'", source=str(path), line=number)
        start = _integer(fields[0], path, number, "start")
        count = _integer(fields[1], path, number, "count")
        if not 0 <= count <= ARC_MAX_RUN or start + count - 1 > INT64_MAX:
            raise LcrInputError(f"count {count} is outside 0..{ARC_MAX_RUN} or runs past int64",
                                source=str(path), line=number)
        if limit is not None:
            count = min(count, limit - total)
        runs.append((start, count))
        total += count
        check_memory(total * 8 * 4, f"{total:,} requests", source=str(path))
        if limit is not None and total >= limit:
            break
    starts = np.repeat(np.array([s for s, _ in runs], dtype=np.int64), [c for _, c in runs])
    firsts = np.cumsum([0] + [c for _, c in runs])[:-1]
    offsets = np.arange(total, dtype=np.int64) - np.repeat(firsts, [c for _, c in runs])
    return Trace(starts + offsets, path.name)


def read_adapt_size(path: Path, limit: int | None = None) -> Trace:
    """AdaptSize / webcachesim traces (Berger et al., NSDI'17; Caffeine's ``adapt_size``
    parser): lines ``time id size``. Keys are the ids; sizes are kept beside them."""
    keys, stamps, sizes = [], [], []
    for number, line in _lines(path):
        fields = line.split()
        if len(fields) < 3:
            raise LcrInputError("expected 'time id size'", source=str(path), line=number)
        stamps.append(_integer(fields[0], path, number, "time"))
        keys.append(_integer(fields[1], path, number, "id"))
        sizes.append(_integer(fields[2], path, number, "size"))
        if limit is not None and len(keys) >= limit:
            break
    return Trace(np.array(keys, dtype=np.int64), path.name, timestamps=np.array(stamps, dtype=np.float64),
                 sizes=np.array(sizes, dtype=np.int64))


def _number(value, what: str, path: Path, line: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LcrInputError(f"field {what!r}: expected a finite number, got {json.dumps(value)[:40]}",
                            source=str(path), line=line)
    return float(value)


def read_mooncake(path: Path, limit: int | None = None) -> Trace:
    """Mooncake JSONL (kvcache-ai/Mooncake, FAST'25 traces): one prompt per line,
    ``hash_ids`` its prefix blocks. Each block is one request; ``request_offsets`` keeps
    the prompts (``Trace.first_prompts`` cuts by prompts)."""
    keys: list[int] = []
    offsets = [0]
    stamps: list[float] = []
    lengths: list[int] = []
    outputs: list[int] = []
    for number, line in _lines(path):
        try:
            request = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            raise LcrInputError(f"malformed JSON ({getattr(err, 'msg', 'nested too deep')})",
                                source=str(path), line=number) from None
        blocks = request.get("hash_ids") if isinstance(request, dict) else None
        if not isinstance(blocks, list) or not all(
                type(b) is int and INT64_MIN <= b <= INT64_MAX for b in blocks):
            raise LcrInputError("field 'hash_ids': expected a list of 64-bit integers",
                                source=str(path), line=number)
        stamp = request.get("timestamp")
        stamp = len(offsets) - 1 if stamp is None and "timestamp" not in request else stamp
        stamps.extend([_number(stamp, "timestamp", path, number)] * len(blocks))
        keys.extend(blocks)
        offsets.append(len(keys))
        length = request.get("input_length")
        lengths.append(length if type(length) is int and length > 0 else 512 * len(blocks))
        output = request.get("output_length")
        outputs.append(output if type(output) is int and output >= 0 else 0)
        if limit is not None and len(keys) >= limit:
            break
    trace = Trace(np.array(keys, dtype=np.int64), path.name, timestamps=np.array(stamps),
                  request_offsets=np.array(offsets, dtype=np.int64),
                  meta={"block_tokens": 512, "requests": len(offsets) - 1, "input_lengths": lengths,
                        "output_lengths": outputs})
    return trace.head(limit) if limit is not None and len(trace) > limit else trace


ORACLE_GENERAL = detect.ORACLE_RECORD


def read_oracle_general(path: Path, limit: int | None = None) -> Trace:
    """libCacheSim's oracleGeneral (1a1a11a/libCacheSim, ``traceReader/generalReader``):
    24-byte little-endian records <u32 time, u64 id, u32 size, i64 next access vtime>,
    plain or zstd-compressed (``.oracleGeneral.zst``)."""
    raw = _read_bytes(path, None if limit is None else limit * ORACLE_GENERAL.itemsize)
    if len(raw) % ORACLE_GENERAL.itemsize:
        raise LcrInputError(f"size {len(raw)} bytes is not a multiple of the "
                            f"{ORACLE_GENERAL.itemsize}-byte oracleGeneral record", source=str(path))
    records = np.frombuffer(raw, dtype=ORACLE_GENERAL)
    return Trace(records["obj_id"].view(np.int64), path.name,
                 timestamps=records["time"].astype(np.float64), sizes=records["size"].astype(np.int64))


def _read_bytes(path: Path, limit_bytes: int | None) -> bytes:
    if compression(path) is None:  # the bytes, then int64 keys of up to twice their size
        size = os.path.getsize(path) if limit_bytes is None else min(limit_bytes, os.path.getsize(path))
        check_memory(3 * size, f"{size:,} bytes of trace", source=str(path))
    with open_binary(path) as f:
        return f.read() if limit_bytes is None else f.read(limit_bytes)


@dataclass(frozen=True)
class IntegerStream:
    """A stream of fixed-width integer keys and nothing else (Caffeine's binary traces)."""

    width: int      # bytes per key
    signed: bool
    order: str      # "be" or "le"

    @property
    def name(self) -> str:
        return f"{'' if self.signed else 'u'}int{self.width * 8}-{self.order}"

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(f"{'>' if self.order == 'be' else '<'}{'i' if self.signed else 'u'}{self.width}")

    def __call__(self, path: Path, limit: int | None = None) -> Trace:
        raw = _read_bytes(path, None if limit is None else limit * self.width)
        if len(raw) % self.width:
            raise LcrInputError(f"size {len(raw)} bytes is not a multiple of {self.width} "
                                f"({self.name} keys)", source=str(path))
        values = np.frombuffer(raw, dtype=self.dtype)
        if self.width == 8 and not self.signed:
            # uint64 keys above int64 keep their identity as the int64 with the same bits.
            return Trace(values.astype(np.uint64).view(np.int64), path.name)
        return Trace(values.astype(np.int64), path.name)


CSV_KEY_COLUMNS = ("lbn", "obj_id", "key", "id")


def read_csv(path: Path, limit: int | None = None) -> Trace:
    """CSV with a header naming the key column (``lbn``, ``obj_id``, ``key`` or ``id``) and
    optionally ``time``: libCacheSim's csv traces (e.g. ``data/cloudPhysicsIO.csv``)."""
    with io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline="") as f:
        rows = csv.reader(f)
        try:
            header = [h.strip().lower() for h in next(rows, [])]
            column = next((header.index(c) for c in CSV_KEY_COLUMNS if c in header), None)
            if column is None:
                raise LcrInputError(f"header has no key column (one of {', '.join(CSV_KEY_COLUMNS)})",
                                    source=str(path), line=1)
            time_col = header.index("time") if "time" in header else None
            keys, stamps = [], []
            for row in rows:
                if not row:
                    continue
                number = rows.line_num
                if len(row) <= max(column, time_col or 0):
                    raise LcrInputError(f"expected {len(header)} fields, got {len(row)}",
                                        source=str(path), line=number)
                keys.append(_integer(row[column], path, number, f"field {header[column]!r}"))
                if time_col is not None:
                    stamps.append(_integer(row[time_col], path, number, "field 'time'"))
                if limit is not None and len(keys) >= limit:
                    break
        except csv.Error as err:
            raise LcrInputError(f"CSV: {err}", source=str(path), line=rows.line_num) from None
    return Trace(np.array(keys, dtype=np.int64), path.name,
                 timestamps=np.array(stamps, dtype=np.float64) if stamps else None)


CRITEO_INTEGER_FIELDS, CRITEO_CATEGORICAL_FIELDS = 13, 26


def criteo_key(field: int, value: int) -> int:
    """(field index, 32-bit hashed value) as one int64 key."""
    return (field << 32) | value


def read_criteo(path: Path, limit: int | None = None) -> Trace:
    """Criteo display-ads TSV (label, I1..I13, C1..C26): one lookup per non-empty
    categorical field, keyed by (field index, 32-bit hex value)."""
    first_cat = 1 + CRITEO_INTEGER_FIELDS
    keys, fields, rows = [], [], 0
    with io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            cols = line.rstrip("\r\n").split("\t")
            if cols == [""]:
                continue
            # Exports often drop trailing empty fields: fewer columns means empty ones.
            if not first_cat <= len(cols) <= first_cat + CRITEO_CATEGORICAL_FIELDS:
                raise LcrInputError(f"expected {first_cat}..{first_cat + CRITEO_CATEGORICAL_FIELDS} "
                                    f"tab-separated fields, got {len(cols)}", source=str(path), line=number)
            for field, value in enumerate(cols[first_cat:]):
                if not value:
                    continue
                try:
                    hashed = int(value, 16)
                except ValueError:
                    hashed = -1
                if not 0 <= hashed < 1 << 32:
                    raise LcrInputError(f"field C{field + 1}: expected a 32-bit hex value, got {value[:20]!r}",
                                        source=str(path), line=number)
                keys.append(criteo_key(field, hashed))
                fields.append(field)
            rows += 1
            if limit is not None and len(keys) >= limit:
                break
    keys, fields = keys[:limit], fields[:limit]
    return Trace(np.array(keys, dtype=np.int64), path.name, meta={"rows": rows},
                 tables=np.array(fields, dtype=np.int16))


def read_moe_router(path: Path, limit: int | None = None) -> Trace:
    """MoE routing capture: ``{"expertsPerLayer", "layers", "selections"}`` with
    ``selections[token][layer] = [expert ids]``. Keys are pages ``layer * experts + expert``;
    a top-k token is k rounds through the layers (``lcr.traces.moe``)."""
    try:
        doc = json.loads(_read_bytes(path, None).decode("utf-8"))
        experts, layers = doc["expertsPerLayer"], doc["layers"]
        selections = doc["selections"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, RecursionError) as err:
        raise LcrInputError(f"not a router trace (needs expertsPerLayer, layers, selections): "
                            f"{type(err).__name__}", source=str(path)) from None
    for name, value in (("expertsPerLayer", experts), ("layers", layers)):
        if type(value) is not int or not 1 <= value <= 1 << 20:
            raise LcrInputError(f"field {name!r}: expected a positive integer, got {json.dumps(value)[:40]}",
                                source=str(path))
    if not isinstance(selections, list):
        raise LcrInputError("field 'selections': expected a list of tokens", source=str(path))
    if limit is not None and selections and isinstance(selections[0], list) and selections[0] \
            and isinstance(selections[0][0], list):
        per_token = layers * max(1, len(selections[0][0]))
        selections = selections[: -(-limit // per_token)]
    trace = routing_trace(selections, layers, experts, "split", name=path.name, source=str(path))
    return trace.head(limit) if limit is not None and len(trace) > limit else trace


Reader = Callable[..., Trace]

_INTEGER_STREAMS = {s.name: s for s in (IntegerStream(w, signed, order) for w in (4, 8)
                                        for signed in (True, False) for order in ("be", "le"))}

#: Canonical format names and their readers.
FORMATS: dict[str, Reader] = {
    "text": read_text,
    "address": read_address,
    "arc": read_arc,
    "adapt_size": read_adapt_size,
    "mooncake": read_mooncake,
    "oracleGeneral": read_oracle_general,
    "csv": read_csv,
    "criteo": read_criteo,
    "moe-router": read_moe_router,
    **_INTEGER_STREAMS,
}

#: The names users know, each the canonical format it is.
ALIASES = {
    "cache2k": "int32-be",       # Caffeine simulator, parser/cache2k: DataInputStream.readInt
    "scarab": "int64-be",        # Caffeine simulator, parser/scarab: DataInputStream.readLong
    "corda": "int64-be",         # Caffeine simulator, parser/corda (R3's traces): readLong
    "cloudphysics": "uint32-be",  # Caffeine simulator, parser/cloud_physics (LIRS2's traces)
    "lirs": "text", "txt": "text", "libcachesim-txt": "text",
    "libcachesim-csv": "csv", "oracle-general": "oracleGeneral", "oraclegeneral": "oracleGeneral",
    "adaptsize": "adapt_size", "int32-stream": "int32-be",
}

FORMAT_NAMES = sorted({*FORMATS, *ALIASES}, key=str.lower)


def canonical_format(name: str, source: str | None = None) -> str:
    if name in FORMATS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    raise LcrInputError(f"unknown trace format {name!r}; valid: {', '.join(FORMAT_NAMES)}", source=source)


def detect_format(path: str | os.PathLike) -> str:
    """The format of ``path``: from its name where that is unambiguous, else its content."""
    fmt = detect.format_from_name(path)
    if fmt is not None:
        return fmt
    try:
        sample = read_prefix(Path(path), detect.SAMPLE_BYTES)
    except READ_ERRORS as err:
        raise LcrInputError(f"cannot read: {_reason(err)}", source=str(path)) from None
    return detect.format_from_content(sample, str(path))


def _check_given_format(path: Path, fmt: str, given: str) -> None:
    """Refuse a named binary format that the content clearly contradicts (text, or int64
    keys named as int32, by their sign words or their word pairs: ``detect.key_width``'s
    tests): the two misreads that would otherwise pass silently."""
    stream = _INTEGER_STREAMS.get(fmt)
    if stream is None:
        return
    sample = read_prefix(path, detect.SAMPLE_BYTES)
    if len(sample) >= 64 and detect.is_text(sample):
        raise LcrInputError(f"--format {given} but the content is text; pass one of "
                            f"{', '.join(detect.TEXT_CANDIDATES)}", source=str(path))
    if stream.width == 4 and len(sample) % 8 == 0:
        words = np.frombuffer(sample[: len(sample) - len(sample) % 4], dtype=">i4")
        if detect.int64_sign_words(words if stream.order == "be" else words.byteswap()):
            raise LcrInputError(f"--format {given} but every other 32-bit word is 0 or -1: these are "
                                f"64-bit keys; pass --format int64-{stream.order}", source=str(path))
        if detect.int64_key_pairs(words[: 1 << 18]):
            raise LcrInputError(f"--format {given} but the 32-bit words repeat only as aligned pairs: "
                                f"these are 64-bit keys; pass --format int64-{stream.order}", source=str(path))


def _reason(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:200]


def read_trace(path: str | os.PathLike, fmt: str | None = None, limit: int | None = None) -> Trace:
    """``path`` as a ``Trace``; ``fmt`` a name from ``FORMAT_NAMES`` (default: detected).
    ``limit``: the first ``limit`` requests. ``trace.meta['format']`` names what was read
    and ``meta['format_from']`` how it was chosen (``--format``, ``name``, ``content``)."""
    path = Path(path)
    if not path.is_file():
        raise LcrInputError("no such trace file", source=str(path))
    if limit is not None and limit < 1:
        raise LcrInputError(f"limit must be at least 1 request, got {limit}", source=str(path))
    try:
        if fmt is not None:
            given, fmt, how = fmt, canonical_format(fmt, str(path)), "--format"
            _check_given_format(path, fmt, given)
        else:
            how = "name" if detect.format_from_name(path) else "content"
            fmt = detect_format(path)
        trace = FORMATS[fmt](path, limit=limit)
    except READ_ERRORS as err:
        raise LcrInputError(f"cannot read as {fmt}: {_reason(err)}", source=str(path)) from None
    except (OverflowError, ValueError) as err:
        if isinstance(err, LcrInputError):
            raise
        raise LcrInputError(f"cannot read as {fmt}: {_reason(err)}", source=str(path)) from None
    if len(trace) == 0:
        raise LcrInputError("trace is empty", source=str(path))
    trace.meta["format"] = fmt
    trace.meta["format_from"] = how
    return trace


def format_label(trace: Trace) -> str:
    """``int64-be (scarab), from content``: what the summary line says was read."""
    fmt = trace.meta.get("format")
    if fmt is None:
        return "generated" if "generator" in trace.meta else "in memory"
    known = [alias for alias, target in ALIASES.items() if target == fmt and alias in
             ("cache2k", "scarab", "cloudphysics")]
    return f"{fmt}{f' ({known[0]})' if known else ''}, from {trace.meta.get('format_from', 'name')}"
