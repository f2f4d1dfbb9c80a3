"""The one benchmark driver: every backend timed the same way, every timed case checked by the oracle.

For each (backend, case) of a sweep: fresh random inputs, the oracle (row-sampled for big shapes) -- which
also warms up JIT builds and autotuning outside the timed region -- then, only if the oracle passed,
``triton.testing.do_bench`` (CUDA events, L2 flushed before every launch, warm-up first) giving the
median and the p20/p80 of single calls. On a GPU each call is one replay of a CUDA graph that captured
the backend's call, once its replay is checked to reproduce an eager call's output bit for bit: the
Python and host-side work of an API call (validation, descriptors, dispatch; ~0.2-0.3 ms for our
backends, less for SDPA's C++ path) is then outside the timed region, so short kernels are compared as
kernels. A call that cannot be captured is timed eagerly and its row's note says why.
One long-format row per item is appended to the run's CSV and flushed at once, so an interrupted run
keeps its rows and a rerun of the same commit on the same machine skips them (resume). A row that
failed the oracle is kept with oracle=fail and no timing.

FLOPs are ``4 * B * Hq * D * (unmasked (query, key) pairs)``: exact for bottom-right causal, local windows and tails.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import statistics
import sys
import time
import zlib
from pathlib import Path

import torch

from . import backends as backends_mod
from . import env as env_mod
from . import oracle
from .schema import COLUMNS, EAGER, KEY_COLUMNS, shape_label
from .sweeps import Sweep, shard as shard_items

# The published results (what the figures and the report read). A run writes there only when told to with
# an explicit `out` (--out figures/data/<name>.csv: a deliberate publishing step), never by default.
DATA_DIR = env_mod.REPO_ROOT / "figures" / "data"
# Where a run writes by default: a scratch folder, git-ignored (.gitignore: /runs/), or $FA2_COMPARE_OUT.
SCRATCH_DIR = env_mod.REPO_ROOT / "runs"
OUT_ENV = "FA2_COMPARE_OUT"
# Datasheet dense rates (TFLOP/s) by GPU name fragment: 16-bit and 8-bit tensor-core peaks.
DATASHEET = {"H200": {"16bit": 989.0, "8bit": 1979.0}, "H100": {"16bit": 989.0, "8bit": 1979.0}}

def attention_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int] = (-1, -1)) -> int:
    """Number of (query, key) pairs that are not masked, per (batch, head); window as compare.oracle.visible_range
    (FlashAttention's local attention, bottom-right aligned)."""
    if window != (-1, -1):
        first, last = oracle.visible_range(torch.arange(seqlen_q, dtype=torch.int64), seqlen_q, seqlen_k, causal,
                                           window)
        return int((last.clamp(max=seqlen_k - 1) - first.clamp(min=0) + 1).clamp(min=0).sum())
    if not causal:
        return seqlen_q * seqlen_k
    # Bottom-right: query i sees keys 0 .. i + offset (offset = Sk - Sq), i.e. i + offset + 1 keys,
    # never more than Sk; rows with i < -offset see none. Sum of an arithmetic series from row `lo`.
    offset = seqlen_k - seqlen_q
    lo = max(0, -offset)
    n = seqlen_q - lo
    return n * (offset + 1) + n * (lo + seqlen_q - 1) // 2


def flops(case: oracle.Case) -> int:
    """2 (Q K^T: head_dim) + 2 (P V: V's head_dim) FLOPs per multiply-add of every visible (query, key) pair; for a
    packed batch (compare.varlen.SweepCase) or a KV-cache case (compare.cache_sweep.SweepCase) those of its
    sequences."""
    dims = case.head_dim + getattr(case, "v_dim", case.head_dim)
    sequences = getattr(case, "sequences", None)
    if sequences is not None:
        return sum(2 * case.heads_q * dims * attention_pairs(sq, sk, case.causal, case.window) for sq, sk in sequences)
    return 2 * case.batch * case.heads_q * dims * attention_pairs(case.seqlen_q, case.seqlen_k, case.causal,
                                                                  case.window)


def _tensors(result) -> list:
    return [x for x in (result if isinstance(result, (tuple, list)) else (result,)) if isinstance(x, torch.Tensor)]


def capture_graph(fn) -> tuple[object | None, str]:
    """`fn` captured as a CUDA graph, and '' -- or None and why not. The graph's replay must reproduce
    the output of an eager call bit for bit (the kernels are deterministic), so a capture that missed
    the work cannot pass for a fast one."""
    try:
        expected = [x.clone() for x in _tensors(fn())]
        if not expected:
            return None, "the call returned no tensor to check a replay against"
        side = torch.cuda.Stream()  # warm-up off the capture stream, as torch.cuda.graph asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = _tensors(fn())
        for x in captured:
            x.fill_(math.nan if x.is_floating_point() else 0)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any capture failure means eager timing, said in the row
        with contextlib.suppress(Exception):  # an invalidated capture leaves nothing to wait for
            torch.cuda.synchronize()
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
    if len(captured) != len(expected) or not all(torch.equal(a, b) for a, b in zip(captured, expected)):
        return None, "graph replay did not reproduce an eager call's output"
    return graph, ""


def time_call(fn, device: str, warmup_ms: int = 25, rep_ms: int = 100,
              graph: bool = False) -> tuple[float, float, float, str]:
    """(p20, p50, p80) milliseconds of single calls of `fn`, and how they were timed: '' for the asked
    method, else why not. graph=True on a GPU times replays of `fn` captured as a CUDA graph."""
    if device == "cuda":
        from triton.testing import do_bench
        how = ""
        if graph:
            captured, why = capture_graph(fn)
            if captured is not None:
                fn = captured.replay
            else:
                how = f"{EAGER} (no CUDA graph: {why})"
        p20, p50, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.2, 0.5, 0.8])
        return p20, p50, p80, how
    fn()  # CPU: no events, no L2 flush; plain wall-clock quantiles after one warm-up call
    times = []
    deadline = time.perf_counter() + rep_ms / 1000
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 1000):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    q = statistics.quantiles(times, n=10, method="inclusive")
    return q[1], statistics.median(times), q[7], ""


