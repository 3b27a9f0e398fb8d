"""SparseLengthsSum through a SlabHashCache: per sample, the sum of its rows.

Stages (timed when ``timings`` is given, each closed by a device sync on CUDA):
  query   deduplicate the batch and locate its keys in the cache (reads only)
  fetch   read the missing rows from the backing store
  insert  refresh hits, insert misses, write their rows into cache slots
  reduce  gather-and-sum from cache slots (``embedding_bag``); bypassed keys are summed
          from the fetched rows
Then, when a ``predictor`` is given, the batch's keys get fresh predictions.
A store failure, or rows of the wrong shape or dtype, raise ``StoreError`` before
``insert``, so the cache is left exactly as it was.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from lcr.embedding.cache import SlabHashCache, check_rows
from lcr.embedding.reference import BYPASSED
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
    times (NaN: unknown); called once per batch with the batch's distinct keys.
    """
    device = cache.device
    indices = torch.as_tensor(indices, dtype=torch.int64).to(device).flatten()
    offsets = bag_offsets(offsets, lengths, include_last_offset, device)
    with _stage(timings, "query", device):
        plan = cache.find(indices)
    with _stage(timings, "fetch", device):
        missing = plan.missing_keys
        rows = store.fetch(missing.cpu()) if missing.numel() else None
        try:
            check_rows(rows, int(missing.numel()), cache.dim)
        except ValueError as err:
            raise StoreError(f"{store!r} answered wrong rows: {err}") from None
    with _stage(timings, "insert", device):
        result = cache.commit(plan, rows)
    with _stage(timings, "reduce", device):
        slots = result.slots[plan.inverse]
        if cache.bypassed_last == 0:
            out = F.embedding_bag(slots, cache.values, offsets, mode="sum")
        else:
            out = _reduce_with_bypass(cache, plan, result, slots, rows, offsets)
    if predictor is not None:
        keys = plan.keys.cpu().numpy()
        cache.set_predictions(plan.keys, torch.as_tensor(predictor.predict(keys, now),
                                                         dtype=torch.float64))
    return out


def _reduce_with_bypass(cache, plan, result, slots, rows, offsets) -> torch.Tensor:
    """Rows served from the store without being cached are summed from ``rows``."""
    bypassed = (result.outcome == BYPASSED)[plan.inverse]
    row_of_key = torch.zeros_like(plan.keys)
    row_of_key[plan.missing] = torch.arange(plan.missing.numel(), device=cache.device)
    rows = rows.to(cache.device, cache.dtype)
    cached_part = F.embedding_bag(slots.clamp(min=0), cache.values, offsets, mode="sum",
                                  per_sample_weights=(~bypassed).to(cache.dtype))
    store_part = F.embedding_bag(row_of_key[plan.inverse], rows, offsets, mode="sum",
                                 per_sample_weights=bypassed.to(cache.dtype))
    return cached_part + store_part
