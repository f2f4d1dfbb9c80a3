# Call 2: from the committed tree (FA2_GIT_COMMIT names it): the decode and MLA GPU suites (the decode kernels now
# share decode_work / key_row), then the published mla sweep, both backends.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_mla-wgmma/device_call2.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  > $OUT/call2_pytest.log 2>&1
tail -3 $OUT/call2_pytest.log
if grep -q -E "failed|error" $OUT/call2_pytest.log; then tail -60 $OUT/call2_pytest.log; exit 1; fi
mkdir -p runs
timeout 200 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call2_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call2_mla.csv
tail -42 $OUT/call2_sweep.log