def measure_ceilings(device: str, log=print) -> dict[str, float]:
    """Measured instruction/memory ceilings for this run ({} on CPU); see compare.ceilings.
    A ceiling that cannot be measured leaves %SOL blank and is said in the log, never guessed."""
    if device != "cuda":
        return {}
    from . import ceilings
    return ceilings.measure_all(log=log)


def ceiling_rows(ceilings: dict[str, float]) -> list[dict]:
    """The run's ceilings as rows of the results CSV (family 'ceiling', oracle 'n/a'), so that the
    roofline figure reads them from the same file as the kernels they bound."""
    from .ceilings import CEILINGS

    return [dict(backend="ceiling", family="ceiling", variant=name, ceiling=name, ceiling_tflops=value,
                 oracle="n/a", note=f"{CEILINGS[name][1]}: {CEILINGS[name][0]}") for name, value in ceilings.items()]


def _case_seed(backend_name: str, case: oracle.Case) -> int:
    return zlib.crc32(f"{backend_name}|{case}".encode())


def _gpu_datasheet(gpu: str, case: oracle.Case) -> float | None:
    for fragment, rates in DATASHEET.items():
        if fragment in gpu:
            return rates["8bit" if case.quantized else "16bit"]
    return None


def _judged_call(backend: backends_mod.Backend, case, device: str):
    """(the oracle's verdict on `backend` for `case`, the call it judged, ready to time). A packed batch runs the
    backend's varlen call, or (padded) its dense call on the padded batch, judged as that dense case; a KV-cache case
    (compare.cache_sweep.SweepCase) its attention_with_kvcache, or attention_mla_decode on MLA's latent cache."""
    if getattr(case, "kvcache", False):
        inputs = oracle.make_kvcache_inputs(case.case, device)
        if case.mla:
            def run(q, k_cache, v_cache, **kw):  # (v_cache: the view of k_cache the oracle made)
                return backend.run_mla(q, k_cache, **kw)
        else:
            run = backend.run_kvcache
        verdict = oracle.check_kvcache(run, case.case, device=device, inputs=inputs)
        kwargs = inputs.kwargs(case.case)
        return verdict, lambda: run(inputs.q, inputs.k_cache, inputs.v_cache, **kwargs)
    if getattr(case, "padded", None) is False:
        inputs = oracle.make_varlen_inputs(case.case, device)
        verdict = oracle.check_varlen(backend.run_varlen, case.case, device=device, inputs=inputs,
                                      returns_lse=backend.returns_lse)
        kwargs = inputs.kwargs(case.case)
        return verdict, lambda: backend.run_varlen(inputs.q, inputs.k, inputs.v, **kwargs)
    dense = case.padded_case() if getattr(case, "padded", None) else case
    inputs = oracle.make_inputs(dense, device)
    verdict = oracle.check(backend, dense, device=device, returns_lse=backend.returns_lse, inputs=inputs)
    q, k, v = inputs.q, inputs.k, inputs.v
    extra = dense.extra_kwargs()  # window= / softcap=: the timed call is the call the oracle judged
    return verdict, lambda: backend(q, k, v, causal=dense.causal, scale=dense.scale, **extra)


