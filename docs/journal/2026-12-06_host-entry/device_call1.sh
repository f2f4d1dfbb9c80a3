# Call 1 (fits about 5 minutes: the session's device time was mostly spent on refused starts):
# (a) the host probe: a kvcache call's host time through the compiled entry (cuda_impl.native) and through the
#     Python path, and the Python path's stages alone;
# (b) the compiled entry against the Python path on the GPU (same bits; the entry took the calls), with the kvcache
#     and MLA GPU tests running through it;
# (c) the MLA essentials of docs/journal/2026-12-06_handover-prefetch/device_call1.sh: the MLA GPU tests on
#     "reorder", reorder against "refactor" and "tma" against reorder (paired: bits, then time); tma's MLA GPU tests
#     if time is left.
# Carry cuda_impl/_build/variants.tar.xz and the entry built for the GPU machine's torch
# (python -m cuda_impl.toolchain --native --torch-root <torch 2.11.0+cu130 wheel>/torch).
# The kernels' library is reorder/ (branch wip/mla-tma fcff37b: decode kernels as main's, the MLA wgmma reordered).
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
PAIRED=docs/journal/2026-12-04_mla-wgmma/mla_paired.py
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/variants.tar.xz').extractall('cuda_impl/_build')"
LIB=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().library_path)")
mkdir -p $(dirname $LIB) && cp cuda_impl/_build/reorder/libcuda_fa.so $LIB
PYTHONPATH=. timeout 45 python3 docs/journal/2026-12-06_host-entry/host_probe.py > $OUT/host_probe.log 2>&1
echo "probe rc=$?"; tail -14 $OUT/host_probe.log
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_native_entry.py tests/test_kvcache_api.py \
  tests/test_cuda_mla.py > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.log
grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
paired() {  # new-lib old-lib cases tag seconds
  cp cuda_impl/_build/$1/libcuda_fa.so $LIB
  DEV_BASELINE_LIB=cuda_impl/_build/$2/libcuda_fa.so PYTHONPATH=. timeout $5 python3 $PAIRED \
    --new=default --old=baseline --cases $3 > $OUT/paired_$4.log 2>&1 || echo "paired: $?"
  mv $OUT/mla_paired_default_baseline.csv $OUT/paired_$4.csv
  echo "== $1 against $2, $3"; tail -n +3 $OUT/paired_$4.log | cut -c1-92
}
paired reorder refactor wgmma reorder 75
# What follows runs only while the call has time left (LIMIT: the run's limit in seconds, default 330).
LIMIT=${LIMIT:-330}
if [ $((SECONDS + 70)) -lt $LIMIT ]; then paired tma reorder wgmma tma 65; else echo "tma paired: no time"; fi
if [ $((SECONDS + 85)) -lt $LIMIT ]; then
  cp cuda_impl/_build/tma/libcuda_fa.so $LIB
  timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/pytest_tma.log 2>&1
  echo "pytest tma rc=$?"; tail -2 $OUT/pytest_tma.log
else echo "tma pytest: no time"; fi
