# The decode sweep alone (its KV-cache rows new: contiguous / paged / e4m3 caches through attention_with_kvcache),
# for a short H200 call: no compiled host entries (they change eager host time, not the graph-replayed rows).
# device run: FA2_GIT_COMMIT=<40 hex> LIMIT=<s> bash docs/journal/2026-12-07_h200-sweeps/decode_call.sh (carry .devcarry)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
python3 -c "import tarfile; tarfile.open('.devcarry/cuda_build.tar.xz').extractall('cuda_impl/_build')"
mkdir -p runs
timeout ${LIMIT:-200} python3 -m compare run --sweep decode --out runs/decode.csv --no-progress > $OUT/sweep_decode.log 2>&1
echo "decode sweep rc=$? at ${SECONDS}s"
cp runs/decode.csv $OUT/decode.csv
grep -E "ERROR|FAIL" $OUT/sweep_decode.log | head
grep -E "cache|paged" $OUT/sweep_decode.log | tail -12
