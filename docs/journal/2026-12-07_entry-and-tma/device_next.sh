# The call this session could not make (from main's checkout, no tarball of a branch): triton_impl's compiled
# entry on the GPU (its parity test, the fp32 decode cases added with the fp32 tiles), the host bench in
# interleaved rounds, then on an H200 the mla and headdims sweeps while the call's time lasts (LIMIT, default 540).
# device run: FA2_GIT_COMMIT=<commit> LIMIT=540 bash docs/journal/2026-12-07_entry-and-tma/device_next.sh
# carry .devcarry (git-ignored through .git/info/exclude) holding, built here for torch 2.11.0+cu130:
#   cuda_build.tar.xz   = tar -C cuda_impl/_build: cuda_fa-<digest>/libcuda_fa.so cuda_fa_native-<digest>/
#   triton_build.tar.xz = tar -C triton_impl/_build: triton_fa_native-<digest>/
# (python -m cuda_impl.toolchain; python -m cuda_impl.toolchain --native --torch-root DIR;
#  python -m triton_impl.native --torch-root DIR; DIR an unpacked torch 2.11.0 wheel's torch/ folder)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "
import tarfile
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_native_entry.py tests/test_native_entry.py \
  tests/test_triton_decode.py tests/test_triton_mla.py -k "native or fp32 or matches" > $OUT/pytest.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest.log; grep -E "^(FAILED|ERROR)|^E " $OUT/pytest.log | head -8
PYTHONPATH=. timeout 90 python3 scripts/bench_api_overhead_gpu.py --decode --backends sdpa:flash --calls 2000 \
  --rounds 5 --out $OUT > $OUT/host.log 2>&1; echo "host rc=$?"; tail -9 $OUT/host.log
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: no sweep"; exit 0; }
mkdir -p runs
for sweep in mla headdims; do
  left=$((LIMIT - SECONDS - 10))
  [ $left -lt 150 ] && { echo "$sweep: no time ($left s left)"; continue; }
  timeout $left python3 -m compare run --sweep $sweep --out runs/$sweep.csv --no-progress > $OUT/${sweep}_sweep.log 2>&1 \
    || echo "$sweep sweep stopped: $?"
  cp runs/$sweep.csv $OUT/$sweep.csv 2>/dev/null; echo "== $sweep at ${SECONDS}s: $(grep -c '' runs/$sweep.csv) lines"
  tail -3 $OUT/${sweep}_sweep.log | cut -c1-150
done
