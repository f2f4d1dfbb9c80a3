set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_mla.py tests/test_triton_decode.py > $OUT/pytest_mla.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest_mla.log
grep -E "FAILED|Error" $OUT/pytest_mla.log | head -10
timeout 120 python3 docs/journal/2026-12-02_mla/mla_speed.py > $OUT/mla_speed.log 2>&1; echo "speed rc=$?"; cat $OUT/mla_speed.log | tail -8
