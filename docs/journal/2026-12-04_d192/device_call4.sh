# Call 4: a varlen fuzz minute of cuda:hopper (its varlen twins now exist at d80, d96 and d192 too), then the mla
# sweep from the committed tree with two more cases, 16 heads x 2 speculative tokens (32 packed rows: the mma.sync
# kernel's 32-row tile, in no sweep before). Prediction: those two near the 16-head q1 rows' bandwidth at the same
# cache (b32 k8k 2.6-3.0 TB/s, k64k 3.3-3.7), the other 37 within 2% of the 70c9874 run (same kernels).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_d192/device_call4.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 90 python3 -m compare fuzz --backends cuda:hopper --mode varlen --budget-s 60 --out $OUT/fuzz_varlen \
  > $OUT/call4_fuzz_varlen.console 2>&1; echo "fuzz varlen rc=$?"; tail -4 $OUT/call4_fuzz_varlen.console
mkdir -p runs
timeout 300 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call4_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call4_mla.csv
tail -50 $OUT/call4_sweep.log | head -48
