"""Test-only stand-in for sgl_kernel (SGLang's CUDA kernels) on a CPU-only machine.

SGLang imports it eagerly; the CPU engine with the torch_native attention backend does
not need its kernels. Any attribute, and any ``sgl_kernel.*`` submodule, is a mock.
"""
import importlib.abc
import importlib.machinery
import sys
from unittest.mock import MagicMock


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return MagicMock(name=f"sgl_kernel.{name}")


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = lambda name: MagicMock(name=f"{module.__name__}.{name}")


sys.meta_path.insert(0, _Submodules())
__version__ = "0.0.0+stub"
