# Call 4: compute-sanitizer on the d80 / d96 kernels (d64's choices: three consumers, the split last round's range
# in shared memory): memcheck of the plain and split launches, racecheck of the plain ones (dev.toml sanitize /
# sanitize_split shapes at d80 / d96).
# device run: bash docs/journal/2026-12-06_headdims-tiles/device_call4.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --print-limit 20 python3 scripts/dev.py sanitize hopper --head-dim 80,96 \
    > $OUT/call4_$tool.log 2>&1; echo "$tool rc=$?"; tail -3 $OUT/call4_$tool.log
done
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/dev.py sanitize hopper --split \
  --head-dim 80,96 > $OUT/call4_memcheck_split.log 2>&1; echo "memcheck split rc=$?"; tail -3 $OUT/call4_memcheck_split.log
