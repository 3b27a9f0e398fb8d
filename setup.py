"""Build lcr's native engines.

- ``lcr._native``: every ``csrc/cpu/*.cpp`` in one pybind11 module (always built).
- ``lcr._cuda``: every ``csrc/cuda/*.cu`` plus its pybind11 bindings, built only when
  ``nvcc`` is found (or ``LCR_CUDA=1``) and skipped with a message otherwise
  (or when ``LCR_CUDA=0``). The CUDA runtime is linked statically so that importing
  the module on a machine without a GPU still works; calls then report no device.
"""
import glob
import os
import shutil
import subprocess
import sys

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

# Compile the many small engine files on every core (LCR_BUILD_JOBS overrides).
ParallelCompile("LCR_BUILD_JOBS", default=os.cpu_count() or 1).install()

CPU_SOURCES = sorted(glob.glob("csrc/cpu/*.cpp"))
CUDA_SOURCES = sorted(glob.glob("csrc/cuda/*.cu")) + sorted(glob.glob("csrc/cuda/*.cpp"))
CXX_FLAGS = ["-O3", "-std=c++17", "-fvisibility=hidden"]


def find_nvcc():
    wanted = os.environ.get("LCR_CUDA", "auto")
    if wanted == "0":
        return None
    nvcc = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None
    )
    if nvcc is None and wanted == "1":
        sys.exit("LCR_CUDA=1 but nvcc was not found on PATH")
    return nvcc


def find_cuda_home(nvcc):
    """The toolkit root holding include/cuda_runtime.h (nvcc may be a wrapper script)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
    for root in filter(None, candidates):
        if os.path.exists(os.path.join(root, "include", "cuda_runtime.h")):
            return root
    sys.exit(f"found {nvcc} but no CUDA toolkit with include/cuda_runtime.h; set CUDA_HOME")


class BuildWithCuda(build_ext):
    """build_ext that compiles ``.cu`` sources with nvcc and links them into the extension."""

    def build_extension(self, ext):
        cu_sources = [s for s in ext.sources if s.endswith(".cu")]
        if not cu_sources:
            return super().build_extension(ext)
        nvcc = ext.nvcc
        cuda_home = find_cuda_home(nvcc)
        build_dir = os.path.join(self.build_temp, "cuda")
        os.makedirs(build_dir, exist_ok=True)
        objects = []
        for src in cu_sources:
            obj = os.path.join(build_dir, os.path.basename(src) + ".o")
            cmd = [nvcc, "-c", src, "-o", obj, "-O3", "-std=c++17", "-Xcompiler", "-fPIC",
                   "-Icsrc", *(f"-gencode=arch=compute_{a},code=sm_{a}" for a in ext.cuda_archs),
                   f"-gencode=arch=compute_{ext.cuda_archs[-1]},code=compute_{ext.cuda_archs[-1]}"]
            print(" ".join(cmd))
            subprocess.check_call(cmd)
            objects.append(obj)
        ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
        ext.extra_objects = list(ext.extra_objects or []) + objects
        ext.library_dirs = list(ext.library_dirs or []) + [os.path.join(cuda_home, "lib64")]
        ext.include_dirs = list(ext.include_dirs or []) + [os.path.join(cuda_home, "include")]
        ext.libraries = list(ext.libraries or []) + ["cudart_static", "rt", "dl", "pthread"]
        super().build_extension(ext)


def extensions():
    exts = [Pybind11Extension("lcr._native", CPU_SOURCES, include_dirs=["csrc"],
                              extra_compile_args=CXX_FLAGS, cxx_std=17)]
    nvcc = find_nvcc()
    if not any(s.endswith(".cu") for s in CUDA_SOURCES):
        return exts
    if nvcc is None:
        print("lcr: nvcc not found, skipping the CUDA engines (lcr._cuda)")
        return exts
    cuda = Pybind11Extension("lcr._cuda", CUDA_SOURCES, include_dirs=["csrc"],
                             extra_compile_args=CXX_FLAGS, cxx_std=17)
    cuda.nvcc = nvcc
    # Hopper (H100/H200) and Ampere; PTX of the newest for anything later.
    cuda.cuda_archs = os.environ.get("LCR_CUDA_ARCHS", "80;90").split(";")
    exts.append(cuda)
    return exts


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildWithCuda})
