#!/usr/bin/env bash
# Everything lcr checks on a CUDA GPU, in one run (budget: under 6 minutes on an H100/H200):
#   bash benchmarks/gpu_checks.sh [OUT_DIR]      (default: benchmarks/results)
# 1. builds lcr's engines in place (LCR_CUDA_ARCHS, default 90: Hopper);
# 2. the GPU tests (pytest -m gpu: two-step and fused SLS, no-sync counts, two streams x two
#    threads), which fail loudly when torch sees a GPU lcr._cuda does not;
# 3. benchmarks/slabhash_gpu.py (find/insert table; SLS on hits, two-step and fused, and fused
#    with 1% misses from pinned host memory, against embedding_bag, at three batch sizes);
# 4. the DLRM experiment: lcr bench sls on a 2x10^7-row table with lookups shaped by Meta's
#    locality statistics, cache at 1/2/3%, LRU, LFU and LARU (oracle predictions: the ceiling;
#    the online LightGBM model on its CPU thread, its cost on the clock), in one run with the
#    predictor in sync mode (the loop waits for it) and in one with it async (never waits);
# 5. a profile of find, insert and the fused SLS on hits (host and device time per op);
# 6. compute-sanitizer memcheck and synccheck on the two-step and the fused workloads (the
#    kernels use no shared memory, so racecheck has nothing to check).
# One file per check and device (DEV: the GPU's model, e.g. h100), re-runs overwrite:
#   OUT_DIR/gpu_tests_DEV.txt      the device, the GPU tests' summary and the sanitizers'
#   OUT_DIR/slabhash_gpu_DEV.json  step 3
#   OUT_DIR/sls_DEV.json, sls_async_DEV.json  step 4 (lcr bench sls --json)
#   OUT_DIR/fused_profile_DEV.txt  step 5
# The build log and the full outputs go to a scratch folder, named at the end.
# Exit status 1 when there is no usable GPU or a GPU test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results}
mkdir -p "$out" 2>/dev/null || { echo "gpu_checks: cannot create the output folder $out"; exit 2; }
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu_checks.XXXXXX")
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} LCR_CUDA_ARCHS=${LCR_CUDA_ARCHS:-90}
python=${PYTHON:-python3}
started=$(date +%s)
stage() { echo "[$(( $(date +%s) - started )) s] $*"; }

{ echo "# bash benchmarks/gpu_checks.sh, $(date -u +%F), code $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
       "($(git status --porcelain 2>/dev/null | wc -l) paths changed since)"
  nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nvcc --version | tail -1; } \
    > "$logs/device.txt" 2>&1
if ! "$python" setup.py -q build_ext --inplace > "$logs/build.log" 2>&1; then
    tail -30 "$logs/build.log"
    exit 1
fi
stage built
if ! "$python" -c "import sys; from lcr.cuda import gpu_available; sys.exit(not gpu_available())" \
        >> "$logs/device.txt" 2>&1; then
    echo "gpu_checks: no usable CUDA GPU here ($logs/device.txt); nothing checked"
    exit 1
fi
dev=$("$python" benchmarks/slabhash_gpu.py --device-label)

"$python" -m pytest -q -m gpu tests/test_slabhash_cache.py tests/test_sls.py tests/test_sls_validation.py \
    tests/test_slab_fused.py tests/test_slab_hash.py tests/test_slab_warp_model.py tests/test_slabhash_safety.py \
    tests/test_slab_fifo.py tests/test_moe.py > "$logs/gpu_tests.txt" 2>&1
tests=$?
stage "gpu tests: $(tail -1 "$logs/gpu_tests.txt")"
{ cat "$logs/device.txt"; echo "== pytest -m gpu"; tail -3 "$logs/gpu_tests.txt"; } > "$out/gpu_tests_$dev.txt"

timeout 120 "$python" benchmarks/slabhash_gpu.py --batches 2048,16384,65536 --out "$out/slabhash_gpu_$dev.json" \
    > "$logs/slabhash_gpu.log" 2>&1
stage "slabhash benchmark rc $?"

timeout 200 "$python" -m lcr bench sls --trace dlrm --device cuda --table-rows 20000000 \
    --cache-ratio 0.01,0.02,0.03 --batch-sizes 2048 --policies lru,lfu,laru --predictor oracle,lightgbm \
    --batches 10 --warmup 10 --json "$out/sls_$dev.json" > "$logs/sls.txt" 2>&1
stage "dlrm (oracle, lightgbm) rc $?"

timeout 150 "$python" -m lcr bench sls --trace dlrm --device cuda --table-rows 20000000 \
    --cache-ratio 0.01,0.02,0.03 --batch-sizes 2048 --policies lru,lfu,laru --predictor lightgbm \
    --prediction-mode async --batches 300 --warmup 50 --json "$out/sls_async_$dev.json" > "$logs/sls_async.txt" 2>&1
stage "dlrm (lightgbm, async) rc $?"

timeout 90 "$python" benchmarks/slabhash_gpu.py --profile > "$out/fused_profile_$dev.txt" 2>&1
stage "profile rc $?"

for workload in gpu_sanitize_slabhash gpu_sanitize_fused; do
    for tool in memcheck synccheck; do
        echo "== $tool $workload"
        timeout 60 compute-sanitizer --tool "$tool" "$python" "tests/$workload.py" 2>&1 | tail -3
    done
done > "$logs/sanitize.txt"
stage "sanitizers: $(grep -c ' 0 errors\| 0 hazards' "$logs/sanitize.txt") of 4 clean"
{ echo "== compute-sanitizer"; cat "$logs/sanitize.txt"; } >> "$out/gpu_tests_$dev.txt"

echo "gpu_checks: results in $out/*_$dev.*, logs in $logs"
exit $(( tests != 0 ))
