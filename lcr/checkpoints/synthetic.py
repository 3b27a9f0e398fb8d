"""Seeded synthetic overlap laws shaped like the workloads sparse checkpoints are meant for.

- ``spike``: questions about one long document; most requests reuse nearly all of it.
- ``short``: shared system prompts; mass sits on a few short prefix lengths.
- ``multimodal``: long stories read to different depths; several wide bumps.
- ``uniform``: every depth equally likely (where balanced spacing is optimal).

A spec string names one: ``multimodal`` or ``multimodal:length=2048,seed=3``.
"""
from __future__ import annotations

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.errors import LcrInputError

DEFAULT_LENGTH = 1024


def _bumps(length: int, centers, widths, masses) -> np.ndarray:
    """A mixture of Gaussian bumps discretized on depths 0..L, each bump carrying its mass."""
    d = np.arange(length + 1, dtype=np.float64)
    out = np.zeros(length + 1)
    for c, s, m in zip(centers, widths, masses):
        bump = np.exp(-0.5 * ((d - c) / max(s, 0.5)) ** 2)
        out += m * bump / bump.sum()
    return out


def spike_law(length: int = DEFAULT_LENGTH, seed: int = 0) -> OverlapLaw:
    rng = np.random.default_rng(seed)
    near_end = _bumps(length, [length * rng.uniform(0.93, 0.99)], [length * 0.01], [0.75])
    early_exits = rng.uniform(0, 1, length + 1) ** 3  # a thin, uneven floor of earlier divergences
    w = near_end + 0.2 * early_exits / early_exits.sum()
    w[0] += 0.05  # some requests miss the document entirely
    return OverlapLaw(w)


def short_prefix_law(length: int = DEFAULT_LENGTH, seed: int = 0) -> OverlapLaw:
    rng = np.random.default_rng(seed)
    prompts = rng.integers(4, 9)
    centers = np.minimum(rng.lognormal(np.log(0.06 * length), 0.6, prompts), length)
    w = _bumps(length, centers, 0.003 * length * np.ones(prompts), rng.dirichlet(np.ones(prompts)))
    tail = np.exp(-np.arange(length + 1) / (0.3 * length))  # rare long shared contexts
    return OverlapLaw(w + 0.05 * tail / tail.sum())


def multimodal_law(length: int = DEFAULT_LENGTH, seed: int = 0) -> OverlapLaw:
    rng = np.random.default_rng(seed)
    modes = rng.integers(3, 7)
    centers = rng.uniform(0.05, 1.0, modes) * length
    widths = rng.uniform(0.02, 0.1, modes) * length
    return OverlapLaw(_bumps(length, centers, widths, rng.dirichlet(np.ones(modes))))


def uniform_law(length: int = DEFAULT_LENGTH, seed: int = 0) -> OverlapLaw:
    return OverlapLaw(np.ones(length + 1))


SYNTHETIC_LAWS = {
    "spike": spike_law,
    "short": short_prefix_law,
    "multimodal": multimodal_law,
    "uniform": uniform_law,
}


def law_from_spec(spec: str) -> OverlapLaw:
    """``name[:length=L,seed=S]`` -> the seeded synthetic law."""
    name, _, params = spec.partition(":")
    if name not in SYNTHETIC_LAWS:
        raise LcrInputError(
            f"{spec!r} is neither a trace file nor a synthetic law; laws: {', '.join(SYNTHETIC_LAWS)}"
        )
    options = {"length": DEFAULT_LENGTH, "seed": 0}
    for item in filter(None, params.split(",")):
        key, eq, value = item.partition("=")
        key = "length" if key == "L" else key
        if not eq or key not in options:
            raise LcrInputError(f"law {name!r}: bad parameter {item!r}; expected length=N or seed=N")
        try:
            options[key] = int(value)
        except ValueError:
            raise LcrInputError(f"law {name!r}: {key} must be an integer, got {value!r}") from None
    if options["length"] < 1:
        raise LcrInputError(f"law {name!r}: prefix length L must be >= 1, got {options['length']}")
    return SYNTHETIC_LAWS[name](options["length"], options["seed"])
