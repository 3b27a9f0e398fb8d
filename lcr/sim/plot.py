"""Plots in the paper's style: hit ratio vs cache size, cost ratio vs noise (Figure 5)."""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from lcr.atomic import write_output
from lcr.sim.sweep import SimResult


def plot_sweep(results: list[SimResult], path: str | os.PathLike, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    capacities = sorted({r.capacity for r in results})
    noises = sorted({r.noise for r in results if r.noise is not None})
    panels = 1 + (len(capacities) if len(noises) > 1 else 0)
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.6), squeeze=False)
    axes = axes[0]

    # Hit ratio vs cache size, predictive policies at their lowest noise.
    lines = defaultdict(list)
    for r in results:
        if r.noise is None or r.noise == noises[0]:
            label = r.policy if r.noise is None else f"{r.policy} (noise {r.noise:g})"
            lines[label].append((r.capacity, r.hit_ratio))
    for label, points in lines.items():
        xs, ys = zip(*sorted(points))
        axes[0].plot(xs, ys, marker="o", label=label)
    axes[0].set(xscale="log" if len(capacities) > 2 else "linear", xlabel="cache size (items)",
                ylabel="hit ratio", title="hit ratio vs cache size")
    axes[0].legend(fontsize=7)

    # Cost ratio (misses / OPT) vs noise probability, one panel per cache size.
    for ax, capacity in zip(axes[1:], capacities):
        at = [r for r in results if r.capacity == capacity]
        curves = defaultdict(list)
        for r in at:
            if r.noise is not None:
                curves[r.policy].append((r.noise, r.cost_ratio))
        for label, points in curves.items():
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", label=label)
        for r in at:
            if r.noise is None and r.policy != "opt":
                ax.axhline(r.cost_ratio, linestyle="--", linewidth=1, label=r.policy,
                           color=ax._get_lines.get_next_color())
        ax.set(xlabel="noise", ylabel="cost ratio (misses / OPT)", title=f"cache = {capacity}")
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


def save_figure(fig, path: str | os.PathLike, title: str = "") -> None:
    """Title, tighten, write the image (creating its folder; whole or not at all, see
    ``lcr.atomic``) in the format its suffix names, and free the figure."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    image_format = Path(path).suffix.lstrip(".").lower() or None  # the temporary file's name has no say
    try:
        write_output(path, lambda f: fig.savefig(f, format=image_format, dpi=120), "the plot")
    finally:
        plt.close(fig)
