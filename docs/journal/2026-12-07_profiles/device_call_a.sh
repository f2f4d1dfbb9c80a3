# Call A (one machine, the most asked of it first): MLA builds paired
# against the default one (mla_paired_occupancy.py; bits compared first): FA_MLA_MULTICAST (pairs of row-tile CTAs
# in a cluster, each TMA panel's rows split between them and multicast to both), FA_MLA_TWO_CTAS (the 16-row
# mma.sync kernel two CTAs an SM on two-stage rings), FA_MLA_EARLY_S (group 0 issues the next pair's S on its own
# panels before waiting out P_B V_B), FA_MLA_PV_B_FIRST (group 1 issues P_B V_B before it meets group 0); Nsight
# Compute profiles (profile_cases.py) in between, while the call's time lasts (LIMIT, default 540). (The GPU tests of
# journal 2026-12-07 entry-and-tma's device_next.sh run in call B, which runs that script.)
# From a checkout of branch wip/mla-experiments (the flags; its default build's SASS is main's), carrying .devcarry
# with mla_experiments.tar.xz (its default and four flag builds, tar -C cuda_impl/_build, and the compiled entry) and
# triton_build.tar.xz; rebuild them if the sources change (commands in the entry-and-tma device_next.sh header).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-07_profiles/device_call_a.sh (carry .devcarry)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-07_profiles
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 -c "
import tarfile
tarfile.open('.devcarry/mla_experiments.tar.xz').extractall('cuda_impl/_build')
tarfile.open('.devcarry/triton_build.tar.xz').extractall('triton_impl/_build')"
paired() {  # FLAG CASES
  [ $SECONDS -gt $LIMIT ] && { echo "paired $1: no time"; return; }
  PYTHONPATH=. timeout 120 python3 $J/mla_paired_occupancy.py --new=-DFA_MLA_$1 --old=default --cases $2 \
    > $OUT/paired_$1.log 2>&1; echo "paired $1 rc=$? at ${SECONDS}s"; tail -10 $OUT/paired_$1.log
}
profile() {  # CASE
  [ $SECONDS -gt $LIMIT ] && { echo "profile $1: no time"; return; }
  timeout 100 ncu --clock-control none --profile-from-start off --set full --import-source no -f -o $OUT/$1 \
    python3 $J/profile_cases.py $1 > $OUT/$1_run.log 2>&1; echo "profile $1 rc=$? at ${SECONDS}s"
  grep -E "PASS|FAIL|Error" $OUT/$1_run.log | head -3
  ncu --import $OUT/$1.ncu-rep --page details > $OUT/$1_details.txt 2>&1
  ncu --import $OUT/$1.ncu-rep --page raw --csv > $OUT/$1_raw.csv 2>&1
  ncu --import $OUT/$1.ncu-rep --page source --csv --print-source sass > $OUT/$1_sass.csv 2>&1
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput" $OUT/$1_details.txt | head -8
}
paired MULTICAST wgmma
profile mla128
paired TWO_CTAS 16
paired EARLY_S wgmma
paired PV_B_FIRST wgmma
for c in gqa_bf16 cudnn_bf16 gqa_e4m3 mla16 triton_e4m3; do profile $c; done
