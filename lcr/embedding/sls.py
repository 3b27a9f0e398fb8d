"""SparseLengthsSum through a SlabHashCache: per sample, the sum of its rows.

Stages (timed when ``timings`` is given, each closed by a device sync on CUDA):
  query   deduplicate the batch and locate its keys in the cache (reads only)
  fetch   read the missing rows from the backing store
  insert  refresh hits, insert misses, write their rows into cache slots (and the rows
          of bypassed misses into scratch rows past them)
  reduce  one ``embedding_bag`` over those rows (queued during ``query`` already, and
          used as is when the batch had no miss)
Then, when a ``predictor`` is given, the batch's keys get fresh predictions.
A store failure, or rows of the wrong shape or dtype, raise ``StoreError`` before
``insert``, so the cache is left exactly as it was.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from lcr.embedding.cache import SlabHashCache, check_rows
from lcr.embedding.stores import StoreError

STAGES = ("query", "fetch", "insert", "reduce")


def bag_offsets(offsets=None, lengths=None, include_last_offset=False, device="cpu") -> torch.Tensor:
    """Start offsets [batch] from ``offsets`` ([batch], or [batch + 1] ending with the
    total when ``include_last_offset``) or from ``lengths`` [batch]."""
    if (offsets is None) == (lengths is None):
        raise ValueError("give exactly one of offsets and lengths")
    if lengths is not None:
        lengths = torch.as_tensor(lengths, dtype=torch.int64, device=device)
        return torch.cumsum(lengths, 0) - lengths
    offsets = torch.as_tensor(offsets, dtype=torch.int64, device=device)
    return offsets[:-1] if include_last_offset else offsets


@contextmanager
def _stage(timings: dict | None, name: str, device: torch.device):
    if timings is None:
        yield
        return
    start = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def sls(cache: SlabHashCache, store, indices, offsets=None, *, lengths=None,
        include_last_offset: bool = False, predictor=None, now: int = 0,
        timings: dict | None = None) -> torch.Tensor:
    """[batch, dim] pooled sums, equal to ``embedding_bag(mode="sum")`` on the full table.

    ``predictor``: any object with ``predict(keys, now)`` returning predicted next-access
    times (NaN: unknown); called once per batch with the batch's distinct keys (read
    from the host when ``indices`` are given there, else copied back: one more sync).
    The whole batch holds ``cache.lock``: concurrent calls on one cache are serialised.
    On a GPU a batch whose lookups all hit synchronises with the host once (``find``
    reads back its miss count); the reduce is one ``embedding_bag`` over ``cache.rows``.
    """
    device = cache.device
    indices = torch.as_tensor(indices, dtype=torch.int64).flatten()
    host_indices = indices if indices.device.type == "cpu" else None
    with cache.lock:
        offsets = bag_offsets(offsets, lengths, include_last_offset, device)
        def pool(slot_of):
            return F.embedding_bag(slot_of.clamp(min=0), cache.rows, offsets, mode="sum")
        with _stage(timings, "query", device):
            # The reduce is queued before find waits for its read-back: when every lookup
            # hits (the common case) it is the answer, else it is redone after commit.
            plan = cache.find(indices, overlap=pool)
        with _stage(timings, "fetch", device):
            missing = plan.missing_keys
            rows = store.fetch(missing) if missing.numel() else None
            try:
                check_rows(rows, int(missing.numel()), cache.dim)
            except ValueError as err:
                raise StoreError(f"{store!r} answered wrong rows: {err}") from None
        with _stage(timings, "insert", device):
            cache.commit(plan, rows)
        with _stage(timings, "reduce", device):
            out = plan.overlapped if rows is None else pool(plan.slot_of)
        if predictor is not None:
            lookups = host_indices if host_indices is not None else plan.indices.cpu()
            keys = np.unique(lookups.numpy())
            cache.set_predictions(keys, torch.as_tensor(predictor.predict(keys, now),
                                                        dtype=torch.float64))
    return out
