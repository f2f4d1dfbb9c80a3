# Call 1: the seesaw wgmma MLA kernel (64-key blocks, one S tile per warpgroup, P and the row maximum handed over
# through shared memory) - the MLA GPU tests, then paired against the previous kernel's build (HEAD's library).
# device run: bash docs/journal/2026-12-06_mla-seesaw/device_call1.sh (carry this library and baseline-mla)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-06_mla-seesaw
PAIRED=docs/journal/2026-12-04_mla-wgmma/mla_paired.py
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -x tests/test_cuda_mla.py > $OUT/call1_pytest.log 2>&1
echo "pytest rc=$?"; tail -3 $OUT/call1_pytest.log
if grep -q -E "failed|error|Timeout" $OUT/call1_pytest.log; then grep -E "Error|assert|FAIL" $OUT/call1_pytest.log | head -30; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline-mla/libcuda_fa.so PYTHONPATH=. timeout 200 python3 $PAIRED \
  --new=default --old=baseline > $OUT/call1_paired.log 2>&1 || echo "paired: $?"
tail -11 $OUT/call1_paired.log
