"""SlabHashCache: a set-associative embedding cache with a per-slabset eviction policy.

The metadata (``SlabMetadata``) and the values live in torch tensors on the cache's
device. Three engines run the batch semantics of ``lcr.embedding.reference`` on them,
all through the same five calls (``_Engine``): the C++ CPU engine (``lcr._native``,
device="cpu"), the CUDA kernels (``lcr._cuda``, device="cuda", on the current stream of
the cache's device) and those same kernels compiled for the host and run on a model of
32-lane warps (``lcr._native.warp_model``, device="cpu", engine="warp-model"), which is
how CI checks the GPU's decisions without a GPU. Engines take raw data pointers, so the
native builds never link libtorch.

A batch is served in two steps so that a failing backing store leaves the cache as it
was: ``find`` (read only) probes every lookup and reads back the misses, the one
device-to-host synchronisation of a batch; once their rows are fetched, ``commit``
refreshes the hits, inserts the misses, writes their rows and points every lookup at
the row that serves it (``BatchPlan.slot_of`` into ``rows``), so the pooled sums are a
single ``embedding_bag``.

Concurrency: every call holds ``cache.lock`` on the host and, on a GPU, is ordered on the
device after the cache's previous call whatever stream either ran on (a cache-owned event
that each call waits on first and records last), so batches from several threads and
streams are served one after the other on the device as well. A plan is valid until the
next ``commit``: committing a stale plan, or one twice, raises ``StalePlan``.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass

import numpy as np
import torch

from lcr.embedding.reference import BYPASSED, HIT, INSERTED, SLABSET_SLOTS
from lcr.embedding.slab_policies import SlabPolicyChoice, parse_slab_policy

RECORD_WORDS = 8192 // 64
READBACK_MISSES = 1024  # misses read back with the count; more cost a second read
ENGINES = ("native", "warp-model", "cuda")
_DTYPES = {"float32": torch.float32, "float16": torch.float16,
           torch.float32: torch.float32, torch.float16: torch.float16}


class SlabMetadata:
    """The per-slot and per-slabset arrays of docs/embedding.md, on one device."""

    def __init__(self, num_slabsets: int, device: torch.device):
        slots = num_slabsets * SLABSET_SLOTS
        self.keys = torch.full((slots,), -1, dtype=torch.int64, device=device)
        self.tags = torch.zeros(slots, dtype=torch.uint8, device=device)
        self.stamps = torch.zeros(slots, dtype=torch.int64, device=device)
        self.predictions = torch.full((slots,), float("inf"), dtype=torch.float64, device=device)
        self.old = torch.zeros(slots, dtype=torch.uint8, device=device)
        self.lambda_shift = torch.zeros(num_slabsets, dtype=torch.int32, device=device)
        self.old_count = torch.zeros(num_slabsets, dtype=torch.int32, device=device)
        self.record = torch.zeros(num_slabsets * RECORD_WORDS, dtype=torch.int64, device=device)

    def engine_view(self, num_slabsets: int, policy: SlabPolicyChoice) -> tuple:
        """The tuple ``slab_table_from`` (csrc/common/slab_table_py.h) reads."""
        return (self.keys.data_ptr(), self.tags.data_ptr(), self.stamps.data_ptr(),
                self.predictions.data_ptr(),
                self.old.data_ptr(), self.lambda_shift.data_ptr(), self.old_count.data_ptr(),
                self.record.data_ptr(), num_slabsets, *policy.engine_args())


@dataclass
class BatchPlan:
    """What ``find`` learned about a batch of N lookups (M distinct keys missing)."""

    indices: torch.Tensor        # int64 [N] on the cache's device: the looked-up keys
    slot_of: torch.Tensor        # int64 [N]: slot serving each lookup, -1 for misses until commit
    missing_keys: torch.Tensor   # int64 [M] on the host, in order of first lookup
    # The rest are numpy arrays, or tensors on the device when READBACK_MISSES are exceeded:
    missing_first: np.ndarray    # int64 [M]: position of each missing key's first lookup
    miss_lookups: np.ndarray     # int64: positions of every lookup that missed
    miss_inverse: np.ndarray     # int64: for each of those, its index in missing_keys
    overlapped: object = None    # what find's ``overlap`` returned
    missing_on_device: torch.Tensor | None = None  # missing_keys where they were found
    epoch: int = -1              # the cache's commit count at find; stale once it moves on
    owner: object = None         # the token of the cache that found it


class StalePlan(ValueError):
    """``commit`` got a plan the cache has moved on from (another commit came between its
    ``find`` and this commit, or it was committed already) or a plan of another cache.
    Its slots may have been evicted and refilled since: committing it would point lookups
    at other keys' rows and insert its misses twice."""


