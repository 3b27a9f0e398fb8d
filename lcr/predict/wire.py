"""The service's binary encoding of bulk arrays.

Bodies are raw little-endian arrays, sent as ``application/octet-stream``:

- ``/observe`` request: int64 keys followed by int64 times, n of each (16·n bytes);
- ``/predict`` request: int64 keys (8·n bytes), with ``now`` as a query parameter;
- ``/predict`` response: float64 predicted next-access times (8·n bytes), NaN = unknown.

One element is 8 bytes instead of ~20 as JSON text, and decoding is a zero-copy view.
"""
from __future__ import annotations

import numpy as np

from lcr.errors import LcrInputError

INT64 = np.dtype("<i8")
FLOAT64 = np.dtype("<f8")
CONTENT_TYPE = "application/octet-stream"


def encode_int64(values) -> bytes:
    return np.ascontiguousarray(values, dtype=INT64).tobytes()


def encode_float64(values) -> bytes:
    return np.ascontiguousarray(values, dtype=FLOAT64).tobytes()


def decode_keys(body: bytes) -> np.ndarray:
    if len(body) % 8:
        raise LcrInputError(f"body of {len(body)} bytes is not a whole number of int64 keys (8 bytes each)")
    return np.frombuffer(body, dtype=INT64)


def decode_observations(body: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, times)`` from keys-then-times int64 halves."""
    if len(body) % 16:
        raise LcrInputError(f"body of {len(body)} bytes is not n int64 keys followed by n int64 times "
                            "(16 bytes per observation)")
    values = np.frombuffer(body, dtype=INT64)
    n = len(values) // 2
    return values[:n], values[n:]


def encode_observations(keys, times) -> bytes:
    keys = np.ascontiguousarray(keys, dtype=INT64)
    times = np.ascontiguousarray(times, dtype=INT64)
    if keys.ndim != 1 or keys.shape != times.shape:
        raise LcrInputError(f"observations need 1-D keys and times of one length, got {keys.shape} and {times.shape}")
    return keys.tobytes() + times.tobytes()


def decode_predictions(body: bytes, expected: int) -> np.ndarray:
    values = np.frombuffer(body, dtype=FLOAT64)
    if len(body) % 8 or len(values) != expected:
        raise LcrInputError(f"predictor answered {len(body)} bytes for {expected} keys")
    return values
