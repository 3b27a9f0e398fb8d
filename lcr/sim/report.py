"""Tables and JSON for sweep results."""
from __future__ import annotations

import json
import os
import platform

from lcr.atomic import write_output
from lcr.sim.sweep import SimResult


def format_table(results: list[SimResult]) -> str:
    header = ("policy", "cache", "noise", "hit ratio", "misses", "cost ratio", "pred calls")
    rows = [(r.policy, str(r.capacity), "-" if r.noise is None else f"{r.noise:g}", f"{r.hit_ratio:.4f}",
             str(r.misses), f"{r.cost_ratio:.3f}" if r.cost_ratio is not None else "-",
             str(r.stats.get("predictor_calls", 0))) for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def machine_description() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "system": platform.platform()}


def write_json(path: str | os.PathLike, results: list, **context) -> None:
    """Results and their context as JSON at ``path`` (folders created), written whole or
    not at all (``lcr.atomic``); one-line error if it cannot be written."""
    doc = {**context, "machine": machine_description(), "results": [r.as_dict() for r in results]}
    write_output(path, json.dumps(doc, indent=1, default=float), "JSON")
