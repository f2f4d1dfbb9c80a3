#!/usr/bin/env bash
# FlashAttention-4 (the `fa4:cute` peer) for the GPU machine, which has no network: its wheels, fetched
# here and split over two device calls, because one call carries at most 64 MiB with the working tree
# and FA4's CuTe-DSL native library alone is 92 MB as a wheel (61 MiB repacked with xz).
#
#   bash scripts/fa4_wheels.sh          # here: fills .fa4a/ (small wheels, part 0) and .fa4b/ (the rest)
#   device call 1, carry [".fa4a"]:       python3 scripts/fa4_install.py --partial-ok /tmp/site .fa4a
#   device call 2, carry [".fa4b", ...]:  python3 scripts/fa4_install.py /tmp/site .fa4b
#       then  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
#
# A carried folder does not outlive its call there, but /tmp does while the machine stays warm, so the
# install keeps what call 1 brought under /tmp/site; if the machine was given back in between, call 1 again. The versions are those pip
# resolved for the 2026-11-29 FA4 anchor (../shared/anchors/h200-2026-11-29-fa4.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
FA4=flash-attn-4==4.0.0b36
DSL=4.8.1
SMALL=(apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 quack-kernels==0.6.5
       "nvidia-cutlass-dsl==$DSL" "nvidia-cutlass-dsl-libs-base==$DSL" "nvidia-cutlass-dsl-libs-core==$DSL")
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for d in .fa4a .fa4b; do
  grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
done
rm -rf .fa4a .fa4b && mkdir .fa4a .fa4b
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps -d .fa4a "$FA4"
python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d .fa4a "${SMALL[@]}"
python3 -m pip download -q --no-deps "${PLATFORM[@]}" -d "$tmp" "nvidia-cutlass-dsl-libs-cu13==$DSL"
echo "repacking the cu13 wheel with xz (about 3 minutes on 2 cores)"
mkdir "$tmp/tree" && (cd "$tmp/tree" && python3 -m zipfile -e "$tmp"/nvidia_cutlass_dsl_libs_cu13-*.whl .)
tar -C "$tmp/tree" -cf - . | xz -T0 -9e > "$tmp/cu13.tar.xz"
sha256sum "$tmp/cu13.tar.xz" | cut -d' ' -f1 > .fa4a/cu13.sha256
split -b 31000000 -d "$tmp/cu13.tar.xz" "$tmp/cu13.part"
mv "$tmp/cu13.part00" .fa4a/ && mv "$tmp"/cu13.part0* .fa4b/
du -sh .fa4a .fa4b
