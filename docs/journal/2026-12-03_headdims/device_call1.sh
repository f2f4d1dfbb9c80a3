# Call 1: cuda:hopper at every head_dim (the kernel of the next of 64 / 128 / 256, TMA's zero fill past head_dim) and
# Q/K 192 with V 128: the GPU oracle tests of the hopper family, a fuzz run of cuda:hopper (dense and varlen: it
# draws the new head dims from the declaration), then the headdims sweep from the committed tree.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-03_headdims/device_call1.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py tests/test_cuda_hopper.py \
  tests/test_cuda_varlen.py tests/test_cuda_local.py > $OUT/call1_pytest.log 2>&1
tail -3 $OUT/call1_pytest.log
if grep -q failed $OUT/call1_pytest.log; then grep -E "^(FAILED|E )" $OUT/call1_pytest.log | head -30; exit 1; fi
for mode in dense varlen; do
  timeout 110 python3 -m compare fuzz --backends cuda:hopper --mode $mode --budget-s 80 --out $OUT/fuzz_$mode \
    > $OUT/call1_fuzz_$mode.console 2>&1; echo "fuzz $mode rc=$?"; tail -2 $OUT/call1_fuzz_$mode.console
done
mkdir -p runs
timeout 230 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress > $OUT/call1_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/headdims.csv $OUT/headdims.csv
tail -22 $OUT/call1_sweep.log
