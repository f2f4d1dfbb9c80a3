set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
python3 -c "from cuda_impl import _lib; _lib.load()" || exit 1
timeout 300 python3 -m compare run --sweep local --out $OUT/local.csv --no-progress > $OUT/local_sweep.log 2>&1; echo "sweep rc=$?"
tail -24 $OUT/local_sweep.log
