"""The robustness plot of paper Figure 13: token hit rate vs worst-case noise probability."""
from __future__ import annotations

import os
from collections import defaultdict

from lcr.sim.plot import save_figure


def plot_robustness(results, path: str | os.PathLike, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    capacities = sorted({r.cache_tokens for r in results})
    noises = sorted({r.noise for r in results if r.noise is not None}) or [0.0]
    fig, axes = plt.subplots(1, len(capacities), figsize=(4.5 * len(capacities), 3.6), squeeze=False)
    for ax, capacity in zip(axes[0], capacities):
        curves = defaultdict(list)
        for r in results:
            if r.cache_tokens != capacity:
                continue
            # Policies that ignore predictions are flat lines across the noise axis.
            for noise in ([r.noise] if r.noise is not None else noises):
                curves[r.policy].append((noise, r.hit_rate))
        for label, points in curves.items():
            xs, ys = zip(*sorted(points))
            style = "--" if label in ("lru", "opt", "rlt") else "-"
            ax.plot(xs, ys, style, marker="o" if style == "-" else None, label=label)
        ax.set(xlabel="probability of worst-case prediction", ylabel="token hit rate",
               title=f"cache = {capacity:,} tokens", ylim=(0, None))
        ax.legend(fontsize=7)
    save_figure(fig, path, title)
