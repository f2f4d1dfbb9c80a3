#!/usr/bin/env bash
# The paper sweep (compare/sweeps/paper.toml) on every GPU of the machine, one interleaved shard per GPU,
# each under a time limit; the shards are merged into $OUT/paper.csv. Resumable: pass the CSV of an
# earlier, cut-off run as $OUT/paper-<i>.csv again and only the missing rows are measured.
#   here first:  bash scripts/gpu_measure.sh --build-only
#   device run:  FA2_GIT_COMMIT=<commit> bash scripts/gpu_paper.sh LIMIT_S [BACKEND_PATTERN ...]
#                with carry ["cuda_impl/_build"]
#   FlashAttention-4's rows (fa4:*) are measured where it imports: install it over two calls first
#   (scripts/fa4_wheels.sh says how) and export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages;
#   without it the sweep says it skips fa4:cute and why.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONWARNINGS=ignore::UserWarning
LIMIT=${1:?usage: gpu_paper.sh LIMIT_S [BACKEND_PATTERN ...]}
shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
BACKENDS=()
[ $# -gt 0 ] && BACKENDS=(--backends "$@")
for ((i = 0; i < GPUS; i++)); do
  # SIGINT first: Python closes the CSV between rows, so a cut-off shard stays a valid, resumable CSV
  CUDA_VISIBLE_DEVICES=$i timeout -s INT -k 15 "$LIMIT" python3 -m compare run --sweep paper "${BACKENDS[@]}" \
    --shard "$i/$GPUS" --out "$OUT/paper-$i.csv" --no-progress > "$OUT/paper-$i.log" 2>&1 &
done
wait
parts=("$OUT"/paper-*.csv)
python3 -m compare merge --out "$OUT/paper.csv" "${parts[@]}" && rm -f "${parts[@]}"
for ((i = 0; i < GPUS; i++)); do
  echo "== shard $i/$GPUS"
  grep -E "^sweep|to measure" "$OUT/paper-$i.log" | head -3
done
python3 - "$OUT/paper.csv" <<'EOF'
import sys

import pandas as pd

df = pd.read_csv(sys.argv[1])
rows = df[df["family"] != "ceiling"]
print(f"{len(rows)} rows measured; oracle: {rows['oracle'].value_counts().to_dict()}")
print(rows.groupby(["head_dim", "format"]).size().unstack(fill_value=0).to_string())
EOF
