#!/usr/bin/env bash
# One command for an engineer with one H200, under 5 minutes: the kernel tests compiled for real
# (not interpreted), benchmarks/kernels.py (each Triton kernel against torch, the two MLA prefill
# forms against each other), benchmarks/gpu_decode.py at its quick sizes (a full-width 2-layer
# GLM-5.3 with random FP8 weights decoding over an FP8 KV cache, per-kernel HBM bandwidth against
# the copy bandwidth measured in the same run), and the engine: `horizon serve` on a random
# full-width 2-layer GLM-5.3 checkpoint written on the GPU, 64 concurrent streaming requests
# through the OpenAI API (benchmarks/serve_load.py). One table at the end (gpu_check_summary.py);
# every stage's log and JSON under $OUT (or a temp dir).
#
#   scripts/gpu_check.sh                        on the GPU machine, from anywhere in the checkout
#   scripts/gpu_check.sh --extended             then also the FP8 GEMM / fused-MoE benchmarks, the
#                                               full-width forward per weight format and gpu_decode's
#                                               full sizes (about 8 more minutes)
#   scripts/gpu_check.sh --dry-run [--extended] the same stages at tiny sizes on a CPU
#                                               (tests/test_gpu_check.py runs it)
#
# It uses the machine's own python3 (torch and triton there, no venv; PYTHON overrides). The
# engine stage needs fastapi, uvicorn and pydantic, which the GPU image lacks: it installs them
# offline from .whl/ (scripts/gpu_wheels.sh fetches them on a machine with network; carry .whl/).
# Every stage has a time limit and fails soft: its error is printed and the script goes on.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DRY=0
EXTENDED=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --extended) EXTENDED=1 ;;
    *) echo "gpu_check.sh: unknown argument $arg (expected --dry-run, --extended)" >&2; exit 2 ;;
  esac
done
T0=$(date +%s)
RESULTS="${OUT:-$(mktemp -d)}"
mkdir -p "$RESULTS"
STAGES=()
NAMES=()
LANES=1  # stages at once: one on the GPU (each stage's timings need the device to itself)

