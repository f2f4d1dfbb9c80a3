# Call D (from a checkout of wip/d192-v128, main's 93ab468 plus the pair's kernels; every other kernel's machine code
# is main's): first the CUDA decode GPU tests (796e8df's e4m3 unpack, never run on a GPU: the same machine code here),
# then Q/K 192 with V 128 on dense kernels of their own (P V at 128 columns, 128-key tiles, staged store): the head
# dims' GPU oracle tests (the pair's dense, local and varlen cases), then the pair and d192 timed against cuDNN in
# interleaved rounds (compare paired on the headdims sweep's d192 cases), with main's library (the pair on the d192
# kernel) and then with this branch's: the ratio to cuDNN moves by the new kernels' gain, d192 is the control (the
# same machine code in both). Then journal 2026-12-07 entry-and-tma's device_next.sh in the time left (LIMIT).
# Prediction: 192 / 128 1.08-1.15x (P V is half of the MMA work at 192 columns, 2/5 at 128; 128-key tiles spread the
# per-tile costs over more keys), d192 level.
# device run: FA2_GIT_COMMIT=<commit> LIMIT=560 bash docs/journal/2026-12-07_d192-v128/device_call_d.sh (carry
# .devcarry with v128_build.tar.xz = this branch's library and the native entry, cuda_build.tar.xz = main's,
# triton_build.tar.xz)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
LIMIT=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
NEW=cuda_impl/_build/$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().build_dir.name)")
python3 -c "
import tarfile
tarfile.open('.devcarry/v128_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('/tmp/main_build')"
cp $NEW/libcuda_fa.so /tmp/v128_libcuda_fa.so
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_decode.py tests/test_native_entry.py \
  > $OUT/pytest_decode.log 2>&1; echo "decode GPU tests rc=$? at ${SECONDS}s"; tail -2 $OUT/pytest_decode.log
grep -E "^(FAILED|ERROR)" $OUT/pytest_decode.log | head
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py > $OUT/pytest_headdims.log 2>&1
echo "headdims GPU tests rc=$? at ${SECONDS}s"; tail -2 $OUT/pytest_headdims.log
grep -E "^(FAILED|ERROR)" $OUT/pytest_headdims.log | head
paired() {  # LABEL
  timeout 150 python3 -m compare paired --sweep headdims --head-dims 192 --backends cuda:hopper sdpa:cudnn --rounds 5 \
    --out $OUT/paired_$1.csv > $OUT/paired_$1.log 2>&1; echo "paired $1 rc=$? at ${SECONDS}s"; tail -8 $OUT/paired_$1.log
}
cp /tmp/main_build/cuda_fa-*/libcuda_fa.so $NEW/libcuda_fa.so  # main's library at this checkout's path
paired main
cp /tmp/v128_libcuda_fa.so $NEW/libcuda_fa.so
paired v128
LIMIT=$((LIMIT - SECONDS)) bash docs/journal/2026-12-07_entry-and-tma/device_next.sh
