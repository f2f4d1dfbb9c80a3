#!/usr/bin/env bash
# The project's measuring call on the H200 (device tool), everything in one command:
#   here first:  bash scripts/gpu_measure.sh --build-only     (libraries into cuda_impl/_build)
#   device run:  FA2_GIT_COMMIT=<commit> bash scripts/gpu_measure.sh   with carry ["cuda_impl/_build"]
# Two lanes, one per GPU when the machine has two (nvidia-h200-x2), one after the other otherwise:
#   timing      the quick and seed sweeps (every backend; the driver checks each row against the oracle
#               before timing it), then the full oracle matrix of the Triton variants;
#   correctness GPU tests, the full oracle matrix of the SDPA peers and the CUDA kernels, the ladder's
#               sanitizers, then compute-sanitizer on the Hopper kernels (scripts/dev.py sanitize FAMILY).
# Each step has its own time limit so that a slow or hung one cannot take the others' results with it.
# GPU_MEASURE_LANES (default "timing correctness") picks the lanes: "correctness" alone re-checks a
# kernel change without the sweeps, and on two GPUs it gives the Hopper sanitizers the second one.
# GPU_MEASURE_EXTRA, when set, is one more command (bash -c) run at the end of the first GPU's work, its
# output in logs/extra.log: e.g. `python3 scripts/dev.py same-bits` or `... paired` beside the sweeps or
# checks of the same call.
# $OUT receives env.json, quick.csv, seed.csv, quant.csv, summary.txt and logs.tgz (the device tool
# returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONWARNINGS=ignore::UserWarning

if [ "${1:-}" = "--build-only" ]; then
  # the kernels, the quantizers, the sm_120a kernels' sm_90a emulation build (their oracle test), ceilings
  python3 -m cuda_impl.toolchain >/dev/null && python3 -m compare.ceilings --build-only || exit 1
  python3 -c "from cuda_impl import toolchain, quant, sm120
for spec in (quant.library_spec(), sm120.library_spec(emulate=True)): toolchain.build_library(spec)" || exit 1
  find cuda_impl/_build -name '*.o' -delete
  exit 0
fi

OUT=${OUT:-/tmp/out}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
python3 -m compare env > "$OUT/env.json"
python3 -c "from cuda_impl import _lib; _lib.load()" || { echo "carried CUDA build does not load here"; exit 1; }

# step LANE LIMIT NAME CMD...: run CMD with a time limit, its output appended to logs/NAME.log
step() {
  local lane=$1 limit=$2 name=$3; shift 3
  local t0=$SECONDS
  timeout "$limit" "$@" >> "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "[$lane] $name rc=$rc $((SECONDS - t0))s (limit ${limit}s)" | tee -a "$LOGS/steps.txt"
  return $rc
}

timing_lane() {
  step timing 280 quick python3 -m compare run --sweep quick --out "$OUT/quick.csv" --no-progress
  step timing 50 seed python3 -m compare run --sweep seed --out "$OUT/seed.csv" --no-progress
  step timing 200 check-triton python3 -m compare check --backends 'triton:*'
}

extra_step() {
  if [ -n "${GPU_MEASURE_EXTRA:-}" ]; then
    step "$1" "${GPU_MEASURE_EXTRA_LIMIT:-200}" extra bash -c "$GPU_MEASURE_EXTRA"
  fi
}

