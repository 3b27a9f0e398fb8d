"""Readers for every trace format in ``shared/data``, chosen by extension or by name.

Each reader turns a file into a ``Trace`` or raises ``LcrInputError`` with a one-line
message naming the file, the line (for text formats) and the problem.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from lcr.errors import LcrInputError
from lcr.traces.moe import routing_trace
from lcr.traces.trace import Trace

_OPENERS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}


def _open_binary(path: Path):
    opener = _OPENERS.get(path.suffix, open)
    return opener(path, "rb")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank, non-comment line."""
    with io.TextIOWrapper(_open_binary(path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if line and not line.startswith("#"):
                yield number, line


def _integer(text: str, path: Path, line: int, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LcrInputError(f"{what}: expected an integer, got {text[:40]!r}",
                            source=str(path), line=line) from None


def read_text(path: Path, limit: int | None = None) -> Trace:
    """One integer key per line (LIRS traces); optionally gz/xz/bz2-compressed.
    A line holding only ``*`` is a LIRS marker with no key and is skipped."""
    keys = []
    for number, line in _lines(path):
        if line == "*":
            continue
        keys.append(_integer(line.split()[0], path, number, "key"))
        if limit is not None and len(keys) >= limit:
            break
    return Trace(np.array(keys, dtype=np.int64), path.name)


def read_mooncake(path: Path, limit: int | None = None) -> Trace:
    """Mooncake JSONL: one request per line, ``hash_ids`` its prompt's prefix blocks."""
    keys: list[int] = []
    offsets = [0]
    stamps: list[float] = []
    lengths: list[int] = []
    outputs: list[int] = []
    for number, line in _lines(path):
        try:
            request = json.loads(line)
        except json.JSONDecodeError as err:
            raise LcrInputError(f"malformed JSON ({err.msg})", source=str(path), line=number) from None
        blocks = request.get("hash_ids") if isinstance(request, dict) else None
        if not isinstance(blocks, list) or not all(isinstance(b, int) for b in blocks):
            raise LcrInputError("field 'hash_ids': expected a list of integers",
                                source=str(path), line=number)
        keys.extend(blocks)
        offsets.append(len(keys))
        stamps.extend([float(request.get("timestamp", len(offsets) - 2))] * len(blocks))
        length = request.get("input_length")
        lengths.append(length if isinstance(length, int) and length > 0 else 512 * len(blocks))
        output = request.get("output_length")
        outputs.append(output if isinstance(output, int) and output >= 0 else 0)
        if limit is not None and len(offsets) - 1 >= limit:
            break
    return Trace(np.array(keys, dtype=np.int64), path.name, timestamps=np.array(stamps),
                 request_offsets=np.array(offsets, dtype=np.int64),
                 meta={"block_tokens": 512, "requests": len(offsets) - 1, "input_lengths": lengths,
                       "output_lengths": outputs})


ORACLE_GENERAL = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("size", "<u4"), ("next_vtime", "<i8")])


def read_oracle_general(path: Path, limit: int | None = None) -> Trace:
    """libCacheSim oracleGeneral: 24-byte records <u32 time, u64 id, u32 size, i64 next>."""
    with _open_binary(path) as f:
        raw = f.read() if limit is None else f.read(limit * ORACLE_GENERAL.itemsize)
    if len(raw) % ORACLE_GENERAL.itemsize:
        raise LcrInputError(f"size {len(raw)} bytes is not a multiple of the "
                            f"{ORACLE_GENERAL.itemsize}-byte oracleGeneral record", source=str(path))
    records = np.frombuffer(raw, dtype=ORACLE_GENERAL)
    return Trace(records["obj_id"].view(np.int64), path.name,
                 timestamps=records["time"].astype(np.float64), sizes=records["size"].astype(np.int64))


_CSV_KEY_COLUMNS = ("lbn", "obj_id", "key", "id")


def read_csv(path: Path, limit: int | None = None) -> Trace:
    """CSV with a header naming the key column (``lbn``, ``obj_id``, ``key`` or ``id``)."""
    with io.TextIOWrapper(_open_binary(path), encoding="utf-8", newline="") as f:
        rows = csv.reader(f)
        header = [h.strip().lower() for h in next(rows, [])]
        column = next((header.index(c) for c in _CSV_KEY_COLUMNS if c in header), None)
        if column is None:
            raise LcrInputError(f"header has no key column (one of {', '.join(_CSV_KEY_COLUMNS)})",
                                source=str(path), line=1)
        time_col = header.index("time") if "time" in header else None
        keys, stamps = [], []
        for number, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) <= column:
                raise LcrInputError(f"expected {len(header)} fields, got {len(row)}",
                                    source=str(path), line=number)
            keys.append(_integer(row[column], path, number, f"field {header[column]!r}"))
            if time_col is not None:
                stamps.append(_integer(row[time_col], path, number, "field 'time'"))
            if limit is not None and len(keys) >= limit:
                break
    return Trace(np.array(keys, dtype=np.int64), path.name,
                 timestamps=np.array(stamps, dtype=np.float64) if stamps else None)


