# Call 3: the committed decode windows (both backends) and the MLA decode kernel on the GPU: both decode GPU suites
# whole, the MLA oracle tests, then mla_speed.py (both backends, ceilings in the same run) and window_speed.py.
# device run: bash docs/journal/2026-12-03_mla-cuda/device_call3.sh (carry cuda_impl/_build)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-03_mla-cuda
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_decode.py tests/test_triton_decode.py \
  tests/test_cuda_mla.py > $OUT/call3_pytest.log 2>&1
tail -4 $OUT/call3_pytest.log
PYTHONPATH=. timeout 200 python3 $J/mla_speed.py > $OUT/call3_mla.log 2>&1 || echo "mla_speed failed"
cp $OUT/mla_speed.csv $OUT/call3_mla_speed.csv 2>/dev/null
PYTHONPATH=. timeout 120 python3 $J/window_speed.py --backends triton,cuda > $OUT/call3_window.log 2>&1 \
  || echo "window_speed failed"
cp $OUT/window_speed.csv $OUT/call3_window_speed.csv 2>/dev/null
tail -18 $OUT/call3_mla.log; tail -12 $OUT/call3_window.log
