# Call B: the CUDA decode GPU tests (the e4m3 unpack of 796e8df has not run on a GPU), the Triton e4m3 decode tile
# candidates (fp8_tiles.py of journal 2026-12-06 headdims-tiles, never run), then journal 2026-12-07 entry-and-tma's
# device_next.sh in the time left (LIMIT, default 560): the Triton entry's GPU tests and fp32 cases, the host bench in
# interleaved rounds (settles triton_impl's compiled entry against SDPA), on an H200 the mla and headdims sweeps.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-07_profiles/device_call_b.sh (carry .devcarry)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
LIMIT=${LIMIT:-560}
python3 -c "
import tarfile
tarfile.open('.devcarry/cuda_build.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_decode.py tests/test_native_entry.py \
  > $OUT/pytest_decode.log 2>&1; echo "decode GPU tests rc=$?"; tail -2 $OUT/pytest_decode.log
PYTHONPATH=. timeout 120 python3 docs/journal/2026-12-06_headdims-tiles/fp8_tiles.py > $OUT/fp8_tiles.log 2>&1
echo "fp8_tiles rc=$?"; tail -14 $OUT/fp8_tiles.log
LIMIT=$((LIMIT - SECONDS)) bash docs/journal/2026-12-07_entry-and-tma/device_next.sh
