"""profile: hardware counters (Nsight Compute) for registry backends and builds, one profiled kernel per case,
read from the counters instead of guessed from timings.

    dev.py profile --out DIR CASE [CASE ...]
    CASE = backend:variant[BUILD]@B,Hq,Hkv,Sq,Sk,D[,causal][,FORMAT]     e.g. cuda:hopper@1,16,16,16384,16384,128

The driver runs itself under `ncu` (clock control off: the GPU keeps the clocks it would have in a benchmark).
The child builds every case's inputs, warms each backend up outside the profiled window (compilation, Triton's
autotuner), then, inside one cudaProfilerStart/Stop window, launches a marker kernel (torch's `spin_kernel`)
before each case and the case's call after it. The kernels between two markers belong to one case; the longest
of them is the attention kernel (a call may also launch layout or quantization kernels).

Written to DIR: `ncu-raw.csv` (every collected metric of every profiled kernel, ncu's own CSV), `cases.txt`, and
`profile.csv`: one row per case for its attention kernel with the metrics that explain its speed (duration, SM
clock, instructions, issue slots, tensor pipe, MUFU and FMA pipes, shared-memory bank conflicts, occupancy, the
top warp stall reasons), also printed as a table. `--report --out DIR` rebuilds profile.csv from an ncu-raw.csv
and cases.txt.

`--cycles --repeat N` collects only the elapsed cycles and the duration of each launch (one pass, so fast), the
case list profiled N times over, into DIR/cycles.csv, and prints per case the median cycles and their spread: an
A/B measure that the clock swings of a power-capped GPU move less than they move the time. BUILD names a build
of dev.toml (`cuda:hopper[no-pingpong]@...`, built here first with `dev.py build NAME` and carried), the
baseline library (`[baseline]`, DEV_BASELINE_LIB) or another library (`[lib=PATH]`).

`--source` collects ncu's SourceCounters instead (the SASS of every profiled kernel with the warp stall samples
of each instruction) into DIR/sass.csv.gz and prints `stall_summary` of it; `--stalls FILE` prints that summary
again from a sass.csv[.gz] (no GPU): per kernel, the share of the samples by instruction class and by stall
reason, the instructions that hold the most, and the executed instructions by opcode. `--per UNITS` divides
those counts by UNITS (e.g. consumer warps x KV tiles of the launch), so that two kernels compare per unit of
work.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import subprocess
import sys
from pathlib import Path

from . import core, kernels

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "WarpStateStats", "SchedulerStats", "LaunchStats",
            "Occupancy", "MemoryWorkloadAnalysis_Tables", "InstructionStats")
# counters beyond the sections, requested only where this ncu knows their base name
EXTRA_METRICS = (
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smsp__inst_executed.sum",
)
# (column title, metric) of the table; absent metrics print as "-". "tensor%" counts every tensor
# instruction family (HMMA, HGMMA, QGMMA) as a share of the SM's active cycles.
TABLE = (
    ("ms", "gpu__time_duration.sum"),
    ("GHz", "gpc__cycles_elapsed.avg.per_second"),
    ("cycles", "gpc__cycles_elapsed.max"),
    ("warp-insts", "smsp__inst_executed.sum"),
    ("regs", "launch__registers_per_thread"),
    ("occ%", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("issue%", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("tensor%", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    ("xu%", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    ("fma%", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("shm-ld-conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    ("shm-ld-wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
)
# unit conversions of the table's columns: durations to ms, clocks to GHz
SCALE = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
         "hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1.0}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
MARKER = "spin_kernel"


def parse_case(text: str):
    """(backend name, build, oracle case) of `backend:variant[BUILD]@B,Hq,Hkv,Sq,Sk,D[,causal][,FORMAT]`; BUILD
    is a build of dev.toml, "baseline" (DEV_BASELINE_LIB) or "lib=PATH" (another commit's library), '' none."""
    from compare import oracle

    name, _, shape = text.partition("@")
    name, _, build = name.partition("[")
    fields = shape.split(",")
    if len(fields) < 6 or (build and not build.endswith("]")):
        raise SystemExit(f"bad case {text!r}: want backend:variant[BUILD]@B,Hq,Hkv,Sq,Sk,D[,causal][,FORMAT]")
    build = build[:-1]
    if build and not name.startswith("cuda:"):
        raise SystemExit(f"bad case {text!r}: builds only for cuda:* backends")
    if build and not build.startswith("lib=") and build != core.BASELINE:
        if build not in core.builds():
            raise SystemExit(f"bad case {text!r}: no build {build!r} in dev.toml ({', '.join(core.builds())})")
        if core.builds()[build]["variant"] != name.split(":", 1)[1]:
            raise SystemExit(f"bad case {text!r}: build {build} is one of cuda:{core.builds()[build]['variant']}")
    extra = fields[6:]
    fmt = next((f for f in extra if f != "causal"), "bf16")
    try:
        case = oracle.Case(*map(int, fields[:6]), causal="causal" in extra, fmt=fmt)
    except ValueError as exc:
        raise SystemExit(f"bad case {text!r}: {exc}") from None
    return name, build, case


def flags_of(build: str) -> tuple[str, ...]:
    """The _lib key of a case's build; "lib=PATH" is registered under its own key on first use."""
    if not build.startswith("lib="):
        return core.flags_of(build)
    from cuda_impl import _lib

    key = (build,)
    _lib.register_library(key, Path(build[4:]))
    return key


def build_call(name: str, build: str, case, inputs):
    """One forward of `name` on the oracle inputs: the registry backend, or the library of `build` (built here
    and carried: the GPU machine does not build it) through cuda_impl._lib."""
    if not build:
        from compare import backends

        backend = backends.get(name)
        reason = backend.unavailable_reason() or backend.unsupported_reason(case)
        if reason:
            raise SystemExit(f"{name}: {reason}")
        return lambda: backend(inputs.q, inputs.k, inputs.v, causal=case.causal, scale=case.scale)
    if build == core.BASELINE:
        core.register_baseline()
    elif not build.startswith("lib=") and not core.is_built(build):
        raise SystemExit(f"{name}[{build}]: library not built (dev.py build {build}, then carry cuda_impl/_build)")
    return kernels.timed_call(name.split(":", 1)[1], inputs, case, flags_of(build))


def child(cases: list[str], repeat: int) -> None:
    """Every case once in the profiled window, `repeat` times over (rounds in the same order)."""
    import torch

    from compare import oracle

    runs = []
    for text in cases:
        name, build, case = parse_case(text)
        call = build_call(name, build, case, oracle.make_inputs(case, "cuda"))
        for _ in range(3):  # compile, autotune, warm the clocks; outside the profiled window
            call()
        runs.append(call)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in runs * repeat:
        torch.cuda._sleep(1000)
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def known_metrics(ncu: str) -> set[str]:
    listing = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line and not line.startswith(("-", " "))}


