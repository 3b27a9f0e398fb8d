"""Prediction arrays for a sweep: each computed once per trace and predictor (and cache
size, where the model learns per size), reused by every policy, and (learned ones) kept
on disk so reruns are instant.

A predictor "with an array" (``lcr.predict.PredictorSpec.has_array``) answers request i
the same way whatever the cache does, so a sweep needs its array once. The learned
models' pass (``lightgbm:async``, ``lcr.predict.replayed``) is the expensive one: it
trains the online model over the whole trace. Its file is keyed by

- the trace's content (SHA-256 of the keys, which is all the features read),
- the predictor's canonical name, seed and full settings (``repr`` of ``learned_config``),
- a hash of the ``lcr.predict`` sources, so a changed model never reads old answers,
- the cache size, for models whose boundary is for one (``lightgbm``: the relaxed-Belady
  classifier learns per cache size), which get one pass per size.

Each array ``DIGEST.npy`` has its settings beside it in ``DIGEST.json``, with the SHA-256
of the array's bytes, checked on every load: a file that is unreadable, of the wrong
length, damaged in place or without its checksum is warned about (once, naming it),
deleted and recomputed, so a damaged cache costs time, never a wrong result. Both are
written whole through ``lcr.atomic`` (a failed write leaves no partial or temporary file).
Not thread-safe: one sweep uses one cache.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from lcr import predict
from lcr.atomic import write_atomic
from lcr.errors import LcrInputError
from lcr.predict import PredictorSpec
from lcr.traces import Trace

log = logging.getLogger(__name__)

#: ``--prediction-cache off`` keeps passes in memory for one run only.
OFF = "off"


def default_directory() -> Path:
    root = os.environ.get("LCR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lcr")
    return Path(root) / "predictions"


def replay_predictor(predictor: "str | PredictorSpec") -> PredictorSpec:
    """The predictor a replay uses: a learned model named without a query mode means its
    fast exact replay (async): ``lightgbm`` -> ``lightgbm:async``,
    ``lightgbm:window=80000`` -> ``lightgbm:async;window=80000``. ``:sync`` only when asked for."""
    spec = PredictorSpec.parse(predictor)
    return replace(spec, mode="async") if spec.learned and spec.mode is None else spec


def trace_digest(trace: Trace) -> str:
    """SHA-256 of the trace's keys (computed once per trace object)."""
    cached = getattr(trace, "_keys_sha256", None)
    if cached is None or cached[0] is not trace.keys:
        cached = (trace.keys, hashlib.sha256(np.ascontiguousarray(trace.keys).tobytes()).hexdigest())
        trace._keys_sha256 = cached
    return cached[1]


def static_digest(trace: Trace, fields: tuple[str, ...]) -> str:
    """SHA-256 of the static columns ``fields`` of ``trace`` ("" for none)."""
    if not fields:
        return ""
    from lcr.traces.static import static_columns

    return hashlib.sha256(static_columns(trace, fields).tobytes()).hexdigest()


