"""Telling a trace's format from its name where that is unambiguous, else from its content.

A name decides only where one format uses it (``.jsonl``, ``.csv``, ``.oracleGeneral``,
...). ``.trace``, ``.trace.xz``, ``.bin``, ``.txt`` and unknown names are shared by
several formats (Caffeine keeps cache2k int32 and scarab int64 traces both as
``.trace.xz``), so the decompressed bytes decide:

- text (printable bytes only): one integer per line is ``text``; JSON lines with
  ``hash_ids`` are ``mooncake``; a first line ``l|s 0xHEX count`` is ``address`` (no
  other format reads a line holding a letter and a 0x number); several numeric columns
  could be ARC or AdaptSize, which only the user can tell, so that is refused with both
  named.
- binary: 24-byte records whose next-access field is a valid oracle are
  ``oracleGeneral``. Otherwise the key width: int64 keys read as int32 show a telltale
  pattern, every other 32-bit word a sign word (0 or -1), and every repeat of a key at
  an even distance (a key is two words). An int32 trace has repeats at odd distances
  too. Without sign words (64-bit hashes), repeats only at even distances, at many
  distances, whose aligned word pairs repeat as keys do, settle int64. When none of
  this shows, the file is refused with both widths named.

Byte order and signedness only relabel keys (same hits and misses either way); the
order whose top bytes are mostly zero is named, big-endian (Caffeine's) otherwise.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from lcr.errors import LcrInputError

#: How much of a file (decompressed) the content check reads.
SAMPLE_BYTES = 1 << 20

_COMPRESSED = (".gz", ".xz", ".bz2", ".zst", ".zstd")

# Names one format owns (matched on the name without its compression suffix).
_UNAMBIGUOUS = [(".oraclegeneral.bin", "oracleGeneral"), (".oraclegeneral", "oracleGeneral"),
                (".jsonl", "mooncake"), (".csv", "csv"), (".tsv", "criteo"), (".json", "moe-router"),
                (".lis", "arc")]

#: Formats the content check can produce, for the messages naming candidates.
TEXT_CANDIDATES = ("text", "address", "arc", "adapt_size", "mooncake", "csv", "criteo")
BINARY_CANDIDATES = ("int32-be", "int64-be", "uint32-be", "oracleGeneral")

#: A line of a CPU address trace (``readers.read_address``): op, hex address, count. The
#: one rule for both detecting and reading the format.
HEX_ADDRESS = re.compile(r"0[xX][0-9a-fA-F]{1,16}")
ADDRESS_LINE = re.compile(rf"[ls]\s+(?P<address>{HEX_ADDRESS.pattern})\s+[0-9]+")


def strip_compression(name: str) -> str:
    name = name.lower()
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def format_from_name(path: str | Path) -> str | None:
    """The format a file name alone settles, or None when the content must decide."""
    name = strip_compression(Path(path).name)
    return next((fmt for suffix, fmt in _UNAMBIGUOUS if name.endswith(suffix)), None)


def is_text(sample: bytes) -> bool:
    """Printable UTF-8 (tabs and line ends allowed): what every text format looks like."""
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(sample) - 3:  # not just a character cut at the end of the sample
            return False
        text = sample[:err.start].decode("utf-8")
    return bool(text) and all(c.isprintable() or c in "\t\r\n" for c in text)


def format_from_content(sample: bytes, source: str) -> str:
    """The one format ``sample`` (the start of a file) can be, or ``LcrInputError``
    naming the candidates."""
    if not sample:
        raise LcrInputError("trace is empty", source=source)
    if is_text(sample):
        return _text_format(sample.decode("utf-8", errors="ignore"), source)
    return _binary_format(sample, source)


def _text_format(text: str, source: str) -> str:
    lines = [line.strip() for line in text.splitlines()[:-1] or text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")][:200]
    if not lines:
        raise LcrInputError("trace is empty (no data lines)", source=source)
    first = lines[0]
    if first.startswith("{"):
        try:
            if isinstance(json.loads(first), dict) and "hash_ids" in json.loads(first):
                return "mooncake"
        except json.JSONDecodeError:
            pass
        raise LcrInputError("JSON content of unknown layout; pass --format mooncake or moe-router",
                            source=source)
    if "\t" in first and len(first.split("\t")) >= 14:
        return "criteo"
    if "," in first:
        return "csv"
    if ADDRESS_LINE.fullmatch(first):
        return "address"
    columns = {len(line.split()) for line in lines if line != "*"}
    if columns <= {1} and all(_is_int(line) for line in lines if line != "*"):
        return "text"
    if all(_is_int(field) for line in lines for field in line.split()):
        raise LcrInputError(f"text with {max(columns)} numeric columns could be arc ('start count ...') "
                            f"or adapt_size ('time id size'); pass --format arc or --format adapt_size",
                            source=source)
    raise LcrInputError(f"text of unknown layout (first line {first[:40]!r}); pass --format, one of "
                        f"{', '.join(TEXT_CANDIDATES)}", source=source)


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def _binary_format(sample: bytes, source: str) -> str:
    if looks_like_oracle_general(sample):
        return "oracleGeneral"
    usable = len(sample) - len(sample) % 4
    if usable == 0:
        raise LcrInputError(f"{len(sample)} bytes: too short for 32-bit keys", source=source)
    if len(sample) % 8 == 0:
        width = key_width(sample, source)
    else:
        width = 4  # not a whole number of int64 keys
    return f"int{width * 8}-{byte_order(sample[:len(sample) - len(sample) % width], width)}"


def int64_sign_words(words: np.ndarray) -> str | None:
    """'be' / 'le' if every other 32-bit word (the high one of that byte order) is 0 or -1
    while the others vary: int64 keys read as int32."""
    if len(words) < 16:
        return None
    even, odd = words[0::2], words[1::2]
    sign = lambda w: np.isin(w, (0, -1)).all()  # noqa: E731
    if sign(even) and not sign(odd):
        return "be"
    if sign(odd) and not sign(even):
        return "le"
    return None


def repeat_gaps(values: np.ndarray) -> np.ndarray:
    """The distance from each value to its next occurrence, for every value that recurs."""
    inverse = np.unique(values, return_inverse=True)[1]
    order = np.lexsort((np.arange(len(values)), inverse))
    same = inverse[order][1:] == inverse[order][:-1]
    return np.diff(order)[same]


def odd_repeat_share(words: np.ndarray) -> tuple[int, float]:
    """(repeats, share of them at an odd distance) among the 32-bit words: an int64
    trace repeats keys, so pairs of words, only at even distances."""
    gaps = repeat_gaps(words)
    return len(gaps), float(np.mean(gaps % 2)) if len(gaps) else 0.0


#: Fewer distinct reuse distances than this could be a loop over an even number of
#: int32 keys, which reads as well as a loop over half as many int64 keys.
PAIR_MIN_DISTANCES = 16


def int64_key_pairs(words: np.ndarray) -> bool:
    """True if the 32-bit words are 64-bit keys without sign words (hashes, e.g. R3
    Corda's vault-service trace): at least 64 repeats, every one at an even distance and
    at many distances, and the aligned pairs repeat as often as the half of them (high
    or low words) that repeats less. Two int32 streams alternating over disjoint keys
    also repeat only at even distances, but their pairs rarely repeat."""
    n = len(words) - len(words) % 2
    gaps = repeat_gaps(words[:n])
    if len(gaps) < 64 or (gaps % 2).any() or len(np.unique(gaps)) < PAIR_MIN_DISTANCES:
        return False
    repeats = lambda values: len(values) - len(np.unique(values))  # noqa: E731
    pairs = np.ascontiguousarray(words[:n]).view(np.int64)
    return repeats(pairs) >= 0.9 * min(repeats(words[0:n:2]), repeats(words[1:n:2]))


def key_width(sample: bytes, source: str) -> int:
    """4 or 8 bytes per key, from the content; refuses when it cannot tell."""
    words = np.frombuffer(sample, dtype=">i4")
    if int64_sign_words(words) or int64_sign_words(words.byteswap()):
        return 8
    words = words[: 1 << 18]
    repeats, odd = odd_repeat_share(words)
    if repeats >= 64 and odd >= 0.05:
        return 4
    if int64_key_pairs(words):
        return 8
    raise LcrInputError("binary keys whose width the content does not settle: pass --format "
                        "int32-be (cache2k) or int64-be (scarab), or -le for little-endian",
                        source=source)


def byte_order(sample: bytes, width: int) -> str:
    """'be' unless little-endian reading makes the top bytes clearly more often zero."""
    values = np.frombuffer(sample, dtype=np.uint8).reshape(-1, width)
    be_top, le_top = np.mean(values[:, 0] == 0), np.mean(values[:, -1] == 0)
    return "le" if le_top > 0.9 and be_top < 0.5 else "be"


ORACLE_RECORD = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("size", "<u4"), ("next_vtime", "<i8")])


def looks_like_oracle_general(sample: bytes) -> bool:
    """Whole 24-byte records whose next-access field is -1 or a later record's index + 1
    holding the same id, for every link the sample can check (and there are some): what
    libCacheSim writes; other data essentially never is."""
    n = len(sample) // ORACLE_RECORD.itemsize
    if n < 2:
        return False
    records = np.frombuffer(sample[: n * ORACLE_RECORD.itemsize], dtype=ORACLE_RECORD)
    nxt, ids = records["next_vtime"], records["obj_id"]
    index = np.arange(n)
    if not ((nxt == -1) | (nxt > index + 1)).all():
        return False
    inside = np.flatnonzero((nxt > 0) & (nxt <= n))
    return bool(len(inside)) and bool((ids[nxt[inside] - 1] == ids[inside]).all())
