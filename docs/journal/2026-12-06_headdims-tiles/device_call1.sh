# Call 1: cuda:hopper d80 / d96 on d64's choices (three consumers, three stages, 96-key tiles, the split last round in
# shared memory, no clusters) and triton:fa2 at head dims off the powers of two as two power-of-two column blocks
# (d80 = 64 + 16, d96 = 64 + 32, d192 = 128 + 64; were padded to 128 / 256): the GPU oracle tests of both, a fuzz
# minute of cuda:hopper, d80 / d96 paired against the previous build (DEV_BASELINE_LIB), then the headdims sweep.
# Prediction: CUDA d80 / d96 1.10-1.25x (the softmax of three consumers overlaps the others' MMAs, as at d64; the
# 96-key tile costs a little per key); Triton d80 1.3x, d96 1.2x, d192 1.2x (the MMAs and loads of the padding go).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-06_headdims-tiles/device_call1.sh (carry the libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py tests/test_cuda_hopper.py \
  tests/test_cuda_varlen.py tests/test_cuda_local.py tests/test_triton_headdims.py > $OUT/call1_pytest.log 2>&1
tail -2 $OUT/call1_pytest.log
if grep -q -E "failed|error" $OUT/call1_pytest.log; then grep -E "^(FAILED|E )" $OUT/call1_pytest.log | head -30; exit 1; fi
timeout 60 python3 -m compare fuzz --backends cuda:hopper --mode dense --budget-s 40 --out $OUT/fuzz_dense \
  > $OUT/call1_fuzz_dense.console 2>&1; echo "fuzz dense rc=$?"; tail -2 $OUT/call1_fuzz_dense.console
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so timeout 150 python3 scripts/dev.py paired --head-dim 80,96 \
  --formats bf16 --out $OUT/call1_paired.csv > $OUT/call1_paired.log 2>&1 || echo "paired: $?"
mkdir -p runs
timeout 240 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress > $OUT/call1_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/headdims.csv $OUT/call1_headdims.csv
tail -12 $OUT/call1_paired.log
tail -24 $OUT/call1_sweep.log
