# Call 3: the MLA kernels' online softmax as one helper (decode/mla.cuh mla_softmax_row), the mma.sync kernel taking
# the wgmma kernel's lazy rescale (2^8) and its skipped O rescale: the MLA and decode GPU suites (the wgmma kernel's
# P V also goes through the rewritten wgmma_rs), then the 16-head (mma.sync) and wgmma cases paired against
# 0d48378's build (the same kernels without it). Prediction: the 16-head cases 1.00-1.03x (memory-bound, O's
# rescale 64 multiplies a thread per 32-key tile), the wgmma cases 1.00x (the same instructions).
# device run: bash docs/journal/2026-12-04_d192/device_call3.sh (carry both libraries)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
P=docs/journal/2026-12-04_mla-wgmma/mla_paired.py
export DEV_BASELINE_LIB=cuda_impl/_build/cuda_fa-1bb3d6cca805e96b/libcuda_fa.so
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  > $OUT/call3_pytest.log 2>&1
tail -2 $OUT/call3_pytest.log
if grep -q -E "failed|error" $OUT/call3_pytest.log; then grep -E "^(FAILED|E )" $OUT/call3_pytest.log | head -30; fi
PYTHONPATH=. timeout 150 python3 $P --new=default --old=baseline --cases 16 > $OUT/call3_paired_16.log 2>&1 \
  || echo "paired 16: $?"
PYTHONPATH=. timeout 150 python3 $P --new=default --old=baseline --cases wgmma > $OUT/call3_paired_wgmma.log 2>&1 \
  || echo "paired wgmma: $?"
tail -8 $OUT/call3_paired_16.log; tail -10 $OUT/call3_paired_wgmma.log
