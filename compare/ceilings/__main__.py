"""python -m compare.ceilings [--build-only]: build + SASS-check the mma.sync and wgmma benchmarks, then measure."""

from __future__ import annotations

import argparse

from compare import ceilings
from compare.ceilings import wgmma


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build-only", action="store_true", help="build and check the SASS, no GPU needed")
    args = parser.parse_args()
    path = ceilings.build_library()
    print(path)
    chains = ceilings.load_checked().mma_ceiling_chains()  # raises if the SASS lost MMAs
    print(f"SASS check passed: {chains} HMMA per loop iteration in every cubin")
    print(wgmma.build_library())
    per_iter = wgmma.load_checked().wgmma_ceiling_wgmmas_per_iter()  # raises if the SASS lost wgmmas
    print(f"SASS check passed: {per_iter} HGMMA (bf16) / QGMMA (e4m3) per loop iteration on sm_90a")
    if args.build_only:
        return
    for name, value in ceilings.measure_all().items():
        what, unit = ceilings.CEILINGS[name]
        print(f"{name:<14} {value:8.2f} {unit:<8} {what}")


if __name__ == "__main__":
    main()
