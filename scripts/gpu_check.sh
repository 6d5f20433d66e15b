#!/usr/bin/env bash
# One command for an engineer with one H200 (about 5 minutes): the kernel tests compiled for real
# (not interpreted), the FP8 GEMM and fused-MoE benchmarks at GLM-5.3 shapes (--quick), and a
# full-width 2-layer GLM-5.3 forward with random FP8 weights made on the GPU, and its decode over an
# FP8 KV cache at batch 1/16/64 x 8K/64K context with per-kernel HBM bandwidth. It uses the
# machine's own python3 (torch + triton there; no venv). Every stage fails soft: a failing stage
# prints its error and the script goes on. One table at the end; full JSON under $OUT if set.
#
#   scripts/gpu_check.sh            on the GPU machine, from the repository root
#   scripts/gpu_check.sh --dry-run  the same stages on a CPU at tiny sizes (tests/test_gpu_check.py)
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
RESULTS="${OUT:-$(mktemp -d)}"
mkdir -p "$RESULTS"
STAGES=()

stage() {  # stage NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2 t0 rc
  shift 2
  echo "=== $name (limit ${limit}s): $*"
  t0=$(date +%s)
  timeout "$limit" "$@" > "$RESULTS/$name.log" 2>&1
  rc=$?
  tail -n 40 "$RESULTS/$name.log"
  [ $rc -ne 0 ] && echo "!!! $name failed (rc=$rc; 124 = over its time limit); going on"
  STAGES+=("$name:$rc:$(( $(date +%s) - t0 ))")
}

if [ $DRY -eq 1 ]; then
  stage kernel_tests 300 "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_fp8_gemm_reference.py
  stage fp8_gemm 300 "$PY" benchmarks/fp8_gemm.py --quick --json "$RESULTS/fp8_gemm.json"
  stage fused_moe_fp8 300 "$PY" benchmarks/fused_moe_fp8.py --quick --json "$RESULTS/fused_moe_fp8.json"
  stage glm53_forward 300 "$PY" benchmarks/glm53_forward.py --dry-run --json "$RESULTS/glm53_forward.json"
  stage gpu_decode 300 "$PY" benchmarks/gpu_decode.py --dry-run --json "$RESULTS/gpu_decode.json"
else
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
  # Compiled on the GPU: triton_kernels/ is collected directly there; the interpreter subprocess
  # and the kernels benchmark's own test are left out (the latter is stage-sized by itself).
  # (includes the fused indexer top-k and FP8-direct sparse MLA tests, compiled)
  stage kernel_tests 110 "$PY" -m pytest -q -p no:cacheprovider -x tests/kernels \
    --ignore=tests/kernels/test_triton_interpreted.py --ignore=tests/kernels/test_benchmark_quick.py
  stage fp8_gemm 90 "$PY" benchmarks/fp8_gemm.py --quick --json "$RESULTS/fp8_gemm.json"
  stage fused_moe_fp8 45 "$PY" benchmarks/fused_moe_fp8.py --quick --json "$RESULTS/fused_moe_fp8.json"
  stage glm53_forward 120 "$PY" benchmarks/glm53_forward.py --json "$RESULTS/glm53_forward.json"
  stage gpu_decode 120 "$PY" benchmarks/gpu_decode.py --json "$RESULTS/gpu_decode.json"
fi

"$PY" benchmarks/gpu_check_summary.py "$RESULTS" "${STAGES[@]}"
