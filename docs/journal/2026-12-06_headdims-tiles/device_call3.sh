# Call 3 (an H200 only): the headdims sweep from the committed tree, to publish beside the H200 runs, and d80 / d96
# paired against the d128 choices' build (e7115b0's parent) on the H200, as call 1 did on an H100.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-06_headdims-tiles/device_call3.sh (carry both libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: nothing run"; exit 3; }
mkdir -p runs
timeout 260 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress > $OUT/call3_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/headdims.csv $OUT/call3_headdims.csv
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so timeout 150 python3 scripts/dev.py paired --head-dim 80,96 \
  --formats bf16 --out $OUT/call3_paired.csv > $OUT/call3_paired.log 2>&1 || echo "paired: $?"
tail -12 $OUT/call3_paired.log
tail -22 $OUT/call3_sweep.log
