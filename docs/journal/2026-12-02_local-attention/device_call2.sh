set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-02_local-attention
python3 -c "from cuda_impl import _lib; _lib.load()" || exit 1
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_local.py tests/test_triton_headdims.py > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.log
LOCAL_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so timeout 120 python3 $J/local_speed.py > $OUT/local_speed.log 2>&1; echo "local rc=$?"
FA2_GIT_COMMIT=${FA2_GIT_COMMIT:-unknown} timeout 240 python3 -m compare run --sweep local --out $OUT/local.csv --no-progress > $OUT/local_sweep.log 2>&1; echo "sweep rc=$?"
timeout 60 python3 $J/headdim_speed.py > $OUT/headdim_speed.log 2>&1; echo "headdim rc=$?"
grep -E "FAILED|Error" $OUT/pytest.log | head -10
tail -14 $OUT/local_speed.log; tail -3 $OUT/headdim_speed.log
tail -24 $OUT/local_sweep.log
