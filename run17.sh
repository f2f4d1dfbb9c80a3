#!/bin/bash
# session 17 device call: d64 with a 4-stage ring, checked against the oracle, then cycles
set -u
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/carry.tar.xz').extractall('cuda_impl/_build')"
export PYTHONPATH=.
timeout 150 python3 scripts/dev_hopper_gpu.py --stage correctness d64-4-stage > $OUT/dev-d64-4-stage.log 2>&1; echo "correct rc=$?"; tail -1 $OUT/dev-d64-4-stage.log
F="-DFA_HOPPER_D64_STAGES=4"
CASES=()
for c in "4,32,32,4096,4096,64" "1,32,32,16384,16384,64" "4,32,32,4096,4096,64,causal" "1,32,32,16384,16384,64,causal" "16,32,32,1024,1024,64,causal"; do
  CASES+=("cuda:hopper@$c" "cuda:hopper[$F]@$c"); done
timeout 250 python3 scripts/profile_gpu.py --cycles --repeat 7 --out $OUT/cyc "${CASES[@]}" > $OUT/cycles.log 2>&1; echo "cycles rc=$?"
rm -f $OUT/cyc/ncu-raw.csv
tail -11 $OUT/cycles.log
