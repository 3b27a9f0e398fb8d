"""Backing stores: where the full embedding table lives, row by row.

A store answers ``fetch(keys)`` with the rows of ``keys`` as a CPU tensor
[len(keys), dim] in its dtype, or raises ``StoreError``. SparseLengthsSum calls it
only for the batch's misses, before the cache changes.

- ``HostStore``: the table in host memory, pinned when CUDA is usable so that the copy
  of missed rows to the GPU runs asynchronously.
- ``RedisStore``: one binary blob per row in a redis-server or a Redis Cluster, read with
  pipelined MGETs.

Whatever a store returns, ``SlabHashCache.commit`` checks the rows' shape and dtype
before it changes anything, so a faulty store can fail a batch but never corrupt the
cache.
"""
from __future__ import annotations

import numpy as np
import torch

from lcr.errors import LcrInputError
from lcr.redact import redact_url, url_secrets

_NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16}


class StoreError(RuntimeError):
    """A backing store could not serve a batch (the cache was left untouched)."""


class StoreUnavailable(LcrInputError):
    """A backing store cannot be reached at construction."""


def _torch_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    return {"float32": torch.float32, "float16": torch.float16}[np.dtype(dtype).name]


class HostStore:
    def __init__(self, table, pin: bool | None = None):
        table = torch.as_tensor(table)
        if table.dim() != 2:
            raise ValueError(f"an embedding table is 2-D [rows, dim], got shape {tuple(table.shape)}")
        if pin is None:
            pin = torch.cuda.is_available()
        self.table = table.cpu().contiguous()
        if pin:
            self.table = self.table.pin_memory()
        self.rows, self.dim = self.table.shape
        self.dtype = self.table.dtype

    def fetch(self, keys: torch.Tensor) -> torch.Tensor:
        keys = keys.cpu()
        if keys.numel() and (int(keys.min()) < 0 or int(keys.max()) >= self.rows):
            raise StoreError(f"row ids must lie in [0, {self.rows})")
        out = torch.empty((keys.numel(), self.dim), dtype=self.dtype,
                          pin_memory=self.table.is_pinned())
        return torch.index_select(self.table, 0, keys, out=out)

    def __repr__(self) -> str:
        return f"HostStore(rows={self.rows}, dim={self.dim}, dtype={self.dtype})"


class RedisStore:
    """Rows as ``<prefix><row id>`` -> raw little-endian bytes of ``dim`` values.

    ``url``: ``redis://[:password@]host:port/db`` or ``unix:///path/to/redis.sock``. When
    the server is a Redis Cluster node, the store talks to the whole cluster: rows are
    ``<prefix>{<row mod 256>}<row id>``, so a batch is one MGET per hash tag present,
    pipelined per node, and a master failover is followed by the client.
    ``<prefix>meta`` records dim and dtype; a store that would read the rows with
    another layout is refused at construction. The password never appears in ``repr``
    or in errors. Thread-safe as far as the redis client is (connection pools).
    """

    TAGS = 256

    def __init__(self, url: str, dim: int, dtype="float32", prefix: str = "lcr:row:",
                 batch: int = 4096, timeout: float = 5.0):
        try:
            import redis
        except ImportError as err:
            raise StoreUnavailable("RedisStore needs the redis client: pip install 'lcr[redis]'") from err
        self._redis_errors = (redis.RedisError, OSError)
        self.url, self.dim, self.prefix, self.batch = redact_url(url), int(dim), prefix, int(batch)
        self._secrets = url_secrets(url)
        if self.dim < 1 or self.batch < 1:
            raise StoreUnavailable(f"RedisStore: dim and batch must be at least 1, got {dim} and {batch}")
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
            raise StoreUnavailable(f"redis at {self.url}: rows under {prefix!r} were written as "
                                   f"{layout.decode(errors='replace')}, not {self._layout.decode()}")

    @property
    def _meta_key(self) -> bytes:
        return self.prefix.encode() + b"meta"

    @property
    def _layout(self) -> bytes:
        return b"dim=%d,dtype=%s" % (self.dim, self._np_dtype.name.encode())

    def _key(self, row: int) -> bytes:
        if self.cluster:
            return b"%s{%d}%d" % (self.prefix.encode(), row % self.TAGS, row)
        return b"%s%d" % (self.prefix.encode(), row)

    def _scrub(self, err: Exception) -> str:
        text = str(err)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def load(self, table: np.ndarray, start: int = 0, chunk: int = 10_000) -> None:
        """Write ``table`` rows as rows ``start``, ``start + 1``, ... (bulk, pipelined)."""
        table = np.asarray(table)
        if table.ndim != 2 or table.shape[1] != self.dim:
            raise ValueError(f"expected a [rows, {self.dim}] table, got shape {table.shape}")
        table = np.ascontiguousarray(table.astype(self._np_dtype, copy=False))
        try:
            self.client.set(self._meta_key, self._layout)
            for begin in range(0, len(table), chunk):
                block = table[begin:begin + chunk]
                mapping = {self._key(start + begin + i): row.tobytes() for i, row in enumerate(block)}
                if self.cluster:
                    self.client.mset_nonatomic(mapping)  # one MSET per slot, pipelined per node
                else:
                    self.client.mset(mapping)
        except self._redis_errors as err:
            raise StoreError(f"loading rows into redis at {self.url} failed: {self._scrub(err)}") from None

    def fetch(self, keys: torch.Tensor) -> torch.Tensor:
        rows = [int(k) for k in keys.cpu().tolist()]
        names = [self._key(r) for r in rows]
        try:
            if self.cluster:  # one MGET per hash tag present, pipelined per node
                blobs = self.client.mget_nonatomic(names)
            else:
                pipe = self.client.pipeline(transaction=False)
                for begin in range(0, len(names), self.batch):
                    pipe.mget(names[begin:begin + self.batch])
                blobs = [blob for reply in pipe.execute() for blob in reply]
        except self._redis_errors as err:  # the cluster client re-reads the slot map itself
            raise StoreError(f"fetching {len(rows)} rows from redis at {self.url} failed: "
                             f"{self._scrub(err)}") from None
        out = np.empty((len(rows), self.dim), dtype=self._np_dtype)
        for i, (row, blob) in enumerate(zip(rows, blobs)):
            if blob is None or len(blob) != self._row_bytes:
                raise StoreError(f"redis at {self.url} has no valid row {row}")
            out[i] = np.frombuffer(blob, dtype=self._np_dtype)
        return torch.from_numpy(out.astype(self._np_dtype.newbyteorder("="), copy=False))

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        kind = "cluster" if self.cluster else "server"
        return f"RedisStore({self.url!r}, {kind}, dim={self.dim}, dtype={self.dtype})"
