# Call D (from a checkout of wip/d192-v128: main's 93ab468 plus two kernel changes; every other kernel's machine code
# is main's), all the session's GPU questions in one machine start:
# 1. The CUDA decode GPU tests: 796e8df's e4m3 unpack (on main, never run on a GPU) and this branch's tile pages
#    (the decode kernel looks a tile's one or two pages up once per tile, not once per row: 14-17% fewer
#    instructions in its KV loop).
# 2. The head dims' GPU oracle tests (Q/K 192 with V 128 on dense kernels of their own: P V at 128 columns, 128-key
#    tiles, the staged store).
# 3. Timing, first with main's library, then with this branch's (the same checkout, the library swapped at its path),
#    each against cuDNN in interleaved rounds (compare paired): the headdims sweep's d192 cases (d192 the control:
#    the same machine code in both), the decode sweep's Sq 1 cases; and the paged / e4m3 table of
#    scripts/bench_kvcache_gpu.py (cuda_impl; its e4m3 / bf16 ratio is issue 31's 1.8x).
# Predictions: 192 / 128 1.08-1.15x against cuDNN (P V half of the MMA work at 192 columns, 2/5 at 128; 128-key tiles
# spread the per-tile costs), d192 level; decode bf16 1.00-1.03x (memory-bound: fewer instructions buy only latency),
# e4m3 1.03-1.08x (it issues more per byte), toward 1.8x bf16.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-07_d192-v128/device_call_d.sh (carry .devcarry with
# v128_build.tar.xz = this branch's library and the native entry, cuda_build.tar.xz = main's, triton_build.tar.xz)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
NEW=cuda_impl/_build/$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().build_dir.name)")
python3 -c "
import tarfile
tarfile.open('.devcarry/v128_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('/tmp/main_build')"
cp $NEW/libcuda_fa.so /tmp/branch_libcuda_fa.so
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_decode.py tests/test_native_entry.py \
  tests/test_cuda_mla.py > $OUT/pytest_decode.log 2>&1; echo "decode GPU tests rc=$? at ${SECONDS}s"
tail -1 $OUT/pytest_decode.log; grep -E "^(FAILED|ERROR)" $OUT/pytest_decode.log | head
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_headdims.py > $OUT/pytest_headdims.log 2>&1
echo "headdims GPU tests rc=$? at ${SECONDS}s"; tail -1 $OUT/pytest_headdims.log
grep -E "^(FAILED|ERROR)" $OUT/pytest_headdims.log | head
timings() {  # LABEL
  timeout 80 python3 -m compare paired --sweep headdims --head-dims 192 --backends cuda:hopper sdpa:cudnn --rounds 5 \
    --out $OUT/paired_headdims_$1.csv > $OUT/paired_headdims_$1.log 2>&1
  echo "paired headdims $1 rc=$? at ${SECONDS}s"; tail -6 $OUT/paired_headdims_$1.log
  timeout 110 python3 -m compare paired --sweep decode --seqlens 1 --backends cuda:decode sdpa:cudnn --rounds 3 \
    --out $OUT/paired_decode_$1.csv > $OUT/paired_decode_$1.log 2>&1
  echo "paired decode $1 rc=$? at ${SECONDS}s"; tail -20 $OUT/paired_decode_$1.log
  mkdir -p $OUT/kvcache_$1
  PYTHONPATH=. timeout 80 python3 scripts/bench_kvcache_gpu.py --backends cuda_impl --out $OUT/kvcache_$1 \
    > $OUT/kvcache_$1.log 2>&1; echo "kvcache $1 rc=$? at ${SECONDS}s"; tail -16 $OUT/kvcache_$1.log
}
cp /tmp/main_build/cuda_fa-*/libcuda_fa.so $NEW/libcuda_fa.so  # main's library at this checkout's path
timings main
cp /tmp/branch_libcuda_fa.so $NEW/libcuda_fa.so
timings branch
