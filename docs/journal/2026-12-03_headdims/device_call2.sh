# Call 2: what the column bound in the 16-bit epilogue costs the kernels at 64 / 128 / 256: dev.py paired, this tree's
# library against the one of 8048c6b (the same kernels without it), interleaved rounds, cuDNN as the clock reference.
# device run: bash docs/journal/2026-12-03_headdims/device_call2.sh (carry both libcuda_fa.so)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
DEV_BASELINE_LIB=cuda_impl/_build/cuda_fa-5b3d31d8a714e29b/libcuda_fa.so timeout 560 python3 scripts/dev.py paired \
  --rounds 3 --out $OUT/call2_paired.csv > $OUT/call2_paired.log 2>&1 || echo "paired stopped: $?"
tail -40 $OUT/call2_paired.log
