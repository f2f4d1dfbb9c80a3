# Call 3: racecheck reported hazards on the seesaw kernel's hand-over (row statistics and P slots, ordered by
# bar.arrive -> bar.sync) and in its epilogue across __syncthreads (call 2). Is it racecheck's handling of
# bar.arrive? The same kernel with bar.sync on both sides of every hand-over (carried as racetest/) under racecheck,
# then timed against the committed kernel (baseline-mla/: ef04e9f's library).
# device run: bash docs/journal/2026-12-06_mla-seesaw/device_call3.sh (carry racetest/ and baseline-mla/)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-06_mla-seesaw
nvidia-smi --query-gpu=name --format=csv,noheader
LIB=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().library_path)")
mkdir -p $(dirname $LIB) && cp cuda_impl/_build/racetest/libcuda_fa.so $LIB
PYTHONPATH=. timeout 120 compute-sanitizer --tool racecheck --print-limit 20 python3 $J/sanitize_mla.py \
  > $OUT/call3_racecheck_sync.log 2>&1; echo "racecheck rc=$?"; grep -E "SUMMARY|FAIL|PASS" $OUT/call3_racecheck_sync.log | head -8
DEV_BASELINE_LIB=cuda_impl/_build/baseline-mla/libcuda_fa.so PYTHONPATH=. timeout 200 python3 $J/mla_paired.py \
  --new=default --old=baseline > $OUT/call3_paired.log 2>&1 || echo "paired: $?"
tail -11 $OUT/call3_paired.log
