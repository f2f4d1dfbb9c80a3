# triton_impl's compiled entry on the GPU (.devcarry/call.sh), then on an H200 the mla and headdims sweeps of main
# ddaa542452a5 (.devcarry/mainlib.tar.xz) while the call's time lasts (LIMIT seconds, default 540).
set -u
LIMIT=${LIMIT:-540}
bash .devcarry/call.sh
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: no sweep"; exit 0; }
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning FA2_GIT_COMMIT=ddaa542452a5
python3 -c "import tarfile; tarfile.open('.devcarry/mainlib.tar.xz').extractall('cuda_impl/_build')"
mkdir -p runs
for sweep in mla headdims; do
  left=$((LIMIT - SECONDS - 10))
  [ $left -lt 150 ] && { echo "$sweep: no time ($left s left)"; continue; }
  timeout $left python3 -m compare run --sweep $sweep --out runs/$sweep.csv --no-progress > $OUT/${sweep}_sweep.log 2>&1 \
    || echo "$sweep sweep stopped: $?"
  cp runs/$sweep.csv $OUT/$sweep.csv 2>/dev/null; echo "== $sweep at ${SECONDS}s: $(grep -c '' runs/$sweep.csv) lines"
  tail -3 $OUT/${sweep}_sweep.log | cut -c1-150
done
