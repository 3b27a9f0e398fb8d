"""DLRM embedding lookups shaped by Meta's production locality statistics.

``facebookresearch/dlrm_datasets`` summarises each real embedding table trace
(``embedding_bag/20xx/locality_stats.txt``) by one batch's lookups N, distinct rows U, and
two histograms over power-of-two buckets of per-row access counts c, (0,1], (1,2], (2,4],
..., (16384,32768], (32768+: the share of distinct rows in each bucket and the share of
lookups in each bucket. The second is what a cache sees: the top rows' share of the
traffic. The traces themselves are not public.

``LocalityTable.popularity(rows)`` turns one table's statistics into a popularity over
``rows`` rows that reproduces that curve: a bucket holding the share r_b of the lookups has
about r_b N / c_b rows, where c_b is the bucket's geometric mid count (the row shares of
the file are rounded to 0.001, which loses the hottest buckets; the lookup shares are not
small there); its rows' weights run geometrically across the bucket's range and add up to
r_b. ``locality_lookups`` draws lookups independently from it, with hot rows scattered over
the id space. Independent draws reproduce the per-batch statistics only: how popularity
drifts between batches is not in the file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lcr.errors import LcrInputError

BUCKETS = 17  # (0,1], (1,2], (2,4], ..., (16384,32768], (32768+
_BUCKET = re.compile(r"^\((\d+), (\d+)\]:\s*(\S+)$|^\((\d+)\+:\s*(\S+)$")
_NUMBER = re.compile(r"^(Avg # of indices|Avg # of unique cols|Avg col size):\s*(\S+)$")


@dataclass(frozen=True)
class LocalityTable:
    """One table's statistics from a locality_stats file."""

    name: str
    lookups: float               # per batch (N)
    distinct: float              # per batch (U)
    row_share: tuple             # [BUCKETS]: share of distinct rows per count bucket
    lookup_share: tuple          # [BUCKETS]: share of lookups per count bucket

    def bucket_rows(self) -> np.ndarray:
        """Distinct rows per bucket implied by the lookup shares (r_b N / c_b)."""
        return np.asarray(self.lookup_share) * self.lookups / _mid_counts()

    def popularity(self, rows: int) -> np.ndarray:
        """float64 [rows] access probabilities, hottest first, with this table's curve."""
        if rows < BUCKETS:
            raise LcrInputError(f"a locality-shaped table needs at least {BUCKETS} rows, got {rows}")
        share = np.asarray(self.lookup_share, dtype=np.float64)
        counts = self.bucket_rows()
        alloc = np.where(share > 0, np.maximum(1, np.round(counts / counts.sum() * rows)), 0)
        alloc[0] += rows - alloc.sum()  # rounding lands on the coldest bucket
        if alloc[0] < 0:
            raise LcrInputError(f"table {self.name}: {rows} rows cannot hold its hot buckets")
        weights = []
        for bucket in range(BUCKETS - 1, -1, -1):  # hottest first
            n = int(alloc[bucket])
            if n == 0:
                continue
            low, high = _bounds(bucket)
            ramp = np.geomspace(high, low, n) if n > 1 else np.array([np.sqrt(low * high)])
            weights.append(ramp / ramp.sum() * share[bucket])
        weights = np.concatenate(weights)
        return weights / weights.sum()


#: Meta's table t856 (dlrm_datasets embedding_bag/2021, the file's first table): the
#: workload ``lcr bench sls --trace dlrm`` runs without the file.
T856 = LocalityTable(
    "fbgemm_t856_bs65536", lookups=887_017_990, distinct=128_435_723,
    row_share=(0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001, 0, 0, 0, 0, 0, 0, 0),
    lookup_share=(0.069, 0.044, 0.068, 0.101, 0.121, 0.104, 0.073, 0.058, 0.052, 0.05, 0.049, 0.048,
                  0.048, 0.043, 0.031, 0.023, 0.019))


