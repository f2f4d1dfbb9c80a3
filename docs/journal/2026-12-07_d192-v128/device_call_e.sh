# Call E (from a checkout of wip/d192-v128 f45a51b, carrying its library): compute-sanitizer memcheck on the decode GPU
# tests that touch the block table (hostile tables, windows off page boundaries, every page size, contiguous
# caches): the per-tile page path must read nothing outside the cache.
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
python3 -c "
import tarfile
tarfile.open('.devcarry/v128_build.tar.xz').extractall('cuda_impl/_build')"
timeout 300 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/test_cuda_decode.py -k "hostile or window or paged or page" > $OUT/memcheck_decode.log 2>&1
echo "memcheck rc=$? at ${SECONDS}s"; grep -E "passed|failed" $OUT/memcheck_decode.log | tail -2
grep -E "ERROR SUMMARY|Invalid" $OUT/memcheck_decode.log | head -5
