# Call 12: from the committed tree (FA2_GIT_COMMIT names it): the block table read a tile ahead in all three decode
# kernels (decode/params.cuh RowPages; the GQA kernel's d256 looks its rows up as it copies them, PAGES_AHEAD):
# the decode and MLA GPU suites, the GQA kernel on paged caches paired against f26216e's build, then the
# published mla sweep (both backends).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_mla-wgmma/device_call12.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  > $OUT/call12_pytest.log 2>&1
tail -2 $OUT/call12_pytest.log
if grep -q -E "failed|error" $OUT/call12_pytest.log; then tail -60 $OUT/call12_pytest.log; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 200 python3 $J/mla_paired.py \
  --new=default --old=baseline --cases gqa > $OUT/call12_paired_gqa.log 2>&1 || echo "paired: $?"
mkdir -p runs
timeout 200 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call12_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call12_mla.csv
tail -10 $OUT/call12_paired_gqa.log
tail -42 $OUT/call12_sweep.log | head -30