def measure(backend: backends_mod.Backend, case: oracle.Case, device: str, ceilings: dict[str, float],
            warmup_ms: int = 25, rep_ms: int = 100) -> dict:
    """One results row (without the environment columns) for `backend` on `case` (a dense case, or a packed batch:
    compare.varlen.SweepCase)."""
    row = {**_case_fields(backend, case), "note": ""}
    case = case.replace(seed=_case_seed(backend.name, case))
    try:
        verdict, call = _judged_call(backend, case, device)
    except Exception as exc:  # a crash is a result too: keep it, marked
        row.update(oracle="error", note=f"{type(exc).__name__}: {exc}"[:300])
        return row
    row.update(max_abs_err=verdict.max_abs_err, err_bound=verdict.bound, rel_l2=verdict.rel_l2,
               rel_l2_unquantized=verdict.rel_l2_unquantized, oracle_rows=verdict.rows_checked,
               oracle="pass" if verdict.passed else "fail", note=verdict.reason)
    if not verdict.passed:
        return row
    p20, p50, p80, how = time_call(call, device, warmup_ms, rep_ms, graph=True)
    tflops = flops(case) / (p50 * 1e-3) / 1e12
    tile = backend.last_config()  # the autotuner's pick, so a number can be traced to its config
    row["note"] = "; ".join(part for part in (f"config {tile}" if tile else "", how) if part)
    ceiling = backend.ceiling_for(case.fmt)
    ceiling_tflops = ceilings.get(ceiling)
    row.update(ms_p20=p20, ms_p50=p50, ms_p80=p80, tflops=tflops, ceiling=ceiling if ceiling_tflops else "",
               ceiling_tflops=ceiling_tflops or "", pct_sol=100 * tflops / ceiling_tflops if ceiling_tflops else "")
    return row


def scratch_dir() -> Path:
    """$FA2_COMPARE_OUT when set (and not empty), else ./runs/ at the repository root."""
    chosen = os.environ.get(OUT_ENV, "").strip()
    return Path(chosen).expanduser() if chosen else SCRATCH_DIR


def default_output(sweep: str, environment: dict) -> Path:
    """The CSV a run writes without `out`: <scratch>/<sweep>-<gpu>-<commit>.csv, never under DATA_DIR (so a
    trial run, on CPU or GPU, does not land in the published data)."""
    gpu = environment["gpu"].replace("NVIDIA ", "").replace(" ", "-").lower()
    return scratch_dir() / f"{sweep}-{gpu}-{environment['git_commit']}.csv"


def _done_keys(path: Path) -> set[tuple]:
    if not path.exists():
        return set()
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path} has other columns than this version writes; pass a new --out")
        return {tuple(r[c] for c in KEY_COLUMNS) for r in reader}


def _key(row: dict) -> tuple:
    return tuple(_fmt(row[c]) for c in KEY_COLUMNS)  # as the CSV writes the cells (softcap 0.0 -> '0')


