# Host cost per decode call: the dense decode calls of the API-overhead benchmark with cProfiles, then the paged
# attention_with_kvcache path of both backends.  device run: bash <this>, carry the CUDA library.
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
PYTHONPATH=. timeout 200 python3 scripts/bench_api_overhead_gpu.py --decode --out $OUT --profile cuda:decode \
  --profile triton:decode --profile sdpa:cudnn > $OUT/api_overhead_decode.log 2>&1; echo "rc=$?"
PYTHONPATH=. timeout 200 python3 docs/journal/2026-12-03_decode-merge/host_profile.py > $OUT/host_profile.log 2>&1; echo "rc=$?"
head -8 $OUT/api_overhead_decode.log; head -5 $OUT/host_profile.log
