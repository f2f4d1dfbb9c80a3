set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-02_local-attention
pip install -q --no-index --no-deps .whl/fuzz/*.whl 2>&1 | tail -1
python3 -c "from cuda_impl import _lib; _lib.load()" || exit 1
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_local.py tests/test_triton_local.py > $OUT/pytest_local.log 2>&1; echo "pytest rc=$?"; tail -3 $OUT/pytest_local.log
timeout 200 python3 $J/local_speed.py > $OUT/local_speed.log 2>&1; echo "speed rc=$?"
timeout 150 python3 -m compare fuzz --backends cuda:hopper --mode dense --budget-s 100 --out $OUT/fuzz > $OUT/fuzz.console 2>&1; echo "fuzz rc=$?"; tail -4 $OUT/fuzz.console
grep -E "FAILED|Error" $OUT/pytest_local.log | head -20
tail -16 $OUT/local_speed.log