def run(sweep: Sweep, *, patterns: list[str] | None = None, out: Path | None = None, shard: str | None = None,
        resume: bool = True, warmup_ms: int = 25, rep_ms: int = 100, progress=True, log=print) -> Path:
    """Run `sweep` (restricted to backends matching `patterns`, default the sweep's own list) and
    append its rows to `out`. Returns the CSV path."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    environment = env_mod.environment(device)
    out = Path(out) if out else default_output(sweep.name, environment)
    chosen, skipped = backends_mod.select(patterns or list(sweep.backends))
    for name, reason in skipped.items():
        log(f"skip {name}: {reason}")
    applicable = [(b, c) for c in sweep.cases for b in chosen if not b.unsupported_reason(c)]
    outside = len(sweep.cases) * len(chosen) - len(applicable)
    items = shard_items(applicable, shard)
    done = _done_keys(out) if resume else set()
    base = {**environment, "sweep": sweep.name}
    todo = [(b, c) for b, c in items if _key({**base, **_case_fields(b, c)}) not in done]
    log(f"sweep {sweep.name}: {len(todo)} to measure, {len(items) - len(todo)} already in {out}, "
        f"{outside} (backend, case) pairs outside a backend's declared capabilities, on {device} "
        f"({environment['gpu']}, commit {environment['git_commit']})")

    clock_start = env_mod.sm_clock_mhz()
    ceilings = measure_ceilings(device, log) if todo else {}
    if ceilings:
        log("ceilings: " + ", ".join(f"{k} {v:.1f}" for k, v in ceilings.items()))
    out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not out.exists()
    rows = []
    bar = _progress(todo, progress)
    with out.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new_file:
            writer.writeheader()
        for row in ceiling_rows(ceilings):
            writer.writerow(csv_cells({**base, "timestamp": env_mod.now(), **row}))
        for backend, case in bar:
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(f"{backend.name} {case.shape_str()}")
            row = measure(backend, case, device, ceilings, warmup_ms, rep_ms)
            sheet = _gpu_datasheet(environment["gpu"], case)
            if sheet and row.get("tflops"):
                row["pct_datasheet"] = 100 * row["tflops"] / sheet
            row = {**base, "timestamp": env_mod.now(), "sm_clock_mhz": env_mod.sm_clock_mhz(), **row}
            writer.writerow(csv_cells(row))
            f.flush()
            rows.append(row)
    log(f"SM clock before {clock_start or '-'} MHz, after {env_mod.sm_clock_mhz() or '-'} MHz")
    log(summary_table(rows))
    return out


def _case_fields(backend, case) -> dict:
    padded = getattr(case, "padded", None)  # (a packed batch: its mix and packing)
    return dict(backend=backend.backend, family=backend.family, variant=backend.variant, format=case.fmt,
                batch=case.batch, heads_q=case.heads_q, heads_kv=case.heads_kv, seqlen_q=case.seqlen_q,
                seqlen_k=case.seqlen_k, head_dim=case.head_dim, causal=case.causal, head_dim_v=case.v_dim,
                window_left=case.window[0], window_right=case.window[1], softcap=case.softcap,
                lengths="" if padded is None else case.mix,
                packing=getattr(case, "packing", "") if padded is None else "padded" if padded else "packed",
                page_size=getattr(case, "page_size", None) or "", kv_format=getattr(case, "kv_format", ""))


def _fmt(value) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


def csv_cells(row: dict) -> dict:
    """A results row as the CSV writes it: every schema column, formatted, '' where the row has none."""
    return {c: _fmt(row.get(c, "")) for c in COLUMNS}


def _progress(items, enabled):
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, file=sys.stderr, unit="case", dynamic_ncols=True)


def summary_table(rows: list[dict]) -> str:
    """TFLOP/s per case (rows) and backend (columns); failed or crashed items shown as FAIL/ERROR."""
    if not rows:
        return "(no new rows)"
    import pandas as pd

    df = pd.DataFrame(rows)
    df["name"] = df["backend"] + ":" + df["variant"]
    df["shape"] = df.apply(shape_label, axis=1)
    df["cell"] = df.apply(lambda r: f"{r['tflops']:.1f}" if r["oracle"] == "pass" else r["oracle"].upper(), axis=1)
    table = df.pivot_table(index="shape", columns="name", values="cell", aggfunc="first", sort=False).fillna("-")
    failed = df[df["oracle"] != "pass"]
    lines = ["TFLOP/s (median; FAIL = oracle rejected, ERROR = raised)", table.to_string()]
    for _, r in failed.iterrows():
        lines.append(f"  {r['oracle'].upper()} {r['name']} {r['shape']}: {r['note']}")
    return "\n".join(lines)


def merge(parts: list[Path], out: Path) -> int:
    """Join shard CSVs into `out` (same columns; duplicate keys keep the first). Returns the row count."""
    seen, rows = set(), []
    for part in parts:
        with Path(part).open(newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                raise ValueError(f"{part}: columns differ from this version's schema")
            for r in reader:
                if _key(r) not in seen:
                    seen.add(_key(r))
                    rows.append(r)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)
