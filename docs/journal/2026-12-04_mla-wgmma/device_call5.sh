# Call 5: Nsight Compute on the wgmma MLA kernel (with the block-table look-ahead and the skipped rescale), one
# compute-bound case (b32 h128 q1 k8k): speed of light, pipes, warp stalls, and the stall samples per instruction.
# device run: bash docs/journal/2026-12-04_mla-wgmma/device_call5.sh (carry the library)
set -u
export PYTHONWARNINGS=ignore
J=docs/journal/2026-12-04_mla-wgmma
ncu --clock-control none --kernel-name regex:fwd_mla_decode_wgmma --launch-skip 2 --launch-count 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section InstructionStats \
  env PYTHONPATH=. python3 $J/mla_once.py 32 128 1 8192 > $OUT/call5_ncu.txt 2>&1 || echo "ncu: $?"
ncu --clock-control none --kernel-name regex:fwd_mla_decode_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters \
  --page source --print-source sass --csv env PYTHONPATH=. python3 $J/mla_once.py 32 128 1 8192 \
  > $OUT/call5_source.csv 2> $OUT/call5_source.err || echo "ncu source: $?"
grep -v "^==PROF==" $OUT/call5_ncu.txt | grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|Active|Bank|Shared|L1|L2|DRAM|Tensor|Busy" | head -70
python3 scripts/dev.py profile --stalls $OUT/call5_source.csv 2>&1 | head -60
