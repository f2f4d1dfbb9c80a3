# Call 1: (a) the host probe: a kvcache call's host time through the compiled entry (cuda_impl.native) and through
# the Python path, and the Python path's stages alone; (b) the compiled entry against the Python path on the GPU
# (same bits; the entry took the calls) and the decode/kvcache GPU tests with it in the path; (c) the MLA
# measurement plan of docs/journal/2026-12-06_handover-prefetch/device_call1.sh.
# Carry cuda_impl/_build/variants.tar.xz and the entry built for the GPU machine's torch
# (python -m cuda_impl.toolchain --native --torch-root <torch 2.11.0+cu130 wheel>/torch).
# The kernels' library is reorder/ (branch wip/mla-tma fcff37b: decode kernels as main's, the MLA wgmma reordered).
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/variants.tar.xz').extractall('cuda_impl/_build')"
LIB=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().library_path)")
mkdir -p $(dirname $LIB) && cp cuda_impl/_build/reorder/libcuda_fa.so $LIB
PYTHONPATH=. timeout 90 python3 docs/journal/2026-12-06_host-entry/host_probe.py > $OUT/host_probe.log 2>&1
echo "probe rc=$?"; tail -14 $OUT/host_probe.log
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_native_entry.py tests/test_kvcache_api.py \
  tests/test_cuda_decode.py > $OUT/native_pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/native_pytest.log
grep -E "^(FAILED|ERROR)" $OUT/native_pytest.log | head
timeout 380 bash docs/journal/2026-12-06_handover-prefetch/device_call1.sh
