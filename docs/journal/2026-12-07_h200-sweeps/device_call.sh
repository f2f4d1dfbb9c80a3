# One script, two calls, from main (the library carried in .devcarry/cuda_build.tar.xz, with Triton's compiled
# entry):
# PART=mla: the MLA and decode GPU suites of both backends on main's own build (ce9c937's FlashMLA order had only
#   run as the FA_MLA_EARLY_S experiment build), compute-sanitizer memcheck / racecheck / synccheck on small wgmma
#   MLA launches (block B's left-half refill moved later), then the mla sweep (issue 34's published run).
# PART=dims: the head-dim and local GPU suites of both backends (Q/K 192 with V 128 on its own kernels, the d80 / d96
#   tiles, local d64 on three consumers), then the headdims and decode sweeps (issue 32's and 31's published runs).
# PART=all: the MLA suites, then the mla, headdims and decode sweeps in one call.
# PART=every: the mla, headdims, decode, varlen and local sweeps, each cut to the time left of TOTAL, then every
#   GPU test in the time left.
# PART=tests: every GPU test, the decode, MLA, head-dim, local and varlen files first (SKIP: files to leave out).
# PART=local: the local sweep (finding 6; local d64 on three consumers for windows above 1k keys).
# device run: PART=mla FA2_GIT_COMMIT=<40 hex> bash docs/journal/2026-12-07_h200-sweeps/device_call.sh (carry .devcarry)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
python3 -c "
import tarfile
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('cuda_impl/_build')"
# the two compiled decode entries (torch ABI): carried when built here from the GPU machine's torch wheel, else
# built there for the running torch, before any timing
if [ -f .devcarry/triton_build.tar.xz ]; then
  python3 -c "import tarfile; tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')"
else
  python3 -m triton_impl.native > $OUT/native_builds.log 2>&1; echo "triton entry rc=$?"
fi
ls cuda_impl/_build | grep -q cuda_fa_native || \
  { python3 -m cuda_impl.toolchain --native >> $OUT/native_builds.log 2>&1; echo "cuda entry rc=$?"; }
mkdir -p runs
gpu_tests() {  # LIMIT TESTS...
  local limit=$1; shift
  timeout $limit python3 -m pytest -q -p no:cacheprovider -m gpu "$@" >> $OUT/${PART}_pytest.log 2>&1
  echo "GPU tests rc=$? at ${SECONDS}s"; tail -1 $OUT/${PART}_pytest.log; grep -E "^(FAILED|ERROR)" $OUT/${PART}_pytest.log | head
}
sweep() {  # NAME LIMIT (cut to what is left of TOTAL, less 20 s to copy back)
  local limit=$(( $2 < ${TOTAL:-575} - SECONDS - 20 ? $2 : ${TOTAL:-575} - SECONDS - 20 ))
  [ $limit -lt 20 ] && { echo "$1 sweep not run: ${SECONDS}s gone"; return; }
  timeout $limit python3 -m compare run --sweep $1 --out runs/$1.csv --no-progress > $OUT/sweep_$1.log 2>&1 \
    || echo "$1 sweep stopped: $?"
  cp runs/$1.csv $OUT/$1.csv; echo "$1 sweep done at ${SECONDS}s, $(grep -c ERROR $OUT/sweep_$1.log) errors"
}
if [ "$PART" = mla ]; then
  gpu_tests 200 tests/test_cuda_mla.py tests/test_triton_mla.py tests/test_cuda_decode.py tests/test_triton_decode.py \
    tests/test_native_entry.py
  for tool in memcheck racecheck synccheck; do
    PYTHONPATH=. timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 \
      docs/journal/2026-12-06_mla-seesaw/sanitize_mla.py > $OUT/mla_$tool.log 2>&1
    echo "$tool rc=$? at ${SECONDS}s"; grep -E "SUMMARY|FAIL|Race reported" $OUT/mla_$tool.log | head -5
  done
  sweep mla 240
  tail -40 $OUT/sweep_mla.log | head -34
elif [ "$PART" = dims ]; then
  gpu_tests 150 tests/test_cuda_headdims.py tests/test_triton_headdims.py tests/test_cuda_local.py
  sweep headdims 240
  sweep decode 150
  tail -24 $OUT/sweep_headdims.log
elif [ "$PART" = all ]; then  # the three sweeps in one call (their GPU suites passed on an H100 the same day)
  gpu_tests 40 tests/test_cuda_mla.py tests/test_triton_mla.py
  sweep mla ${MLA_LIMIT:-220}
  [ "${HEADDIMS_LIMIT:-200}" -gt 0 ] && sweep headdims ${HEADDIMS_LIMIT:-200}
  [ "${DECODE_LIMIT:-120}" -gt 0 ] && sweep decode ${DECODE_LIMIT:-120}
  tail -12 $OUT/sweep_mla.log
elif [ "$PART" = every ]; then  # the five sweeps (earlier H200 runs: rows over 13-78 s each), then GPU tests to the end
  sweep mla ${MLA_LIMIT:-200}
  sweep headdims ${HEADDIMS_LIMIT:-160}
  sweep decode ${DECODE_LIMIT:-110}
  sweep varlen ${VARLEN_LIMIT:-130}
  sweep local ${LOCAL_LIMIT:-80}
  left=$((${TOTAL:-575} - SECONDS))
  [ $left -gt 30 ] && gpu_tests $left tests
  tail -12 $OUT/sweep_mla.log
elif [ "$PART" = tests ]; then  # the GPU tests, the issues' matrices first (decode, MLA, head dims, local, varlen)
  # two runs: pytest orders one run's items by the tree whatever order its arguments name the files in
  first="tests/test_cuda_decode.py tests/test_triton_decode.py tests/test_cuda_mla.py tests/test_triton_mla.py
    tests/test_native_entry.py tests/test_triton_native_entry.py tests/test_cuda_headdims.py
    tests/test_triton_headdims.py tests/test_cuda_local.py tests/test_triton_local.py tests/test_cuda_varlen.py"
  gpu_tests $(( ${TOTAL:-575} - SECONDS - 10 )) $first
  gpu_tests $(( ${TOTAL:-575} - SECONDS - 10 )) tests $(for f in $first ${SKIP:-}; do echo --ignore=$f; done)
else  # PART=local
  sweep local 280
  tail -24 $OUT/sweep_local.log
fi
