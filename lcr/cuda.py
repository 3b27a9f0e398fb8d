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
    """Whether lcr's CUDA engines can run here. Raises RuntimeError when torch sees a
    CUDA device but lcr._cuda does not (e.g. its static CUDA runtime needs a newer
    driver), so GPU tests and benchmarks fail loudly instead of skipping."""
    try:
        module = cuda_module()
    except ImportError:
        return False
    if module.device_count() > 0:
        return True
    if _torch_sees_cuda():
        raise RuntimeError(f"torch sees a CUDA device but lcr._cuda does not: {module.device_error()} "
                           "(lcr._cuda links the CUDA runtime of the nvcc it was built with; "
                           "update the driver or rebuild with a matching nvcc)")
    return False


def _torch_sees_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
