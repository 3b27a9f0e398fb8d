"""The fused SparseLengthsSum: a batch queued on the device whole, with no host round trip.

For a ``SlabHashCache`` running the CUDA kernels (engine "cuda", or "warp-model" on the
host, which is how CI checks them) over a ``HostStore`` of the cache's dtype, with
``mode="sum"`` and no ``per_sample_weights``. One call, two kernels
(csrc/common/slab_fused.h):

1. a warp per bag probes its lookups, stamps the hits (the first-touch rule of the two-step
   path's refresh), lists the misses per slabset, and sums the bag's rows: a hit's from
   ``cache.rows``, a miss's straight from the store's table (pinned host memory, which the
   GPU reads through unified addressing), keeping a copy in a staging row on the device;
2. a warp per slabset with misses sorts its list, keeps each key's first lookup and inserts
   those in batch order with the two-step path's insert (pinned keys, bypass, the policy's
   victim), copying each inserted row into its slot from its staging row (from the table
   once the staging rows ran out), so host memory is read once per missed lookup.

The cache ends every batch exactly as ``find`` + ``commit`` leave it (every metadata array
and the hits / misses / bypassed counters; tests/test_slab_fused.py), and the sums equal
``embedding_bag(mode="sum")`` on the full table. Nothing is read back: launch sizes are the
worst case (a warp per bag; a warp per slabset that could miss, grid-stride over the
device's count), and the counters stay on the device, so on a GPU the host queues the
batch and returns.

Per-cache scratch (``_Scratch``): 16 bytes per slabset for the miss lists, which every
batch leaves empty, 64 bytes per lookup of the largest batch so far, and staging rows for
up to that many misses within STAGING_BYTES.

Concurrency: every call holds ``cache.ordered()`` (the cache's lock and, on a GPU, its
event ordering calls across streams), so fused batches, two-step batches and other calls
on one cache are served one after the other, on the host and on the device.
"""
from __future__ import annotations

import functools
import threading
import weakref

import torch

from lcr.embedding.cache import SlabHashCache, _retire
from lcr.embedding.stores import HostStore

ENGINES = ("cuda", "warp-model")
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1}  # slab_fused::RowDtype
STAGING_BYTES = 64 << 20  # staged missed rows per batch; misses past them are read twice


def refusal(cache: SlabHashCache, store, mode: str = "sum", per_sample_weights=None) -> str | None:
    """Why the fused path cannot serve this cache, store and pooling, or None when it can."""
    if cache.engine_name not in ENGINES:
        return (f"the fused SLS runs the CUDA kernels (engine cuda or warp-model), "
                f"this cache's engine is {cache.engine_name}")
    if not isinstance(store, HostStore):
        return f"the fused SLS reads rows from a HostStore's table, got {type(store).__name__}"
    if store.dtype != cache.dtype or store.dim != cache.dim:
        return (f"the store's rows ({store.dim} x {store.dtype}) differ from the cache's "
                f"({cache.dim} x {cache.dtype})")
    if mode != "sum" or per_sample_weights is not None:
        return "the fused SLS pools with mode='sum' and no per_sample_weights"
    if cache.engine_name == "cuda" and not store.table.is_pinned():
        return "the store's table is not in pinned host memory (HostStore(table, pin=True))"
    return None


def applies(cache: SlabHashCache, store, mode: str = "sum", per_sample_weights=None) -> bool:
    """Whether ``fused_pool`` / ``fused_sls`` can serve batches of ``cache`` from ``store``."""
    return refusal(cache, store, mode, per_sample_weights) is None


