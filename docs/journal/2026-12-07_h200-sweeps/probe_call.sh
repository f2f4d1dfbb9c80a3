# The decode sweep alone (decode_call.sh), then the GPU test files that shared a process when 43 Triton items ran
# out of memory with 138.8 GiB reserved but unallocated (test_gpu_oracle .. test_triton_limits, less the files the
# earlier run had taken first), under memprobe.py.
# device run: FA2_GIT_COMMIT=<40 hex> LIMIT=<s> TESTS_LIMIT=<s> bash docs/journal/2026-12-07_h200-sweeps/probe_call.sh
set -u
here=docs/journal/2026-12-07_h200-sweeps
bash $here/decode_call.sh
files=$(ls tests/test_*.py | awk -F/ '$2 >= "test_gpu_oracle.py" && $2 <= "test_triton_limits.py"' |
  grep -v -e test_native_entry -e test_triton_native_entry -e test_triton_decode -e test_triton_headdims)
PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} timeout ${TESTS_LIMIT:-300} python3 -m pytest -q -p no:cacheprovider -p memprobe -m gpu $files \
  > $OUT/probe_pytest.log 2>&1
echo "probe tests rc=$? at ${SECONDS}s"; tail -1 $OUT/probe_pytest.log; grep -E "^(FAILED|ERROR)" $OUT/probe_pytest.log | head
awk -F'\t' '{print $1, $3}' $OUT/memprobe.txt | awk '{r=$NF; if (r - p > 4 || p - r > 4) print; p=r}' | head -20
grep -n "segment" $OUT/memprobe.txt | head -8
