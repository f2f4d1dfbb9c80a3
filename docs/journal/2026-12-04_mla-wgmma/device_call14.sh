# Call 14: the block-table look-ahead with the rows in the page kept too (recomputed at the copies, call 13 lost the
# MLA gain): from the committed tree (FA2_GIT_COMMIT names it), the decode and MLA GPU suites, the MLA 16-head
# and the GQA paged cases paired against f26216e's build, then the published mla sweep (both backends).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_mla-wgmma/device_call14.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  > $OUT/call14_pytest.log 2>&1
tail -2 $OUT/call14_pytest.log
if grep -q -E "failed|error" $OUT/call14_pytest.log; then tail -60 $OUT/call14_pytest.log; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 200 python3 $J/mla_paired.py \
  --new=default --old=baseline --cases gqa > $OUT/call14_paired_gqa.log 2>&1 || echo "paired: $?"
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 150 python3 $J/mla_paired.py \
  --new=default --old=baseline --cases 16 > $OUT/call14_paired_16.log 2>&1 || echo "paired 16: $?"
mkdir -p runs
timeout 200 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call14_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call14_mla.csv
tail -8 $OUT/call14_paired_gqa.log; tail -7 $OUT/call14_paired_16.log
tail -42 $OUT/call14_sweep.log | head -30
