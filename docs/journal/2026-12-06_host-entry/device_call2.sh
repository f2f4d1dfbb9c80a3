# Call 2 (an H200 only): this branch's kernels' library (cuda_impl/_build/main-lib.tar.xz; decode kernels and hopper
# as main's), the compiled entry's and the decode GPU tests, then the headdims sweep to publish beside the H200 runs.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-06_host-entry/device_call2.sh
# (carry cuda_impl/_build/main-lib.tar.xz and cuda_impl/_build/cuda_fa_native-<digest of torch 2.11.0+cu130>)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: nothing run"; exit 3; }
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/main-lib.tar.xz').extractall('cuda_impl/_build')"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_native_entry.py tests/test_kvcache_api.py \
  tests/test_cuda_decode.py > $OUT/call2_pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/call2_pytest.log
grep -E "^(FAILED|ERROR)" $OUT/call2_pytest.log | head
PYTHONPATH=. timeout 60 python3 scripts/bench_api_overhead_gpu.py --decode --calls 2000 --out $OUT \
  > $OUT/call2_host.log 2>&1; echo "host rc=$?"; tail -7 $OUT/call2_host.log
mkdir -p runs
timeout 260 python3 -m compare run --sweep headdims --out runs/headdims.csv --no-progress > $OUT/call2_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/headdims.csv $OUT/call2_headdims.csv
tail -22 $OUT/call2_sweep.log
