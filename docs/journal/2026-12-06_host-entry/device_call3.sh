# Call 3 (the last 4 minutes of device time): the compiled entry on the GPU only: the host probe, then the entry's
# GPU test (both paths, same bits, the entry took the calls) and the CUDA decode GPU tests through it, on this
# branch's kernels' library (cuda_impl/_build/main-lib.tar.xz).
# device run: bash docs/journal/2026-12-06_host-entry/device_call3.sh
# (carry cuda_impl/_build/main-lib.tar.xz and cuda_impl/_build/cuda_fa_native-<digest of torch 2.11.0+cu130>)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/main-lib.tar.xz').extractall('cuda_impl/_build')"
PYTHONPATH=. timeout 45 python3 docs/journal/2026-12-06_host-entry/host_probe.py > $OUT/host_probe.log 2>&1
echo "probe rc=$?"; tail -14 $OUT/host_probe.log
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_native_entry.py tests/test_cuda_decode.py \
  > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.log
grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
