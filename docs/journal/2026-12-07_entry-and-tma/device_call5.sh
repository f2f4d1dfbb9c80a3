# triton_impl's compiled decode entry on the GPU (tree: wip/triton-entry 82598ef7f4e7, carried as .devcarry/te.tar.xz with
# its builds for torch 2.11.0+cu130 and the kernels' library of the MLA TMA build)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning FA2_GIT_COMMIT=82598ef7f4e7
mkdir -p /tmp/te && tar xJf .devcarry/te.tar.xz -C /tmp/te && cd /tmp/te || exit 3
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_native_entry.py tests/test_native_entry.py \
  tests/test_kvcache_api.py tests/test_triton_decode.py tests/test_triton_mla.py > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.log
grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
PYTHONPATH=. timeout 70 python3 scripts/bench_api_overhead_gpu.py --decode --calls 2000 --out $OUT > $OUT/host.log 2>&1
echo "host rc=$?"; tail -8 $OUT/host.log
