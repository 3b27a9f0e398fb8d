"""Test-only stand-in for torchvision on a CPU-only machine (the PyPI wheels link CUDA).

SGLang imports torchvision for multimodal preprocessing at import time; the prefix
cache never calls it. Every attribute resolves to an inert placeholder.
"""
import sys
import types


class _Placeholder:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


__version__ = "0.0.0+stub"
for _name in ("transforms", "transforms.functional", "transforms.v2", "transforms.v2.functional",
              "io", "ops", "models", "utils", "datasets"):
    sys.modules[f"{__name__}.{_name}"] = _Module(f"{__name__}.{_name}")
transforms = sys.modules[f"{__name__}.transforms"]
io = sys.modules[f"{__name__}.io"]
ops = sys.modules[f"{__name__}.ops"]