def locality_table(spec: str) -> LocalityTable:
    """``dlrm`` (T856), ``dlrm:FILE`` (its first table) or ``dlrm:FILE:TABLE`` (by name or
    position in the file)."""
    if spec == "dlrm":
        return T856
    path, _, which = spec[len("dlrm:"):].partition(":")
    tables = read_locality_stats(path)
    if not which:
        return tables[0]
    for position, table in enumerate(tables):
        if which in (table.name, str(position)):
            return table
    raise LcrInputError(f"{path}: no table {which!r}; tables: "
                        f"{', '.join(t.name for t in tables[:5])}{', ...' if len(tables) > 5 else ''}")


def _bounds(bucket: int) -> tuple[float, float]:
    """The access counts a bucket spans (the open-ended last one taken as one doubling)."""
    return (1.0, 1.0) if bucket == 0 else (2.0 ** (bucket - 1), 2.0 ** bucket)


def _mid_counts() -> np.ndarray:
    return np.array([np.sqrt(np.prod(_bounds(b))) for b in range(BUCKETS)])


def read_locality_stats(path) -> list[LocalityTable]:
    """Every table of a dlrm_datasets locality_stats.txt, in file order."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise LcrInputError(f"{path}: cannot read: {err}") from None
    tables, current = [], None

    def finish(at: int):
        if current is None:
            return
        missing = [k for k in ("lookups", "distinct", "row_share", "lookup_share") if k not in current]
        if missing:
            raise LcrInputError(f"{path}:{at}: table {current['name']}: missing {', '.join(missing)}")
        tables.append(LocalityTable(**current))

    histogram = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("[") or line.startswith("Locality stats"):
            continue
        if line.endswith(".pt"):
            finish(number)
            current, histogram = {"name": line[:-3]}, None
            continue
        if current is None:
            raise LcrInputError(f"{path}:{number}: expected a table name ending in .pt, got {line[:40]!r}")
        if match := _NUMBER.match(line):
            field = {"Avg # of indices": "lookups", "Avg # of unique cols": "distinct"}.get(match[1])
            value = _number(match[2], path, number, match[1])
            if field:
                current[field] = value
        elif line.startswith("Histogram of col sizes"):
            histogram = current.setdefault("row_share", [])
        elif line.startswith("Ratio of index distribution"):
            histogram = current.setdefault("lookup_share", [])
        elif match := _BUCKET.match(line):
            if histogram is None or len(histogram) >= BUCKETS:
                raise LcrInputError(f"{path}:{number}: a histogram bucket outside a histogram")
            histogram.append(_number(match[3] or match[5], path, number, "bucket share"))
        else:
            raise LcrInputError(f"{path}:{number}: unexpected line {line[:40]!r}")
    finish(len(lines))
    for table in tables:
        for field in ("row_share", "lookup_share"):
            if len(getattr(table, field)) != BUCKETS:
                raise LcrInputError(f"{path}: table {table.name}: {field} has "
                                    f"{len(getattr(table, field))} buckets, expected {BUCKETS}")
    if not tables:
        raise LcrInputError(f"{path}: no locality statistics found")
    return [LocalityTable(t.name, t.lookups, t.distinct, tuple(t.row_share), tuple(t.lookup_share))
            for t in tables]


def _number(text: str, path, line: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LcrInputError(f"{path}:{line}: field {field!r}: expected a number, got {text[:20]!r}") from None
    if not np.isfinite(value) or value < 0:
        raise LcrInputError(f"{path}:{line}: field {field!r}: expected a non-negative number, got {text}")
    return value


def locality_lookups(table: LocalityTable, rows: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` int64 row ids in [0, rows), drawn independently from ``table``'s
    popularity; the hottest rows are scattered over the ids by a seeded permutation."""
    rng = np.random.default_rng(seed)
    popularity = table.popularity(rows)
    ids = rng.permutation(rows).astype(np.int64)
    return ids[np.minimum(np.searchsorted(np.cumsum(popularity), rng.random(count)), rows - 1)]


__all__ = ["LocalityTable", "T856", "locality_lookups", "locality_table", "read_locality_stats"]
