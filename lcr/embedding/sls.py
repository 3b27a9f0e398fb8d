"""SparseLengthsSum through a SlabHashCache: per sample, the pooled rows of its bag.

``lcr.sls`` takes the arguments of ``torch.nn.functional.embedding_bag`` (1-D indices with
offsets, or 2-D indices, one bag per row; ``mode``; ``per_sample_weights``;
``include_last_offset``) or lcr's SparseLengthsSum form (``lengths``), refuses exactly what
embedding_bag refuses (``read_bags``), and returns the tensor embedding_bag returns on the
full table. Where embedding_bag (torch 2.13, CPU) contradicts its documentation and its own
sum mode, lcr.sls follows them: decreasing offsets are refused in max mode too, a last
offset short of the indices ends the last bag in mean and max mode too, and max with no
bag answers [0, dim] (embedding_bag crashes); tests/test_sls_validation.py states each.

Stages (timed when ``timings`` is given, each closed by a device sync on CUDA):
  query   check the arguments, deduplicate the batch and locate its keys in the cache
          (reads only)
  fetch   read the missing rows from the backing store
  insert  refresh hits, insert misses, write their rows into cache slots (and the rows
          of bypassed misses into scratch rows past them)
  reduce  one ``embedding_bag`` over those rows (queued during ``query`` already, and
          used as is when the batch had no miss)
Then, when a ``predictor`` is given, the batch's keys get fresh predictions.

A cache running the CUDA kernels (engine cuda, or warp-model in tests) over a ``HostStore``
with ``mode="sum"`` takes the fused path instead (``lcr.embedding.fused``): one call, two
kernels, no host synchronisation, the same sums and the same cache state; its one stage
is timed as ``fused``.
Refused arguments, a store failure, or rows of the wrong shape or dtype raise before
``insert``, so the cache is left exactly as it was.
"""
from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from lcr.embedding.cache import SlabHashCache, check_rows
from lcr.embedding.stores import StoreError

STAGES = ("query", "fetch", "insert", "reduce")
MODES = ("sum", "mean", "max")
INDEX_DTYPES = (torch.int32, torch.int64)  # what embedding_bag reads indices and offsets as


