# Call 9: from the committed tree (FA2_GIT_COMMIT names it): the decode and MLA GPU suites, a kvcache fuzz run of
# cuda:decode (MLA latent caches among its draws), then the published mla sweep (both backends), and Nsight
# Compute's warp state of the final wgmma kernel on b32 h128 q1 k8k.
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-04_mla-wgmma/device_call9.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-04_mla-wgmma
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  > $OUT/call9_pytest.log 2>&1
tail -2 $OUT/call9_pytest.log
if grep -q -E "failed|error" $OUT/call9_pytest.log; then tail -60 $OUT/call9_pytest.log; exit 1; fi
timeout 90 python3 -m compare fuzz --backends cuda:decode --mode kvcache --budget-s 60 --out $OUT/fuzz \
  > $OUT/call9_fuzz.console 2>&1; echo "fuzz rc=$?"; tail -2 $OUT/call9_fuzz.console
mkdir -p runs
timeout 200 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call9_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call9_mla.csv
ncu --clock-control none --kernel-name regex:fwd_mla_decode_wgmma --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
  env PYTHONPATH=. python3 $J/mla_once.py 32 128 1 8192 > $OUT/call9_ncu.txt 2>&1 || echo "ncu: $?"
grep -E "Duration|Issue Slots|Eligible|highest-utilized" $OUT/call9_ncu.txt | head -8
tail -42 $OUT/call9_sweep.log
