# Call 3: on an H200, first the mla sweep from the committed tree (the library ef04e9f built, carried as
# baseline-mla/), to publish. Then (a): racecheck reported hazards on the seesaw kernel's hand-over (ordered by
# bar.arrive -> bar.sync) and in its epilogue across __syncthreads (call 2): is it racecheck's handling of
# bar.arrive? The same kernel with bar.sync on both sides of every hand-over ("racetest") under racecheck, then
# timed against the committed kernel. (b) The per-panel wait's fence.proxy.async compiles to MEMBAR.ALL.CTA +
# FENCE.VIEW.ASYNC.S (nine a block): the kernel without it ("nofence", a measurement only) timed the same way.
# (c) "v2": the rope panel refilled as soon as S is done and read first, and group 0 issuing the next S's first
# panels behind its last P V: the MLA GPU tests on it, then timed the same way.
# The libraries travel as cuda_impl/_build/variants.tar.gz (racetest/, nofence/, v2/, baseline-mla/).
# device run: FA2_GIT_COMMIT=ef04e9f bash docs/journal/2026-12-06_mla-seesaw/device_call3.sh
#   (carry cuda_impl/_build/variants.tar.gz)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-06_mla-seesaw
PAIRED=docs/journal/2026-12-04_mla-wgmma/mla_paired.py
nvidia-smi --query-gpu=name --format=csv,noheader
tar xzf cuda_impl/_build/variants.tar.gz -C cuda_impl/_build
LIB=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().library_path)")
mkdir -p $(dirname $LIB)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  cp cuda_impl/_build/baseline-mla/libcuda_fa.so $LIB
  mkdir -p runs
  timeout 220 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call3_sweep.log 2>&1 \
    || echo "sweep stopped: $?"
  cp runs/mla.csv $OUT/call3_mla.csv; grep -c pass $OUT/call3_mla.csv
fi
cp cuda_impl/_build/racetest/libcuda_fa.so $LIB
PYTHONPATH=. timeout 120 compute-sanitizer --tool racecheck --print-limit 20 python3 $J/sanitize_mla.py \
  > $OUT/call3_racecheck_sync.log 2>&1; echo "racecheck (sync) rc=$?"
grep -E "SUMMARY|FAIL|PASS" $OUT/call3_racecheck_sync.log | cut -c1-60 | head -6
cp cuda_impl/_build/v2/libcuda_fa.so $LIB
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call3_pytest_v2.log 2>&1
echo "pytest v2 rc=$?"; tail -2 $OUT/call3_pytest_v2.log
for variant in v2 racetest nofence; do
  cp cuda_impl/_build/$variant/libcuda_fa.so $LIB
  DEV_BASELINE_LIB=cuda_impl/_build/baseline-mla/libcuda_fa.so PYTHONPATH=. timeout 150 python3 $PAIRED \
    --new=default --old=baseline > $OUT/call3_paired_$variant.log 2>&1 || echo "paired: $?"
  mv $OUT/mla_paired_default_baseline.csv $OUT/call3_paired_$variant.csv
  echo "== $variant against ef04e9f"; tail -9 $OUT/call3_paired_$variant.log
done
