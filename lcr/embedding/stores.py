"""Backing stores: where the full embedding table lives, row by row.

A store answers ``fetch(keys)`` with the rows of ``keys`` as a CPU tensor
[len(keys), dim] in its dtype, or raises ``StoreError``. SparseLengthsSum calls it
only for the batch's misses, before the cache changes.

- ``HostStore``: the table in host memory, pinned when CUDA is usable so that the copy
  of missed rows to the GPU runs asynchronously.
- ``RedisStore``: one binary blob per row in a redis-server, read with pipelined MGETs.
"""
from __future__ import annotations

import numpy as np
import torch

from lcr.errors import LcrInputError

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

    ``url``: ``redis://host:port/db`` or ``unix:///path/to/redis.sock``.
    """

    def __init__(self, url: str, dim: int, dtype="float32", prefix: str = "lcr:row:",
                 batch: int = 4096, timeout: float = 5.0):
        try:
            import redis
        except ImportError as err:
            raise StoreUnavailable("RedisStore needs the redis client: pip install 'lcr[redis]'") from err
        self._redis_errors = (redis.RedisError, OSError)
        self.url, self.dim, self.prefix, self.batch = url, int(dim), prefix, int(batch)
        self.dtype = _torch_dtype(dtype)
        self._np_dtype = np.dtype(_NUMPY_DTYPES[self.dtype]).newbyteorder("<")
        self._row_bytes = self.dim * self._np_dtype.itemsize
        try:
            self.client = redis.Redis.from_url(url, socket_timeout=timeout,
                                               socket_connect_timeout=timeout)
            self.client.ping()
        except self._redis_errors as err:
            raise StoreUnavailable(f"cannot reach redis at {url}: {err}") from err

    def _key(self, row: int) -> bytes:
        return b"%s%d" % (self.prefix.encode(), row)

    def load(self, table: np.ndarray, start: int = 0, chunk: int = 10_000) -> None:
        """Write ``table`` rows as rows ``start``, ``start + 1``, ... (bulk, pipelined)."""
        table = np.ascontiguousarray(np.asarray(table).astype(self._np_dtype, copy=False))
        if table.ndim != 2 or table.shape[1] != self.dim:
            raise ValueError(f"expected a [rows, {self.dim}] table, got shape {table.shape}")
        try:
            for begin in range(0, len(table), chunk):
                block = table[begin:begin + chunk]
                pipe = self.client.pipeline(transaction=False)
                pipe.mset({self._key(start + begin + i): row.tobytes() for i, row in enumerate(block)})
                pipe.execute()
        except self._redis_errors as err:
            raise StoreError(f"loading rows into redis at {self.url} failed: {err}") from err

    def fetch(self, keys: torch.Tensor) -> torch.Tensor:
        rows = [int(k) for k in keys.cpu().tolist()]
        try:
            pipe = self.client.pipeline(transaction=False)
            for begin in range(0, len(rows), self.batch):
                pipe.mget([self._key(r) for r in rows[begin:begin + self.batch]])
            blobs = [blob for reply in pipe.execute() for blob in reply]
        except self._redis_errors as err:
            raise StoreError(f"fetching {len(rows)} rows from redis at {self.url} failed: {err}") from err
        out = np.empty((len(rows), self.dim), dtype=self._np_dtype)
        for i, (row, blob) in enumerate(zip(rows, blobs)):
            if blob is None or len(blob) != self._row_bytes:
                raise StoreError(f"redis at {self.url} has no valid row {row}")
            out[i] = np.frombuffer(blob, dtype=self._np_dtype)
        return torch.from_numpy(out.astype(self._np_dtype.newbyteorder("="), copy=False))

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, dim={self.dim}, dtype={self.dtype})"
