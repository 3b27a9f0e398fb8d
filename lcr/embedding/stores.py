"""Backing stores: where the full embedding table lives, row by row.

A store answers ``fetch(keys)`` with the rows of ``keys`` as a CPU tensor
[len(keys), dim] in its dtype, or raises ``StoreError``. SparseLengthsSum calls it
only for the batch's misses, before the cache changes.

- ``HostStore``: the table in host memory, pinned when CUDA is usable so that the copy
  of missed rows to the GPU runs asynchronously.
- ``RedisStore``: one binary blob per row in a redis-server or a Redis Cluster, read with
  pipelined MGETs; every batch it writes or reads checks the layout record (dim, dtype)
  of its prefix in the same atomic step, so two layouts never share a prefix.

Whatever a store returns, ``SlabHashCache.commit`` checks the rows' shape and dtype
before it changes anything, so a faulty store can fail a batch but never corrupt the
cache.
"""
from __future__ import annotations

import re

import numpy as np
import torch

from lcr.embedding.cache import ROW_DTYPES, row_ids
from lcr.errors import LcrInputError
from lcr.redact import redact_url, url_secrets

_NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16}
ROW_LIMIT = 2 ** 63  # row ids are int64


class StoreError(RuntimeError):
    """A backing store could not serve a batch (the cache was left untouched)."""


class LayoutMismatch(StoreError):
    """Rows under a prefix are laid out (dim, dtype) otherwise than this store reads them."""


class StoreUnavailable(LcrInputError):
    """A backing store cannot be reached, or is misconfigured, at construction."""


def _torch_dtype(dtype) -> torch.dtype:
    """float32 or float16, from a torch or numpy dtype or its name; else ``None``."""
    if isinstance(dtype, torch.dtype):
        return dtype if dtype in ROW_DTYPES else None
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return None
    return {"float32": torch.float32, "float16": torch.float16}.get(name)


class HostStore:
    """``table`` [rows, dim] (float32 or float16) in host memory. ``fetch`` takes row ids
    of any shape (read flat); ids outside [0, rows) raise ``StoreError``, ids that are not
    integers ``TypeError``/``ValueError`` (one line). Thread-safe: it only reads."""

    def __init__(self, table, pin: bool | None = None):
        try:
            table = torch.as_tensor(table)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"HostStore: the table must be a tensor or an array: "
                            f"{str(err).splitlines()[0]}") from None
        if table.dim() != 2:
            raise ValueError(f"an embedding table is 2-D [rows, dim], got shape {tuple(table.shape)}")
        if table.dtype not in ROW_DTYPES:
            raise TypeError(f"HostStore: the table must be float32 or float16 (the cache's row "
                            f"dtypes), got {table.dtype}")
        if pin is None:
            pin = torch.cuda.is_available()
        self.table = table.cpu().contiguous()
        if pin:
            self.table = self.table.pin_memory()
        self.rows, self.dim = self.table.shape
        self.dtype = self.table.dtype

    def fetch(self, keys) -> torch.Tensor:
        keys = row_ids(keys, "keys").cpu()
        if keys.numel() and (int(keys.min()) < 0 or int(keys.max()) >= self.rows):
            bad = int(keys.min()) if int(keys.min()) < 0 else int(keys.max())
            raise StoreError(f"{self!r} has no row {bad}: row ids lie in [0, {self.rows})")
        out = torch.empty((keys.numel(), self.dim), dtype=self.dtype,
                          pin_memory=self.table.is_pinned())
        return torch.index_select(self.table, 0, keys, out=out)

    def __repr__(self) -> str:
        return f"HostStore(rows={self.rows}, dim={self.dim}, dtype={self.dtype})"


# Writes rows only under the writer's layout, claiming an unclaimed prefix (or hash tag) in
# the same atomic step. KEYS[1]: the layout record, KEYS[2..]: rows; ARGV[1]: the writer's
# layout, ARGV[2..]: the rows' bytes. All keys share one hash slot (Redis Cluster).
_WRITE_ROWS = """
local layout = redis.call('GET', KEYS[1])
if not layout then
  redis.call('SET', KEYS[1], ARGV[1])
elseif layout ~= ARGV[1] then
  return redis.error_reply('LCR_LAYOUT ' .. layout)
end
local kv = {}
for i = 2, #KEYS do
  kv[#kv + 1] = KEYS[i]
  kv[#kv + 1] = ARGV[i]
end
for b = 1, #kv, 4000 do  -- unpack stays below Lua's C stack limit (8000)
  redis.call('MSET', unpack(kv, b, math.min(b + 3999, #kv)))
end
return #KEYS - 1
"""