correctness_lane() {
  # every GPU test but test_gpu_oracle.py's matrix test, which repeats `compare check` below (1064 cases)
  step correctness 400 pytest-gpu python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/test_formats.py tests/test_bench.py tests/test_cuda_ceilings.py tests/test_cuda_gpu.py \
    tests/test_cuda_hopper.py tests/test_cuda_hopper_fp8.py tests/test_cuda_hopper_mx.py \
    tests/test_cuda_quant.py tests/test_cuda_sm120.py tests/test_triton_gpu.py \
    tests/test_gpu_oracle.py::test_gpu_poisoning_exposes_unwritten_output \
    tests/test_gpu_oracle.py::test_fp8_plain_reference_uses_tensor_cores_and_stays_close_to_fp32
  step correctness 130 check-sdpa-cuda python3 -m compare check --backends 'sdpa:*' 'cuda:*'
  # the split last round of cuda:hopper and cuda:hopper-fp8 (its workspace in global memory): memcheck only
  for family in hopper hopper-fp8; do
    step correctness 90 "sanitize-split-$family" compute-sanitizer --tool memcheck python3 scripts/dev.py sanitize $family --split
  done
  # the mma.sync ladder (v1..v5): small launches, memcheck and racecheck
  for tool in memcheck racecheck; do
    step correctness 100 "sanitize-ladder-$tool" compute-sanitizer --tool $tool python3 scripts/dev.py sanitize ladder
  done
  step correctness 25 quant-bench python3 scripts/bench_quant_gpu.py --out "$OUT/quant.csv"
}

hopper_sanitizers() {
  # every kernel: racecheck with a kernel filter (--kernel-name kns=fwd_) crashes in the sanitizer on
  # these kernels; torch's reductions in the oracle show hazards of their own, so the summary counts the
  # races reported in the project's kernels (fwd_*) apart. Racecheck of the bf16 launches needs more than
  # 150 s since the clustered 176-key shape (session 19), the fp8 launches about 120 s since d256.
  local family tool limit
  for family in hopper hopper-fp8 hopper-mx; do
    for tool in memcheck racecheck; do
      limit=150
      [ $tool = racecheck ] && [ $family != hopper-mx ] && limit=300
      step correctness $limit "sanitize-$family" compute-sanitizer --tool $tool python3 scripts/dev.py sanitize $family
    done
  done
}

GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "GPUs: $GPUS" | tee "$LOGS/steps.txt"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader >> "$LOGS/steps.txt"
LANES=${GPU_MEASURE_LANES:-timing correctness}
lane() { [[ " $LANES " == *" $1 "* ]]; }
if [ "$GPUS" -ge 2 ] && lane timing; then
  (export CUDA_VISIBLE_DEVICES=0; timing_lane; extra_step timing) &
  lane correctness && (export CUDA_VISIBLE_DEVICES=1; correctness_lane; hopper_sanitizers) &
  wait
elif [ "$GPUS" -ge 2 ]; then
  lane correctness && (export CUDA_VISIBLE_DEVICES=0; correctness_lane; extra_step correctness) &
  lane correctness && (export CUDA_VISIBLE_DEVICES=1; hopper_sanitizers) &
  wait
else
  lane timing && { timing_lane; extra_step timing; }
  lane correctness && { correctness_lane; hopper_sanitizers; }
  lane timing || extra_step correctness
fi

{
  cat "$LOGS/steps.txt"
  echo "== oracle"
  grep -hE "^oracle check|passed|FAIL|ERROR" "$LOGS"/check-*.log "$LOGS"/pytest-gpu.log 2>/dev/null | tail -40
  echo "== sanitizers"
  grep -HE "ERROR SUMMARY|RACECHECK SUMMARY|sanitizer" "$LOGS"/sanitize-*.log 2>/dev/null | tail -24
  for f in "$LOGS"/sanitize-*.log; do
    [ -f "$f" ] && echo "$(basename "$f"): $(grep -c 'Race reported.*fwd_' "$f") races reported in fwd_* kernels"
  done
  [ -f "$LOGS/extra.log" ] && { echo "== extra"; tail -40 "$LOGS/extra.log"; }
  if lane correctness; then echo "== quantizers"; tail -12 "$LOGS/quant-bench.log"; fi
  if lane timing; then
    echo "== quick"
    sed -n '/^TFLOP/,$p' "$LOGS/quick.log"
    echo "== seed"
    sed -n '/^TFLOP/,$p' "$LOGS/seed.log"
  fi
} > "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
cat "$OUT/summary.txt"
