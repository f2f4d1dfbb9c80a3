# Call 3: two changes to the wgmma MLA kernel (the block-table reads a tile ahead; O's rescale skipped where no
# row's maximum moved) against the published build (a9ea824), and an experiment build (FA_MLA_TWO_CHAINS: S's
# k-steps in two accumulator chains) against them; the MLA GPU tests first. The libraries travel as one xz tarball
# (three of them exceed what a call carries).
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call3.sh (carry cuda_impl/_build/libs.tar.xz)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
tar -xJf cuda_impl/_build/libs.tar.xz -C cuda_impl/_build || exit 1
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call3_pytest.log 2>&1
tail -2 $OUT/call3_pytest.log
if grep -q -E "failed|error" $OUT/call3_pytest.log; then tail -60 $OUT/call3_pytest.log; exit 1; fi
export DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so
PYTHONPATH=. timeout 200 python3 $J/mla_paired.py --new default --old baseline > $OUT/call3_paired1.log 2>&1 || echo "paired 1: $?"
PYTHONPATH=. timeout 200 python3 $J/mla_paired.py --new -DFA_MLA_TWO_CHAINS --old default > $OUT/call3_paired2.log 2>&1 || echo "paired 2: $?"
tail -12 $OUT/call3_paired1.log; tail -12 $OUT/call3_paired2.log
