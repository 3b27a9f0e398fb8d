"""The predictor interface every cache and the simulator talk to, and the checks on
the values that enter it.

A predictor sees every access (``observe``) and answers, for a batch of keys, the
predicted absolute time of each key's next access (``predict``). Times are in the
caller's logical clock (request index in the simulator). NaN means "unknown": the
policies then fall back to recency (see ``lcr.policies.predictions``).

Keys and times travel as int64 (``lcr.predict.wire``), so ``int64_value``,
``int64_keys`` and ``time_value`` are the one place that decides what may enter:
integers within int64, or floats that are finite, whole and within int64, and for a time
not negative; anything else is refused with a one-line ``LcrInputError`` (a
``ValueError``) naming the argument.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_FLOAT_LIMIT = 2.0 ** 63  # floats in [-2^63, 2^63) convert to int64 exactly


def _shown(value) -> str:
    """``value`` for a one-line message: short, no newlines."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def int64_value(value, name: str) -> int:
    """``value`` as a Python int within int64, or ``LcrInputError`` naming ``name``.
    Taken: ints and numpy integers within int64, floats that are finite, whole and within
    int64 (and 0-d arrays of those). Refused: everything else, bools and None included."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:  # the hot path: plain ints
        return value
    if isinstance(value, (np.generic, np.ndarray)):
        if np.ndim(value) != 0 or value.dtype.kind not in "iuf":
            raise LcrInputError(f"{name} must be an integer, got {_shown(value)}")
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LcrInputError(f"{name} must be a finite integer, got {'NaN' if math.isnan(value) else value}")
        if not value.is_integer():
            raise LcrInputError(f"{name} must be a whole number, got {value}")
        if not -_FLOAT_LIMIT <= value < _FLOAT_LIMIT:
            raise LcrInputError(f"{name} is outside the int64 range, got {value:g}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise LcrInputError(f"{name} must be an integer, got {type(value).__name__} {_shown(value)}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise LcrInputError(f"{name} is outside the int64 range, got {value}")
    return int(value)


def time_value(value, name: str) -> int:
    """An access time: an ``int64_value`` that is not negative (times count up from 0;
    the service refuses negative ones too)."""
    value = int64_value(value, name)
    if value < 0:
        raise LcrInputError(f"{name} must be a time >= 0, got {value}")
    return value


def int64_keys(keys, name: str = "keys") -> np.ndarray:
    """``keys`` as a 1-D int64 array, or ``LcrInputError`` naming ``name`` and the problem.

    A list or tuple is checked element by element, exactly as ``int64_value`` checks one
    value (so ``[2**62 + 1, 1.0]`` keeps its first key, which a float array would round).
    Anything else is read as an array: integer dtypes within int64, or float dtypes whose
    values are finite, whole and within int64; other dtypes (bool, complex, text, object)
    and other shapes than 1-D are refused."""
    if isinstance(keys, (list, tuple)):
        if all(type(key) is int for key in keys):  # the hot path: a list of ints
            try:
                return np.array(keys, dtype=np.int64)
            except OverflowError:
                pass  # one is outside int64: int64_value names it
        return np.array([int64_value(key, f"{name}[{i}]") for i, key in enumerate(keys)], dtype=np.int64)
    array = np.asarray(keys)
    if array.ndim != 1:
        raise LcrInputError(f"{name} must be a 1-D sequence of integers, got shape {array.shape}")
    kind = array.dtype.kind
    if kind == "i":
        return array.astype(np.int64, copy=False)
    if kind == "u":
        if array.size and array.max() > INT64_MAX:
            raise LcrInputError(f"{name} contain values outside the int64 range (largest {array.max()})")
        return array.astype(np.int64)
    if kind == "f":
        _check_float_keys(array, name)
        return array.astype(np.int64)
    raise LcrInputError(f"{name} must be integers, got dtype {array.dtype}")


def _check_float_keys(array: np.ndarray, name: str) -> None:
    if np.isnan(array).any():
        raise LcrInputError(f"{name} contain NaN; keys must be integers")
    if np.isinf(array).any():
        raise LcrInputError(f"{name} contain inf; keys must be integers")
    if not (np.mod(array, 1) == 0).all():
        raise LcrInputError(f"{name} must be integers, got fractional values")
    wide = array.astype(np.float64, copy=False)  # 2^63 is no float16 or float32: compare in float64
    if not ((wide >= -_FLOAT_LIMIT) & (wide < _FLOAT_LIMIT)).all():
        raise LcrInputError(f"{name} contain values outside the int64 range")


class Predictor(ABC):
    name: str = "predictor"

    def observe(self, key: int, t: int) -> None:
        """Record an access to ``key`` at time ``t`` (features, labels, online training)."""

    @abstractmethod
    def predict(self, keys: Sequence[int], now: int) -> np.ndarray:
        """Predicted next-access time of each key, float64, NaN where unknown."""


__all__ = ["INT64_MAX", "INT64_MIN", "Predictor", "int64_keys", "int64_value", "time_value"]
