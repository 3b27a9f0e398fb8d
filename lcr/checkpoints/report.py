"""Budget-sweep output: a text table, a JSON file and the reduction-factor plot."""
from __future__ import annotations

import json
import math
from pathlib import Path

from lcr.atomic import write_output
from lcr.checkpoints.sweep import Sweep
from lcr.sim.plot import save_figure


def _factor(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def format_table(result: Sweep) -> str:
    names = list(result.curves)
    width = max(9, *(len(n) + 2 for n in names))
    lines = [
        f"{result.source}: L = {result.length} blocks, no-cache work E[d] = {result.no_cache_work:.4g} blocks/request",
        "recompute reduction factor (no-cache work / recompute work), by checkpoint budget:",
        "budget" + "".join(n.rjust(width) for n in names),
    ]
    for i, budget in enumerate(result.budgets):
        cells = "".join(_factor(result.curves[n][i].reduction).rjust(width) for n in names)
        lines.append(f"{budget:>6}{cells}")
    return "\n".join(lines)


def to_json(result: Sweep) -> dict:
    def finite(x: float):
        return None if math.isinf(x) else x  # JSON has no infinity; null reads "nothing recomputed"

    return {
        "source": result.source,
        "length": result.length,
        "no_cache_work": result.no_cache_work,
        "budgets": result.budgets,
        "planners": {
            name: [
                {"budget": p.budget, "recompute": p.recompute, "reduction_factor": finite(p.reduction),
                 "positions": list(p.positions)}
                for p in points
            ]
            for name, points in result.curves.items()
        },
    }


def write_json(result: Sweep, path: str | Path) -> None:
    """``to_json`` at ``path``, whole or not at all (``lcr.atomic``); one-line error if it
    cannot be written."""
    write_output(path, json.dumps(to_json(result), indent=2) + "\n", "JSON")


def plot_reduction(result: Sweep, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    omitted = False
    for name, points in result.curves.items():
        shown = [(p.budget, p.reduction) for p in points if math.isfinite(p.reduction)]
        omitted |= len(shown) < len(points)
        if shown:
            ax.plot(*zip(*shown), marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("checkpoint budget m")
    ax.set_ylabel("recompute reduction factor")
    title = f"{Path(result.source).name} (L = {result.length})"
    ax.set_title(title + ("\nbudgets with zero recompute not drawn" if omitted else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save_figure(fig, path)
