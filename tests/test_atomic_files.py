"""Every file lcr writes is whole or untouched (``lcr.atomic``), and the prediction cache
never serves a damaged array (``lcr.sim.predictions``): issue 39, items 7 and 8.

The failures are real ones: a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored) in a
child process makes the write hit EFBIG partway, as a full disk would; a JSON encoder
raises at its 1000th element; Ctrl-C arrives halfway; bytes are zeroed inside a cached
array. Run time about 40 s on 2 shared cores (most of it the child processes' imports
and five 24,000-request LightGBM passes); the hypothesis tests take 150 + 100 examples.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lcr.atomic import write_atomic

PREVIOUS = b'{"previous": "good file"}\n'  # smaller than the limit below, unlike every new output
LIMIT = 64                                 # bytes a child process may write into any file


def only_file_in(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# The helper itself ------------------------------------------------------------------
class Halfway(Exception):
    pass


@settings(max_examples=150, deadline=None)
@given(previous=st.one_of(st.none(), st.binary(max_size=300)), new=st.binary(max_size=3000),
       cut=st.floats(0, 1), failure=st.sampled_from([Halfway, KeyboardInterrupt, OSError]))
def test_a_write_that_fails_partway_leaves_the_previous_file(previous, new, cut, failure):
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "out.json"
        if previous is not None:
            target.write_bytes(previous)

        def half(f):
            f.write(new[:int(cut * len(new))])
            f.flush()  # the bytes reach the file before the failure
            raise failure("partway")

        with pytest.raises(failure):
            write_atomic(target, half)
        assert (target.read_bytes() if previous is not None else None) == previous
        assert only_file_in(Path(folder)) == (["out.json"] if previous is not None else [])
        write_atomic(target, new)  # and a good write after it replaces the file whole
        assert target.read_bytes() == new and only_file_in(Path(folder)) == ["out.json"]


def test_json_whose_encoding_fails_at_the_1000th_element_leaves_the_previous_file(tmp_path):
    target = tmp_path / "r.json"
    target.write_bytes(PREVIOUS)
    calls = []

    def encode(value):
        calls.append(value)
        if len(calls) == 1000:
            raise TypeError("element 1000 cannot be written")
        return float(value)

    def stream(f):  # encoded and written piece by piece, as json.dump does
        for piece in json.JSONEncoder(default=encode).iterencode([np.float32(i) for i in range(5000)]):
            f.write(piece.encode())

    with pytest.raises(TypeError, match="element 1000"):
        write_atomic(target, stream)
    assert target.read_bytes() == PREVIOUS and only_file_in(tmp_path) == ["r.json"]


def test_the_file_keeps_its_mode_and_a_symlinked_output_stays_a_link(tmp_path):
    target = tmp_path / "r.json"
    target.write_bytes(PREVIOUS)
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o640
    mask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "sub" / "fresh.json", "x")  # folders created; mode as open() makes it
    finally:
        os.umask(mask)
    assert (tmp_path / "sub" / "fresh.json").stat().st_mode & 0o777 == 0o644
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "through the link")
    assert link.is_symlink() and target.read_text() == "through the link"


# Every writer behind the command line, under a real EFBIG -----------------------------
CHILD = f"""
import importlib, resource, signal, sys
for name in sys.argv[1].split(","):  # what the command imports and caches, before the limit
    importlib.import_module(name)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))
