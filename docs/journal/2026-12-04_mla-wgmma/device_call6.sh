# Call 6: the wgmma MLA kernel with fewer instructions a tile (the group index warp-uniform, so the Q descriptor
# lives in uniform registers; per-stage descriptors; the copies' destinations as one base and immediates) and the
# rescale threshold (the maximum kept while it grows by at most 2^8), against the published build (a9ea824); the
# MLA GPU tests first (the threshold changes P's rounding).
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call6.sh (carry this library and the baseline)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call6_pytest.log 2>&1
tail -2 $OUT/call6_pytest.log
if grep -q -E "failed|error" $OUT/call6_pytest.log; then tail -60 $OUT/call6_pytest.log; exit 1; fi
DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so PYTHONPATH=. timeout 250 python3 $J/mla_paired.py \
  --new=default --old=baseline > $OUT/call6_paired.log 2>&1 || echo "paired: $?"
tail -11 $OUT/call6_paired.log