def read_raw(path: Path) -> tuple[list[dict], dict]:
    """ncu's --page raw CSV: a header row, a units row, one row per kernel."""
    lines = [line for line in path.read_text().splitlines() if line.startswith('"')]
    rows = list(csv.reader(lines))
    header, units = rows[0], dict(zip(rows[0], rows[1]))
    return [dict(zip(header, row)) for row in rows[2:]], units


def per_case(kernels: list[dict], cases: list[str]) -> list[tuple[str, dict]]:
    """Split the profiled kernels at the markers; the longest kernel of each group is the case's."""
    groups, current = [], None
    for kernel in kernels:
        if MARKER in kernel["Kernel Name"]:
            current = []
            groups.append(current)
        elif current is not None:
            current.append(kernel)
    if len(groups) != len(cases):
        raise SystemExit(f"found {len(groups)} marker kernels for {len(cases)} cases")
    duration = lambda k: float(k.get("gpu__time_duration.sum", "0").replace(",", "") or 0)  # noqa: E731
    return [(case, max(group, key=duration)) for case, group in zip(cases, groups) if group]


def number(value: str) -> float | None:
    try:
        return float(value.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def table(picked: list[tuple[str, dict]], units: dict) -> list[dict]:
    """One row per case: the TABLE metrics in the table's units, and the five largest stall reasons."""
    rows = []
    for case, kernel in picked:
        row = {"case": case, "kernel": kernel["Kernel Name"][:100]}
        for title, metric in TABLE:
            value = number(kernel.get(metric, ""))
            if value is not None:
                value *= SCALE.get(units.get(metric, "").lower(), 1.0)
            row[title] = "-" if value is None else f"{value:.4g}"
        stalls = sorted(((number(v) or 0.0, m.group(1)) for k, v in kernel.items() if (m := STALL.fullmatch(k))),
                        reverse=True)
        row["top stalls (warps per issue)"] = ", ".join(f"{name} {value:.2f}" for value, name in stalls[:5])
        rows.append(row)
    return rows


def report(raw: Path, cases: list[str], out: Path) -> None:
    """Write profile.csv (the table) next to ncu's raw CSV and print the table, tab-separated."""
    kernels, units = read_raw(raw)
    rows = table(per_case(kernels, cases), units)
    with open(out / "profile.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("\t".join(k for k in rows[0] if k != "kernel"))
    for row in rows:
        print("\t".join(v for k, v in row.items() if k != "kernel"), flush=True)


# instruction classes of the stall summary (first match, by opcode prefix)
STALL_CLASSES = ("WARPGROUP.DEPBAR", "SYNCS.PHASECHK", "BAR.SYNC", "BAR.ARV", "HGMMA", "QGMMA", "MUFU", "FMNMX",
                 "FADD", "FMUL", "FFMA", "F2FP", "SHFL", "BRA", "NOP")


CYCLE_METRICS = ("gpc__cycles_elapsed.max", "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second")


def cycles_report(raw: Path, cases: list[str], repeat: int, out: Path) -> None:
    """--cycles: every profiled launch into cycles.csv; per case the median cycles (what a kernel change
    moves, clock-independent where the kernel is not waiting on memory), the spread over the rounds and
    the median duration and clock, printed as a table."""
    kernels, units = read_raw(raw)
    picked = per_case(kernels, cases * repeat)
    rows = []
    for i, (case, kernel) in enumerate(picked):
        value = {m: (number(kernel.get(m, "")) or 0.0) * SCALE.get(units.get(m, "").lower(), 1.0)
                 for m in CYCLE_METRICS}
        rows.append({"case": case, "round": i // len(cases), "cycles": int(value[CYCLE_METRICS[0]]),
                     "ms": f"{value[CYCLE_METRICS[1]]:.5f}", "GHz": f"{value[CYCLE_METRICS[2]]:.3f}"})
    with open(out / "cycles.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print(f"{'case':70} {'Mcycles':>8} {'spread':>7} {'ms':>8} {'GHz':>6}  rounds")
    for case in cases:
        mine = [r for r in rows if r["case"] == case]
        cycles = [r["cycles"] for r in mine]
        spread = (max(cycles) - min(cycles)) / median(cycles)
        print(f"{case:70} {median(cycles) / 1e6:8.4f} {100 * spread:6.2f}% {median([float(r['ms']) for r in mine]):8.4f} "
              f"{median([float(r['GHz']) for r in mine]):6.3f}  {len(mine)}", flush=True)


def stall_summary(text: str, top: int = 8) -> list[dict]:
    """Per profiled kernel of an ncu `--page source --print-source sass --csv` dump (the marker kernels and
    kernels without samples left out): name, samples, shares of the samples by instruction class and by
    stall reason, the `top` instructions holding the most samples (share, text, two main reasons), and the executed
    instructions ("Instructions Executed", when the dump has it) in total and by full opcode, most first."""
    from cuda_impl import sass  # (imports torch: only where a summary is made)

    kernels = []
    for block in re.split(r'^"Kernel Name",', text, flags=re.M)[1:]:
        name, _, body = block.partition("\n")
        rows = list(csv.reader(io.StringIO(body)))
        if not rows:
            continue
        header = rows[0]
        rows = [dict(zip(header, r)) for r in rows[1:] if len(r) == len(header)]
        samples = lambda r: number(r.get("Warp Stall Sampling (All Samples)", "")) or 0.0  # noqa: E731
        total = sum(map(samples, rows))
        if MARKER in name or total == 0:
            continue
        reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
        by_class, by_reason, executed = {}, {}, {}
        for r in rows:
            op = sass.opcode(r["Source"])
            executed[op] = executed.get(op, 0) + int(number(r.get("Instructions Executed", "")) or 0)
            key = next((c for c in STALL_CLASSES if op.startswith(c)), "other")
            by_class[key] = by_class.get(key, 0.0) + samples(r) / total
            for h in reasons:
                by_reason[h[6:]] = by_reason.get(h[6:], 0.0) + (number(r[h]) or 0.0) / total
        heavy = sorted(rows, key=samples, reverse=True)[:top]
        kernels.append(dict(
            name=name.strip('",')[:100], samples=total,
            by_class=dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
            by_reason=dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
            top=[(samples(r) / total, r["Source"].strip(),
                  [h[6:] for h in sorted(reasons, key=lambda h: -(number(r[h]) or 0.0))[:2]]) for r in heavy],
            executed=sum(executed.values()),
            executed_by_opcode={op: n for op, n in sorted(executed.items(), key=lambda kv: -kv[1]) if n}))
    return kernels


def print_stalls(text: str, per: float | None = None) -> None:
    """stall_summary as text; executed instructions divided by `per` (units of work) when given."""
    for k in stall_summary(text):
        print(f"== {k['name']} ({k['samples']:.0f} samples)")
        print("  by instruction: " + ", ".join(f"{c} {100 * v:.1f}%" for c, v in list(k["by_class"].items())[:12]))
        print("  by reason: " + ", ".join(f"{c} {100 * v:.1f}%" for c, v in list(k["by_reason"].items())[:8]))
        for share, source, why in k["top"]:
            print(f"    {100 * share:5.1f}%  {source[:70]:70} {', '.join(why)}")
        if k["executed"]:
            scale, unit = (1.0 / per, f" per unit (/{per:g})") if per else (1.0, "")
            print(f"  executed{unit}: {k['executed'] * scale:.4g}; by opcode: "
                  + ", ".join(f"{op} {n * scale:.4g}" for op, n in list(k["executed_by_opcode"].items())[:24]))


def read_text(path: Path) -> str:
    return gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()


def main(args) -> int:
    if args.repeat < 1:
        raise core.UsageError("--repeat: at least 1")
    if args.per is not None and not args.per > 0:
        raise core.UsageError("--per: a positive number of units")
    if args.stalls:
        print_stalls(read_text(args.stalls), args.per)
        return 0
    if args.stage == "child":
        child(args.cases, args.repeat)
        return 0
    out = core.out_dir(args.out)
    if args.report:
        report(out / "ncu-raw.csv", (out / "cases.txt").read_text().split(), out)
        return 0
    if not args.cases:
        raise core.UsageError("profile: give at least one CASE (or --report, --stalls)")
    for text in args.cases:
        parse_case(text)  # bad case text fails here, before ncu starts
    if args.build_only:
        for build in sorted({parse_case(text)[1] for text in args.cases}):
            if build and not build.startswith("lib=") and build != core.BASELINE:
                print(f"built {build}: {core.build_library(build)}", flush=True)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(core.DEV_PY), "profile", "--stage", "child"]
    if args.source:
        cmd = [args.ncu, "--profile-from-start", "off", "--clock-control", "none", "--csv", "--page", "source",
               "--print-source", "sass", "--section", "SourceCounters", *me, *args.cases]
        print("$ " + " ".join(cmd[:3]) + " ... (" + str(len(args.cases)) + " cases)", flush=True)
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode:
            print(result.stdout[-3000:], result.stderr[-3000:])
            raise SystemExit(f"ncu exited with {result.returncode}")
        with gzip.open(out / "sass.csv.gz", "wt") as f:
            f.write(result.stdout)
        print_stalls(result.stdout, args.per)
        return 0
    raw = out / "ncu-raw.csv"
    if args.cycles:
        collect = ["--metrics", ",".join(CYCLE_METRICS)]
    else:
        known = known_metrics(args.ncu)
        metrics = [m for m in EXTRA_METRICS if m.split(".")[0] in known]
        collect = [*[arg for s in SECTIONS for arg in ("--section", s)],
                   *(["--metrics", ",".join(metrics)] if metrics else [])]
    cmd = [args.ncu, "--profile-from-start", "off", "--clock-control", "none", "--csv", "--page", "raw", *collect,
           *me, "--repeat", str(args.repeat), *args.cases]
    print("$ " + " ".join(cmd[:3]) + f" ... ({len(args.cases)} cases x {args.repeat})", flush=True)
    with open(raw, "w") as f:
        rc = subprocess.run(cmd, stdout=f, check=False).returncode
    if rc:
        print(raw.read_text()[-3000:])
        raise SystemExit(f"ncu exited with {rc}")
    (out / "cases.txt").write_text("\n".join(args.cases) + "\n")
    if args.cycles:
        cycles_report(raw, args.cases, args.repeat, out)
    else:
        report(raw, args.cases, out)
    return 0
