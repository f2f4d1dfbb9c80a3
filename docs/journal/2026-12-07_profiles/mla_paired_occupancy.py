"""docs/journal/2026-12-04_mla-wgmma/mla_paired.py with each build's split plan taken at that build's resident CTAs
per SM (the script plans both with the default build's count, which hides a build that fits more CTAs an SM).
Same arguments. GPU machine: python3 <this file> --new=-DFA_MLA_TWO_CTAS --old=default --cases 16"""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "mla_paired", Path(__file__).resolve().parent.parent / "2026-12-04_mla-wgmma" / "mla_paired.py")
paired = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paired)
per_sm, launcher = paired._lib.mla_decode_ctas_per_sm, paired.launcher


def launcher_at_own_occupancy(case, inputs, flags):
    paired._lib.mla_decode_ctas_per_sm = lambda dtype, rows, device: per_sm(dtype, rows, device, extra_flags=flags)
    try:
        return launcher(case, inputs, flags)
    finally:
        paired._lib.mla_decode_ctas_per_sm = per_sm


paired.launcher = launcher_at_own_occupancy
if __name__ == "__main__":
    paired.main()