"""
COMMAND_LINE = "from lcr.cli import main\nsys.exit(main(sys.argv[2:]))"
PLOTTING = "matplotlib.pyplot"


def run_limited(body: str, preload: str, *argv: str, env: dict | None = None):
    """``body`` in a child process that may write at most LIMIT bytes to any file."""
    return subprocess.run([sys.executable, "-c", CHILD + body, preload, *argv],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def write_chats(path: Path, conversations: int = 40) -> Path:
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        for i in range(conversations):
            turns = []
            for t in range(int(rng.integers(1, 5))):
                turns += [{"from": "human", "value": f"question {t} about topic {i % 7} " * int(rng.integers(1, 6))},
                          {"from": "gpt", "value": "an answer " * int(rng.integers(1, 20))}]
            f.write(json.dumps({"id": str(i), "conversations": turns}) + "\n")
    return path


WRITERS = {  # name: (argv with {out}, output name, modules to load first)
    "sim --json": (["sim", "loop:requests=100,keys=10", "--json", "{out}"], "r.json", PLOTTING),
    "sim --plot": (["sim", "loop:requests=100,keys=10", "--plot", "{out}"], "r.png", PLOTTING),
    "sim-kv --json": (["sim-kv", "online_qa:conversations=20", "--cache-tokens", "5%", "--json", "{out}"],
                      "r.json", PLOTTING),
    "sim-ckpt --json": (["sim-ckpt", "multimodal:length=100,seed=1", "--budgets", "1,2,4", "--requests", "500",
                         "--json", "{out}"], "r.json", PLOTTING),
    "sim-ckpt --plot": (["sim-ckpt", "multimodal:length=100,seed=1", "--budgets", "1,2,4", "--requests", "500",
                         "--plot", "{out}"], "r.png", PLOTTING),
    "sim-route --json": (["sim-route", "gsp:groups=4,prompts=4", "--workers", "2", "--routers", "round_robin",
                          "--json", "{out}"], "r.json", PLOTTING),
    "bench sls --json": (["bench", "sls", "--table-rows", "500", "--dim", "4", "--pooling", "2", "--batch-sizes", "8",
                          "--cache-ratio", "0.1", "--policies", "lru", "--batches", "1", "--warmup", "0",
                          "--json", "{out}"], "r.json", f"{PLOTTING},torch"),
}


@pytest.mark.parametrize("name", WRITERS)
def test_a_result_file_whose_write_fails_partway_is_left_as_it_was(name, tmp_path):
    """Disk full halfway through ``--json``/``--plot``/a model file: one line, exit 2,
    the previous file byte for byte, and no temporary file beside it."""
    argv, output, preload = WRITERS[name]
    if "torch" in preload:
        pytest.importorskip("torch")
    out = tmp_path / "out" / output
    out.parent.mkdir()
    out.write_bytes(PREVIOUS)
    done = run_limited(COMMAND_LINE, preload, *(a.format(out=out) for a in argv),
                       env={"LCR_CACHE_DIR": str(tmp_path / "cache")})
    err = done.stderr.strip()
    assert out.read_bytes() == PREVIOUS, err
    assert only_file_in(out.parent) == [output]
    assert done.returncode == 2 and "Traceback" not in err, err
    assert f"{out}: cannot write" in err.splitlines()[-1] and "File too large" in err, err


LPC_SAVE = """
from lcr.errors import LcrInputError
from lcr.lpc.model import Classifier
try:
    Classifier("turns", state={"turn_table": [0.5] * 11}).save(sys.argv[2])
except LcrInputError as err:
    print(err)
"""


def test_an_lpc_model_whose_write_fails_partway_is_left_as_it_was(tmp_path):
    """``lcr lpc-train -o``'s writer (``Classifier.save``), the same way."""
    pytest.importorskip("torch")
    out = tmp_path / "model.pt"
    out.write_bytes(PREVIOUS)
    done = run_limited(LPC_SAVE, "torch", str(out))
    assert out.read_bytes() == PREVIOUS and only_file_in(tmp_path) == ["model.pt"], done.stderr
    assert done.returncode == 0 and done.stdout.strip() == f"{out}: cannot write the model: File too large"


@pytest.mark.parametrize("argv, flag", [
    (["lpc-train", "{chats}", "-o", "/proc/no/m.pt"], "--output"),
    (["lpc-train", "{chats}", "-o", "{tmp}/m.pt", "--json", "/proc/no/r.json"], "--json"),
    (["sim-route", "gsp:groups=4,prompts=4", "--json", "/proc/no/r.json"], "--json"),
])
def test_outputs_are_checked_before_training_or_routing(argv, flag, tmp_path, capsys):
    from lcr.cli import main

    chats = write_chats(tmp_path / "chats.jsonl")
    assert main([a.format(chats=chats, tmp=tmp_path) for a in argv]) == 2
    captured = capsys.readouterr()
    assert f"{flag} /proc/no/" in captured.err and "cannot write there" in captured.err, captured.err
    assert captured.out == "" and only_file_in(tmp_path) == ["chats.jsonl"]


# The prediction cache -----------------------------------------------------------------
PREDICTOR = "lightgbm:async"
TRACE = "zipf:requests=24000,keys=3000,alpha=0.9,seed=5"
CAPACITY = 200


@pytest.fixture(scope="module")
def trace():
    pytest.importorskip("lightgbm")
    from lcr.traces import generate

    return generate(TRACE)


@pytest.fixture(scope="module")
def clean(trace, tmp_path_factory):
    """The predictions and LARU's result computed without a cache, and a cache folder
    holding that pass."""
    from lcr.sim import PolicySpec, run_one
    from lcr.sim.predictions import PredictionCache

    folder = tmp_path_factory.mktemp("kept")
    values = PredictionCache(folder).get(PREDICTOR, trace, capacity=CAPACITY)
    laru = run_one(trace, PolicySpec.parse("laru"), CAPACITY, PREDICTOR, predictions=PredictionCache("off"))
    return values, laru.misses, folder