stage() {  # stage NAME TIMEOUT_S COMMAND...
  local name=$1
  NAMES+=("$name")
  if [ "$LANES" -gt 1 ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$LANES" ]; do wait -n; done
    run_stage "$@" &
  else
    echo "=== $name (limit ${2}s): ${*:3}"  # before it runs: on the GPU one watches the stages go by
    run_stage "$@"
    report_stage "$name"
  fi
}

run_stage() {  # the stage's log, then NAME:RC:SECONDS in $RESULTS/NAME.stage
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*" > "$RESULTS/$name.head"
  timeout "$limit" "$@" > "$RESULTS/$name.log" 2>&1
  rc=$?
  echo "$name:$rc:$(( $(date +%s) - t0 ))" > "$RESULTS/$name.stage"
}

report_stage() {  # printed in the stages' order, whichever finished first
  local name=$1 rc
  [ "$LANES" -gt 1 ] && cat "$RESULTS/$name.head"
  tail -n 25 "$RESULTS/$name.log"
  rc=$(cut -d: -f2 "$RESULTS/$name.stage")
  [ "$rc" -ne 0 ] && echo "!!! $name failed (rc=$rc; 124 = over its time limit); going on"
  STAGES+=("$(cat "$RESULTS/$name.stage")")
}

server_deps() {  # the engine stage's imports; installed offline from .whl/ when missing
  "$PY" -c "import fastapi, uvicorn, pydantic" 2>/dev/null && return 0
  if compgen -G ".whl/*.whl" > /dev/null; then
    echo "installing the server's packages from .whl/ into $RESULTS/site (offline)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RESULTS/site" .whl/*.whl \
      && export PYTHONPATH="$RESULTS/site:$PYTHONPATH"
  fi
  "$PY" -c "import fastapi, uvicorn, pydantic" || echo "!!! the engine stage needs fastapi, uvicorn and pydantic:" \
    "run scripts/gpu_wheels.sh where there is network and bring .whl/ along"
}

# Stage limits (s). On the GPU they add up, with the preflight, to under 5 minutes.
if [ $DRY -eq 1 ]; then
  L_TESTS=300 L_KERNELS=300 L_DECODE=300 L_ENGINE=300 L_EXT=300
  # One cheap test file: the stage's wiring (pytest, junit XML, the table), not the kernels. The
  # plugins this file does not use cost more than it does.
  TESTS=(-p no:hypothesispytest -p no:textual-snapshot -p no:syrupy tests/kernels/test_mla_prefill_reference.py)
  KERNELS=(--only mla_prefill)
  DECODE=(--dry-run)
  ENGINE=(--dry-run)
  # NOTE: the dry-run stages are independent CPU jobs, each mostly one thread of Python (its own
  # torch import, a tiny model): two at a time, so a two-core machine does not leave one core idle.
  LANES=2
  # One intra-op thread each: at these sizes torch's OpenMP threads only spin against each other
  # (glm53_forward --dry-run: 5 s with one thread, 15 s with two, on a loaded two-core machine).
  export OMP_NUM_THREADS=1
else
  L_TESTS=70 L_KERNELS=40 L_DECODE=50 L_ENGINE=120 L_EXT=120
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
  # The Triton kernels against their references, compiled on the GPU, and the sm_90 compile checks.
  # The other files in tests/kernels are CPU tests (several need a newer transformers than the GPU
  # image's) or run benchmarks that are stages of their own.
  TESTS=(tests/kernels/triton_kernels tests/kernels/test_triton_compiles.py)
  "$PY" -c "import xdist" 2>/dev/null && TESTS+=(-n 8)  # compiling kernels is CPU-bound: 16 cores
  KERNELS=(--quick)
  DECODE=(--quick)
  ENGINE=(--deadline-s $((L_ENGINE - 10)))
fi

stage kernel_tests "$L_TESTS" "$PY" -m pytest -q -p no:cacheprovider --maxfail=10 --junitxml "$RESULTS/kernel_tests.xml" "${TESTS[@]}"
stage kernels "$L_KERNELS" "$PY" benchmarks/kernels.py "${KERNELS[@]}" --json "$RESULTS/kernels.json"
stage gpu_decode "$L_DECODE" "$PY" benchmarks/gpu_decode.py "${DECODE[@]}" --json "$RESULTS/gpu_decode.json"
server_deps
stage engine "$L_ENGINE" "$PY" benchmarks/serve_load.py "${ENGINE[@]}" --server-log "$RESULTS/server.log" \
  --json "$RESULTS/engine.json"
if [ $EXTENDED -eq 1 ]; then
  stage fp8_gemm "$L_EXT" "$PY" benchmarks/fp8_gemm.py --quick --json "$RESULTS/fp8_gemm.json"
  stage fused_moe_fp8 "$L_EXT" "$PY" benchmarks/fused_moe_fp8.py --quick --json "$RESULTS/fused_moe_fp8.json"
  if [ $DRY -eq 1 ]; then
    stage glm53_forward "$L_EXT" "$PY" benchmarks/glm53_forward.py --dry-run --json "$RESULTS/glm53_forward.json"
  else
    stage glm53_forward "$L_EXT" "$PY" benchmarks/glm53_forward.py --json "$RESULTS/glm53_forward.json"
    stage gpu_decode_full 240 "$PY" benchmarks/gpu_decode.py --json "$RESULTS/gpu_decode_full.json"
  fi
fi

if [ "$LANES" -gt 1 ]; then
  wait
  for name in "${NAMES[@]}"; do report_stage "$name"; done
fi
"$PY" benchmarks/gpu_check_summary.py "$RESULTS" "${STAGES[@]}"
rc=$?
echo "gpu_check: $(( $(date +%s) - T0 )) s in all; logs and JSON in $RESULTS"
exit $rc
