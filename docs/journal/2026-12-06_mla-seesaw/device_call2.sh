# Call 2: from the committed tree, the MLA and decode GPU suites, compute-sanitizer (memcheck, racecheck,
# synccheck) on small launches of the seesaw kernel, then the mla sweep (both backends; published from an H200 only).
# device run: FA2_GIT_COMMIT=<commit> bash docs/journal/2026-12-06_mla-seesaw/device_call2.sh (carry the library)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-06_mla-seesaw
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py tests/test_cuda_decode.py \
  > $OUT/call2_pytest.log 2>&1
tail -2 $OUT/call2_pytest.log
if grep -q -E "failed|error" $OUT/call2_pytest.log; then tail -60 $OUT/call2_pytest.log; exit 1; fi
for tool in memcheck racecheck synccheck; do
  PYTHONPATH=. timeout 90 compute-sanitizer --tool $tool --print-limit 20 python3 $J/sanitize_mla.py \
    > $OUT/call2_$tool.log 2>&1; echo "$tool rc=$?"; grep -E "SUMMARY|FAIL|Race reported" $OUT/call2_$tool.log | head -5
done
mkdir -p runs
timeout 220 python3 -m compare run --sweep mla --out runs/mla.csv --no-progress > $OUT/call2_sweep.log 2>&1 \
  || echo "sweep stopped: $?"
cp runs/mla.csv $OUT/call2_mla.csv
tail -42 $OUT/call2_sweep.log | head -30
