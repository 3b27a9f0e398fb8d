#!/usr/bin/env bash
# Everything lcr checks on a CUDA GPU, in one run (about 2.5 minutes on an H200):
#   bash benchmarks/gpu_checks.sh [OUT_DIR]      (default: gpu_results/)
# 1. builds lcr's engines in place (LCR_CUDA_ARCHS, default 90: Hopper);
# 2. the GPU tests (pytest -m gpu), which fail loudly when torch sees a GPU lcr._cuda does not;
# 3. compute-sanitizer memcheck, racecheck and synccheck on tests/gpu_sanitize_slabhash.py;
# 4. benchmarks/slabhash_gpu.py (find/insert table and SLS on hits at three batch sizes).
# Logs and the benchmark's JSON go to OUT_DIR. Exit status 1 when there is no usable GPU or a
# GPU test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_results}
mkdir -p "$out" 2>/dev/null || { echo "gpu_checks: cannot create the output folder $out"; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD LCR_CUDA_ARCHS=${LCR_CUDA_ARCHS:-90}
python=${PYTHON:-python3}
started=$(date +%s)
stage() { echo "[$(( $(date +%s) - started )) s] $*"; }

{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nvcc --version | tail -1; } \
    > "$out/device.txt" 2>&1
if ! "$python" setup.py -q build_ext --inplace > "$out/build.log" 2>&1; then
    tail -30 "$out/build.log"
    exit 1
fi
stage built
if ! "$python" -c "import sys; from lcr.cuda import gpu_available; sys.exit(not gpu_available())" \
        >> "$out/device.txt" 2>&1; then
    echo "gpu_checks: no usable CUDA GPU here ($out/device.txt); nothing checked"
    exit 1
fi

"$python" -m pytest -q -m gpu tests/test_slabhash_cache.py tests/test_sls.py tests/test_slab_hash.py \
    tests/test_slab_warp_model.py tests/test_slabhash_safety.py tests/test_moe.py > "$out/gpu_tests.txt" 2>&1
tests=$?
stage "gpu tests: $(tail -1 "$out/gpu_tests.txt")"

for tool in memcheck racecheck synccheck; do
    echo "== $tool"
    timeout 300 compute-sanitizer --tool "$tool" "$python" tests/gpu_sanitize_slabhash.py 2>&1 | tail -3
done > "$out/sanitize.txt"
stage "sanitizers: $(grep -c ' 0 errors\| 0 hazards' "$out/sanitize.txt") of 3 clean"

"$python" benchmarks/slabhash_gpu.py --batches 2048,16384,65536 --out "$out/slabhash_gpu.json" \
    > "$out/slabhash_gpu.log" 2>&1
stage "benchmark rc $?"
exit $(( tests != 0 ))
