"""DLRM locality statistics: parsing, the popularity they imply, and lookups drawn from it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lcr.embedding.locality import BUCKETS, locality_lookups, read_locality_stats
from lcr.errors import LcrInputError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "embedding"
LABELS = ["(0, 1]"] + [f"({2 ** (b - 1)}, {2 ** b}]" for b in range(1, BUCKETS - 1)] + ["(32768+"]


def _table(name: str, lookups: int, distinct: int, rows: list[float], shares: list[float]) -> str:
    def histogram(values):
        return "\n".join(f"{label}: {v:.3f}" for label, v in zip(LABELS, values))
    return (f"{name}.pt\nLocality stats after processing 1 batches of size 65536\n"
            f"Avg # of indices: {lookups}\nAvg # of unique cols: {distinct}\n"
            f"Avg col size: {lookups / distinct:.1f}\nHistogram of col sizes:\n{histogram(rows)}\n"
            f"[0, 1, 2]\n['0.000', '1.000']\nRatio of index distribution at different column sizes:\n"
            f"{histogram(shares)}\n[0, 1, 2]\n['0.000', '1.000']\n\n")


# 1,000 rows seen once, 100 seen ~3 times, 10 seen ~90 times: lookups 1000 + 300 + 900.
SHARES = [1000 / 2200, 0, 300 / 2200] + [0] * 4 + [900 / 2200] + [0] * 9
ROWS = [1000 / 1110, 0, 100 / 1110] + [0] * 4 + [10 / 1110] + [0] * 9


def test_a_stats_file_is_read_table_by_table(tmp_path):
    path = tmp_path / "stats.txt"
    path.write_text(_table("t1", 2200, 1110, ROWS, SHARES) + _table("t2", 50, 10, [1] + [0] * 16,
                                                                         [1] + [0] * 16))
    first, second = read_locality_stats(path)
    assert (first.name, first.lookups, first.distinct) == ("t1", 2200, 1110)
    assert first.lookup_share == pytest.approx([round(s, 3) for s in SHARES])
    assert first.row_share[7] == pytest.approx(0.009)
    assert second.name == "t2" and second.lookup_share[0] == 1


def test_each_buckets_rows_carry_its_share_of_the_lookups_hottest_first(tmp_path):
    path = tmp_path / "stats.txt"
    path.write_text(_table("t", 2200, 1110, ROWS, SHARES))
    table = read_locality_stats(path)[0]
    rows = 11_100
    popularity = table.popularity(rows)
    assert popularity.sum() == pytest.approx(1) and np.all(np.diff(popularity) <= 1e-15)
    # Rows per bucket follow r_b N / c_b: about 10 hot (c ~ 90.5), 108 warm (c ~ 2.83), the rest cold.
    implied = table.bucket_rows()
    hot = round(implied[7] / implied.sum() * rows)
    warm = round(implied[2] / implied.sum() * rows)
    shares = np.asarray(table.lookup_share) / sum(table.lookup_share)
    assert popularity[:hot].sum() == pytest.approx(shares[7])
    assert popularity[hot:hot + warm].sum() == pytest.approx(shares[2])
    assert popularity[hot + warm:].sum() == pytest.approx(shares[0])
    assert popularity[hot - 1] > popularity[hot] and popularity[hot + warm - 1] > popularity[hot + warm]


def test_drawn_lookups_follow_the_popularity(tmp_path):
    path = tmp_path / "stats.txt"
    path.write_text(_table("t", 2200, 1110, ROWS, SHARES))
    table = read_locality_stats(path)[0]
    rows, count = 11_100, 200_000
    lookups = locality_lookups(table, rows, count, seed=3)
    assert lookups.dtype == np.int64 and lookups.min() >= 0 and lookups.max() < rows
    counts = np.sort(np.bincount(lookups, minlength=rows))[::-1]
    hot = round(table.bucket_rows()[7] / table.bucket_rows().sum() * rows)
    assert counts[:hot].sum() / count == pytest.approx(table.lookup_share[7] / sum(table.lookup_share),
                                                       abs=0.01)
    # Hot rows are scattered over the ids, not the first ones.
    top = np.argsort(np.bincount(lookups, minlength=rows))[::-1][:hot]
    assert top.max() > rows // 2
    assert np.array_equal(lookups, locality_lookups(table, rows, count, seed=3))


@pytest.mark.parametrize("text, problem", [
    ("Avg # of indices: 5\n", "expected a table name"),
    ("t.pt\nAvg # of indices: many\n", "stats.txt:2: field 'Avg # of indices': expected a number"),
    ("t.pt\n(0, 1]: 0.5\n", "stats.txt:2: a histogram bucket outside a histogram"),
    ("t.pt\nsomething else\n", "stats.txt:2: unexpected line"),
    ("t.pt\nAvg # of indices: 5\n", "missing distinct, row_share, lookup_share"),
    ("", "no locality statistics"),
])
def test_a_malformed_stats_file_is_refused_in_one_line(tmp_path, text, problem):
    path = tmp_path / "stats.txt"
    path.write_text(text)
    with pytest.raises(LcrInputError, match=problem.replace("(", r"\(").replace(")", r"\)")
                       .replace("]", r"\]").replace("#", r"\#")) as err:
        read_locality_stats(path)
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data not present")
@pytest.mark.parametrize("year", ["2021", "2022"])
def test_metas_tables_read_and_their_lookup_shares_imply_their_distinct_rows(year):
    tables = read_locality_stats(SHARED / f"dlrm_datasets_{year}_locality_stats.txt")
    assert len(tables) >= 16
    for table in tables:
        assert sum(table.lookup_share) == pytest.approx(1, abs=0.01)
        # The model's row count per bucket (r_b N / c_b) against the file's own U.
        assert table.bucket_rows().sum() / table.distinct == pytest.approx(1, abs=0.15)
