# Call 2: the decode path's host work cut (plans and launches prepared once per call shape: cuda_impl's plan cache
# and packed parameter block, triton_impl's prepared launches calling the compiled kernels' launchers; the kvcache
# checks reading each tensor once) and triton:decode's e4m3 tiles meeting bf16 queries in fp16 MMAs (was: e4m3 ->
# fp16 -> bf16 per element, bf16 MMAs). The decode, kvcache and MLA GPU suites of both backends, a kvcache fuzz
# minute of both, the paged / contiguous / e4m3 table (scripts/bench_kvcache_gpu.py), the host cost per call
# (scripts/bench_api_overhead_gpu.py --decode), then on an H200 the headdims sweep (published beside the H200 runs).
# Prediction: triton:decode e4m3 from 0.81-0.86x its bf16 speed to 1.3-1.6x (half the bytes, the conversions one
# instruction per pair); host time per call cuda_impl about 25 us, triton_impl about 60 us (helper's H100 call).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-06_headdims-tiles/device_call2.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_decode.py tests/test_cuda_decode.py \
  tests/test_kvcache_api.py tests/test_triton_mla.py tests/test_cuda_mla.py tests/test_decode_host_cost.py \
  > $OUT/call2_pytest.log 2>&1
tail -2 $OUT/call2_pytest.log
if grep -q -E "failed|error" $OUT/call2_pytest.log; then grep -E "^(FAILED|E )" $OUT/call2_pytest.log | head -30; exit 1; fi
timeout 75 python3 -m compare fuzz --backends cuda:decode triton:decode --mode kvcache --budget-s 50 \
  --out $OUT/fuzz > $OUT/call2_fuzz.console 2>&1; echo "fuzz rc=$?"; tail -4 $OUT/call2_fuzz.console
PYTHONPATH=. timeout 200 python3 scripts/bench_kvcache_gpu.py --out $OUT > $OUT/call2_kvcache.log 2>&1 \
  || echo "kvcache bench: $?"
PYTHONPATH=. timeout 120 python3 scripts/bench_api_overhead_gpu.py --decode --out $OUT > $OUT/call2_host.log 2>&1 \
  || echo "host bench: $?"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p runs
  timeout 240 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress \
    > $OUT/call2_sweep.log 2>&1 || echo "sweep stopped: $?"
  cp runs/headdims.csv $OUT/call2_headdims.csv
  tail -20 $OUT/call2_sweep.log
fi
tail -30 $OUT/call2_kvcache.log
tail -14 $OUT/call2_host.log
