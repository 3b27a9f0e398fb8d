#!/usr/bin/env bash
# Everything lcr checks on a CUDA GPU, in one run (budget: under 6 minutes on an H100/H200):
#   bash benchmarks/gpu_checks.sh [OUT_DIR]      (default: gpu_results/)
# 1. builds lcr's engines in place (LCR_CUDA_ARCHS, default 90: Hopper);
# 2. the GPU tests (pytest -m gpu: two-step and fused SLS, no-sync counts, two streams x two
#    threads), which fail loudly when torch sees a GPU lcr._cuda does not;
# 3. compute-sanitizer memcheck and synccheck on the two-step and the fused workloads (the
#    kernels use no shared memory, so racecheck has nothing to check);
# 4. benchmarks/slabhash_gpu.py (find/insert table; SLS on hits, two-step and fused, and fused
#    with 1% misses from pinned host memory, against embedding_bag, at three batch sizes);
# 5. the DLRM experiment: lcr bench sls on a 2x10^7-row table with lookups shaped by Meta's
#    locality statistics, cache at 1/2/3%, LRU, LFU and LARU (oracle predictions: the ceiling;
#    the online LightGBM model on its CPU thread, its cost on the clock).
# Logs and JSON go to OUT_DIR; copy them to benchmarks/results/ with the device's name.
# Exit status 1 when there is no usable GPU or a GPU test failed.
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

"$python" -m pytest -q -m gpu tests/test_slabhash_cache.py tests/test_sls.py tests/test_sls_validation.py \
    tests/test_slab_fused.py tests/test_slab_hash.py tests/test_slab_warp_model.py tests/test_slabhash_safety.py \
    tests/test_moe.py > "$out/gpu_tests.txt" 2>&1
tests=$?
stage "gpu tests: $(tail -1 "$out/gpu_tests.txt")"

for workload in gpu_sanitize_slabhash gpu_sanitize_fused; do
    for tool in memcheck synccheck; do
        echo "== $tool $workload"
        timeout 90 compute-sanitizer --tool "$tool" "$python" "tests/$workload.py" 2>&1 | tail -3
    done
done > "$out/sanitize.txt"
stage "sanitizers: $(grep -c ' 0 errors\| 0 hazards' "$out/sanitize.txt") of 4 clean"

timeout 120 "$python" benchmarks/slabhash_gpu.py --batches 2048,16384,65536 --out "$out/slabhash_gpu.json" \
    > "$out/slabhash_gpu.log" 2>&1
stage "slabhash benchmark rc $?"

dlrm=(--trace dlrm --device cuda --table-rows 20000000 --cache-ratio 0.01,0.02,0.03 --batch-sizes 2048
      --policies lru,lfu,laru)
timeout 100 "$python" -m lcr bench sls "${dlrm[@]}" --predictor oracle --batches 20 --warmup 20 \
    --json "$out/sls_dlrm_oracle.json" > "$out/sls_dlrm_oracle.txt" 2>&1
stage "dlrm (oracle) rc $?"
timeout 100 "$python" -m lcr bench sls "${dlrm[@]}" --predictor lightgbm --batches 5 --warmup 10 \
    --json "$out/sls_dlrm_lightgbm.json" > "$out/sls_dlrm_lightgbm.txt" 2>&1
stage "dlrm (lightgbm) rc $?"
exit $(( tests != 0 ))
