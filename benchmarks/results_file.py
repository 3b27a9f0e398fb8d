"""One results file per benchmark: a JSON object with one entry per setting (what shapes
the measurement: machine, workload, sizes), so that a re-run of a setting replaces its own
entry and leaves the others as they were. Written whole or not at all."""
from __future__ import annotations

import json
import os
from pathlib import Path


def update_entry(path: str | os.PathLike, setting: str, entry: dict) -> None:
    """Write ``entry`` as ``path``'s entry ``setting`` (the entries kept in name order)."""
    from lcr.atomic import write_output

    path = Path(path)
    results = json.loads(path.read_text()) if path.exists() else {}
    results[setting] = entry
    write_output(path, json.dumps(dict(sorted(results.items())), indent=1, default=str), "the results")
