# Call D (from a checkout of wip/d192-v128): Q/K 192 with V 128 on dense kernels of their own (P V at 128 columns,
# 128-key tiles, staged store). The GPU oracle tests of the head dims (the pair's dense, local and varlen cases) and the
# d192 / d256 machine-code-sensitive hopper tests, then the pair and d192 timed against cuDNN in interleaved rounds
# (compare paired, headdims sweep's d192 cases) with main's library (its 192 / 128 on the d192 kernel) and then with
# this branch's: the ratio to cuDNN moves by the new kernels' gain (d192 is the control: the same machine code).
# Prediction: 192 / 128 1.08-1.15x (P V is 2/5 of the MMA work there at 192 columns, 1/3 at 128; the 128-key tiles
# shave the per-tile costs), d192 level.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-07_d192-v128/device_call_d.sh (carry .devcarry with
# v128_build.tar.xz = this branch's library + the native entry, cuda_build.tar.xz = main's)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
NEW=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().build_dir)")
python3 -c "
import tarfile
tarfile.open('.devcarry/v128_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('/tmp/main_build')"
cp $NEW/libcuda_fa.so /tmp/v128_libcuda_fa.so
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py > $OUT/pytest_headdims.log 2>&1
echo "headdims GPU tests rc=$?"; tail -2 $OUT/pytest_headdims.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_headdims.log | head
paired() {  # LABEL
  timeout 150 python3 -m compare paired --sweep headdims --head-dims 192 --backends cuda:hopper sdpa:cudnn --rounds 5 \
    --out $OUT/paired_$1.csv > $OUT/paired_$1.log 2>&1; echo "paired $1 rc=$? at ${SECONDS}s"; tail -8 $OUT/paired_$1.log
}
cp /tmp/main_build/cuda_fa-*/libcuda_fa.so $NEW/libcuda_fa.so  # main's library at this checkout's path
paired main
cp /tmp/v128_libcuda_fa.so $NEW/libcuda_fa.so
paired v128