def zero_a_block(npy: Path) -> None:
    size = npy.stat().st_size
    with npy.open("r+b") as f:  # 80 KB of the 192 KB of predictions, in place
        f.seek(128 + 8 * 6000)
        f.write(bytes(8 * 10000))
    assert npy.stat().st_size == size


def flip_a_bit(npy: Path) -> None:
    data = bytearray(npy.read_bytes())
    data[5000] ^= 1
    npy.write_bytes(data)


def drop_checksum(npy: Path) -> None:  # as a file written before checksums
    sidecar = npy.with_suffix(".json")
    doc = json.loads(sidecar.read_text())
    doc.pop("sha256", None)
    sidecar.write_text(json.dumps(doc))


DAMAGE = {
    "a block zeroed in place": zero_a_block,
    "one bit flipped": flip_a_bit,
    "settings file lost": lambda npy: npy.with_suffix(".json").unlink(),
    "no checksum recorded": drop_checksum,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cached_array_is_recomputed_with_one_warning(damage, trace, clean, tmp_path, caplog):
    from lcr.sim import PolicySpec, run_one
    from lcr.sim.predictions import PredictionCache

    values, laru_misses, kept = clean
    for path in kept.iterdir():
        shutil.copy(path, tmp_path / path.name)
    (npy,) = tmp_path.glob("*.npy")
    DAMAGE[damage](npy)

    cache = PredictionCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lcr.sim.predictions"):
        laru = run_one(trace, PolicySpec.parse("laru"), CAPACITY, PREDICTOR, predictions=cache)
    assert laru.misses == laru_misses  # the same result as a run without a cache
    assert cache.passes == 1 and cache.loaded == 0
    assert np.array_equal(cache.get(PREDICTOR, trace, capacity=CAPACITY), values, equal_nan=True)
    assert len(caplog.records) == 1, caplog.text
    assert str(npy) in caplog.records[0].getMessage() and "recomputing" in caplog.records[0].getMessage()

    caplog.clear()  # the recomputed file is whole again: read back, without a word
    again = PredictionCache(tmp_path)
    assert np.array_equal(again.get(PREDICTOR, trace, capacity=CAPACITY), values, equal_nan=True)
    assert again.loaded == 1 and again.passes == 0 and caplog.records == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.floats(allow_nan=True), min_size=1, max_size=200),
       where=st.sampled_from([".npy", ".json"]), at=st.floats(0, 1), patch=st.binary(min_size=1, max_size=64),
       how=st.sampled_from(["overwrite", "truncate", "append"]))
def test_a_load_returns_the_stored_array_exactly_or_nothing(values, where, at, patch, how, caplog):
    """Any damage to either file: the load gives the array that was stored, bit for bit,
    or recomputes (None) after one warning; never other numbers."""
    from lcr.sim.predictions import PredictionCache

    stored = np.array(values, dtype=np.float64)
    with tempfile.TemporaryDirectory() as folder:
        cache = PredictionCache(folder)
        cache._store("d" * 32, stored, {"predictor": "test"})
        path = Path(folder) / f"{'d' * 32}{where}"
        data = path.read_bytes()
        i = int(at * len(data))
        path.write_bytes({"overwrite": data[:i] + patch + data[i + len(patch):], "truncate": data[:i],
                          "append": data + patch}[how])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lcr.sim.predictions"):
            loaded = cache._load("d" * 32, len(stored))
        if loaded is None:
            assert len(caplog.records) == 1 and not path.with_suffix(".npy").exists()
        else:
            assert loaded.tobytes() == stored.tobytes() and caplog.records == []


def test_a_cache_write_that_fails_leaves_no_file_behind(trace, clean, tmp_path):
    """Disk full while the pass is kept: the sweep still answers, warns, and leaves no
    partial or temporary file; the next run computes and keeps it."""
    from lcr.sim.predictions import PredictionCache

    values, _, _ = clean
    folder = tmp_path / "predictions"
    script = (f"import hashlib; from lcr.traces import generate; "
              f"from lcr.sim.predictions import PredictionCache; "
              f"v = PredictionCache({str(folder)!r}).get({PREDICTOR!r}, "
              f"generate({TRACE!r}), capacity={CAPACITY}); "
              f"print(hashlib.sha256(v.tobytes()).hexdigest())")
    done = run_limited(script, "lightgbm")
    assert done.returncode == 0, done.stderr
    assert "cannot keep predictions" in done.stderr, done.stderr
    assert done.stdout.strip() == hashlib.sha256(values.tobytes()).hexdigest()  # the answer is right
    assert not folder.exists() or only_file_in(folder) == []
    cache = PredictionCache(folder)
    assert np.array_equal(cache.get(PREDICTOR, trace, capacity=CAPACITY), values, equal_nan=True) and cache.passes == 1
    assert sorted(p.suffix for p in folder.iterdir()) == [".json", ".npy"]
