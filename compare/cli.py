"""Command line: ``python -m compare {list,check,run,paired,merge,env,figures,report}`` (also installed as
``fa2-compare``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from . import backends, bench, env, figures, oracle, paired, report, sweeps

# The oracle matrix: (batch, heads_q, heads_kv, seqlen_q, seqlen_k), each run causal and not, for every
# format and head_dim a backend declares. Chosen to hit tails (lengths that are no multiple of any tile),
# Sq > Sk (causal rows that see no key), Sq < Sk, GQA, MQA, a single query and a single key.
MATRIX = {
    "full": [
        (2, 4, 4, 256, 256),
        (1, 2, 2, 97, 203),
        (1, 2, 2, 300, 100),
        (2, 8, 2, 128, 384),
        (1, 4, 1, 190, 190),
        (1, 2, 2, 1, 777),
        (3, 2, 2, 65, 1),
    ],
    "small": [(1, 2, 2, 97, 203), (1, 4, 2, 130, 64)],
}
HEAD_DIMS = (64, 128, 256)


def matrix_cases(backend: backends.Backend, size: str, formats: list[str] | None, scale: float | None = None):
    """The oracle matrix for one backend, restricted to what it declares (and to `formats` if given)."""
    cases = []
    fmts = [f for f in backend.formats if formats is None or f in formats]
    head_dims = [d for d in HEAD_DIMS if backend.head_dims is None or d in backend.head_dims]
    for i, (fmt, d, shape, causal) in enumerate(
            (f, d, s, c) for f in fmts for d in head_dims for s in MATRIX[size] for c in (False, True)):
        b, hq, hkv, sq, sk = shape
        case = oracle.Case(b, hq, hkv, sq, sk, d, causal=causal, fmt=fmt, scale=scale,
                           dist=oracle.DISTRIBUTIONS[i % len(oracle.DISTRIBUTIONS)], seed=1000 + i)
        if backend.unsupported_reason(case) is None:
            cases.append(case)
    return cases


def cmd_list(args) -> int:
    rows = []
    for name, b in sorted(backends.registry().items()):
        reason = b.unavailable_reason()
        rows.append((name, b.family, ",".join(b.formats), ",".join(map(str, b.head_dims)) if b.head_dims else "any",
                     "yes" if not reason else f"no: {reason}"))
    widths = [max(len(str(r[i])) for r in rows + [("backend", "family", "formats", "head_dim", "runs here")])
              for i in range(4)]
    header = ("backend", "family", "formats", "head_dim", "runs here")
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return 0


def cmd_check(args) -> int:
    chosen, skipped = backends.select(args.backends)
    for name, reason in skipped.items():
        print(f"skip {name}: {reason}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    failures, total = [], 0
    for b in chosen:
        cases = matrix_cases(b, args.matrix, args.formats, args.scale)
        passed, repeats, last_error = 0, 0, None
        for case in cases:
            total += 1
            try:
                verdict = oracle.check(b, case, device=device, returns_lse=b.returns_lse)
                ok, text = verdict.passed, verdict.summary()
            except Exception as exc:  # report and go on: one broken case must not hide the others
                ok, text = False, f"ERROR {type(exc).__name__}: {exc}"
            passed += ok
            if not ok:
                failures.append(f"{b.name} {case.shape_str()}: {text}")
            # an error raised again word for word (a refused variant) is printed once, then counted
            if not ok and not args.verbose and text == last_error:
                repeats += 1
            elif args.verbose or not ok:
                print(f"{b.name:<18} {case.shape_str():<52} {text}")
            last_error = None if ok else text
        if repeats:
            print(f"{b.name:<18} ... and {repeats} more cases with the same error (-v lists each)")
        print(f"{b.name:<18} {passed}/{len(cases)} passed")
    print(f"oracle check on {device}: {total - len(failures)}/{total} passed")
    return 1 if failures or total == 0 else 0


def cmd_run(args) -> int:
    sweep = sweeps.load(args.sweep)
    bench.run(sweep, patterns=args.backends, out=args.out, shard=args.shard, resume=not args.no_resume,
              warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=not args.no_progress)
    return 0


def cmd_paired(args) -> int:
    if args.backends is not None and len(args.backends) < 2:
        raise ValueError("--backends needs at least two names: the first is compared with each other one")
    if args.from_csv:
        rows = paired.read(args.from_csv)
        if args.backends:
            print(paired.table(rows, args.backends[0], args.backends[1:]))
            return 0
        firsts: dict[str, list[str]] = {}  # the comparisons the CSV holds, as the README's table has them
        for first, other in paired.pairs(rows):
            firsts.setdefault(first, []).append(other)
        print("\n\n".join(paired.table(rows, first, others) for first, others in firsts.items()))
        return 0
    if args.backends is None:
        raise ValueError("--backends is needed to time (only --from-csv reads the names from its CSV)")
    chosen, skipped = backends.select(args.backends)
    for name, reason in skipped.items():
        print(f"skip {name}: {reason}")
    causal = {"both": None, "yes": True, "no": False}[args.causal]
    cases = paired.select_cases(sweeps.load(args.sweep).cases, head_dims=args.head_dims, formats=args.formats,
                                seqlens=args.seqlens, causal=causal)
    out = paired.run(args.sweep, chosen, cases, args.rounds, out=args.out, warmup_ms=args.warmup_ms,
                     rep_ms=args.rep_ms)
    print(f"wrote {out}")
    return 0


def cmd_merge(args) -> int:
    n = bench.merge(args.parts, args.out)
    print(f"merged {len(args.parts)} parts into {args.out}: {n} rows")
    return 0


def cmd_env(args) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = {**env.environment(device), "sm_clock_mhz": env.sm_clock_mhz(), "device": device}
    print(json.dumps(report, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compare", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="backends, their capabilities, and whether this machine can run them")

    c = sub.add_parser("check", help="run the oracle matrix for chosen backends")
    c.add_argument("--backends", nargs="+", metavar="PATTERN", help="registry names or shell patterns (default: all)")
    c.add_argument("--matrix", choices=sorted(MATRIX), default="full")
    c.add_argument("--formats", nargs="+", help="only these formats")
    c.add_argument("--scale", type=float, help="custom softmax scale (default 1/sqrt(head_dim))")
    c.add_argument("-v", "--verbose", action="store_true", help="print passing cases too")

    r = sub.add_parser("run", help="run a named sweep, appending rows to a CSV under figures/data/")
    r.add_argument("--sweep", required=True, help=f"one of {', '.join(sweeps.available())}, or a .toml path")
    r.add_argument("--backends", nargs="+", metavar="PATTERN", help="override the sweep's backend patterns")
    r.add_argument("--out", type=Path, help="CSV path (default figures/data/<sweep>-<gpu>-<commit>.csv)")
    r.add_argument("--shard", metavar="i/N", help="run only the i-th of N interleaved parts (0-based)")
    r.add_argument("--no-resume", action="store_true", help="measure again rows already in the CSV")
    r.add_argument("--warmup-ms", type=int, default=25)
    r.add_argument("--rep-ms", type=int, default=100)
    r.add_argument("--no-progress", action="store_true")

    pr = sub.add_parser("paired", help="time backends side by side in interleaved rounds (ratios with their "
                                       "spread), into figures/data/paired/")
    pr.add_argument("--backends", nargs="+", metavar="NAME",
                    help="two or more backends; the first is compared with each other one (with --from-csv, "
                         "default: every comparison the CSV holds)")
    pr.add_argument("--sweep", default="paper", help="the sweep whose cases are filtered (default paper)")
    pr.add_argument("--head-dims", nargs="+", type=int, help="only these head_dims")
    pr.add_argument("--formats", nargs="+", help="only these formats")
    pr.add_argument("--seqlens", nargs="+", type=int, help="only cases with these query lengths")
    pr.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    pr.add_argument("--rounds", type=int, default=7, help="interleaved rounds per case (default 7)")
    pr.add_argument("--out", type=Path, help="CSV path (default figures/data/paired/paired-<gpu>-<commit>.csv)")
    pr.add_argument("--from-csv", type=Path, help="print the ratio table of an earlier paired CSV (no GPU)")
    pr.add_argument("--warmup-ms", type=int, default=25)
    pr.add_argument("--rep-ms", type=int, default=100)

    m = sub.add_parser("merge", help="join shard CSVs into one")
    m.add_argument("parts", nargs="+", type=Path)
    m.add_argument("--out", type=Path, required=True)

    sub.add_parser("env", help="environment report (as recorded in every results row)")

    f = sub.add_parser("figures", help="regenerate the paper figures from the committed CSVs (no GPU needed)")
    figures.add_arguments(f)
    t = sub.add_parser("report", help="markdown tables of the committed results (the README's results block)")
    report.add_arguments(t)
    return p


COMMANDS = {"list": cmd_list, "check": cmd_check, "run": cmd_run, "paired": cmd_paired, "merge": cmd_merge,
            "env": cmd_env, "figures": figures.run, "report": report.run}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, TypeError, backends.BackendUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
