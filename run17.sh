#!/bin/bash
# session 17 device call: v5 with the next tile's loads after S; fp64 check of the builds, then cycles against FA2
set -u
python3 -c "import tarfile; tarfile.open('cuda_impl/_build/carry.tar.xz').extractall('cuda_impl/_build')"
export PYTHONPATH=.
timeout 150 python3 scripts/dev_cuda_gpu.py --out $OUT/dev --skip pytest --skip bench --skip ceilings --skip sanitize > $OUT/dev-cuda-alt.log 2>&1; echo "alt rc=$?"; grep -E 'pass|FAIL' $OUT/dev-cuda-alt.log | tail -2
F="-DFA_V5_LOAD_AFTER_S=1"
CASES=()
for c in "1,8,8,4096,8192,128" "1,8,8,4096,8192,128,causal" "1,16,16,16384,16384,128" "4,16,16,4096,4096,128"; do
  CASES+=("cuda:v5@$c" "cuda:v5[$F]@$c"); [[ $c == *causal* ]] || CASES+=("sdpa:flash@$c"); done
timeout 250 python3 scripts/profile_gpu.py --cycles --repeat 7 --out $OUT/cyc "${CASES[@]}" > $OUT/cycles.log 2>&1; echo "cycles rc=$?"
rm -f $OUT/cyc/ncu-raw.csv; rm -rf $OUT/dev
tail -12 $OUT/cycles.log
