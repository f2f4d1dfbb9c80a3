"""The developer driver: checks, timings, sanitizer targets, bit-identity and paired timing against another
commit's library, profiles and traces of the CUDA and Triton kernels, on the GPU machine. Its data (builds,
shapes per family, the same-bits inputs, the paired list) is scripts/dev.toml; `dev.py list` prints it.

On the dev machine (nvcc, no GPU): build what the call needs, then carry cuda_impl/_build (at most 64 MiB):
    python scripts/dev.py build [NAME ...|all] [--baseline-src /path/to/other/checkout]
On the GPU machine, from the repository root:
    python scripts/dev.py hopper [--builds no-pingpong,no-split] [--head-dim 128] [--rounds 5]
    DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so python scripts/dev.py same-bits
    DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so python scripts/dev.py paired
    compute-sanitizer --tool memcheck python scripts/dev.py sanitize hopper --split

Family runs (hopper, hopper-fp8, hopper-mx, ladder, triton) check every build against the oracle, then time
those that passed beside the peers, each stage in a child process with a time limit, so that a hung kernel is
reported as a timeout; a crashing kernel fails its check and the loop goes on. DEV_BASELINE_LIB names another
commit's prebuilt libcuda_fa.so: it is registered through cuda_impl._lib.register_library(("baseline",), path)
and run beside this checkout's as build "baseline" (extra_flags=("baseline",)).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # devtools/, when imported rather than run

from devtools import core  # noqa: E402

FAMILY_HELP = {
    "hopper": "cuda:hopper bf16/fp16: oracle checks of each build, then timing beside SDPA cuDNN",
    "hopper-fp8": "cuda:hopper-fp8: oracle checks, then timing beside triton:fp8 and cuDNN (bf16 values)",
    "hopper-mx": "cuda:hopper-mxfp8 / -nvfp4: dequantization pass, oracle checks, then timing",
    "ladder": "cuda:v1..v5 (mma.sync): oracle checks, then timing beside SDPA flash and cuDNN",
    "triton": "the Triton and Gluon variants through triton_impl.attention: oracle checks, then timing",
}


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a positive number of units, got {text}")
    return value


def _doc(module: str) -> str:
    import importlib

    return importlib.import_module(f"devtools.{module}").__doc__


def _baseline_arg(p):
    p.add_argument("--baseline", metavar="PATH",
                   help="another commit's prebuilt libcuda_fa.so (default: $DEV_BASELINE_LIB)")


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="dev.py", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    families = core.config()["families"]
    for name in families:
        fam = families[name]
        p = sub.add_parser(name, help=FAMILY_HELP.get(name, f"family {name} of dev.toml"),
                           description=f"{FAMILY_HELP.get(name, name)}.\n\nvariants: {', '.join(fam['variants'])}; "
                           f"formats: {', '.join(fam['formats'])}; peers: {', '.join(fam.get('peers', [])) or '-'}.\n"
                           f"Shapes: dev.toml [families.{name}]. " + _doc("families").split("\n\n", 1)[1])
        p.add_argument("--builds", metavar="NAMES",
                       help="ablation builds to check and time beside the default, comma-separated, 'all' or 'none' "
                            "(default: those built and carried)")
        p.add_argument("--only", choices=("check", "time"), help="run one stage")
        p.add_argument("--rounds", type=positive, help="interleaved timing rounds (default: dev.toml [timing])")
        p.add_argument("--head-dim", metavar="D[,D]", help="only the shapes of these head_dims")
        p.add_argument("--power-log", action="store_true", help="nvidia-smi's clock and power after every timing")
        p.add_argument("--build-only", action="store_true",
                       help="(dev machine) build the libraries this run would use, then stop")
        _baseline_arg(p)
        p.add_argument("--stage", choices=("check", "time"), help=argparse.SUPPRESS)
        p.add_argument("--stage-builds", help=argparse.SUPPRESS)
        p.set_defaults(family=name)

    p = sub.add_parser("sanitize", help="small launches of a family checked in-process: run under compute-sanitizer",
                       description="Small launches of a family (dev.toml sanitize / sanitize_split shapes), each "
                       "checked against the oracle, in this process:\n\n"
                       "    compute-sanitizer --tool memcheck python scripts/dev.py sanitize hopper\n"
                       "    compute-sanitizer --tool racecheck python scripts/dev.py sanitize hopper-fp8\n"
                       "    compute-sanitizer --tool memcheck python scripts/dev.py sanitize hopper --split")
    p.add_argument("name", metavar="FAMILY", choices=list(families), help=f"one of {', '.join(families)}")
    p.add_argument("--split", action="store_true", help="the launches whose last round is split (memcheck)")
    p.add_argument("--build", default="default", metavar="NAME", help="a build of dev.toml, or 'baseline'")
    p.add_argument("--head-dim", metavar="D[,D]", help="only the shapes of these head_dims")
    _baseline_arg(p)

    p = sub.add_parser("same-bits", help="every CUDA variant: this checkout's library and the baseline's, bit for bit",
                       description=_doc("same_bits") + "\nExit status 1 when any case differs.")
    p.add_argument("--out", metavar="CSV", help="default: $OUT/same-bits.csv ($OUT unset: /tmp/out)")
    p.add_argument("--variants", metavar="NAMES", help="only these variants of dev.toml [same-bits.variants]")
    _baseline_arg(p)
    p.add_argument("--stage", choices=("run",), help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)

    p = sub.add_parser("paired", help="this checkout's library against the baseline's, interleaved timing rounds",
                       description=_doc("paired"))
    p.add_argument("--out", metavar="CSV", help="default: $OUT/paired.csv ($OUT unset: /tmp/out)")
    p.add_argument("--rounds", type=positive, help="default: dev.toml [paired] rounds")
    p.add_argument("--formats", metavar="F[,F]", help="only the cases of these formats")
    p.add_argument("--head-dim", metavar="D[,D]", help="only the cases of these head_dims")
    _baseline_arg(p)
    p.add_argument("--stage", choices=("run",), help=argparse.SUPPRESS)

    p = sub.add_parser("build", help="(dev machine) build the default library and named builds, or a baseline",
                       description="Build this checkout's library and the named builds of dev.toml ('all': every "
                       "one) into cuda_impl/_build, drop the object files (carry size) and say how much a call "
                       "would carry. --baseline-src DIR builds DIR's library with DIR's own build code and copies "
                       "it to cuda_impl/_build/baseline/libcuda_fa.so, the DEV_BASELINE_LIB of same-bits and "
                       "paired.")
    p.add_argument("names", nargs="*", metavar="NAME", help="builds of dev.toml, or 'all'")
    p.add_argument("--baseline-src", metavar="DIR", help="another checkout (e.g. a git worktree of the base commit)")
    p.add_argument("--keep-objects", action="store_true", help="keep the .o files")

    p = sub.add_parser("ptxas", help="registers, stack and spills per kernel, optionally against another checkout",
                       description="ptxas -v per kernel of this checkout's library (or a build), and with --against "
                       "DIR beside DIR's own report (its library built there first): exit status 1 when a kernel "
                       "uses more registers or spills more than there.")
    p.add_argument("--build", default="default", metavar="NAME")
    p.add_argument("--against", metavar="DIR", help="another checkout with its library built")
    p.add_argument("--filter", default="", metavar="TEXT", help="only kernels whose name contains TEXT")

    sub.add_parser("list", help="print the families, builds and case counts of dev.toml",
                   description="Print what dev.toml holds and which builds are built here.")

    p = sub.add_parser("profile", help="Nsight Compute counters per case (ncu), or a summary of a SASS dump",
                       description=_doc("profile"))
    p.add_argument("cases", nargs="*", metavar="CASE")
    p.add_argument("--out", metavar="DIR", help="default: $OUT ($OUT unset: /tmp/out)")
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--report", action="store_true",
                   help="only rebuild profile.csv and the table from --out's ncu-raw.csv and cases.txt")
    p.add_argument("--source", action="store_true",
                   help="SourceCounters (stall samples per SASS instruction) into --out/sass.csv.gz")
    p.add_argument("--stalls", type=Path, metavar="FILE", help="only summarize a sass.csv[.gz] (no GPU)")
    p.add_argument("--per", type=positive_float, metavar="UNITS",
                   help="with --source / --stalls: executed instructions per UNITS (e.g. warps x tiles)")
    p.add_argument("--cycles", action="store_true",
                   help="only elapsed cycles and duration per launch (one pass: fast) into --out/cycles.csv")
    p.add_argument("--repeat", type=positive, default=1, help="profile the case list this many times over")
    p.add_argument("--build-only", action="store_true", help="(dev machine) build the cases' builds, then stop")
    p.add_argument("--stage", choices=("child",), help=argparse.SUPPRESS)

    p = sub.add_parser("trace", help="per-item cycle timeline of persistent cuda:hopper CTAs (build 'trace')",
                       description=_doc("trace"))
    p.add_argument("cases", nargs="*", metavar="CASE", help="B,Hq,Hkv,Sq,Sk,D[,causal]")
    p.add_argument("--out", metavar="DIR", help="default: $OUT ($OUT unset: /tmp/out)")
    p.add_argument("--build-only", action="store_true", help="(dev machine) build the traced library, then stop")
    return top


def dispatch(args) -> int:
    if getattr(args, "baseline", None):  # one place for it: the stages in child processes inherit it
        os.environ["DEV_BASELINE_LIB"] = args.baseline
    path = core.baseline_path()
    if path is not None and not path.is_file() and args.command not in ("build", "list"):
        raise core.UsageError(f"DEV_BASELINE_LIB / --baseline: no file {path}")
    if getattr(args, "family", None):
        from devtools import families

        fam = core.family(args.family)
        head_dims = core.head_dim_filter(args.head_dim)
        if args.stage == "check":
            return families.stage_check(args.family, args.stage_builds, head_dims)
        if args.stage == "time":
            rounds = args.rounds or core.config()["timing"]["rounds"]
            return families.stage_time(args.family, args.stage_builds.split(","), head_dims, rounds, args.power_log)
        families.family_builds(args.family, fam, args.builds, False)  # bad --builds fail before any stage
        return families.run(args.family, args, args.argv[1:])
    if args.command == "sanitize":
        from devtools import families

        return families.stage_sanitize(args.name, args.split, args.build, core.head_dim_filter(args.head_dim))
    if args.command == "same-bits":
        from devtools import same_bits

        return same_bits.main(args)
    if args.command == "paired":
        from devtools import paired

        return paired.main(args)
    if args.command in ("build", "ptxas", "list"):
        from devtools import builds

        return {"build": builds.build_main, "ptxas": builds.ptxas_main, "list": builds.list_main}[args.command](args)
    if args.command == "profile":
        from devtools import profile

        return profile.main(args)
    from devtools import trace

    return trace.main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    args.argv = argv
    try:
        return dispatch(args)
    except core.UsageError as exc:
        p.exit(2, f"dev.py {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