def predictor_code_digest() -> str:
    """SHA-256 of the lcr.predict sources: a changed model never reads old answers."""
    digest = hashlib.sha256()
    for path in sorted(Path(predict.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


class PredictionCache:
    """Per-request prediction arrays by (trace, predictor, noise, seed[, size]).

    ``directory``: where learned passes are kept (None: ``default_directory()``;
    ``"off"``: memory only). ``passes`` counts the learned passes computed, ``loaded``
    those read from disk; experiment predictors are memoised for the run only.
    """

    def __init__(self, directory: str | os.PathLike | None = None, progress: bool | None = None):
        self.directory = None if str(directory) == OFF else Path(directory or default_directory())
        self.progress = progress
        self.passes = 0
        self.loaded = 0
        self.pass_seconds = {"wall": 0.0, "cpu": 0.0}  # spent computing passes
        self._memory: dict[tuple, np.ndarray] = {}
        self._code = None

    @property
    def used(self) -> bool:
        return bool(self.passes or self.loaded)

    def summary(self) -> str:
        return f"{self.passes} prediction pass{'es' if self.passes != 1 else ''} computed, {self.loaded} loaded"

    def get(self, predictor: "str | PredictorSpec", trace: Trace, noise: float = 0.0, seed: int = 0,
            capacity: int | None = None) -> np.ndarray:
        """The prediction made at every request of ``trace`` by ``predictor``."""
        spec = PredictorSpec.parse(predictor)
        if not spec.learned:
            key = (spec, trace_digest(trace), noise, seed)
            if key not in self._memory:
                self._memory[key] = predict.make_predictions(spec, trace, noise, seed)
            return self._memory[key]
        key, digest, settings = self._identify(spec, trace, noise, seed, capacity)
        if key in self._memory:
            return self._memory[key]
        values = self._load(digest, len(trace))
        if values is None:
            wall, cpu = time.perf_counter(), time.process_time()
            with _PassTicker(f"{spec} prediction pass over {len(trace):,} requests", self.progress):
                values = _learned_pass(spec, trace, noise, seed, key[4])
            self._computed(digest, values, settings, time.perf_counter() - wall, time.process_time() - cpu)
        else:
            self.loaded += 1
        self._memory[key] = values
        return values

    def prefetch(self, predictor: "str | PredictorSpec", trace: Trace, noise: float, seed: int,
                 capacities: list[int], jobs: int) -> None:
        """Compute the learned passes that ``get`` will ask for at ``capacities`` and that
        are neither in memory nor on disk, up to ``jobs`` at once in worker processes
        (a per-size model has one pass per size). Same answers as ``get`` computing them."""
        spec = PredictorSpec.parse(predictor)
        if jobs < 2 or not spec.learned:
            return
        missing = {}
        for capacity in capacities:
            key, digest, settings = self._identify(spec, trace, noise, seed, capacity)
            if key in self._memory or key in missing:
                continue
            values = self._load(digest, len(trace))
            if values is not None:
                self.loaded += 1
                self._memory[key] = values
            else:
                missing[key] = (digest, settings)
        if len(missing) < 2:
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        wall = time.perf_counter()
        # forkserver: a fresh process per worker, never a fork of a parent with threads.
        with ProcessPoolExecutor(min(jobs, len(missing)), mp_context=multiprocessing.get_context("forkserver")) as pool, \
                _PassTicker(f"{spec}: {len(missing)} prediction passes over {len(trace):,} requests, "
                            f"{min(jobs, len(missing))} at once", self.progress):
            futures = {key: pool.submit(_timed_learned_pass, spec, trace, noise, seed, key[4]) for key in missing}
            for key, future in futures.items():
                values, cpu = future.result()
                digest, settings = missing[key]
                self._computed(digest, values, settings, 0.0, cpu)
                self._memory[key] = values
        self.pass_seconds["wall"] += time.perf_counter() - wall

    def _identify(self, spec: PredictorSpec, trace: Trace, noise: float, seed: int, capacity: int | None):
        """A learned pass's memory key, file digest and recorded settings."""
        config = predict.learned_config(spec, seed, trace, capacity)
        sized = config.capacity is not None  # a boundary for this cache size: one pass per size
        # The static columns the model reads are part of the trace's content for it.
        content = trace_digest(trace) + static_digest(trace, config.features.static_fields)
        key = (spec, content, noise, seed, capacity if sized else None)
        if self._code is None:
            self._code = predictor_code_digest()
        settings = {"predictor": str(spec), "trace": key[1], "noise": noise, "seed": seed,
                    "capacity": key[4], "config": repr(config), "code": self._code}
        return key, hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:32], settings

    def _computed(self, digest: str, values: np.ndarray, settings: dict, wall: float, cpu: float) -> None:
        self.pass_seconds["wall"] += wall
        self.pass_seconds["cpu"] += cpu
        self.passes += 1
        self._store(digest, values, settings)

    def _path(self, digest: str) -> Path:
        return self.directory / f"{digest}.npy"

    def _load(self, digest: str, length: int) -> np.ndarray | None:
        path = self._path(digest) if self.directory is not None else None
        if path is None or not path.is_file():
            return None
        values, problem = _read_checked(path, length)
        if problem is not None:
            log.warning("prediction cache %s %s; deleting it and recomputing", path, problem)
            for stale in (path, path.with_suffix(".json")):
                with contextlib.suppress(OSError):  # a read-only cache: recomputed every run, still right
                    stale.unlink(missing_ok=True)
        return values

    def _store(self, digest: str, values: np.ndarray, settings: dict) -> None:
        if self.directory is None:
            return
        path = self._path(digest)
        try:  # the array first: its checksum in the settings file is what makes it valid
            write_atomic(path, lambda f: np.save(f, values, allow_pickle=False))
            write_atomic(path.with_suffix(".json"),
                         json.dumps({**settings, "sha256": _checksum(values)}, indent=1))
        except OSError as err:  # a cache that cannot be written only costs the next run time
            log.warning("cannot keep predictions in %s: %s", self.directory, err)


def _checksum(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values)).hexdigest()


