"""Command line of fa2-compare: python -m compare <command> (also installed as fa2-compare).

FlashAttention-2 forward in Triton and hand-written CUDA C++, checked by one oracle and timed by one
benchmark driver. Without arguments, `run` measures the `quick` sweep on a GPU, or a small CPU sweep on a
machine without one.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import sys
from pathlib import Path

import torch

from . import backends, bench, env, figures, launch, oracle, paired, report, sweeps

DESCRIPTION = """\
fa2-compare: FlashAttention-2 forward in Triton and hand-written CUDA C++, one oracle, one benchmark driver.

Start here:
  python -m compare run          measure the default sweep: 'quick' on a GPU, 'cpu' (small, under a
                                 minute) on a machine without one; rows go to a scratch CSV
  python -m compare check        run the oracle matrix for every backend that runs here
  python -m compare list         backends and whether they run here

Every command has its own --help. User errors print one line on stderr and exit with status 2."""

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


def default_sweep() -> tuple[str, str]:
    """The sweep `run` measures without --sweep, and why (one line for stdout)."""
    if torch.cuda.is_available():
        return "quick", f"a CUDA GPU is visible ({torch.cuda.get_device_name(0)})"
    return "cpu", "no CUDA GPU is visible to torch; on a GPU machine it is 'quick'"


def cmd_run(args) -> int:
    part = launch.resolve(args.shard)  # a bad --shard or launcher environment fails before anything runs
    if args.sweep is None:
        name, why = default_sweep()
        sweep = sweeps.load(name)
        print(f"no --sweep given: running the '{name}' sweep ({why})", flush=True)
    else:
        sweep = sweeps.load(args.sweep)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if sweep.triton_interpret and device == "cpu":
        backends.use_triton_interpreter()
    used = launch.select_device()
    base = args.out or bench.default_output(sweep.name, env.environment(device))
    # a part writes its own file, <base>.part<i>of<N>.csv -- unless --out and --shard both name it
    out = base if part is None or (args.out is not None and args.shard is not None) else launch.part_path(base, part)
    if part is not None:
        print(f"part {part.spec} of sweep {sweep.name} (from {part.source})"
              + (f" on {used}" if used else "") + f": rows go to {out}", flush=True)
    try:
        bench.run(sweep, patterns=args.backends, out=out, shard=part.spec if part else None,
                  resume=not args.no_resume, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
                  progress=not args.no_progress)
    except backends.BackendUnavailable as exc:
        if device == "cpu" and args.sweep is not None:
            raise backends.BackendUnavailable(f"{exc} (without --sweep, `python -m compare run` measures the "
                                              "'cpu' sweep here)") from None
        raise
    if out != base:
        glob = launch.part_path(base, part).name.replace(f".part{part.index}of", ".part*of")
        print(f"when all {part.count} parts are done: python -m compare merge {base.parent / glob} --out {base}")
    print(f"wrote {out}")
    return 0


def _expand(patterns: list[str], names: list[str], where: str) -> list[str]:
    """Names matching shell-style `patterns`, in pattern order, each once; a pattern matching none is an error."""
    out = []
    for pattern in patterns:
        matches = [n for n in sorted(names) if fnmatch.fnmatchcase(n, pattern)]
        if not matches:
            raise ValueError(f"no backend in {where} matches {pattern!r}; it holds: {', '.join(sorted(names))}")
        out += [m for m in matches if m not in out]
    return out


def read_paired_csv(path: Path) -> list[dict]:
    """The rows of a CSV written by `compare paired`, or ValueError saying why it is not one."""
    if not path.is_file():
        raise ValueError(f"paired --from-csv: no such file: {path}" if not path.exists()
                         else f"paired --from-csv: {path} is not a file")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("backend", "variant", "note", "oracle", "ms_p50") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path} is not a results CSV (no column {', '.join(missing)}); "
                             "--from-csv reads what `compare paired` wrote")
        rows = list(reader)
    if not rows:
        raise ValueError(f"{path} has no rows")
    for i, row in enumerate(rows, start=2):
        try:
            paired._round(row)
        except ValueError:
            raise ValueError(f"{path} is not a paired CSV: line {i}'s note {row['note'][:40]!r} names no round "
                             "(a sweep CSV? --from-csv reads what `compare paired` wrote)") from None
    return rows


def _comparisons(rows: list[dict], first: str, others: list[str], path: Path) -> str:
    for other in others:
        if not paired.ratios(rows, first, other):
            raise ValueError(f"{path} has no case timed for both {first} and {other}")
    return paired.table(rows, first, others)


def cmd_paired(args) -> int:
    if args.from_csv:
        rows = read_paired_csv(args.from_csv)
        if args.backends:
            names = _expand(args.backends, list({f"{r['backend']}:{r['variant']}" for r in rows}), str(args.from_csv))
            if len(names) < 2:
                raise ValueError(f"--backends {' '.join(args.backends)} matches only {names[0]} in {args.from_csv}; "
                                 "a comparison needs two or more (the first against each other one)")
            print(_comparisons(rows, names[0], names[1:], args.from_csv))
            return 0
        firsts: dict[str, list[str]] = {}  # the comparisons the CSV holds, as the README's table has them
        for first, other in paired.pairs(rows):
            firsts.setdefault(first, []).append(other)
        if not firsts:
            raise ValueError(f"{args.from_csv} holds one backend only; nothing to compare")
        print("\n\n".join(paired.table(rows, first, others) for first, others in firsts.items()))
        return 0
    if args.backends is None:
        raise ValueError("paired: --backends is needed to time (only --from-csv reads the names from its CSV)")
    chosen, skipped = backends.select(args.backends)
    if len(chosen) < 2:
        ran = ", ".join(b.name for b in chosen) or "none"
        why = "; ".join(f"{n}: {r}" for n, r in skipped.items())
        raise ValueError(f"paired needs at least two runnable backends (the first is compared with each other "
                         f"one); --backends {' '.join(args.backends)} gives {len(chosen)} here ({ran})"
                         + (f"; not runnable: {why}" if why else ""))
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
    launch.check_parts(args.parts)
    n = bench.merge(args.parts, args.out)
    print(f"merged {len(args.parts)} parts into {args.out}: {n} rows")
    return 0


def cmd_env(args) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = {**env.environment(device), "sm_clock_mhz": env.sm_clock_mhz(), "device": device}
    print(json.dumps(report, indent=2))
    return 0


def _interpreter_for_triton(patterns: list[str] | None) -> None:
    """Without a GPU, Triton backends run under TRITON_INTERPRET=1 (as the cpu sweep of `run` does): switched on
    here, before any kernel is imported, when the patterns can select one."""
    if torch.cuda.is_available() or backends.interpreting():
        return
    names = [n for n, b in backends.registry().items() if b.family == "triton"]
    if any(fnmatch.fnmatchcase(n, p) for n in names for p in (patterns or ["*"])):
        backends.use_triton_interpreter()


def cmd_fuzz(args) -> int:
    try:
        from . import fuzz
    except ImportError as exc:
        raise ValueError(f"fuzz needs hypothesis ({exc}): pip install hypothesis, or the test extra "
                         "(pip install -e '.[test]')") from None
    if args.budget_s <= 0:
        raise ValueError(f"--budget-s must be a positive number of seconds, got {args.budget_s:g}")
    if args.max_examples is not None and args.max_examples < 1:
        raise ValueError(f"--max-examples must be >= 1, got {args.max_examples}")
    if args.example_timeout_s is not None and args.example_timeout_s <= 0:
        raise ValueError(f"--example-timeout-s must be positive, got {args.example_timeout_s:g}")
    if args.replay:
        entries = fuzz.load_failures(args.replay)
        _interpreter_for_triton(sorted({e["backend"] for e in entries}))
        still = fuzz.replay(entries, example_timeout_s=args.example_timeout_s)
        print(f"replayed {len(entries)} recorded examples: {still} still fail")
        return 1 if still else 0
    _interpreter_for_triton(args.backends)
    chosen, skipped = backends.select(args.backends)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    modes = fuzz.MODES if args.mode == "all" else (args.mode,)
    targets, left_out = fuzz.targets_for(chosen, device, modes)
    skipped = {**skipped, **left_out}
    for name, reason in skipped.items():
        print(f"skip {name}: {reason}")
    if not targets:
        raise ValueError(f"nothing to fuzz here: --backends {' '.join(args.backends or ['*'])} gives no runnable "
                         f"backend in mode {args.mode}" + (f" ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})"
                                                           if skipped else ""))
    report = fuzz.fuzz(targets, budget_s=args.budget_s, seed=args.seed, out=args.out, device=device,
                       max_examples=args.max_examples, example_timeout_s=args.example_timeout_s,
                       log=lambda line: print(line, flush=True), hard_exit=True, skipped=skipped)
    print(report.summary())
    return 0 if report.ok else 1


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block): 'error: ...  (see: <prog> --help)', status 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


def _sub(sub, name: str, help: str, description: str | None = None, **kw) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description or help[0].upper() + help[1:] + ".", **kw)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m compare", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    _sub(sub, "list", "backends, their capabilities, and whether this machine can run them")

    c = _sub(sub, "check", "run the oracle matrix for chosen backends",
             "Run the oracle matrix (tails, Sq != Sk, GQA/MQA, one query, one key; causal and not) for every "
             "format and head_dim each chosen backend declares, against the float64 reference. Exit status 1 "
             "if any case fails or none ran.")
    c.add_argument("--backends", nargs="+", metavar="PATTERN",
                   help="registry names or shell patterns such as 'triton:*' (default: all that run here)")
    c.add_argument("--matrix", choices=sorted(MATRIX), default="full",
                   help="'full': the whole matrix (default); 'small': two shapes, for a quick look")
    c.add_argument("--formats", nargs="+", metavar="FORMAT", help="only these formats (e.g. bf16 fp8)")
    c.add_argument("--scale", type=float, help="custom softmax scale (default 1/sqrt(head_dim))")
    c.add_argument("-v", "--verbose", action="store_true", help="print passing cases too")

    r = _sub(sub, "run", "measure a sweep (default: 'quick' on a GPU, 'cpu' without one) into a CSV",
             "Measure every (backend, case) of a sweep: the oracle first, then the timing; one row per item "
             "appended to a CSV (resumable). Without --sweep: 'quick' on a GPU, the small 'cpu' sweep (SDPA "
             "math and the Triton kernels under TRITON_INTERPRET=1) on a machine without one. Under torchrun "
             "(RANK/WORLD_SIZE, LOCAL_RANK picks the GPU) or a Slurm array (SLURM_ARRAY_TASK_ID/COUNT) each "
             "process runs its own part into <out>.part<i>of<N>.csv; join them with 'merge'.")
    r.add_argument("--sweep", help=f"one of {', '.join(sweeps.available())}, or a .toml path "
                                   "(default: quick on a GPU, cpu without one)")
    r.add_argument("--backends", nargs="+", metavar="PATTERN", help="override the sweep's backend patterns")
    r.add_argument("--out", type=Path, help="CSV path (default: a scratch file named <sweep>-<gpu>-<commit>.csv, "
                                            "see compare.bench.default_output)")
    r.add_argument("--shard", metavar="i/N", help="run only the i-th of N interleaved parts (0-based); wins over "
                                                  "the launcher's environment")
    r.add_argument("--no-resume", action="store_true", help="measure again rows already in the CSV")
    r.add_argument("--warmup-ms", type=int, default=25, metavar="MS",
                   help="warm-up time per item before timing, milliseconds (default 25)")
    r.add_argument("--rep-ms", type=int, default=100, metavar="MS",
                   help="timing budget per item, milliseconds (default 100; at least 5 calls on CPU)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    pr = _sub(sub, "paired", "time backends side by side in interleaved rounds (ratios with their spread)",
              "Time two or more backends back to back on each case of a sweep, in interleaved rounds (the "
              "order reversed every other round), and print time(other) / time(first) as the median over "
              "rounds with its range. --from-csv prints the table of an earlier run instead (no GPU needed).")
    pr.add_argument("--backends", nargs="+", metavar="PATTERN",
                    help="names or shell patterns ('sdpa:*'), two or more backends after expansion; the first is "
                         "compared with each other one (with --from-csv they match the CSV's backends; "
                         "default there: every comparison the CSV holds)")
    pr.add_argument("--sweep", default="paper", help="the sweep whose cases are filtered (default paper)")
    pr.add_argument("--head-dims", nargs="+", type=int, metavar="D", help="only these head_dims")
    pr.add_argument("--formats", nargs="+", metavar="FORMAT", help="only these formats")
    pr.add_argument("--seqlens", nargs="+", type=int, metavar="S", help="only cases with these query lengths")
    pr.add_argument("--causal", choices=["both", "yes", "no"], default="both",
                    help="causal cases only (yes), non-causal only (no), or both (default)")
    pr.add_argument("--rounds", type=int, default=7, help="interleaved rounds per case (default 7)")
    pr.add_argument("--out", type=Path, help="CSV path (default runs/paired-<gpu>-<commit>.csv; --out figures/data/paired/NAME.csv publishes it)")
    pr.add_argument("--from-csv", type=Path, metavar="CSV",
                    help="print the ratio table of an earlier paired CSV instead of timing (no GPU)")
    pr.add_argument("--warmup-ms", type=int, default=25, metavar="MS",
                    help="warm-up time per measurement, milliseconds (default 25)")
    pr.add_argument("--rep-ms", type=int, default=100, metavar="MS",
                    help="timing budget per measurement, milliseconds (default 100)")

    z = _sub(sub, "fuzz", "property-based fuzzing of backends against the oracle (hypothesis), with shrinking",
             "Draw random cases within what each chosen backend declares (batch, GQA, Sq/Sk with tails, head_dim, "
             "causal, input distribution, format incl. fp8/mxfp8/nvfp4; q/k/v as (B,S,H,D)-storage views, sliced "
             "and misaligned views; KV-cache cases with pages, lengths incl. 0, hostile block tables for backends "
             "with attention_with_kvcache) and hold each to the oracle. A ValueError/TypeError/NotImplementedError "
             "naming the constraint counts as refused; a crash, CUDA error, NaN, wrong answer or a call past the "
             "per-example limit is a failure, shrunk to a minimal case and written to --out (log.txt, "
             "failures.json). On a CPU machine the Triton kernels run under TRITON_INTERPRET=1. Exit status 1 if "
             "anything failed.")
    z.add_argument("--backends", nargs="+", metavar="PATTERN",
                   help="registry names or shell patterns such as 'triton:*' (default: all that run here)")
    z.add_argument("--budget-s", type=float, default=60.0, metavar="N",
                   help="seconds of fuzzing, shared among the targets in turn (default 60); shrinking a failure "
                        "found late may run past it by the target's share")
    z.add_argument("--seed", type=int, default=0, help="seed of the example generator (default 0): same seed, same "
                                                       "examples in the same order")
    z.add_argument("--out", type=Path, metavar="DIR",
                   help="directory for log.txt and failures.json (default: runs/fuzz-<time>, see "
                        "compare.bench.scratch_dir)")
    z.add_argument("--mode", choices=("all",) + ("dense", "kvcache", "varlen"), default="all",
                   help="dense attention(), KV-cache attention_with_kvcache(), packed attention_varlen(), or all "
                        "that a backend has (default all)")
    z.add_argument("--max-examples", type=int, metavar="N",
                   help="at most N examples per target (with a fixed --seed: a reproducible run whatever the speed)")
    z.add_argument("--example-timeout-s", type=float, metavar="S",
                   help="limit of one backend call (default 180 on a GPU, 120 under the Triton interpreter, 60 on "
                        "CPU); past it the example fails as a timeout")
    z.add_argument("--replay", type=Path, metavar="FAILURES_JSON",
                   help="run the examples recorded in a failures.json once each instead of fuzzing")

    m = _sub(sub, "merge", "join the part CSVs of a sharded run into one",
             "Join the CSVs written by the parts of a sharded run (--shard, torchrun, a Slurm array) into one; "
             "rows measured twice keep the first. Refuses a missing file, a part of a <stem>.part<i>of<N>.csv "
             "set missing, and CSVs of another schema.")
    m.add_argument("parts", nargs="+", type=Path, metavar="PART", help="the part CSVs (a shell glob will do)")
    m.add_argument("--out", type=Path, required=True, help="the merged CSV (replaced)")

    _sub(sub, "env", "environment report (as recorded in every results row), as JSON")

    f = _sub(sub, "figures", "regenerate the paper figures from the committed CSVs (no GPU needed)")
    figures.add_arguments(f)
    t = _sub(sub, "report", "markdown tables of the committed results (the README's results block)")
    report.add_arguments(t)
    return p


COMMANDS = {"list": cmd_list, "check": cmd_check, "run": cmd_run, "paired": cmd_paired, "merge": cmd_merge,
            "env": cmd_env, "fuzz": cmd_fuzz, "figures": figures.run, "report": report.run}


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, TypeError, OSError, backends.BackendUnavailable) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
