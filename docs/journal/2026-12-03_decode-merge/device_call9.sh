# Host cost before (ab_host/: aac5d04's compare, cuda_impl and triton_impl, not committed) and after (408e4a0) in
# one call, three interleaved rounds of host_profile.py (single readings of host time moved 2x between calls).
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
for r in 1 2 3; do
  for arm in before after; do
    P=.; [ $arm = before ] && P=ab_host:.
    echo "== $arm round $r"; PYTHONPATH=$P timeout 60 python3 docs/journal/2026-12-03_decode-merge/host_profile.py | head -5
  done
done > $OUT/host_ab.log 2>&1
grep -E "^==|cuda_impl  |triton_impl  |sdpa" $OUT/host_ab.log
