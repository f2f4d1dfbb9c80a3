# Call 8: the pipelined wgmma MLA kernel with its loop run in threes (each stage's descriptors loop invariants,
# kept in uniform registers: no R2UR left in the loop) against the pipelined build (call 7); MLA GPU tests first.
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call8.sh (carry this library and the baseline)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call8_pytest.log 2>&1
tail -2 $OUT/call8_pytest.log
if grep -q -E "failed|error" $OUT/call8_pytest.log; then tail -60 $OUT/call8_pytest.log; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 250 python3 $J/mla_paired.py \
  --new=default --old=baseline > $OUT/call8_paired.log 2>&1 || echo "paired: $?"
tail -11 $OUT/call8_paired.log
