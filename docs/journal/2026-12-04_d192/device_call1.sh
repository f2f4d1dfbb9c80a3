# Call 1: cuda:hopper's d192 kernel (112-key tiles; d136-d184 and Q/K 192 with V 128 run on it): the GPU oracle tests
# of the hopper family, a fuzz run of cuda:hopper (dense: it draws the head dims from the declaration), then the
# headdims sweep from the committed tree (d192 beside d256 in the same run: the d256 row's time is what d192 cost on
# the d256 kernel, the same MMAs).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_d192/device_call1.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 230 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py tests/test_cuda_hopper.py \
  tests/test_cuda_varlen.py tests/test_cuda_local.py > $OUT/call1_pytest.log 2>&1
tail -3 $OUT/call1_pytest.log
if grep -q failed $OUT/call1_pytest.log; then grep -E "^(FAILED|E )" $OUT/call1_pytest.log | head -30; fi
timeout 90 python3 -m compare fuzz --backends cuda:hopper --mode dense --budget-s 60 --out $OUT/fuzz_dense \
  > $OUT/call1_fuzz_dense.console 2>&1; echo "fuzz dense rc=$?"; tail -2 $OUT/call1_fuzz_dense.console
mkdir -p runs
timeout 240 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress > $OUT/call1_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/headdims.csv $OUT/headdims.csv
tail -24 $OUT/call1_sweep.log
