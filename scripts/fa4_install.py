"""Install FlashAttention-4 on the GPU machine from the folders `scripts/fa4_wheels.sh` fills (no pip, no
network): every wheel is unzipped into TARGET, and the CuTe-DSL native library, carried as xz parts
cu13.partNN with its checksum in cu13.sha256, is joined, checked and unpacked there once all parts have come.
Parts are kept in TARGET/.fa4-parts, because a carried folder does not outlive its call on the GPU machine
(TARGET under /tmp does, while the machine stays warm).

    python3 scripts/fa4_install.py [--partial-ok] TARGET DIR [DIR ...]
    export PYTHONPATH=TARGET:TARGET/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH

Wheels are unzipped rather than pip-installed because pip's --target replaces a top-level folder that two
wheels share (nvidia_cutlass_dsl), and the .pth file of nvidia-cutlass-dsl is not read from PYTHONPATH,
hence the second path. --partial-ok: parts missing (the first of the two device calls) is not an error.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partial-ok", action="store_true")
    parser.add_argument("target", type=Path)
    parser.add_argument("dirs", type=Path, nargs="+")
    args = parser.parse_args()
    args.target.mkdir(parents=True, exist_ok=True)
    wheels = sorted(w for d in args.dirs for w in d.glob("*.whl"))
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(args.target)
        print(f"unzipped {wheel.name}")
    kept = args.target / ".fa4-parts"
    kept.mkdir(exist_ok=True)
    for carried in (p for d in args.dirs for p in d.glob("cu13.*")):
        shutil.copyfile(carried, kept / carried.name)
    parts = sorted(kept.glob("cu13.part*"))
    if not (kept / "cu13.sha256").exists():
        sys.exit(f"no cu13.sha256 in {', '.join(map(str, args.dirs))} or {kept}: carry .fa4a (scripts/fa4_wheels.sh)")
    blob = b"".join(p.read_bytes() for p in parts)
    if hashlib.sha256(blob).hexdigest() != (kept / "cu13.sha256").read_text().strip():
        message = f"cu13 parts {[p.name for p in parts]} do not match cu13.sha256 (a part is missing?)"
        if args.partial_ok:
            print(message + "; left for the next call")
            return 0
        sys.exit(message)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(blob))) as tar:
        tar.extractall(args.target)
    print(f"unpacked the CuTe-DSL cu13 library ({len(blob) / 2**20:.0f} MiB xz) into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
