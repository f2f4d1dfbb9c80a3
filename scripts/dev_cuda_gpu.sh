#!/usr/bin/env bash
# One device call for cuda_impl (see scripts/dev_cuda_gpu.py). Before the call, on the dev machine:
#   bash scripts/dev_cuda_gpu.sh --build-only
# then run this with carry ["cuda_impl/_build"]; output lands in $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ "$1" = "--build-only" ]; then
  exec python3 scripts/dev_cuda_gpu.py --build-only
fi
# The carried libraries normally load as they are; if they do not, build them here.
if ! python3 -c "from cuda_impl import _lib; _lib.load()"; then
  echo "carried build did not load; building on this machine"
  rm -rf cuda_impl/_build
  python3 scripts/dev_cuda_gpu.py --build-only || exit 1
fi
OUT="${OUT:-/tmp/dev_cuda_gpu}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
python3 scripts/dev_cuda_gpu.py --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
