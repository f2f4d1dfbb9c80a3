# Call 10: after the MLA kernels' shared epilogue (decode/mla.cuh mla_finish_row) and the tests' shared
# hopper_or_skip: the GPU suites those touch (MLA, decode, and the hopper head-dim, local and varlen ones).
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call10.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 500 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  tests/test_cuda_headdims.py tests/test_cuda_local.py tests/test_cuda_varlen.py > $OUT/call10_pytest.log 2>&1
tail -3 $OUT/call10_pytest.log
grep -E "failed|Error" $OUT/call10_pytest.log | head -20
