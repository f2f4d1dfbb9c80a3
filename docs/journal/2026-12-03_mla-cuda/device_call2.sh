# Call 2: cuda_impl's MLA decode (csrc/fwd_mla_decode.cu) on the GPU: its oracle tests, then mla_speed.py (both
# backends, the ceilings in the same run). device run: bash docs/journal/2026-12-03_mla-cuda/device_call2.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-03_mla-cuda
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py -x > $OUT/call2.log 2>&1
tail -15 $OUT/call2.log
PYTHONPATH=. timeout 300 python3 $J/mla_speed.py >> $OUT/call2.log 2>&1 || echo "mla_speed failed"
tail -20 $OUT/call2.log
