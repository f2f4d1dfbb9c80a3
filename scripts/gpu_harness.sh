#!/usr/bin/env bash
# Harness validation on the GPU machine: environment, oracle matrix for the SDPA peers, quick sweep.
# Usage (device tool): bash scripts/gpu_harness.sh   (writes logs and the CSV under $OUT)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=. OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m compare env | tee "$OUT/env.json"
python3 -m compare list 2>&1 | tee "$OUT/list.log"
python3 -m compare check --backends 'sdpa:*' 2>&1 | tee "$OUT/check-sdpa.log" | tail -8
python3 -m compare run --sweep quick --backends 'sdpa:*' --out "$OUT/quick-sdpa.csv" --no-progress 2>&1 | tee "$OUT/quick-sdpa.log"
