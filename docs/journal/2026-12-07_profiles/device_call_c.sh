# Call C: cuda:hopper with every fourth exp2 of the softmax on the FMA pipe (poly_exp2, branch wip/exp2-emu,
# -DFA_EXP2_EMU=4; carried as exp2emu/libcuda_fa.so) against this checkout's build, paired at d64 / d80 / d96 / d128
# (scripts/dev.py paired: "new" is this checkout's build, so a ratio below 1 is the emulation's gain).
# Prediction: 1.03-1.08x at d64 / d80 (the SFU's 16 exp2 a clock per SM set the softmax's pace where the MMAs are
# narrow), level at d128.
# device run: bash docs/journal/2026-12-07_profiles/device_call_c.sh (carry .devcarry)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
python3 -c "
import tarfile
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/exp2_build.tar.xz').extractall('cuda_impl/_build')"
DEV_BASELINE_LIB=cuda_impl/_build/exp2emu/libcuda_fa.so timeout 400 python3 scripts/dev.py paired \
  --head-dim 64,80,96,128 --formats bf16 --out $OUT/paired_exp2.csv > $OUT/paired_exp2.log 2>&1 || echo "paired: $?"
tail -20 $OUT/paired_exp2.log
