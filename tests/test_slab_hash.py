"""The key -> slabset hash: Python spec, C++ twin and CUDA kernel agree."""
from __future__ import annotations

import numpy as np
import pytest

from lcr import _native
from lcr.cuda import cuda_module, gpu_available
from lcr.embedding import slabset_of

KEYS = np.concatenate([np.arange(-5, 2000), np.random.default_rng(0).integers(-2**63, 2**63 - 1, 3000)])


@pytest.mark.parametrize("num_slabsets", [1, 7, 1024, 100_003])
def test_cpu_twin_matches_the_spec(num_slabsets):
    expected = [slabset_of(int(k), num_slabsets) for k in KEYS]
    assert _native.slabsets_of(KEYS, num_slabsets).tolist() == expected


def test_dense_ids_spread_evenly():
    counts = np.bincount(_native.slabsets_of(np.arange(64_000), 1000), minlength=1000)
    assert counts.min() > 30 and counts.max() < 100  # mean 64


def test_zero_slabsets_is_an_error():
    with pytest.raises(ValueError):
        _native.slabsets_of(KEYS, 0)
    with pytest.raises(ValueError):
        slabset_of(1, 0)


def test_cuda_module_imports_without_a_gpu_and_fails_cleanly():
    try:
        cuda = cuda_module()
    except ImportError:
        pytest.skip("built without nvcc")
    if gpu_available():
        assert cuda.slabsets_of(KEYS, 1024).tolist() == _native.slabsets_of(KEYS, 1024).tolist()
    else:
        assert cuda.device_count() == 0
        with pytest.raises(RuntimeError, match="cuda|CUDA"):
            cuda.slabsets_of(KEYS, 1024)


def test_gpu_available_fails_loudly_when_only_torch_sees_a_gpu(monkeypatch):
    # An old driver under lcr._cuda's static runtime: torch sees the GPU, lcr._cuda none.
    # That combination cannot be produced on this machine, so both sides are stood in for.
    import lcr.cuda

    class NoDevice:
        device_count = staticmethod(lambda: 0)
        device_error = staticmethod(lambda: "CUDA driver version is insufficient for CUDA runtime version")

    monkeypatch.setattr(lcr.cuda, "cuda_module", lambda: NoDevice)
    monkeypatch.setattr(lcr.cuda, "_torch_sees_cuda", lambda: True)
    with pytest.raises(RuntimeError, match="driver version is insufficient"):
        lcr.cuda.gpu_available()
    monkeypatch.setattr(lcr.cuda, "_torch_sees_cuda", lambda: False)
    assert lcr.cuda.gpu_available() is False
