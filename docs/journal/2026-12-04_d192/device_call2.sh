# Call 2: cuda:hopper's d80 and d96 kernels (d128's tiles in panels of 32- and 64-byte rows; d72 and d88 run on
# them): the GPU oracle tests of the hopper family, a fuzz run of cuda:hopper (dense: it draws the head dims from the
# declaration), then the headdims sweep from the committed tree (d80 and d96 beside d128 in the same run: the d128
# row's time is what they cost on the d128 kernel, the same MMAs).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_d192/device_call2.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 230 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py tests/test_cuda_hopper.py \
  tests/test_cuda_varlen.py tests/test_cuda_local.py > $OUT/call2_pytest.log 2>&1
tail -3 $OUT/call2_pytest.log
if grep -q failed $OUT/call2_pytest.log; then grep -E "^(FAILED|E )" $OUT/call2_pytest.log | head -30; fi
timeout 90 python3 -m compare fuzz --backends cuda:hopper --mode dense --budget-s 60 --out $OUT/fuzz_dense \
  > $OUT/call2_fuzz_dense.console 2>&1; echo "fuzz dense rc=$?"; tail -2 $OUT/call2_fuzz_dense.console
mkdir -p runs
timeout 240 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress > $OUT/call2_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/headdims.csv $OUT/headdims.csv
tail -24 $OUT/call2_sweep.log
