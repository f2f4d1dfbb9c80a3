"""Paired timing: backends measured side by side on the same cases, in interleaved rounds.

A sweep times each (backend, case) once, one backend after the other, so a ratio between two backends also
holds whatever the GPU did between their timings: at its power cap the H200's clock drifts by several
percent within a call, and some kernels time bimodally (cuDNN's d128 4k medians were 0.82 ms in one sweep
and 0.90 ms in the next). Here each round measures every backend on a case back to back, with the driver's
own `bench.measure` (oracle check, CUDA-graph replays, L2 flushed), the order reversed every other round.
A ratio is the median over rounds of the per-round ratios, reported with their range.

Rows follow the results schema (`compare.schema`) with sweep "paired:<sweep>" and the round first in the
note. Without `out` they go to the scratch folder (bench.default_output); published with
`--out figures/data/paired/<name>.csv`, which the figures do not draw and `compare report` tabulates. Only `run` needs torch (the summaries run where the figures do). On a copy of the checkout
without its .git (the GPU machine), set FA2_GIT_COMMIT as for the sweeps, or the rows carry a wrong commit.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from .schema import COLUMNS, shape_label



def select_cases(cases: list, *, head_dims=None, formats=None, seqlens=None, causal: bool | None = None) -> list:
    """The cases that pass every given filter (None: no filter); an empty result is an error."""
    kept = [c for c in cases
            if (head_dims is None or c.head_dim in head_dims) and (formats is None or c.fmt in formats)
            and (seqlens is None or c.seqlen_q in seqlens) and (causal is None or c.causal == causal)]
    if not kept:
        raise ValueError("no case of the sweep matches the filters")
    return kept


def run(sweep_name: str, chosen: list, cases: list, rounds: int, *, out: Path | None = None,
        warmup_ms: int = 25, rep_ms: int = 100, log=print) -> Path:
    """Measure every backend of `chosen` on every case (oracle.Case) in `rounds` interleaved rounds; write
    the rows to `out` (default <scratch>/paired-<gpu>-<commit>.csv, replaced) and log the ratio
    table of the first backend against each other one. Returns the CSV path."""
    import torch

    from . import bench, env as env_mod

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if len(chosen) < 2:
        raise ValueError("paired timing needs at least two runnable backends")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    environment = env_mod.environment(device)
    out = Path(out) if out else bench.default_output("paired", environment)
    out.parent.mkdir(parents=True, exist_ok=True)
    base = {**environment, "sweep": f"paired:{sweep_name}"}
    rows = []
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for case in cases:
            runnable = [b for b in chosen if b.unsupported_reason(case) is None]
            if len(runnable) < 2:
                log(f"skip {case.shape_str()}: fewer than two of the backends take it")
                continue
            for round_ in range(rounds):
                for backend in runnable if round_ % 2 == 0 else runnable[::-1]:
                    row = bench.measure(backend, case, device, {}, warmup_ms, rep_ms)
                    row["note"] = "; ".join(part for part in (f"round {round_}", row.get("note", "")) if part)
                    row = {**base, "timestamp": env_mod.now(), "sm_clock_mhz": env_mod.sm_clock_mhz(), **row}
                    writer.writerow(bench.csv_cells(row))
                    f.flush()
                    rows.append(row)
            log(f"{case.shape_str()}: {rounds} rounds of {', '.join(b.name for b in runnable)}")
    names = [b.name for b in chosen]
    log(table(rows, names[0], names[1:]))
    return out


def _round(row) -> int:
    return int(str(row["note"]).split(";")[0].removeprefix("round "))


def ratios(rows: list[dict], first: str, second: str) -> list[dict]:
    """Per case: the two backends' median times (and TFLOP/s) over rounds, and the median, min and max over
    rounds of time(second) / time(first) (> 1: `first` is faster). Rounds where either failed the oracle or
    was not timed are left out and counted. Cases that one of the two has no row for (it does not take them,
    so `run` measured the others only) are not comparisons and are left out."""
    by_case: dict[str, dict[int, dict[str, float]]] = {}
    present: dict[str, set[str]] = {}
    for row in rows:
        name = f"{row['backend']}:{row['variant']}"
        if name not in (first, second):
            continue
        present.setdefault(shape_label(row), set()).add(name)
        times = by_case.setdefault(shape_label(row), {}).setdefault(_round(row), {})
        if row.get("oracle") == "pass" and row.get("ms_p50") not in ("", None):
            times[name] = (float(row["ms_p50"]), float(row["tflops"]) if row.get("tflops") not in ("", None) else None)
    result = []
    for label, per_round in by_case.items():
        if present[label] != {first, second}:
            continue
        both = [t for t in per_round.values() if first in t and second in t]
        entry = dict(case=label, rounds=len(both), incomplete=len(per_round) - len(both))
        if both:
            per = [t[second][0] / t[first][0] for t in both]
            entry.update(ms_first=statistics.median(t[first][0] for t in both),
                         ms_second=statistics.median(t[second][0] for t in both),
                         ratio=statistics.median(per), ratio_min=min(per), ratio_max=max(per))
            if all(t[name][1] is not None for t in both for name in (first, second)):
                entry.update(tflops_first=statistics.median(t[first][1] for t in both),
                             tflops_second=statistics.median(t[second][1] for t in both))
        result.append(entry)
    return result


def table(rows: list[dict], first: str, others: list[str]) -> str:
    lines = [f"ratio = time(other) / time({first}), median over rounds [min, max]; > 1: {first} is faster"]
    for other in others:
        lines.append(f"{'case':44} {first:>14} {other:>14}  ratio [min, max]  rounds")
        for r in ratios(rows, first, other):
            if "ratio" not in r:
                lines.append(f"{r['case']:44} no round with both timed ({r['incomplete']} incomplete)")
                continue
            missing = f" ({r['incomplete']} incomplete)" if r["incomplete"] else ""
            lines.append(f"{r['case']:44} {r['ms_first']:11.3f} ms {r['ms_second']:11.3f} ms  {r['ratio']:5.3f} "
                         f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]  {r['rounds']}{missing}")
    return "\n".join(lines)


def pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """The comparisons a paired CSV holds: each backend of the "cuda" family against each other backend
    (so that > 1 means the CUDA kernel is faster), or, if none is CUDA, the first by name against the rest."""
    names = sorted({f"{r['backend']}:{r['variant']}" for r in rows})
    firsts = [n for n in names if n.startswith("cuda:")] or names[:1]
    return [(first, other) for first in firsts for other in names if other not in firsts]


def read(path: Path) -> list[dict]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))
