# Call 4: the MLA kernel with Q in registers (partial scores summed in shared memory): its oracle tests, then the
# mla sweep, both backends, from the committed tree (FA2_GIT_COMMIT names it: the device's checkout has no later
# commits), and the window timing of both backends.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-03_mla-cuda/device_call4.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-03_mla-cuda
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py -x > $OUT/call4_pytest.log 2>&1
tail -3 $OUT/call4_pytest.log
if grep -q failed $OUT/call4_pytest.log; then tail -40 $OUT/call4_pytest.log; exit 1; fi
mkdir -p runs
timeout 300 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call4_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/mla.csv
PYTHONPATH=. timeout 100 python3 $J/window_speed.py --backends triton,cuda > $OUT/call4_window.log 2>&1 \
  || echo "window_speed failed"
cp $OUT/window_speed.csv $OUT/call4_window_speed.csv 2>/dev/null
tail -42 $OUT/call4_sweep.log; tail -10 $OUT/call4_window.log
