# Call 7: the wgmma MLA kernel software-pipelined (S(t + 1) issued before the softmax of tile t, P V(t) under the
# exchange of S(t + 1)) against c400ad4; the MLA GPU tests first.
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call7.sh (carry this library and the baseline)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call7_pytest.log 2>&1
tail -2 $OUT/call7_pytest.log
if grep -q -E "failed|error" $OUT/call7_pytest.log; then tail -60 $OUT/call7_pytest.log; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 250 python3 $J/mla_paired.py \
  --new=default --old=baseline > $OUT/call7_paired.log 2>&1 || echo "paired: $?"
tail -11 $OUT/call7_paired.log
