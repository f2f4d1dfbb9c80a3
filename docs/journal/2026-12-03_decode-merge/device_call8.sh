# After bc598f9 (lazy check messages, cached Triton plan): the GPU decode tests of both backends, then the host
# cost as in call 7.  device run: bash <this>, carry the CUDA library.
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
PYTHONPATH=. timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_decode.py tests/test_triton_decode.py \
  tests/test_kvcache_api.py -m gpu > $OUT/pytest_decode.log 2>&1; echo "pytest rc=$?"; tail -1 $OUT/pytest_decode.log
PYTHONPATH=. timeout 200 python3 scripts/bench_api_overhead_gpu.py --decode --out $OUT --profile cuda:decode \
  --profile triton:decode > $OUT/api_overhead_decode.log 2>&1; echo "rc=$?"
PYTHONPATH=. timeout 200 python3 docs/journal/2026-12-03_decode-merge/host_profile.py > $OUT/host_profile.log 2>&1; echo "rc=$?"
head -8 $OUT/api_overhead_decode.log; head -5 $OUT/host_profile.log