def _read_checked(path: Path, length: int) -> tuple[np.ndarray | None, str | None]:
    """The array at ``path``, or None and what is wrong with it: a file that does not
    match the checksum recorded in its settings file beside it is never used."""
    try:
        recorded = json.loads(path.with_suffix(".json").read_text()).get("sha256")
        values = np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - numpy raises many kinds (TokenError, ...) on a damaged header
        return None, f"is unreadable ({type(err).__name__}: {err})"
    if values.shape != (length,) or values.dtype != np.float64:
        return None, "has the wrong shape"
    if recorded is None:
        return None, "has no checksum (written by an older lcr)"
    if recorded != _checksum(values):
        return None, "does not match its checksum (damaged)"
    return values, None


def check_cache_directory(directory: str | None) -> None:
    """Refuse a ``--prediction-cache`` that is a file (a folder that cannot be created
    is only warned about later: the sweep itself does not need it)."""
    if directory not in (None, OFF) and Path(directory).exists() and not Path(directory).is_dir():
        raise LcrInputError(f"--prediction-cache {directory}: not a folder")


def _learned_pass(spec: PredictorSpec, trace: Trace, noise: float, seed: int, capacity: int | None) -> np.ndarray:
    return np.ascontiguousarray(predict.make_predictions(spec, trace, noise, seed, capacity), dtype=np.float64)


def _timed_learned_pass(*args) -> tuple[np.ndarray, float]:
    """``_learned_pass`` in a worker process, with the CPU seconds it took there."""
    cpu = time.process_time()
    values = _learned_pass(*args)
    return values, time.process_time() - cpu


class _PassTicker:
    """A line on stderr with the elapsed time of a long prediction pass (after 3 s, on a
    terminal unless told otherwise); the pass itself runs undisturbed."""

    DELAY, EVERY = 3.0, 1.0

    def __init__(self, label: str, enabled: bool | None):
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._stop = threading.Event()
        self._thread = None
        self._shown = False

    def __enter__(self):
        if self.enabled:
            self._start = time.perf_counter()
            self._thread = threading.Thread(target=self._run, daemon=True, name="lcr-pass-ticker")
            self._thread.start()
        return self

    def _run(self):
        if self._stop.wait(self.DELAY):
            return
        while not self._stop.is_set():
            self._shown = True
            sys.stderr.write(f"\r{self.label}: {time.perf_counter() - self._start:5.0f} s (computed once, "
                             f"then cached)")
            sys.stderr.flush()
            self._stop.wait(self.EVERY)

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self._shown:
                sys.stderr.write(f"\r{self.label}: done in {time.perf_counter() - self._start:.0f} s\n")
                sys.stderr.flush()
        return False
