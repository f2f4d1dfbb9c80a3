# Call 3: the committed decode windows (both backends) and the MLA decode kernel on the GPU: both decode GPU suites
# whole and the MLA oracle tests, then the mla sweep (both backends, the ceilings in the same run; resumable: a
# second call carries runs/mla.csv back and goes on).
# device run: bash docs/journal/2026-12-03_mla-cuda/device_call3.sh (carry cuda_impl/_build/<the three libraries>)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_decode.py tests/test_triton_decode.py \
  tests/test_cuda_mla.py tests/test_triton_mla.py > $OUT/call3_pytest.log 2>&1
tail -4 $OUT/call3_pytest.log
mkdir -p runs
timeout ${SWEEP_S:-320} python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call3_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/mla.csv
tail -45 $OUT/call3_sweep.log
