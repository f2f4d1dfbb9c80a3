"""python -m cuda_impl.toolchain: build the attention library and print ptxas -v per kernel; with --native, build
the compiled decode entry (cuda_impl.native) for the running torch or, with --torch-root, for another machine's."""

from __future__ import annotations

import argparse
import sys

from pathlib import Path

from cuda_impl import _lib, native
from cuda_impl.toolchain import BuildError, build_library, format_report, ptxas_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--flag",
        action="append",
        default=[],
        metavar="NVCC_FLAG",
        help="extra nvcc flag, e.g. -DFA_D128_WARPS=4 (builds a separate cache entry)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the library path")
    parser.add_argument("--native", action="store_true", help="build the compiled decode entry instead")
    parser.add_argument("--torch-root", type=Path, help="with --native: an unpacked torch wheel's torch/ folder "
                        "(include/, lib/, version.py), to build for that torch, e.g. the GPU machine's")
    args = parser.parse_args(argv)
    if args.native:
        target = native.TorchBuild.unpacked(args.torch_root) if args.torch_root else native.TorchBuild.running()
        try:
            print(native.build(target))
        except BuildError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    spec = _lib.library_spec(tuple(args.flag))
    try:
        path = build_library(spec, verbose=not args.quiet)
    except BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    if not args.quiet:
        print(format_report(ptxas_report(spec)))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