@dataclass
class Bags:
    """A batch of bags as ``embedding_bag`` reads it (``read_bags``)."""

    lookups: torch.Tensor              # int64 [N] on the device: the indices some bag reads
    host_lookups: torch.Tensor | None  # the same on the host, when they were given there
    shape: tuple                       # of those indices as embedding_bag takes them
    offsets: torch.Tensor | None       # int64 on the device (None: 2-D indices)
    include_last_offset: bool
    mode: str
    per_sample_weights: torch.Tensor | None
    rules: "_ValueRules"

    def reduce(self, slot_of: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """embedding_bag over ``rows`` with each lookup replaced by the row serving it."""
        return F.embedding_bag(slot_of.clamp(min=0).view(self.shape), rows, self.offsets,
                               mode=self.mode, per_sample_weights=self.per_sample_weights,
                               include_last_offset=self.include_last_offset)

    def check(self) -> None:
        """Raise the refusal of values checked on the device, if any (a no-op otherwise)."""
        self.rules.check()


def read_bags(indices, offsets=None, lengths=None, include_last_offset=False, mode="sum",
              per_sample_weights=None, *, rows: int | None = None, dtype=torch.float32,
              device="cpu", defer: bool | None = None, reader_checks: bool = False) -> Bags:
    """Check the arguments of one batch as ``embedding_bag`` checks them and put them on
    ``device``. ``rows``: the table's row count, when known (indices must lie below it);
    ``dtype``: the rows' dtype (``per_sample_weights`` must have it).

    Refusals, each one line naming the argument: ``TypeError`` for types and dtypes
    (indices with offsets or lengths must promote to int32 or int64, as in embedding_bag,
    so bool or uint8 indices pass with int64 offsets and floats never do), ``ValueError``
    for shapes and values (offsets start at 0, never decrease, end within the indices;
    lengths are non-negative and add up to the indices), ``IndexError`` for indices outside
    [0, rows). Indices past the last offset (``include_last_offset``), or with no bag at all,
    are read by no bag: they are neither checked nor looked up, as in embedding_bag.

    Values of tensors on a GPU are checked without a synchronisation: ``defer`` (the
    default there) copies what the rules read to the host asynchronously, and
    ``Bags.check()`` raises once the stream has passed the copy; meanwhile ``offsets`` are
    made monotone within the lookups, so a reduce queued before the check cannot read out
    of bounds. ``include_last_offset`` with offsets on a GPU is checked at once instead, at
    the cost of synchronisations: the last offset decides which indices are looked up.

    ``reader_checks``: the batch's reader is the fused kernel, which clamps each bag into
    the batch itself and gathers the facts of the indices and the offsets as it serves
    the batch (csrc/common/slab_fused.h, kLowestBadKey...), so a deferred check launches
    nothing of its own for them (on an H100, ~8 small launches and a prefix maximum over
    the offsets: 0.18 ms at 65,536 bags); the reader then calls ``rules.start(facts)``.
    """
    indices, offsets, lengths, weights, shape = _checked_arguments(
        indices, offsets, lengths, include_last_offset, mode, per_sample_weights, dtype)
    include_last_offset = include_last_offset and offsets is not None
    on_host = all(t.device.type == "cpu" for t in (indices, offsets, lengths) if t is not None)
    where = torch.device("cpu") if on_host else torch.device(device)
    flat = indices.to(where, torch.int64).flatten()
    offsets, lengths = (None if t is None else t.to(where, torch.int64) for t in (offsets, lengths))
    n = flat.numel()
    defer = where.type == "cuda" if defer is None else defer
    rules = _ValueRules(n, rows)
    from_reader = reader_checks and defer and not include_last_offset
    rules.add(_bound_facts(None if from_reader else offsets, lengths))
    if include_last_offset:  # the last offset decides which indices are read: check now
        used, defer = rules.check()["last"], False
    else:
        used = 0 if offsets is not None and not offsets.numel() else n
    if used != n:
        flat, shape = flat[:used], (used,)
    if weights is not None:
        weights = weights.flatten()[:used].view(shape)
    if from_reader:
        rules.reader = "offsets" if offsets is not None else "indices"
    else:
        rules.add(_index_facts(flat))
        if defer:
            rules.start()
        else:
            rules.check()
    if lengths is not None:  # from here on the starts of the bags
        offsets = torch.cumsum(lengths, 0) - lengths
    if defer and offsets is not None and not from_reader:  # read before the check
        offsets = offsets.clamp(0, n).cummax(0).values
    device = torch.device(device)
    moved = [None if t is None else t.to(device, non_blocking=True) for t in (flat, offsets, weights)]
    return Bags(moved[0], flat if on_host else None, shape, moved[1], include_last_offset, mode,
                moved[2], rules)


def _checked_arguments(indices, offsets, lengths, include_last_offset, mode, weights, dtype):
    """The arguments as tensors, their types, dtypes and shapes checked (no values read)."""
    if not isinstance(include_last_offset, bool):
        raise TypeError(f"include_last_offset must be a bool, got {type(include_last_offset).__name__}")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    indices = _tensor(indices, "indices")
    offsets = None if offsets is None else _tensor(offsets, "offsets")
    lengths = None if lengths is None else _tensor(lengths, "lengths")
    weights = None if weights is None else _tensor(weights, "per_sample_weights")
    shape = _check_form(indices, offsets, lengths, include_last_offset)
    bounds = {name: t for name, t in (("offsets", offsets), ("lengths", lengths)) if t is not None}
    _check_index_dtypes({"indices": indices, **bounds})
    if weights is not None:
        _check_weights(weights, indices, mode, dtype)
    return indices, offsets, lengths, weights, shape


def _tensor(value, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise TypeError(f"{name} must be a tensor or an array: {str(err).splitlines()[0]}") from None


def _check_form(indices, offsets, lengths, include_last_offset) -> tuple:
    """The shape embedding_bag pools: 1-D indices with offsets (or lengths), or 2-D."""
    if indices.dim() == 2:
        if offsets is not None or lengths is not None:
            raise ValueError("2-D indices are one bag per row: give neither offsets nor lengths")
        if indices.shape[1] == 0:
            raise ValueError(f"indices: a 2-D batch needs at least one index per bag, got shape "
                             f"{tuple(indices.shape)}")
        return tuple(indices.shape)
    if indices.dim() != 1:
        raise ValueError(f"indices must be 1-D (with offsets or lengths) or 2-D (a bag per row), "
                         f"got {indices.dim()}-D")
    if (offsets is None) == (lengths is None):
        raise ValueError("with 1-D indices, give exactly one of offsets and lengths")
    name, bounds = ("offsets", offsets) if offsets is not None else ("lengths", lengths)
    if bounds.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(bounds.shape)}")
    if include_last_offset and lengths is not None:
        raise ValueError("include_last_offset applies to offsets, not to lengths")
    if include_last_offset and not offsets.numel():
        raise ValueError("offsets: include_last_offset needs at least one offset (the end of "
                         "the last bag)")
    return tuple(indices.shape)


def _check_index_dtypes(tensors: dict[str, torch.Tensor]) -> None:
    """embedding_bag reads indices and offsets in their promoted dtype: int32 or int64.
    Lengths stand for offsets: the same rule."""
    try:
        common = functools.reduce(torch.promote_types, (t.dtype for t in tensors.values()))
    except RuntimeError:  # uint16/32/64 do not promote
        common = None
    if common not in INDEX_DTYPES:
        given = " and ".join(f"{name} ({t.dtype})" for name, t in tensors.items())
        raise TypeError(f"{given} must be integers that promote to int32 or int64, as "
                        f"embedding_bag reads them")


def _check_weights(weights, indices, mode, dtype) -> None:
    if weights.shape != indices.shape:
        raise ValueError(f"per_sample_weights must have the shape of indices "
                         f"{tuple(indices.shape)}, got {tuple(weights.shape)}")
    if mode != "sum":
        raise ValueError(f"per_sample_weights need mode='sum', got mode={mode!r}")
    if weights.dtype != dtype:
        raise TypeError(f"per_sample_weights must have the rows' dtype {dtype}, got {weights.dtype}")


def _bound_facts(offsets, lengths) -> dict[str, torch.Tensor]:
    """0-d tensors the rules on offsets or lengths read (no synchronisation)."""
    facts = {}
    if offsets is not None and offsets.numel():
        facts.update(first=offsets[0], last=offsets[-1],
                     falls=(offsets[1:] < offsets[:-1]).sum())  # compares: no int64 overflow
    if lengths is not None:
        facts["total"] = lengths.sum()
        if lengths.numel():
            facts["shortest"], facts["longest"] = torch.aminmax(lengths)
    return facts


def _index_facts(flat: torch.Tensor) -> dict[str, torch.Tensor]:
    if not flat.numel():
        return {}
    lowest, highest = torch.aminmax(flat)
    return {"lowest": lowest, "highest": highest}


class _ValueRules:
    """The rules of ``read_bags`` on values, applied to facts (0-d tensors on the data's
    device): ``check`` reads them (one synchronisation on a GPU) and raises; or ``start``
    copies them to pinned host memory behind an event, and ``check`` raises once the
    stream has passed it (after find's read-back it has: no wait). With ``reader`` set
    ("offsets" or "indices": which of them the reader saw as given), ``start(facts)`` also
    takes the reader's facts (``READER_FACTS``, in that order)."""

    READER_FACTS = ("lowest_bad", "highest_bad", "falls", "first", "last")

    def __init__(self, n: int, rows: int | None):
        self.n, self.rows = n, rows
        self.facts: dict[str, torch.Tensor] = {}
        self.host = self.ready = None
        self.reader: str | None = None

    def add(self, facts: dict[str, torch.Tensor]) -> None:
        self.facts.update(facts)

    def start(self, reader_facts: torch.Tensor | None = None) -> None:
        if reader_facts is None and self.reader is not None:
            raise ValueError("read_bags(reader_checks=True): the reader's facts are missing")
        parts = [v.reshape(1) for v in self.facts.values()]
        if reader_facts is not None:
            parts.append(reader_facts)
        if not parts:
            return
        values = parts[0] if len(parts) == 1 else torch.cat(parts)
        on_gpu = values.device.type == "cuda"
        self.host = torch.empty(values.shape, dtype=values.dtype, pin_memory=on_gpu)
        self.host.copy_(values, non_blocking=True)
        if on_gpu:
            self.ready = torch.cuda.Event()
            self.ready.record(torch.cuda.current_stream(values.device))

    def check(self) -> dict[str, int]:
        """Raise the first rule the facts break; else return their values and forget them
        (checked facts are not checked again)."""
        if self.ready is not None:
            self.ready.synchronize()
        host = self.host
        if host is None:
            host = torch.stack(list(self.facts.values())) if self.facts else torch.empty(0)
        listed = host.tolist()
        values = dict(zip(self.facts, listed))
        if self.reader is not None and len(listed) > len(self.facts):  # the reader ran
            values.update(self._reader_values(listed[len(self.facts):]))
        self._refuse(values)
        self.facts, self.host, self.ready, self.reader = {}, None, None, None
        return values

    def _reader_values(self, got: list[int]) -> dict[str, int]:
        """The reader's facts as the rules name them (the reader records bad keys only, and
        0 where it saw none, which passes every rule)."""
        seen = dict(zip(self.READER_FACTS, got))
        values = {"lowest": seen["lowest_bad"]}
        if self.n and (seen["highest_bad"] or self.rows == 0):
            values["highest"] = seen["highest_bad"]
        if self.reader == "offsets":
            values.update(first=seen["first"], last=seen["last"], falls=seen["falls"])
        return values

    def _refuse(self, facts: dict[str, int]) -> None:
        n, rows = self.n, self.rows
        if facts.get("first", 0) != 0:
            raise ValueError(f"offsets[0] must be 0 (the first bag starts at the first index), "
                             f"got {facts['first']}")
        if facts.get("falls", 0):
            raise ValueError("offsets must be non-decreasing")
        if facts.get("last", 0) > n:
            raise ValueError(f"offsets[-1] is {facts['last']}, past the end of the {n} indices")
        if facts.get("shortest", 0) < 0:
            raise ValueError(f"lengths must be non-negative, got {facts['shortest']}")
        if "total" in facts and (facts.get("longest", 0) > n or facts["total"] != n):
            # a bag longer than the batch: the sum may have wrapped around int64
            raise ValueError(f"lengths must add up to the {n} indices, got a sum of "
                             f"{facts['total']} (longest bag {facts.get('longest', 0)})")
        if facts.get("lowest", 0) < 0 or (rows is not None and facts.get("highest", -1) >= rows):
            bad = facts["lowest"] if facts["lowest"] < 0 else facts["highest"]
            where = f"[0, {rows})" if rows is not None else "[0, 2^63)"
            raise IndexError(f"indices: {bad} is not a row id in {where}")


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
        include_last_offset: bool = False, mode: str = "sum", per_sample_weights=None,
        predictor=None, now: int = 0, timings: dict | None = None) -> torch.Tensor:
    """Pooled rows [bags, dim], equal to ``embedding_bag`` on the full table with the same
    arguments (``mode``: sum, mean or max), in the cache's dtype.

    ``lengths`` [bags] instead of ``offsets``: non-negative integers adding up to the
    number of indices, bag i holding the next ``lengths[i]`` of them. Arguments
    embedding_bag refuses are refused (``read_bags``: one-line ``TypeError``,
    ``ValueError`` or ``IndexError`` naming the argument); indices must lie below the
    store's ``rows`` when it has them (``HostStore``), else a row the store lacks fails the
    batch with ``StoreError``. Tensors may live on the host or on the cache's device.

    ``predictor``: any object with ``predict(keys, now)`` returning predicted next-access
    times (NaN: unknown); called once per batch with the batch's distinct keys (read
    from the host when ``indices`` are given there, else copied back: one more sync).
    Or a ``BatchPredictor`` (``lcr.embedding.predictions``), which keeps the model off
    the serving path: its answers so far go in before the batch and the batch's lookups
    (at positions ``now``, ``now + 1``, ...) are handed to its thread after it, with no
    synchronisation and, in its async mode, no wait.
    The whole batch holds the cache (``cache.ordered()``): concurrent calls on one cache
    are serialised. On a GPU a batch whose lookups all hit synchronises with the host
    once (``find`` reads back its miss count, and the checks of values ride on it); the
    reduce is one ``embedding_bag`` over ``cache.rows``.
    """
    device = cache.device
    from lcr.embedding import fused  # fused imports this module's read_bags
    from lcr.embedding.predictions import BatchPredictor

    threaded = isinstance(predictor, BatchPredictor)
    if fused.applies(cache, store, mode, per_sample_weights):
        with cache.ordered():
            if threaded:
                predictor.apply(cache)
            with _stage(timings, "fused", device):
                out = fused.fused_sls(cache, store, indices, offsets, lengths=lengths,
                                      include_last_offset=include_last_offset)
            if predictor is not None:
                _predict(cache, predictor, torch.as_tensor(indices), now)
        return out
    with cache.ordered():
        if threaded:
            predictor.apply(cache)
        with _stage(timings, "query", device):
            bags = read_bags(indices, offsets, lengths, include_last_offset, mode,
                             per_sample_weights, rows=_store_rows(store), dtype=cache.dtype,
                             device=device)
            # The reduce is queued before find waits for its read-back: when every lookup
            # hits (the common case) it is the answer, else it is redone after commit.
            try:
                plan = cache.find(bags.lookups, overlap=lambda slots: bags.reduce(slots, cache.rows))
            except ValueError:
                bags.check()  # the argument's own refusal, where find saw a bad key first
                raise
            bags.check()
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
            out = plan.overlapped if rows is None else bags.reduce(plan.slot_of, cache.rows)
        if predictor is not None:
            _predict(cache, predictor,
                     bags.host_lookups if bags.host_lookups is not None else plan.indices, now)
    return out


def _predict(cache: SlabHashCache, predictor, lookups: torch.Tensor, now: int) -> None:
    """Fresh predictions for the batch's distinct keys (a copy to the host, and so a
    synchronisation, when the lookups live on a GPU), or the lookups handed to a
    ``BatchPredictor``'s thread."""
    from lcr.embedding.predictions import BatchPredictor
    if isinstance(predictor, BatchPredictor):
        predictor.submit(lookups, now)
        return
    keys = np.unique(lookups.cpu().numpy())
    cache.set_predictions(keys, torch.as_tensor(predictor.predict(keys, now), dtype=torch.float64))


def _store_rows(store) -> int | None:
    rows = getattr(store, "rows", None)
    return rows if isinstance(rows, int) else None
