#!/usr/bin/env bash
# One device call for issue 6's CUDA parts on the H200: the GPU quantizers (bit-identical to
# compare.formats, then timed) and the sm_120a kernels through their sm_90a emulation build
# (block-scaled MMA in software; everything else is the real kernel) against the oracle.
# Before the call, on the dev machine:   bash scripts/dev_blockscaled_gpu.sh --build-only
# then run this with carry ["cuda_impl/_build"] (or the .dev copy); logs and quant.csv land in $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
build() {
  python3 -c "from cuda_impl import build, quant, sm120
for spec in (quant.library_spec(), sm120.library_spec(emulate=True)): print(build.build_library(spec))"
}
if [ "$1" = "--build-only" ]; then
  build
  exit
fi
OUT="${OUT:-/tmp/dev_blockscaled_gpu}"
mkdir -p "$OUT"
# Each stage in its own process with a time limit; one line per stage, the quantizer table last.
stage() {
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc=$? $((SECONDS - start))s $(tail -n 1 "$OUT/$name.log")"
}
stage build 300 bash scripts/dev_blockscaled_gpu.sh --build-only
stage quant_tests 240 python3 -m pytest -q -m gpu tests/test_cuda_quant.py
stage sm120_emulated_oracle 300 python3 -m pytest -q -m gpu tests/test_cuda_sm120.py
stage quant_bench 240 python3 scripts/bench_quant_gpu.py --out "$OUT/quant.csv"
sed -n '/^quantize, bf16 in/,$p' "$OUT/quant_bench.log"