class _Scratch:
    """A cache's device arrays for the fused path (csrc/common/slab_fused.h, FusedBatch).
    ``head`` / ``count`` hold each slabset's miss list, empty between batches; the rest
    serve one batch and are sized for the largest so far. Zeroed once when made, so that
    nothing the kernels read is ever uninitialised memory."""

    def __init__(self, cache: SlabHashCache):
        self.int64 = functools.partial(torch.zeros, dtype=torch.int64, device=cache.device)
        self.row_bytes = cache.dim * cache.rows.element_size()
        self.num_slabsets = cache.num_slabsets
        self.head = torch.full((cache.num_slabsets,), -1, dtype=torch.int64, device=cache.device)
        self.count = torch.zeros(cache.num_slabsets, dtype=torch.int64, device=cache.device)
        layout = cache.engine.module
        if not hasattr(layout, "FUSED_FACTS"):  # a module built before the facts
            raise RuntimeError(f"{layout.__name__} predates the fused SLS's argument facts: "
                               "rebuild lcr's native modules")
        self.counters = self.int64(layout.FUSED_COUNTERS)
        first, count = layout.FUSED_FACTS
        self.facts = self.counters[first:first + count]  # the batch's, read after the kernels
        self.pending: list = []  # batches whose argument checks the device has yet to pass
        self.capacity = -1
        self.reserve(0, None)

    def reserve(self, n: int, stream) -> None:
        """Room for a batch of ``n`` lookups (old arrays retired on ``stream``)."""
        if n <= self.capacity:
            return
        if self.capacity >= 0:
            for old in (self.where, self.entries, self.next, self.touched, self.region, self.spare,
                        self.staged):
                _retire(old, stream)
        self.where, self.next = self.int64(n), self.int64(n)
        self.entries, self.region, self.spare = self.int64(2 * n), self.int64(2 * n), self.int64(2 * n)
        self.touched = self.int64(min(n, self.num_slabsets))
        self.staged_rows = min(n, STAGING_BYTES // self.row_bytes)
        self.staged = torch.zeros(self.staged_rows * self.row_bytes, dtype=torch.uint8,
                                  device=self.where.device)
        self.capacity = n


_SCRATCH: "weakref.WeakKeyDictionary[SlabHashCache, _Scratch]" = weakref.WeakKeyDictionary()
_SCRATCH_LOCK = threading.Lock()


def _scratch(cache: SlabHashCache) -> _Scratch:
    with _SCRATCH_LOCK:
        scratch = _SCRATCH.get(cache)
        if scratch is None:
            scratch = _SCRATCH[cache] = _Scratch(cache)
        return scratch


def _bag_offsets(bags) -> tuple[torch.Tensor, int]:
    """Bag bounds as the kernel reads them (``offsets``, with include_last_offset one more
    than the bags) and the number of bags; 2-D indices become equal bags (no sync)."""
    if bags.offsets is None:
        count, length = bags.shape
        return torch.arange(0, count * length, length, device=bags.lookups.device), count
    offsets = bags.offsets.contiguous()
    return offsets, max(offsets.numel() - int(bags.include_last_offset), 0)


def fused_pool(cache: SlabHashCache, store: HostStore, bags) -> torch.Tensor:
    """[bags, dim] pooled rows of a batch read by ``lcr.embedding.sls.read_bags`` (on the
    cache's device), in the cache's dtype, served and cached as ``lcr.sls`` would.

    Raises ``ValueError`` (one line) when the fused path does not apply (``refusal``).
    Lookups outside the store's rows, which ``read_bags`` refuses, are summed as zeros and
    never cached, and offsets are clamped into the batch, so a batch whose deferred checks
    have yet to run cannot make the kernels read or write out of bounds. Bags read with
    ``reader_checks`` get their argument facts from the kernels here.
    """
    reason = refusal(cache, store, bags.mode, bags.per_sample_weights)
    if reason is not None:
        raise ValueError(reason)
    with cache.ordered() as stream:
        lookups = bags.lookups.contiguous()
        offsets, count = _bag_offsets(bags)
        n = lookups.numel()
        scratch = _scratch(cache)
        scratch.reserve(n, stream)
        out = torch.empty(count, cache.dim, dtype=cache.dtype, device=cache.device)
        view = (lookups.data_ptr(), n, offsets.data_ptr(), offsets.numel(), count, cache.clock,
                cache.rows.data_ptr(), store.table.data_ptr(), store.rows,
                cache.dim * cache.rows.element_size(), _DTYPE_CODES[cache.dtype], out.data_ptr(),
                cache._hits.data_ptr(), cache._misses.data_ptr(), cache._bypassed.data_ptr(),
                scratch.counters.data_ptr(), scratch.where.data_ptr(), scratch.entries.data_ptr(),
                scratch.next.data_ptr(), scratch.touched.data_ptr(), scratch.head.data_ptr(),
                scratch.count.data_ptr(), scratch.region.data_ptr(), scratch.spare.data_ptr(),
                scratch.staged.data_ptr(), scratch.staged_rows, scratch.capacity)
        try:
            cache.engine.module.slab_fused_sls(cache._view, view, cache.engine.stream(),
                                               cache.engine.index)
        except BaseException:
            with _SCRATCH_LOCK:  # the miss lists may be half built: start the next batch afresh
                _SCRATCH.pop(cache, None)
            raise
        if bags.rules.reader is not None:  # read_bags left the argument facts to the kernel
            bags.rules.start(scratch.facts)
        # The batch is queued: the cache moved on as commit moves it (plans found before
        # it are stale).
        cache.clock += 2 * n
        cache._epoch += 1
        return out


def fused_sls(cache: SlabHashCache, store: HostStore, indices, offsets=None, *, lengths=None,
              include_last_offset: bool = False) -> torch.Tensor:
    """``lcr.sls(cache, store, indices, offsets, ...)`` with ``mode="sum"`` on the fused path:
    the same arguments, refused alike (``read_bags``), the same pooled rows and cache state.

    Arguments given on the host are checked before anything changes. Tensors already on a
    GPU are checked without a synchronisation: their checks are queued with the batch, and a
    refusal is raised by the first later fused call on this cache that finds the device
    past them, or by ``check(cache)``; the refused batch meanwhile reads nothing out of
    bounds and caches no bad key (``fused_pool``).
    """
    from lcr.embedding.sls import read_bags  # sls will dispatch here: import when called
    with cache.ordered():
        _raise_refusals(cache, wait=False)
        bags = read_bags(indices, offsets, lengths, include_last_offset, "sum", None,
                         rows=store.rows, dtype=cache.dtype, device=cache.device,
                         reader_checks=True)
        out = fused_pool(cache, store, bags)
        if bags.rules.ready is not None:  # deferred: the device checks the values
            _scratch(cache).pending.append(bags)
        return out


def check(cache: SlabHashCache) -> None:
    """Wait for the deferred argument checks of this cache's fused batches and raise the
    first refusal (``fused_sls``)."""
    with cache.ordered():
        _raise_refusals(cache, wait=True)


def _raise_refusals(cache: SlabHashCache, wait: bool) -> None:
    pending = _scratch(cache).pending
    while pending and (wait or pending[0].rules.ready.query()):
        bags = pending.pop(0)
        try:
            bags.check()
        except (TypeError, ValueError, IndexError) as err:
            pending.clear()
            raise type(err)(f"an earlier fused batch on this cache was refused: {err}") from None