@dataclass
class _StagedMisses:
    """Everything ``commit`` allocates for a batch's misses, made before the cache changes,
    so that running out of memory leaves the cache as it was."""

    arrays: tuple                 # the insert plan (keys, first lookups, members, group starts)
    groups: int
    slots: torch.Tensor           # int64 [M], filled by the insert
    evicted: torch.Tensor         # int64 [M], filled by the insert
    bypassed: torch.Tensor        # bool [M]
    bypass_count: torch.Tensor    # int64 [1]
    scratch: torch.Tensor         # int64 [M]: the scratch row of each missing key
    serving: torch.Tensor         # int64 [M]: the row serving each missing key
    rows: torch.Tensor | None     # [M, dim] in the cache's dtype, on its device
    lookups: torch.Tensor         # int64: positions of the lookups that missed
    inverse: torch.Tensor         # int64: each such lookup's index among the missing keys
    lookup_slots: torch.Tensor    # int64: the row serving each such lookup


@dataclass
class CommitResult:
    slots: torch.Tensor    # int64 [M]: slot taken by each missing key, -1 when bypassed
    evicted: torch.Tensor  # int64 [M]: key each insertion evicted, -1 when none


@dataclass
class BatchResult:
    """Per distinct key of a batch, in order of first lookup (``SlabHashCache.access``)."""

    keys: torch.Tensor     # int64 [U]
    slots: torch.Tensor    # int64 [U]: slot serving each key, -1 when bypassed
    evicted: torch.Tensor  # int64 [U]: key evicted by each insertion, -1 when none
    outcome: torch.Tensor  # int8 [U]: HIT, INSERTED or BYPASSED


class _Engine:
    """The slab_* functions of one engine module; all share the signatures of
    csrc/cuda/slab_cache_py.cpp (stream and device are ignored off the GPU)."""

    def __init__(self, kind: str, device: torch.device):
        if kind == "cuda":
            from lcr.cuda import cuda_module
            self.module = cuda_module()
        else:
            from lcr import _native
            self.module = _native.warp_model if kind == "warp-model" else _native
        self.device = device
        self.on_gpu = device.type == "cuda"
        self.index = device.index if self.on_gpu else 0

    def check_policy(self, policy: SlabPolicyChoice) -> None:
        """Refuse a module built with another slab policy enum than the registry's."""
        exported = getattr(self.module, "slab_policy_ids", dict)  # missing: built before the registry
        built = exported().get(policy.name)
        if built != policy.policy.engine_id:
            found = "lacks it" if built is None else f"numbers it {built}"
            raise RuntimeError(f"slab policy {policy.name!r} is {policy.policy.engine_id} in the registry but "
                               f"{self.module.__name__} {found}: rebuild lcr's native modules")

    def stream(self) -> int:
        return torch.cuda.current_stream(self.device).cuda_stream if self.on_gpu else 0

    def probe(self, view, keys, slot_of, readback):
        self.module.slab_probe(view, keys.data_ptr(), keys.numel(), slot_of.data_ptr(),
                               readback.data_ptr(), self.stream(), self.index)

    def refresh(self, view, slot_of, clock, hit_count):
        self.module.slab_refresh(view, slot_of.data_ptr(), slot_of.numel(), clock,
                                 hit_count.data_ptr(), self.stream(), self.index)

    def insert_groups(self, view, plan_arrays, groups, clock, stamp_base, slots, evicted):
        keys, first, members, starts = plan_arrays
        self.module.slab_insert_groups(view, keys.data_ptr(), first.data_ptr(), members.data_ptr(),
                                       starts.data_ptr(), groups, clock, stamp_base,
                                       slots.data_ptr(), evicted.data_ptr(), self.stream(),
                                       self.index)

    def set_predictions(self, view, keys, values):
        self.module.slab_set_predictions(view, keys.data_ptr(), values.data_ptr(), keys.numel(),
                                         self.stream(), self.index)

    def gather(self, rows: torch.Tensor, slot_of: torch.Tensor) -> torch.Tensor:
        """[N, dim]: the row at each slot, zeros where the slot is -1."""
        if not self.on_gpu:
            out = rows.index_select(0, slot_of.clamp(min=0))
            out[slot_of < 0] = 0
            return out
        # torch's index_select moves rows of a few bytes one element per thread: several
        # times slower than this kernel's 16-byte pieces (benchmarks/slabhash_gpu.py).
        out = torch.empty(slot_of.numel(), rows.shape[1], dtype=rows.dtype, device=rows.device)
        self.module.slab_gather(rows.data_ptr(), rows.shape[1] * rows.element_size(),
                                slot_of.data_ptr(), slot_of.numel(), out.data_ptr(), self.stream(),
                                self.index)
        return out

    def slabsets_of(self, keys: torch.Tensor, num_slabsets: int) -> torch.Tensor:
        """int64 slabset of each key, on the keys' device."""
        if not self.on_gpu:
            from lcr import _native
            return torch.from_numpy(_native.slabsets_of(keys.numpy(), num_slabsets).astype(np.int64))
        out = torch.empty(keys.numel(), dtype=torch.int32, device=keys.device)
        self.module.slabsets_of_device(keys.data_ptr(), keys.numel(), num_slabsets, out.data_ptr(),
                                       self.stream(), self.index)
        return out.long()


