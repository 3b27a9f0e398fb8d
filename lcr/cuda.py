"""Access to the optional CUDA engines, with a clear message when they are absent."""
from __future__ import annotations


def cuda_module():
    """``lcr._cuda``, or ImportError saying how to get it."""
    try:
        from lcr import _cuda
    except ImportError as err:
        raise ImportError("lcr was built without its CUDA engines (nvcc was not found at install "
                          "time); reinstall with nvcc on PATH or LCR_CUDA=1") from err
    return _cuda


def gpu_available() -> bool:
    try:
        return cuda_module().device_count() > 0
    except ImportError:
        return False
