"""SlabHashCache: a set-associative embedding cache with a per-slabset eviction policy.

The metadata (``SlabMetadata``) and the values live in torch tensors on the cache's
device. Two engines run the batch semantics of ``lcr.embedding.reference`` on them:
the C++ CPU engine (``lcr._native``) for device="cpu" and the CUDA kernels
(``lcr._cuda``) for device="cuda", on the caller's current stream. Both take raw data
pointers, so the native build never links libtorch.

A batch is served in two steps so that a failing backing store leaves the cache as it
was: ``find`` (read only) tells which keys are missing; once their rows are fetched,
``commit`` refreshes the hits, inserts the misses and writes their rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lcr.embedding.reference import (BYPASSED, HIT, HF_WINDOW, INSERTED, POLICIES,
                                     SLABSET_SLOTS)

RECORD_WORDS = 8192 // 64
_DTYPES = {"float32": torch.float32, "float16": torch.float16,
           torch.float32: torch.float32, torch.float16: torch.float16}


class SlabMetadata:
    """The per-slot and per-slabset arrays of docs/embedding.md, on one device."""

    def __init__(self, num_slabsets: int, device: torch.device):
        slots = num_slabsets * SLABSET_SLOTS
        self.keys = torch.full((slots,), -1, dtype=torch.int64, device=device)
        self.stamps = torch.zeros(slots, dtype=torch.int64, device=device)
        self.predictions = torch.full((slots,), float("inf"), dtype=torch.float64, device=device)
        self.old = torch.zeros(slots, dtype=torch.uint8, device=device)
        self.lambda_shift = torch.zeros(num_slabsets, dtype=torch.int32, device=device)
        self.old_count = torch.zeros(num_slabsets, dtype=torch.int32, device=device)
        self.record = torch.zeros(num_slabsets * RECORD_WORDS, dtype=torch.int64, device=device)

    def engine_view(self, num_slabsets: int, policy_id: int, hf_window: int) -> tuple:
        """The tuple ``slab_table_from`` (csrc/common/slab_table_py.h) reads."""
        return (self.keys.data_ptr(), self.stamps.data_ptr(), self.predictions.data_ptr(),
                self.old.data_ptr(), self.lambda_shift.data_ptr(), self.old_count.data_ptr(),
                self.record.data_ptr(), num_slabsets, policy_id, hf_window)


@dataclass
class BatchPlan:
    """What ``find`` learned about a batch: its unique keys and where they are."""

    keys: torch.Tensor     # int64 [U], deduplicated in order of first occurrence
    inverse: torch.Tensor  # int64 [N], position in ``keys`` of each looked-up key
    found: torch.Tensor    # int64 [U], slot or -1
    missing: torch.Tensor  # int64 [M], positions in ``keys`` of the misses

    @property
    def missing_keys(self) -> torch.Tensor:
        return self.keys[self.missing]


@dataclass
class BatchResult:
    keys: torch.Tensor     # int64 [U]
    slots: torch.Tensor    # int64 [U]: slot serving each key, -1 when bypassed
    evicted: torch.Tensor  # int64 [U]: key evicted by each insertion, -1 when none
    outcome: torch.Tensor  # int8 [U]: HIT, INSERTED or BYPASSED


class _CpuEngine:
    def __init__(self):
        from lcr import _native
        self.native = _native

    def find(self, view, keys, slots):
        self.native.slab_find(view, keys.data_ptr(), keys.numel(), slots.data_ptr())

    def commit(self, view, keys, found, clock, slots, evicted):
        self.native.slab_commit(view, keys.data_ptr(), keys.numel(), found.data_ptr(), clock,
                                slots.data_ptr(), evicted.data_ptr())

    def set_predictions(self, view, keys, values):
        self.native.slab_set_predictions(view, keys.data_ptr(), values.data_ptr(), keys.numel())


class _CudaEngine:
    def __init__(self):
        from lcr.cuda import cuda_module
        self.cuda = cuda_module()

    @staticmethod
    def _stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def find(self, view, keys, slots):
        self.cuda.slab_find(view, keys.data_ptr(), keys.numel(), slots.data_ptr(), self._stream())

    def commit(self, view, keys, found, clock, slots, evicted):
        stream, n = self._stream(), keys.numel()
        slots.copy_(found)
        evicted.fill_(-1)
        self.cuda.slab_refresh_hits(view, found.data_ptr(), n, clock, stream)
        missing = torch.nonzero(found < 0).flatten()
        if missing.numel() == 0:
            return
        # Group the misses by slabset, keeping batch order inside a group (stable sort),
        # so that one warp inserts each group in order.
        miss_keys = keys[missing].contiguous()
        homes = torch.empty(missing.numel(), dtype=torch.int32, device=keys.device)
        self.cuda.slabsets_of_device(miss_keys.data_ptr(), miss_keys.numel(), view[7],
                                     homes.data_ptr(), stream)
        homes, order = torch.sort(homes, stable=True)
        members = missing[order].contiguous()
        _, counts = torch.unique_consecutive(homes, return_counts=True)
        starts = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=keys.device)
        torch.cumsum(counts, 0, out=starts[1:])
        self.cuda.slab_insert_groups(view, keys.data_ptr(), n, members.data_ptr(), starts.data_ptr(),
                                     counts.numel(), clock, slots.data_ptr(), evicted.data_ptr(), stream)

    def set_predictions(self, view, keys, values):
        self.cuda.slab_set_predictions(view, keys.data_ptr(), values.data_ptr(), keys.numel(),
                                       self._stream())


def unique_in_order(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of ``keys`` in order of first occurrence, and for each element
    of ``keys`` the position of its value among them (on keys' device)."""
    if keys.device.type == "cpu":
        values, first, inverse = np.unique(keys.numpy(), return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return torch.from_numpy(values[order]), torch.from_numpy(rank[inverse.reshape(-1)])
    values, inverse = torch.unique(keys, return_inverse=True)
    positions = torch.arange(keys.numel(), device=keys.device)
    first = torch.full((values.numel(),), keys.numel(), dtype=torch.int64, device=keys.device)
    first.scatter_reduce_(0, inverse, positions, reduce="amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=keys.device)
    return values[order], rank[inverse]


ROW_DTYPES = (torch.float32, torch.float16)


def check_rows(rows, count: int, dim: int) -> None:
    """Raise ``ValueError`` unless ``rows`` is None or a [count, dim] float32/float16 tensor."""
    if rows is None:
        return
    if not isinstance(rows, torch.Tensor):
        raise ValueError(f"rows must be a tensor, got {type(rows).__name__}")
    if tuple(rows.shape) != (count, dim):
        raise ValueError(f"expected rows of shape ({count}, {dim}) for the batch's misses, "
                         f"got {tuple(rows.shape)}")
    if rows.dtype not in ROW_DTYPES:
        raise ValueError(f"rows must be float32 or float16, got {rows.dtype}")


class SlabHashCache:
    """``num_slabsets`` x 64 slots of ``dim``-wide rows, evicting by ``policy``.

    policy: lru, fpb, hf or laru (b = 2). Keys are non-negative int64 row ids.
    """

    def __init__(self, num_slabsets: int, dim: int, dtype="float32", policy: str = "lru",
                 device="cpu", hf_window: int = HF_WINDOW):
        if num_slabsets < 1:
            raise ValueError(f"num_slabsets must be at least 1, got {num_slabsets}")
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {device!r}")
        self.num_slabsets, self.dim, self.policy = int(num_slabsets), int(dim), policy
        self.dtype = _DTYPES[dtype]
        self.engine = _CpuEngine() if self.device.type == "cpu" else _CudaEngine()
        self.meta = SlabMetadata(self.num_slabsets, self.device)
        self.values = torch.zeros(self.capacity, self.dim, dtype=self.dtype, device=self.device)
        self._view = self.meta.engine_view(self.num_slabsets, POLICIES.index(policy), hf_window)
        self.clock = 0
        self.hits = self.misses = self.bypassed = 0
        self.bypassed_last = 0  # keys the latest batch served without caching

    @property
    def capacity(self) -> int:
        return self.num_slabsets * SLABSET_SLOTS

    @classmethod
    def for_capacity(cls, rows: int, dim: int, **kwargs) -> "SlabHashCache":
        """A cache holding at least ``rows`` rows (rounded up to whole slabsets)."""
        return cls(max(1, -(-int(rows) // SLABSET_SLOTS)), dim, **kwargs)

    # -- the two steps of a batch ---------------------------------------------------------
    def find(self, keys: torch.Tensor) -> BatchPlan:
        """Deduplicate ``keys`` and locate them. Changes nothing."""
        keys, inverse = unique_in_order(self._keys_tensor(keys))
        found = torch.empty_like(keys)
        self.engine.find(self._view, keys, found)
        return BatchPlan(keys, inverse, found, torch.nonzero(found < 0).flatten())

    def commit(self, plan: BatchPlan, miss_rows: torch.Tensor | None = None) -> BatchResult:
        """Refresh hits, insert misses (writing their rows when given) and report decisions.

        ``miss_rows``: [len(plan.missing), dim] rows of the missing keys, on any device,
        float32 or float16 (converted to the cache's dtype). Checked before anything
        changes: wrong rows raise ``ValueError`` and leave the cache as it was.
        """
        check_rows(miss_rows, int(plan.missing.numel()), self.dim)
        count = plan.keys.numel()
        slots = torch.empty_like(plan.keys)
        evicted = torch.empty_like(plan.keys)
        self.engine.commit(self._view, plan.keys, plan.found, self.clock, slots, evicted)
        self.clock += 2 * count
        outcome = torch.full((count,), HIT, dtype=torch.int8, device=self.device)
        miss_slots = slots[plan.missing]
        inserted = miss_slots >= 0
        outcome[plan.missing] = torch.where(inserted, INSERTED, BYPASSED).to(torch.int8)
        if miss_rows is not None and plan.missing.numel():
            rows = miss_rows.to(self.device, self.dtype, non_blocking=True)
            self.values.index_copy_(0, miss_slots[inserted], rows[inserted])
        misses = int(plan.missing.numel())
        self.hits += count - misses
        self.misses += misses
        self.bypassed_last = int((~inserted).sum())
        self.bypassed += self.bypassed_last
        return BatchResult(plan.keys, slots, evicted, outcome)

    def access(self, keys) -> BatchResult:
        """One batch without values (tests, simulations): find, then commit."""
        return self.commit(self.find(keys))

    def set_predictions(self, keys, values) -> None:
        """Predicted next-access times for cached keys (others are ignored; NaN: unknown)."""
        keys = self._keys_tensor(keys)
        values = torch.as_tensor(values, dtype=torch.float64).to(self.device).contiguous()
        if values.shape != keys.shape:
            raise ValueError(f"{keys.numel()} keys but {values.numel()} predictions")
        self.engine.set_predictions(self._view, keys, values)

    # -- inspection -----------------------------------------------------------------------
    def cached_keys(self) -> set[int]:
        keys = self.meta.keys.cpu()
        return set(keys[keys >= 0].tolist())

    @property
    def hit_ratio(self) -> float:
        served = self.hits + self.misses
        return self.hits / served if served else 0.0

    def _keys_tensor(self, keys) -> torch.Tensor:
        keys = torch.as_tensor(keys, dtype=torch.int64).to(self.device).contiguous().flatten()
        if keys.numel() and int(keys.min()) < 0:
            raise ValueError("keys must be non-negative row ids")
        return keys

    def __repr__(self) -> str:
        return (f"SlabHashCache(num_slabsets={self.num_slabsets}, dim={self.dim}, "
                f"dtype={self.dtype}, policy={self.policy!r}, device={str(self.device)!r})")