class RedisStore:
    """Rows as ``<prefix><row id>`` -> raw little-endian bytes of ``dim`` values.

    ``url``: ``redis://[:password@]host:port/db`` or ``unix:///path/to/redis.sock``. When
    the server is a Redis Cluster node, the store talks to the whole cluster: rows are
    ``<prefix>{<row mod 256>}<row id>``, so a batch is one MGET per hash tag present,
    pipelined per node, and a master failover is followed by the client.

    Layout: ``<prefix>meta`` records dim and dtype (``dim=8,dtype=float32``), in a cluster
    also ``<prefix>{<tag>}meta`` in each hash tag's slot. The first ``load`` claims an
    empty prefix; every write batch is a Lua script that checks (or claims) the record
    and writes its rows in one atomic step, and every MGET of ``fetch`` reads the record
    of its rows with them, so a store never writes under, nor serves, another layout: it
    raises ``LayoutMismatch`` (a ``StoreError``) naming the prefix and both layouts. A
    mismatch already recorded at construction raises ``StoreUnavailable``. Deleting a
    prefix means deleting all its keys (a record deleted alone would let a new layout
    claim rows of the old one). The password never appears in ``repr`` or in errors.
    Thread-safe as far as the redis client is (connection pools).
    """

    TAGS = 256

    def __init__(self, url: str, dim: int, dtype="float32", prefix: str = "lcr:row:",
                 batch: int = 4096, timeout: float = 5.0):
        try:
            import redis
        except ImportError as err:
            raise StoreUnavailable("RedisStore needs the redis client: pip install 'lcr[redis]'") from err
        self._redis_errors = (redis.RedisError, OSError)
        self._check_settings(dim, dtype, prefix, batch, timeout)
        self.url, self.dim, self.prefix, self.batch = redact_url(url), int(dim), prefix, int(batch)
        self._secrets = url_secrets(url)
        self.dtype = _torch_dtype(dtype)
        self._np_dtype = np.dtype(_NUMPY_DTYPES[self.dtype]).newbyteorder("<")
        self._row_bytes = self.dim * self._np_dtype.itemsize
        try:
            self.client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
            self.cluster = self.client.info("cluster").get("cluster_enabled") == 1
            if self.cluster:
                from redis.cluster import RedisCluster

                self.client.close()
                self.client = RedisCluster.from_url(url, socket_timeout=timeout,
                                                    socket_connect_timeout=timeout)
            layout = self.client.get(self._meta_key)
        except self._redis_errors as err:
            raise StoreUnavailable(f"cannot reach redis at {self.url}: {self._scrub(err)}") from None
        if layout is not None and layout != self._layout:
            raise StoreUnavailable(self._mismatch(layout))

    @staticmethod
    def _check_settings(dim, dtype, prefix, batch, timeout) -> None:
        if not isinstance(prefix, str):
            raise StoreUnavailable(f"RedisStore: prefix must be a string, got {type(prefix).__name__}")
        if _torch_dtype(dtype) is None:
            raise StoreUnavailable(f"RedisStore: dtype must be float32 or float16, got {dtype!r}")
        for name, value in (("dim", dim), ("batch", batch)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise StoreUnavailable(f"RedisStore: {name} must be an integer of at least 1, got {value!r}")
        if not isinstance(timeout, (int, float)) or not timeout > 0:
            raise StoreUnavailable(f"RedisStore: timeout must be a positive number of seconds, got {timeout!r}")

    @property
    def _meta_key(self) -> bytes:
        return self.prefix.encode() + b"meta"

    @property
    def _layout(self) -> bytes:
        return b"dim=%d,dtype=%s" % (self.dim, self._np_dtype.name.encode())

    def _mismatch(self, layout: bytes | None) -> str:
        found = ("have no layout record" if layout is None else
                 f"were written as {layout.decode(errors='replace')}")
        return (f"redis at {self.url}: rows under {self.prefix!r} {found}, this store reads "
                f"{self._layout.decode()}")

    def _key(self, row: int) -> bytes:
        if self.cluster:
            return b"%s{%d}%d" % (self.prefix.encode(), row % self.TAGS, row)
        return b"%s%d" % (self.prefix.encode(), row)

    def _batches(self, rows: list[int], size: int) -> list[tuple[bytes, list[int]]]:
        """Positions into ``rows`` in batches of at most ``size``, each with the layout
        record that the batch's one atomic command reads or writes with its rows: the
        prefix's, or in a cluster its hash tag's (the rows' slot)."""
        if not self.cluster:
            return [(self._meta_key, list(range(b, min(b + size, len(rows)))))
                    for b in range(0, len(rows), size)]
        by_tag: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_tag.setdefault(row % self.TAGS, []).append(i)
        prefix = self.prefix.encode()
        return [(b"%s{%d}meta" % (prefix, tag), group[b:b + size])
                for tag, group in by_tag.items() for b in range(0, len(group), size)]

    def _scrub(self, err: Exception) -> str:
        text = str(err)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def load(self, table, start: int = 0, chunk: int = 10_000) -> None:
        """Write ``table`` [rows, dim] as rows ``start``, ``start + 1``, ... (pipelined
        batches of ``chunk`` rows, each written atomically with a check of the layout).
        Raises ``ValueError``/``TypeError`` on a bad argument before writing anything,
        ``LayoutMismatch`` where the prefix holds another layout, ``StoreError`` when
        redis fails; batches written before a failure stay."""
        table = self._rows_to_write(table)
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0 \
                or start + len(table) > ROW_LIMIT:
            raise ValueError(f"start must be a row id with the {len(table)} rows after it within "
                             f"[0, 2^63), got {start!r}")
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
            raise ValueError(f"chunk must be an integer of at least 1, got {chunk!r}")
        rows = list(range(int(start), int(start) + len(table)))
        try:
            self._write([(self._meta_key, [])], [], [])  # claim the prefix first: all or nothing
            for begin in range(0, len(rows), chunk):
                part = rows[begin:begin + chunk]
                self._write(self._batches(part, chunk), [self._key(r) for r in part],
                            [table[r - start].tobytes() for r in part])
        except self._redis_errors as err:
            refused = re.search(r"LCR_LAYOUT (\S+)", str(err))  # _WRITE_ROWS's refusal
            if refused:
                raise LayoutMismatch(self._mismatch(refused.group(1).encode())) from None
            raise StoreError(f"loading rows into redis at {self.url} failed: {self._scrub(err)}") from None

    def _rows_to_write(self, table) -> np.ndarray:
        """``table`` in this store's byte layout, refusing what would change on the way."""
        table = np.asarray(table)
        if table.ndim != 2 or table.shape[1] != self.dim:
            raise ValueError(f"expected a [rows, {self.dim}] table, got shape {table.shape}")
        if table.dtype.kind not in "fiu":
            raise TypeError(f"table values must be numbers, got dtype {table.dtype}")
        with np.errstate(over="ignore", invalid="ignore"):
            rows = table.astype(self._np_dtype)
        overflow = np.isinf(rows) & ~np.isinf(table)
        if overflow.any():
            value = table[overflow].flat[0]
            raise ValueError(f"table value {value!r} is outside {self._np_dtype.name}'s range")
        return np.ascontiguousarray(rows)

    def _write(self, batches, names: list[bytes], blobs: list[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for meta, positions in batches:
            keys = [meta] + [names[i] for i in positions]
            pipe.execute_command("EVAL", _WRITE_ROWS, len(keys), *keys, self._layout,
                                 *(blobs[i] for i in positions))
        pipe.execute()

    def fetch(self, keys) -> torch.Tensor:
        """The rows of ``keys`` (row ids of any shape, read flat) as [len, dim] on the host.
        Each MGET reads the layout record of its rows with them: ``LayoutMismatch`` where it
        is not this store's, ``StoreError`` for a row that is missing or redis failing."""
        rows = row_ids(keys, "keys").tolist()
        names = [self._key(r) for r in rows]
        batches = self._batches(rows, self.batch)
        try:  # the cluster client re-reads the slot map after a failure itself
            pipe = self.client.pipeline(transaction=False)
            for meta, positions in batches:
                pipe.execute_command("MGET", meta, *(names[i] for i in positions))
            replies = pipe.execute()
        except self._redis_errors as err:
            raise StoreError(f"fetching {len(rows)} rows from redis at {self.url} failed: "
                             f"{self._scrub(err)}") from None
        out = np.empty((len(rows), self.dim), dtype=self._np_dtype.newbyteorder("="))
        for (_, positions), (layout, *blobs) in zip(batches, replies):
            if layout != self._layout and (layout is not None or any(b is not None for b in blobs)):
                raise LayoutMismatch(self._mismatch(layout))
            for i, blob in zip(positions, blobs):
                if blob is None or len(blob) != self._row_bytes:
                    self._refuse_missing(rows[i])
            out[positions] = np.frombuffer(b"".join(blobs), dtype=self._np_dtype).reshape(-1, self.dim)
        return torch.from_numpy(out)

    def _refuse_missing(self, row: int) -> None:
        """Raise for a row that is not there: ``LayoutMismatch`` where another layout has
        claimed the prefix (in a cluster, a hash tag without rows has no record of its
        own), else ``StoreError``."""
        try:
            layout = self.client.get(self._meta_key)
        except self._redis_errors:
            layout = None
        if layout is not None and layout != self._layout:
            raise LayoutMismatch(self._mismatch(layout))
        raise StoreError(f"redis at {self.url} has no valid row {row}")

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        kind = "cluster" if self.cluster else "server"
        return f"RedisStore({self.url!r}, {kind}, dim={self.dim}, dtype={self.dtype})"
