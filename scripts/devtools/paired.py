"""paired: this checkout's library against DEV_BASELINE_LIB, side by side in interleaved rounds, with SDPA
cuDNN as the clock reference (dev.toml [paired]).

Each case: this checkout's variant for the format (dev.toml [paired].variants), the same variant of the baseline
library and SDPA cuDNN on the bf16 values of the shape. Each is checked against the oracle once, then every
round times each of them with the driver's own timing (compare.bench.time_call: CUDA-graph replays of one
launch, L2 flushed, median of do_bench), the order reversed every other round. Both libraries are called the
same way (cuda_impl._lib, the public path's input preparation, outputs allocated per call), so the ratio is
the kernels'. ratio = median over rounds of time(baseline) / time(new): > 1, this checkout is faster.

Rows follow the results schema (compare.schema) with sweep "paired:dev", the round first in the note, backend
"cuda" for this checkout and "baseline" for the other library, so that `python -m compare paired --from-csv`
and `compare report` read them like any paired CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from . import core, kernels
from .core import log


def cases(cfg: dict | None = None, formats: set[str] | None = None, head_dims: set[int] | None = None):
    cfg = cfg or core.config()["paired"]
    shapes = [s for grid in cfg.get("grid", []) for s in core.grid_shapes(grid)]
    shapes += core.shapes(cfg.get("shapes", []))
    out = [s.case() for s in shapes]
    out = [c for c in out if (not formats or c.fmt in formats) and (not head_dims or c.head_dim in head_dims)]
    if not out:
        raise core.UsageError("paired: no case of dev.toml [paired] matches --formats / --head-dim")
    return out


def main(args) -> int:
    if core.baseline_path(args.baseline) is None:
        raise core.UsageError("paired needs the baseline library: set DEV_BASELINE_LIB=path/libcuda_fa.so "
                              "(or --baseline PATH)")
    cfg = core.config()["paired"]
    formats = set(args.formats.split(",")) if args.formats else None
    todo = cases(cfg, formats, core.head_dim_filter(args.head_dim))
    rounds = args.rounds or cfg["rounds"]
    if rounds < 1:
        raise core.UsageError(f"--rounds: at least 1, got {rounds}")
    out = Path(args.out) if args.out else core.out_dir() / "paired.csv"
    if not args.stage:
        rc = core.run_stage([*args.argv, "--stage", "run"], core.config()["timeouts"]["paired"], "paired")
        if rc == 124 and out.exists():
            log(f"paired: cut off; the rounds measured so far are in {out}")
        return rc
    return measure(todo, cfg, rounds, out, args.baseline)


def measure(todo, cfg: dict, rounds: int, out: Path, baseline: str | None) -> int:
    import torch

    from compare import backends, bench, env as env_mod, oracle

    core.register_baseline(baseline)
    environment = env_mod.environment("cuda")
    base = {**environment, "sweep": "paired:dev"}
    cudnn = backends.get("sdpa:cudnn")
    rows, names = [], {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=bench.COLUMNS)
        writer.writeheader()
        for case in todo:
            variant = cfg["variants"][case.fmt]
            inputs = oracle.make_inputs(case, "cuda")
            bf16_case = case.replace(fmt="bf16")
            bf16_inputs = inputs if case.fmt == "bf16" else oracle.make_inputs(bf16_case, "cuda")
            sides = [("cuda", variant, case, kernels.runner(variant), kernels.fresh_call(variant, inputs, case)),
                     ("baseline", variant, case, kernels.runner(variant, (core.BASELINE,)),
                      kernels.fresh_call(variant, inputs, case, (core.BASELINE,))),
                     ("sdpa", "cudnn", bf16_case, cudnn,
                      lambda: cudnn(bf16_inputs.q, bf16_inputs.k, bf16_inputs.v, causal=case.causal,
                                    scale=case.scale))]
            names[case.fmt] = (f"cuda:{variant}", f"baseline:{variant}")
            checked = []
            for backend, var, c, run, call in sides:
                x = inputs if c is case else bf16_inputs
                fields = dict(backend=backend, family={"sdpa": "peer"}.get(backend, backend), variant=var,
                              format=c.fmt, batch=c.batch, heads_q=c.heads_q, heads_kv=c.heads_kv,
                              seqlen_q=c.seqlen_q, seqlen_k=c.seqlen_k, head_dim=c.head_dim, causal=c.causal)
                try:
                    verdict = oracle.check(run, c, device="cuda", inputs=x,
                                           returns_lse=getattr(run, "returns_lse", True))
                except Exception as exc:  # noqa: BLE001 - kept as a row, marked
                    log(f"{case.shape_str()} {backend}:{var}: {type(exc).__name__}: {str(exc)[:200]}")
                    continue
                fields.update(max_abs_err=verdict.max_abs_err, err_bound=verdict.bound, rel_l2=verdict.rel_l2,
                              rel_l2_unquantized=verdict.rel_l2_unquantized, oracle_rows=verdict.rows_checked,
                              oracle="pass" if verdict.passed else "fail")
                if not verdict.passed:
                    log(f"{case.shape_str()} {backend}:{var}: oracle {verdict.summary()}")
                checked.append((fields, call))
            flops = bench.flops(case)
            if case is todo[0] and checked:
                core.warm_up(checked[0][1], cfg.get("warm_s", 0))
            for round_ in range(rounds):
                for fields, call in checked if round_ % 2 == 0 else checked[::-1]:
                    row = dict(fields, note=f"round {round_}")
                    if fields["oracle"] == "pass":
                        p20, p50, p80, how = bench.time_call(call, "cuda", cfg["warmup_ms"], cfg["rep_ms"], graph=True)
                        row.update(ms_p20=p20, ms_p50=p50, ms_p80=p80, tflops=flops / (p50 * 1e-3) / 1e12,
                                   note="; ".join(p for p in (f"round {round_}", how) if p))
                    row = {**base, "timestamp": env_mod.now(), "sm_clock_mhz": env_mod.sm_clock_mhz(), **row}
                    writer.writerow(bench.csv_cells(row))
                    f.flush()
                    rows.append(row)
            torch.cuda.synchronize()
            log(f"{case.shape_str()}: {rounds} rounds; {core.gpu_state()}")
    print(summary(rows, names, cfg["tolerance"]))
    log(f"rows in {out}")
    return 0


def summary(rows: list[dict], names: dict[str, tuple[str, str]], tolerance: float) -> str:
    """Per case: TFLOP/s of this checkout, the baseline and cuDNN (medians over rounds), and new / baseline
    as the median of the per-round time ratios with their range; the cases beyond the tolerance counted."""
    from compare import paired as paired_mod

    lines = [f"ratio new/baseline = median over rounds of time(baseline) / time(new) (> 1: this checkout is "
             f"faster) [min, max]; flagged beyond +-{100 * tolerance:.1f}%",
             f"{'case':44} {'new':>8} {'base':>8} {'cudnn':>8}  ratio  [min, max]      rounds"]
    cudnn_rate = {}
    for r in rows:
        if r["backend"] == "sdpa" and r.get("tflops") not in ("", None):
            key = (r["batch"], r["heads_q"], r["seqlen_q"], r["seqlen_k"], r["head_dim"], r["causal"])
            cudnn_rate.setdefault(key, []).append(float(r["tflops"]))
    flagged = total = 0
    for fmt, (new, baseline) in names.items():
        for r in paired_mod.ratios([x for x in rows if x["format"] == fmt], new, baseline):
            total += 1
            if "ratio" not in r:
                lines.append(f"{r['case']:44} no round with both timed ({r['incomplete']} incomplete)")
                flagged += 1
                continue
            sample = next(x for x in rows if x["format"] == fmt and x["backend"] == "cuda"
                          and _label(x) == r["case"])
            key = (sample["batch"], sample["heads_q"], sample["seqlen_q"], sample["seqlen_k"], sample["head_dim"],
                   sample["causal"])
            rates = sorted(cudnn_rate.get(key, []))
            ref = f"{rates[len(rates) // 2]:8.0f}" if rates else f"{'-':>8}"
            off = abs(r["ratio"] - 1) > tolerance
            flagged += off
            lines.append(f"{r['case']:44} {r.get('tflops_first', float('nan')):8.0f} "
                         f"{r.get('tflops_second', float('nan')):8.0f} {ref}  {r['ratio']:5.3f}  "
                         f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]  {r['rounds']}" + ("  <-" if off else ""))
    lines.append(f"paired: {total - flagged} / {total} cases within +-{100 * tolerance:.1f}%")
    return "\n".join(lines)


def _label(row) -> str:
    from compare.schema import shape_label

    return shape_label(row)
