# Call 1: triton:decode's window on the GPU (the oracle tests written last session, then window_speed.py), and a
# re-run of the decode sweep's bimodal row (b32 h32/32 k8k: cuda:decode against sdpa:cudnn, three rounds).
# device run: bash docs/journal/2026-12-03_mla-cuda/device_call1.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-03_mla-cuda
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_decode.py -k windows > $OUT/call1.log 2>&1
tail -3 $OUT/call1.log
PYTHONPATH=. timeout 200 python3 $J/window_speed.py --backends triton >> $OUT/call1.log 2>&1 || echo "window_speed failed"
PYTHONPATH=. timeout 150 python3 $J/bimodal_row.py >> $OUT/call1.log 2>&1 || echo "bimodal failed"
tail -25 $OUT/call1.log
