set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout 100 python3 docs/journal/2026-12-02_mla/mla_speed.py > $OUT/mla_speed.log 2>&1; echo "speed rc=$?"; cat $OUT/mla_speed.log
timeout 100 python3 docs/journal/2026-12-02_mla/mla_splits.py > $OUT/mla_splits.log 2>&1; echo "splits rc=$?"; cat $OUT/mla_splits.log