def _first_occurrences(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct ``keys`` in order of first occurrence, the index of each one's first
    occurrence, and for each element the position of its key among the distinct ones."""
    values, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return values[order], first[order], rank[inverse.reshape(-1)]


def unique_in_order(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct values of ``keys`` in order of first occurrence, and for each element
    of ``keys`` the position of its value among them (on the host)."""
    values, _, inverse = _first_occurrences(torch.as_tensor(keys).cpu().numpy())
    return torch.from_numpy(values), torch.from_numpy(inverse)


ROW_DTYPES = (torch.float32, torch.float16)


def row_ids(values, name: str) -> torch.Tensor:
    """``values`` as a flat int64 tensor of row ids (on their device), refusing what
    would change on the way: floats and booleans (truncated), values outside int64.
    Raises ``TypeError`` or ``ValueError`` with one line naming ``name``."""
    try:
        tensor = torch.as_tensor(values)
    except (OverflowError, RuntimeError, TypeError, ValueError) as err:
        raise ValueError(f"{name} must be integer row ids within int64: "
                         f"{str(err).splitlines()[0]}") from None
    if tensor.numel() == 0:  # [] reads as float32: no values, nothing to refuse
        return tensor.to(torch.int64).flatten()
    if tensor.dtype == torch.bool or tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        raise TypeError(f"{name} must be integers, got {tensor.dtype}")
    if tensor.dtype == torch.uint64 and tensor.numel() and bool((tensor.view(torch.int64) < 0).any()):
        raise ValueError(f"{name} must lie within int64")  # uint64 at or above 2^63
    return tensor.to(torch.int64).flatten()


def _retire(tensor: torch.Tensor, stream) -> None:
    """Keep the allocator from reusing ``tensor``'s memory before ``stream`` (which waited
    for every earlier call of the cache, on any stream) has passed this point."""
    if stream is not None:
        tensor.record_stream(stream)


def _adopt(plan: BatchPlan, stream) -> None:
    """A plan found on one stream and used on another: its device tensors must live
    until that stream is done with them."""
    if stream is not None:
        for tensor in (plan.indices, plan.slot_of):
            tensor.record_stream(stream)


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

    policy: a slab policy registered in ``lcr.embedding.slab_policies``, as ``NAME`` or
    ``NAME:OPTION=VALUE;...`` (e.g. ``hf:window=8``). Keys are non-negative int64 row ids.
    engine: "native" (device="cpu"), "cuda" (device="cuda", the default there) or
    "warp-model" (device="cpu": the CUDA kernels on the host warp model, for tests).

    Thread and stream safety: a cache may be shared between threads and CUDA streams.
    Every method that reads or changes it holds ``cache.lock`` (re-entrant) and, on a GPU,
    queues its work after the cache's previous call on whatever stream that ran
    (``ordered()``); ``lcr.sls`` holds both for a whole batch, so concurrent batches are
    served one after the other, on the host and on the device, never interleaved. A plan
    from ``find`` is valid until the next ``commit`` (``StalePlan`` otherwise).
    """

    def __init__(self, num_slabsets: int, dim: int, dtype="float32", policy: str | SlabPolicyChoice = "lru",
                 device="cpu", engine: str | None = None):
        if num_slabsets < 1:
            raise ValueError(f"num_slabsets must be at least 1, got {num_slabsets}")
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        policy = parse_slab_policy(policy)
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {device!r}")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        engine = engine or ("cuda" if self.device.type == "cuda" else "native")
        if engine not in ENGINES or (engine == "cuda") != (self.device.type == "cuda"):
            raise ValueError(f"engine {engine!r} does not run on {self.device.type}; "
                             f"valid: native or warp-model on cpu, cuda on cuda")
        self.num_slabsets, self.dim, self.policy = int(num_slabsets), int(dim), policy
        self.dtype = _DTYPES[dtype]
        self.engine, self.engine_name = _Engine(engine, self.device), engine
        self.engine.check_policy(policy)
        self.lock = threading.RLock()
        self._epoch = 0           # commits so far: a plan found before the last one is stale
        self._token = object()    # marks this cache's plans
        # Recorded at the end of every call on the stream it ran on; the next call's stream
        # waits for it, so calls on different streams never overlap on the device.
        self._order = torch.cuda.Event() if self.device.type == "cuda" else None
        self.meta = SlabMetadata(self.num_slabsets, self.device)
        # Values by slot, then scratch rows where a batch's bypassed misses are served from.
        self.rows = torch.zeros(self.capacity, self.dim, dtype=self.dtype, device=self.device)
        self._view = self.meta.engine_view(self.num_slabsets, policy)
        self.clock = 0
        self._hits = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._bypassed = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._misses = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._readback = torch.zeros(2, dtype=torch.int64, device=self.device)
        self._no_slots = torch.empty(0, dtype=torch.int64, device=self.device)
        self._host_readback = torch.zeros(2 + 2 * READBACK_MISSES, dtype=torch.int64,
                                          pin_memory=self.engine.on_gpu)
        self._host_view = self._host_readback.numpy()
        self._copied = torch.cuda.Event() if self.engine.on_gpu else None
        self.readbacks = 0  # device-to-host reads of the miss list (one per batch, usually)

    @property
    def capacity(self) -> int:
        return self.num_slabsets * SLABSET_SLOTS

    @property
    def values(self) -> torch.Tensor:
        """[capacity, dim]: the row cached in each slot."""
        return self.rows[:self.capacity]

    @classmethod
    def for_capacity(cls, rows: int, dim: int, **kwargs) -> "SlabHashCache":
        """A cache holding at least ``rows`` rows (rounded up to whole slabsets)."""
        return cls(max(1, -(-int(rows) // SLABSET_SLOTS)), dim, **kwargs)

    @contextlib.contextmanager
    def ordered(self):
        """Hold the cache for a sequence of calls: its lock and, on a GPU, the device order
        (the current stream first waits for the cache's previous call on any stream; the
        next call waits for everything queued here). Yields the current stream, or None
        off the GPU. Re-entrant; ``lcr.sls`` holds it for a whole batch."""
        with self.lock:
            if self._order is None:
                yield None
                return
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(self._order)  # a never-recorded event is complete: no wait
            try:
                yield stream
            finally:
                self._order.record(stream)

    # -- the two steps of a batch ---------------------------------------------------------
    def find(self, keys, overlap=None) -> BatchPlan:
        """Locate every lookup and read the misses back to the host. Changes nothing.

        ``overlap(slot_of)``, when given, is called after the probe is queued and before
        the read-back waits for it, so that its device work overlaps the wait; its result
        is ``plan.overlapped`` (``slot_of`` is -1 for misses there).
        """
        with self.ordered() as stream:
            keys = self._keys_tensor(keys)
            n = keys.numel()
            slot_of = torch.empty_like(keys)
            if self._readback.numel() < 2 + 2 * n:
                _retire(self._readback, stream)
                self._readback = torch.empty(2 + 2 * n, dtype=torch.int64, device=self.device)
            self.engine.probe(self._view, keys, slot_of, self._readback)
            overlapped = overlap(slot_of) if overlap is not None else None
            count = self._read_miss_count(n)
            none = np.empty(0, dtype=np.int64)
            if count == 0:  # all hits: nothing to sort out on the host
                return BatchPlan(keys, slot_of, torch.from_numpy(none), none, none, none,
                                 overlapped, epoch=self._epoch, owner=self._token)
            if count > READBACK_MISSES:  # many misses: sort them out on the device
                return self._many_misses(keys, slot_of, count, overlapped)
            misses = self._host_view[2:2 + 2 * count].reshape(count, 2)
            order = np.argsort(misses[:, 0])
            positions, miss_keys = misses[order, 0], misses[order, 1]
            missing, first, inverse = _first_occurrences(miss_keys)
            return BatchPlan(keys, slot_of, torch.from_numpy(missing), positions[first],
                             positions, inverse, overlapped, epoch=self._epoch, owner=self._token)

    def gather(self, plan: BatchPlan) -> torch.Tensor:
        """[N, dim]: the cached row of every lookup of ``plan``, zeros for its misses
        (after ``find``) or every row that serves it (after ``commit``)."""
        with self.ordered() as stream:
            _adopt(plan, stream)
            return self.engine.gather(self.rows, plan.slot_of)

    def _read_miss_count(self, n: int) -> int:
        """Copy the probe's miss count and its first READBACK_MISSES entries to the host:
        the batch's one synchronisation on a GPU."""
        head = 2 + 2 * min(n, READBACK_MISSES)
        self._host_readback[:head].copy_(self._readback[:head], non_blocking=True)
        if self.engine.on_gpu:
            self._copied.record(torch.cuda.current_stream(self.device))
            self._copied.synchronize()
        self.readbacks += 1
        if self._host_view[1]:
            raise ValueError("keys must be non-negative row ids")
        return int(self._host_view[0])

    def _many_misses(self, keys, slot_of, count: int, overlapped) -> BatchPlan:
        """The plan with its miss fields computed with torch on the cache's device (first
        occurrences by scatter-min of positions); only the missing keys come back."""
        entries = self._readback[2:2 + 2 * count].view(count, 2)
        positions, missed = entries[:, 0], entries[:, 1]
        distinct, inverse = torch.unique(missed, return_inverse=True)
        first = torch.full_like(distinct, keys.numel()).scatter_reduce_(0, inverse, positions,
                                                                        reduce="amin")
        first, order = torch.sort(first)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=self.device)
        missing = distinct[order]
        self.readbacks += 1
        return BatchPlan(keys, slot_of, self._to_host(missing), first, positions.contiguous(),
                         rank[inverse], overlapped, missing_on_device=missing,
                         epoch=self._epoch, owner=self._token)

    def _to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy on the host, through pinned memory (a pageable copy is several times slower)."""
        if not self.engine.on_gpu:
            return tensor
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        self._copied.record(torch.cuda.current_stream(self.device))
        self._copied.synchronize()
        return host

    def commit(self, plan: BatchPlan, miss_rows: torch.Tensor | None = None) -> CommitResult:
        """Refresh hits, insert misses and, given their rows ([M, dim], any device,
        float32 or float16), write them and point ``plan.slot_of`` at the row serving every
        lookup. Nothing changes unless the whole commit can be made: wrong rows raise
        ``ValueError``, a plan the cache has moved on from raises ``StalePlan``, and every
        allocation (scratch rows, the insert plan, the rows on the device) comes before
        the first change, so running out of memory leaves the cache as it was."""
        check_rows(miss_rows, int(plan.missing_keys.numel()), self.dim)
        with self.ordered() as stream:
            self._check_current(plan)
            _adopt(plan, stream)
            n, count, clock = plan.indices.numel(), plan.missing_keys.numel(), self.clock
            staged = self._stage_misses(plan, miss_rows, stream) if count else None
            # Everything is allocated: from here on only the cache's state changes.
            self.engine.refresh(self._view, plan.slot_of, clock, self._hits)
            # All hits is the common case: nothing more to queue.
            result = (self._insert_misses(plan, staged, clock) if count else
                      CommitResult(self._no_slots, self._no_slots))
            self.clock = clock + 2 * n
            self._misses += count  # a host int into a device counter: no synchronisation
            self._epoch += 1
            return result

    def _check_current(self, plan: BatchPlan) -> None:
        if plan.owner is not self._token:
            raise StalePlan("this plan was found by another cache")
        if plan.epoch != self._epoch:
            raise StalePlan(f"stale plan: found at commit {plan.epoch}, the cache is at commit "
                            f"{self._epoch} (another batch was committed after its find, or it "
                            f"was committed already); call find again")

    def _stage_misses(self, plan: BatchPlan, miss_rows, stream) -> _StagedMisses:
        """Allocate and fill everything the insert needs; changes nothing."""
        count = plan.missing_keys.numel()
        arrays, groups = self._insert_plan(plan)
        rows = None
        if miss_rows is not None:
            self._reserve_scratch(count, stream)
            rows = miss_rows.to(self.device, self.dtype, non_blocking=True)
        lookups = self._to_device(plan.miss_lookups)
        new = functools.partial(torch.empty, dtype=torch.int64, device=self.device)
        return _StagedMisses(
            arrays, groups, slots=new(count), evicted=new(count),
            bypassed=torch.empty(count, dtype=torch.bool, device=self.device),
            bypass_count=new(1),
            # Bypassed keys are served from scratch rows past the slots.
            scratch=self.capacity + torch.arange(count, device=self.device),
            serving=new(count), rows=rows, lookups=lookups,
            inverse=self._to_device(plan.miss_inverse), lookup_slots=new(lookups.numel()))

    def _insert_misses(self, plan: BatchPlan, staged: _StagedMisses, clock: int) -> CommitResult:
        """Insert the batch's missing keys, write their rows, point their lookups at them;
        allocates nothing."""
        st, n = staged, plan.indices.numel()
        self.engine.insert_groups(self._view, st.arrays, st.groups, clock, clock + n, st.slots,
                                  st.evicted)
        torch.lt(st.slots, 0, out=st.bypassed)
        torch.sum(st.bypassed, dim=0, keepdim=True, dtype=torch.int64, out=st.bypass_count)
        self._bypassed.add_(st.bypass_count)
        torch.where(st.bypassed, st.scratch, st.slots, out=st.serving)
        if st.rows is not None:
            self.rows.index_copy_(0, st.serving, st.rows)
        torch.index_select(st.serving, 0, st.inverse, out=st.lookup_slots)
        plan.slot_of.index_copy_(0, st.lookups, st.lookup_slots)
        return CommitResult(st.slots, st.evicted)

    def _insert_plan(self, plan: BatchPlan):
        """The missing keys grouped by slabset (batch order inside a group), on the device."""
        m = plan.missing_keys.numel()
        if plan.missing_on_device is not None:  # many misses: group on the device
            keys = plan.missing_on_device
            homes = self.engine.slabsets_of(keys, self.num_slabsets)
            members = torch.sort(homes, stable=True)[1]
            ordered = homes[members]
            change = torch.ones(m, dtype=torch.bool, device=self.device)
            change[1:] = ordered[1:] != ordered[:-1]
            starts = torch.cat([torch.nonzero(change).flatten(),
                                torch.tensor([m], device=self.device)])
            return (keys, plan.missing_first, members, starts), starts.numel() - 1
        from lcr import _native
        keys = plan.missing_keys.numpy()
        homes = _native.slabsets_of(keys, self.num_slabsets).astype(np.int64)
        members = np.argsort(homes, kind="stable")
        ordered = homes[members]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        packed = self._to_device(np.concatenate([keys, plan.missing_first, members, starts,
                                                 [m]]).astype(np.int64))
        return (packed[:m], packed[m:2 * m], packed[2 * m:3 * m], packed[3 * m:]), len(starts)

    def _to_device(self, array) -> torch.Tensor:
        if isinstance(array, torch.Tensor):
            return array
        tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
        if not self.engine.on_gpu:
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _reserve_scratch(self, count: int, stream=None) -> None:
        if self.rows.shape[0] - self.capacity >= count:
            return
        grown = torch.zeros(self.capacity + max(count, 2 * (self.rows.shape[0] - self.capacity)),
                            self.dim, dtype=self.dtype, device=self.device)
        grown[:self.capacity] = self.values
        _retire(self.rows, stream)
        self.rows = grown

    def access(self, keys) -> BatchResult:
        """One batch without values (tests, simulations): find, commit, and the outcome
        per distinct key in order of first lookup."""
        with self.ordered():
            plan = self.find(keys)
            found = plan.slot_of.cpu().numpy().copy()
            result = self.commit(plan)
            keys, first, _ = _first_occurrences(plan.indices.cpu().numpy())
            slots, evicted = found[first], np.full(len(keys), -1, dtype=np.int64)
            outcome = np.full(len(keys), HIT, dtype=np.int8)
            missed = np.searchsorted(first, torch.as_tensor(plan.missing_first).cpu().numpy())
            miss_slots = result.slots.cpu().numpy()
            slots[missed] = miss_slots
            evicted[missed] = result.evicted.cpu().numpy()
            outcome[missed] = np.where(miss_slots >= 0, INSERTED, BYPASSED)
            return BatchResult(*(torch.from_numpy(a) for a in (keys, slots, evicted, outcome)))

    def set_predictions(self, keys, values) -> None:
        """Predicted next-access times for cached keys (others are ignored; NaN: unknown).
        A key given more than once keeps its last value. Keys given on the host are
        deduplicated there and copied over without a synchronisation; keys on a GPU are
        deduplicated there, which synchronises once (``torch.unique``)."""
        with self.ordered():
            keys = row_ids(keys, "keys")
            values = torch.as_tensor(values, dtype=torch.float64).flatten()
            if values.numel() != keys.numel():
                raise ValueError(f"{keys.numel()} keys but {values.numel()} predictions")
            # Kernels run one warp per key in no set order: give each key one value.
            if keys.device.type == "cpu":
                if keys.numel() and int(keys.min()) < 0:
                    raise ValueError("keys must be non-negative row ids")
                # np.unique over the reversed keys finds each key's last position.
                distinct, from_end = np.unique(keys.numpy()[::-1], return_index=True)
                values = values.cpu()[torch.from_numpy(keys.numel() - 1 - from_end)]
                distinct = torch.from_numpy(distinct)
                if self.device.type == "cuda":  # pinned, so that the copies queue without waiting
                    distinct, values = distinct.pin_memory(), values.pin_memory()
            else:
                distinct, inverse = torch.unique(keys, return_inverse=True)
                last = torch.zeros_like(distinct).scatter_reduce_(
                    0, inverse, torch.arange(keys.numel(), device=keys.device), reduce="amax")
                values = values.to(keys.device)[last]
            distinct = distinct.to(self.device, non_blocking=True).contiguous()
            values = values.to(self.device, non_blocking=True).contiguous()
            self.engine.set_predictions(self._view, distinct, values)

    # -- inspection -----------------------------------------------------------------------
    @property
    def hits(self) -> int:
        """Distinct keys found cached, summed over batches (reads the device counter)."""
        with self.ordered():
            return int(self._hits)

    @property
    def misses(self) -> int:
        """Distinct keys found missing, summed over batches (reads the device counter)."""
        with self.ordered():
            return int(self._misses)

    @property
    def bypassed(self) -> int:
        """Distinct missing keys served without being cached, summed over batches."""
        with self.ordered():
            return int(self._bypassed)

    def reset_stats(self) -> None:
        with self.ordered():
            self._hits.zero_()
            self._bypassed.zero_()
            self._misses.zero_()

    def cached_keys(self) -> set[int]:
        keys = self.meta.keys.cpu()
        return set(keys[keys >= 0].tolist())

    @property
    def hit_ratio(self) -> float:
        hits = self.hits
        served = hits + self.misses
        return hits / served if served else 0.0

    def _keys_tensor(self, keys) -> torch.Tensor:
        keys = row_ids(keys, "keys")
        if keys.device.type == "cpu" and keys.numel() and int(keys.min()) < 0:
            raise ValueError("keys must be non-negative row ids")
        return keys.to(self.device, non_blocking=True).contiguous()

    def __repr__(self) -> str:
        return (f"SlabHashCache(num_slabsets={self.num_slabsets}, dim={self.dim}, "
                f"dtype={self.dtype}, policy={str(self.policy)!r}, device={str(self.device)!r}, "
                f"engine={self.engine_name!r})")
