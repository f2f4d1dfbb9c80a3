# Call 11: both MLA kernels read the block table a tile ahead (decode/params.cuh RowPages; the mma.sync kernel's
# 16-head memory-bound case is the one that may move), paired against f26216e's build; MLA GPU tests first.
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call11.sh (carry this library and the baseline)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call11_pytest.log 2>&1
tail -2 $OUT/call11_pytest.log
if grep -q -E "failed|error" $OUT/call11_pytest.log; then tail -60 $OUT/call11_pytest.log; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 250 python3 $J/mla_paired.py \
  --new=default --old=baseline --cases 16 > $OUT/call11_paired.log 2>&1 || echo "paired: $?"
tail -11 $OUT/call11_paired.log
