# Call B: the CUDA decode GPU tests (the e4m3 unpack of 796e8df has not run on a GPU), the host-time bench in interleaved rounds (settles triton_impl's compiled entry against SDPA), the Triton
# e4m3 decode tile candidates (fp8_tiles.py of journal 2026-12-06 headdims-tiles, never run), then on an H200 the
# mla and headdims sweeps to republish while the call's time lasts (LIMIT, default 560).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-07_profiles/device_call_b.sh (carry .devcarry)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
LIMIT=${LIMIT:-560}
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "
import tarfile
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_decode.py tests/test_native_entry.py \
  > $OUT/pytest_decode.log 2>&1; echo "decode GPU tests rc=$?"; tail -2 $OUT/pytest_decode.log
PYTHONPATH=. timeout 90 python3 scripts/bench_api_overhead_gpu.py --decode --backends sdpa:flash --calls 2000 \
  --rounds 5 --out $OUT > $OUT/host.log 2>&1; echo "host rc=$?"; tail -9 $OUT/host.log
PYTHONPATH=. timeout 120 python3 docs/journal/2026-12-06_headdims-tiles/fp8_tiles.py > $OUT/fp8_tiles.log 2>&1
echo "fp8_tiles rc=$?"; tail -14 $OUT/fp8_tiles.log
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
