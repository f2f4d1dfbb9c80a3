# Call 1: the wgmma MLA kernel (fwd_mla_decode_wgmma.cu) against the oracle (the MLA GPU tests: 64 and 128 heads and
# Sq 4 x 16 heads now run it), then the mla sweep twice in one machine session: both backends with the kernel from
# 33 packed rows (the default), and cuda:decode alone with it for every row count (FA_MLA_WGMMA_MIN_ROWS=1, the one
# measurement that decides where the mma.sync kernel keeps the small tiles).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_mla-wgmma/device_call1.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py -x > $OUT/call1_pytest.log 2>&1
tail -3 $OUT/call1_pytest.log
if grep -q -E "failed|error" $OUT/call1_pytest.log; then tail -60 $OUT/call1_pytest.log; exit 1; fi
mkdir -p runs
timeout 200 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call1_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call1_mla.csv
FA_MLA_WGMMA_MIN_ROWS=1 timeout 120 python3 -m compare run --sweep mla --backends cuda:decode \
  --out runs/mla_all_wgmma.csv --no-progress > $OUT/call1_sweep_all_wgmma.log 2>&1 || echo "sweep 2 stopped: $?"
cp runs/mla_all_wgmma.csv $OUT/call1_mla_all_wgmma.csv
tail -42 $OUT/call1_sweep.log; tail -40 $OUT/call1_sweep_all_wgmma.log