def read_int32_stream(path: Path, limit: int | None = None) -> Trace:
    """A (compressed) stream of big-endian int32 keys, as cache2k's traces."""
    with _open_binary(path) as f:
        raw = f.read() if limit is None else f.read(4 * limit)
    if len(raw) % 4:
        raise LcrInputError(f"size {len(raw)} bytes is not a multiple of 4 (int32 keys)", source=str(path))
    return Trace(np.frombuffer(raw, dtype=">i4").astype(np.int64), path.name)


CRITEO_INTEGER_FIELDS, CRITEO_CATEGORICAL_FIELDS = 13, 26


def criteo_key(field: int, value: int) -> int:
    """(field index, 32-bit hashed value) as one int64 key."""
    return (field << 32) | value


def read_criteo(path: Path, limit: int | None = None) -> Trace:
    """Criteo TSV (label, I1..I13, C1..C26): one lookup per non-empty categorical field,
    keyed by (field index, value)."""
    first_cat = 1 + CRITEO_INTEGER_FIELDS
    keys, fields, rows = [], [], 0
    with io.TextIOWrapper(_open_binary(path), encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            cols = line.rstrip("\n").split("\t")
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
                    keys.append(criteo_key(field, int(value, 16)))
                except ValueError:
                    raise LcrInputError(f"field C{field + 1}: expected a hex value, got {value[:20]!r}",
                                        source=str(path), line=number) from None
                fields.append(field)
            rows += 1
            if limit is not None and rows >= limit:
                break
    return Trace(np.array(keys, dtype=np.int64), path.name,
                 meta={"rows": rows, "fields": np.array(fields, dtype=np.int16)})


def read_moe_router(path: Path, limit: int | None = None) -> Trace:
    """MoE routing capture: ``selections[token][layer] = [expert ids]``.

    Keys are pages ``layer * experts_per_layer + expert``. A top-k token is k rounds
    through the layers: round r requests each layer's r-th selected expert.
    """
    try:
        doc = json.loads(path.read_text())
        experts, layers = int(doc["expertsPerLayer"]), int(doc["layers"])
        selections = doc["selections"]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise LcrInputError(f"not a router trace (needs expertsPerLayer, layers, selections): {err}",
                            source=str(path)) from None
    return routing_trace(selections[:limit], layers, experts, "split", name=path.name, source=str(path))


Reader = Callable[..., Trace]
FORMATS: dict[str, Reader] = {
    "text": read_text,
    "mooncake": read_mooncake,
    "oracle-general": read_oracle_general,
    "csv": read_csv,
    "int32-stream": read_int32_stream,
    "criteo": read_criteo,
    "moe-router": read_moe_router,
}

# Most specific suffix first.
_SUFFIXES = [
    (".oraclegeneral.bin", "oracle-general"), (".bin", "oracle-general"), (".jsonl", "mooncake"),
    (".csv", "csv"), (".tsv", "criteo"), (".json", "moe-router"), (".trace.xz", "int32-stream"),
    (".txt", "text"), (".trace", "text"), (".gz", "text"), (".xz", "text"), (".bz2", "text"),
]


def detect_format(path: str | os.PathLike) -> str:
    name = str(path).lower()
    for suffix, fmt in _SUFFIXES:
        if name.endswith(suffix):
            return fmt
    raise LcrInputError(f"cannot tell the trace format from the name; pass --format "
                        f"(one of {', '.join(FORMATS)})", source=str(path))


def read_trace(path: str | os.PathLike, fmt: str | None = None, limit: int | None = None) -> Trace:
    path = Path(path)
    if not path.is_file():
        raise LcrInputError("no such trace file", source=str(path))
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise LcrInputError(f"unknown trace format {fmt!r}; valid: {', '.join(FORMATS)}", source=str(path))
    try:
        trace = FORMATS[fmt](path, limit=limit)
    except (OSError, EOFError, lzma.LZMAError) as err:
        raise LcrInputError(f"cannot read as {fmt}: {err}", source=str(path)) from None
    if len(trace) == 0:
        raise LcrInputError("trace is empty", source=str(path))
    trace.meta.setdefault("format", fmt)
    return trace
