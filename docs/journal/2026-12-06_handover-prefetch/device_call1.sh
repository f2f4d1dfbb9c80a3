# Call 1: (a) the MLA wgmma kernel with P_A handed to group 1 unscaled at S_A's maximum, before S_B's softmax
# ("reorder", branch wip/mla-tma fcff37b: the default library): group 1 multiplies block A's right half first, so that half is copied again
# a softmax and a P V earlier; group 0 no longer rescales and re-sends P_A, and the third named barrier goes. The MLA
# GPU tests, then timed against "refactor" (df5f544: the copy rows through RowPages and panel_offset), and
# refactor against ae4156a's build ("baseline-head") (same bits expected there).
# (b) the decode kernels' K/V cp.async with an L2 prefetch size of 256 or 128 bytes (FA_KV_L2_PREFETCH, a
# measurement: df5f544 built with -DFA_KV_L2_PREFETCH=256): 256 against refactor on the GQA and the 16-head MLA cases (128: not run, time).
# (c) the same copies with an L2 evict-first policy (FA_KV_EVICT_FIRST, FlashMLA's hint on its TMA copies;
# fcff37b built with -DFA_KV_EVICT_FIRST=1) against reorder, on the 64/128-head MLA cases.
# (c2) "tma" (b5a30f2: reorder with whole key blocks copied by TMA where pages hold multiples of 64
# keys, no proxy fence for them; the tail block by cp.async): bits and time against reorder, then its MLA GPU tests.
# (d) Nsight Compute on one launch of the reorder kernel (b32 h128 k8192): where its time goes.
# (e) the oracle on MLA's 128-head 64k cases (they ran out of memory before the grouped reference).
# The other libraries travel as cuda_impl/_build/variants.tar.xz (baseline-head/, refactor/, reorder/, l2-256/,
# evict-first/, tma/; each libcuda_fa.so).
# device run: bash docs/journal/2026-12-06_handover-prefetch/device_call1.sh  (carry cuda_impl/_build/variants.tar.xz)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-06_handover-prefetch
PAIRED=docs/journal/2026-12-04_mla-wgmma/mla_paired.py
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/variants.tar.xz').extractall('cuda_impl/_build')"
LIB=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().library_path)")
mkdir -p $(dirname $LIB) && cp cuda_impl/_build/reorder/libcuda_fa.so $LIB  # (this checkout's Python, any commit)
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call1_pytest.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/call1_pytest.log
paired() {  # new-lib old-lib cases tag seconds
  cp cuda_impl/_build/$1/libcuda_fa.so $LIB
  DEV_BASELINE_LIB=cuda_impl/_build/$2/libcuda_fa.so PYTHONPATH=. timeout $5 python3 $PAIRED \
    --new=default --old=baseline --cases $3 > $OUT/call1_paired_$4.log 2>&1 || echo "paired: $?"
  mv $OUT/mla_paired_default_baseline.csv $OUT/call1_paired_$4.csv
  echo "== $1 against $2, $3"; tail -n +3 $OUT/call1_paired_$4.log | cut -c1-92
}
paired reorder refactor wgmma reorder 80
paired tma reorder wgmma tma 70
paired l2-256 refactor gqa l2-256_gqa 55
cp cuda_impl/_build/reorder/libcuda_fa.so $LIB
PYTHONPATH=. timeout 60 ncu --clock-control none -k regex:fwd_mla_decode_wgmma -s 1 -c 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats python3 $J/ncu_mla.py > $OUT/call1_ncu.log 2>&1; echo "ncu rc=$?"
grep -E "Duration|Throughput|Pipe|Stall|Issued|Eligible|Bank" $OUT/call1_ncu.log | head -30
paired l2-256 refactor 16 l2-256_16 50
paired evict-first reorder wgmma evict-first_wgmma 70
paired refactor baseline-head wgmma refactor 70
cp cuda_impl/_build/tma/libcuda_fa.so $LIB
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call1_pytest_tma.log 2>&1
echo "pytest tma rc=$?"; tail -2 $OUT/call1_pytest_tma.log
cp cuda_impl/_build/reorder/libcuda_fa.so $LIB
PYTHONPATH=. timeout 60 python3 $J/oom_check.py 2>&1 | tee $OUT/call1_oom.log | tail -3
