"""Markdown of the committed results (``python -m compare report``): the README's findings and headline table,
and every table of docs/results.md.

Each generated part sits in its document between two marker lines (``<!-- NAME:begin ... -->`` and
``<!-- NAME:end -->``, see BLOCKS); ``--update-readme`` rewrites them all, and a test fails when a document and
a fresh generation from the committed CSVs disagree, so no measured number in either is typed by hand.

What is published: the CSVs directly in the data folder (``figures/data/``, not its subfolders; the side-by-side
CSVs of ``figures/data/paired/`` feed only the side-by-side table), GPU rows only (a CPU run is a smoke test),
grouped by GPU: every header and every table is about one GPU, never a mix.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from . import paired
from .results import (DECODE_CASE, FOUNDING_SHAPE, HEADLINE_HEAD_DIM, KERNEL_HEAD_DIMS, KERNEL_PAIRS, OWN_KERNEL_DIMS,
                      REPO_ROOT, cache_ratios, ceiling_value, decode_calls, decode_data, decode_eager_cases,
                      decode_ratio, grid_rows, headdims_data, load_results, mla_data, not_drawn_note, passed)
from .schema import shape_label



def tflops_table(df: pd.DataFrame) -> str:
    """TFLOP/s per shape (rows) and backend (columns); '-' where a backend has no passing row."""
    rows = passed(df)
    if rows.empty:
        return "(no passing rows)"
    rows = rows.assign(shape=rows.apply(shape_label, axis=1))
    order = rows.sort_values(["format", "head_dim", "causal", "seqlen_q", "seqlen_k"])["shape"].unique()
    table = rows.pivot_table(index="shape", columns="label", values="tflops", aggfunc="first").reindex(order)
    columns = sorted(table.columns, key=lambda c: ({"cuda": 0, "triton": 1}.get(c.split(":")[0], 2), c))
    table = table[columns]
    lines = ["| shape | " + " | ".join(f"`{c}`" for c in columns) + " |", "|---|" + "---:|" * len(columns)]
    for shape, values in table.iterrows():
        cells = ["-" if pd.isna(v) else f"{v:.0f}" for v in values]
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# (what, numerator backends, their format, denominator backends, their format); each side is the fastest
# passing row of its list for the case
HEADLINES = [
    ("`cuda:hopper` / `sdpa:cudnn`", ["cuda:hopper"], "bf16", ["sdpa:cudnn"], "bf16"),
    ("`cuda:v5` / `sdpa:flash` (FA2)", ["cuda:v5"], "bf16", ["sdpa:flash"], "bf16"),
    ("best Triton / `sdpa:cudnn`", ["triton:fa2", "triton:fa2-tma", "triton:fa2-ws"], "bf16", ["sdpa:cudnn"], "bf16"),
    ("`cuda:hopper-fp8` / best Triton fp8", ["cuda:hopper-fp8"], "fp8", ["triton:fp8", "triton:fp8-ws"], "fp8"),
    ("`cuda:hopper-fp8` / `cuda:hopper` bf16", ["cuda:hopper-fp8"], "fp8", ["cuda:hopper"], "bf16"),
    ("`cuda:hopper-mxfp8` / best Triton", ["cuda:hopper-mxfp8"], "mxfp8",
     ["triton:mxfp8-dequant", "triton:mxfp8-dot-scaled"], "mxfp8"),
    ("`cuda:hopper-mxfp8` / `cuda:hopper-fp8`", ["cuda:hopper-mxfp8"], "mxfp8", ["cuda:hopper-fp8"], "fp8"),
    ("`cuda:hopper-nvfp4` / best Triton", ["cuda:hopper-nvfp4"], "nvfp4",
     ["triton:nvfp4-dequant", "triton:nvfp4-dot-scaled"], "nvfp4"),
]
HEADLINE_SEQLENS = (1024, 4096, 16384)
CASE = ["head_dim", "seqlen_q", "seqlen_k", "causal"]


def _best(rows: pd.DataFrame, labels: list[str], fmt: str) -> pd.DataFrame:
    """Fastest passing row per case among the backends `labels`, in format `fmt`: its TFLOP/s and the run
    (git commit) it comes from."""
    picked = rows[rows["label"].isin(labels) & (rows["format"] == fmt)]
    if (picked.groupby(CASE)[["batch", "heads_q"]].nunique() > 1).any(axis=None):
        raise ValueError(f"two shapes of {labels} share one {CASE}: the headline ratios would mix them")
    best = picked.loc[picked.groupby(CASE)["tflops"].idxmax()] if not picked.empty else picked
    run = best["git_commit"] if "git_commit" in best else pd.Series("", index=best.index)
    index = pd.MultiIndex.from_frame(best[CASE]) if not best.empty else pd.MultiIndex.from_tuples([], names=CASE)
    return pd.DataFrame({"tflops": best["tflops"].to_numpy(), "run": run.to_numpy()}, index=index)


CROSS_RUN = "†"  # marks a ratio whose two sides come from different runs


def _cell(ratio: pd.Series, cross_run: pd.Series, key: tuple) -> str:
    value = ratio.get(key)
    if value is None or pd.isna(value):
        return "-"
    return f"{value:.2f}" + (CROSS_RUN if cross_run.get(key, False) else "")


def headline_table(df: pd.DataFrame) -> str:
    """Speed ratios of the HEADLINES comparisons on the 16k-token grid (non-causal / causal per seqlen) and at
    the founding shape; '-' where a side has no passing row, and a note under the table when a ratio's
    two sides come from different runs (the CSVs hold several commits)."""
    rows = passed(df)
    grid = grid_rows(rows)
    founding = {column: FOUNDING_SHAPE[column] for column in CASE}
    header = ["comparison", "head_dim"] + [f"{s // 1024}k" for s in HEADLINE_SEQLENS] + ["founding shape"]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(header) - 2)]
    any_cross_run = False
    for what, top, top_fmt, bottom, bottom_fmt in HEADLINES:
        sides = _best(rows, top, top_fmt).add_suffix("_top").join(
            _best(rows, bottom, bottom_fmt).add_suffix("_bottom"), how="inner")
        ratio = (sides["tflops_top"] / sides["tflops_bottom"]).dropna()
        cross_run = (sides["run_top"] != sides["run_bottom"]).reindex(ratio.index)
        on_grid = ratio[ratio.index.isin(_best(grid, top, top_fmt).index)]
        for head_dim in sorted(on_grid.index.get_level_values("head_dim").unique()):
            keys = [(head_dim, s, s, causal) for s in HEADLINE_SEQLENS for causal in (False, True)]
            cells = [" / ".join(_cell(on_grid, cross_run, (head_dim, s, s, causal)) for causal in (False, True))
                     for s in HEADLINE_SEQLENS]
            at_founding = "-"
            if head_dim == founding["head_dim"]:
                keys.append(tuple(founding.values()))
                at_founding = _cell(ratio, cross_run, tuple(founding.values()))
            any_cross_run |= any(key in on_grid.index and cross_run.get(key, False) for key in keys)
            lines.append(f"| {what} | {int(head_dim)} | " + " | ".join(cells) + f" | {at_founding} |")
    if any_cross_run:
        lines += ["", f"{CROSS_RUN} The two sides of this ratio come from different runs (different commits in "
                  "the CSVs), so it also carries the difference in the GPU's power state between them."]
    return "\n".join(lines)


def _newest_paired(paired_dir: Path, gpu: str | None = None) -> dict[tuple[str, str, str], dict]:
    """(first, second, case) -> the summary of compare.paired.ratios from the newest CSV (by its rows'
    timestamps) in `paired_dir` that measured it, with 'commit' (short) and 'measured' added; with `gpu`,
    only that GPU's rows count (the published tables pass it, so that a CPU or another GPU's call never
    mixes in)."""
    newest: dict[tuple[str, str, str], dict] = {}
    for path in sorted(Path(paired_dir).glob("*.csv")):
        rows = [r for r in paired.read(path) if gpu is None or r.get("gpu") == gpu]
        if not rows:
            continue
        commit = rows[0].get("git_commit", "")[:7]  # short, as the file names have it
        measured = max(r.get("timestamp", "") for r in rows)
        for first, second in paired.pairs(rows):
            for r in paired.ratios(rows, first, second):
                key = (first, second, r["case"])
                if key not in newest or measured > newest[key]["measured"]:
                    newest[key] = {**r, "commit": commit, "measured": measured}
    return newest


def paired_table(paired_dir: Path, gpu: str | None = None) -> str:
    """The side-by-side ratios of the paired CSVs (compare.paired) in `paired_dir`: a row per comparison and
    case, from the newest CSV (by its rows' timestamps) that measured it, so that a case measured again after
    a change shows its current ratio once; '' when there is none. Only rows of `gpu` when it is given."""
    newest = _newest_paired(paired_dir, gpu)
    if not newest:
        return ""
    lines = []
    for key in sorted(newest, key=lambda key: (key[0], key[1], _case_order(key[2]))):
        first, second, case = key
        r = newest[key]
        what = f"| `{first}` / `{second}` | {case} |"
        if "ratio" not in r:
            lines.append(f"{what} - | - | 0 | - | {r['commit']} |")
            continue
        rates = f"{r['tflops_first']:.0f} / {r['tflops_second']:.0f}" if "tflops_first" in r else "-"
        lines.append(f"{what} {r['ratio']:.3f} | [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}] | {r['rounds']} | "
                     f"{rates} | {r['commit']} |")
    return "\n".join(["| comparison | case | ratio | [min, max] | rounds | TFLOP/s | commit |",
                      "|---|---|---:|---|---:|---|---|"] + lines)


def _case_order(label: str) -> tuple:
    """Sort key of a case label (compare.schema.shape_label: 'fmt bB hQ/KV qS kS dD [causal]'):
    format, head_dim, query length, key length, causal last."""
    fields = {part[0]: part[1:] for part in label.split()[1:] if part[0] in "dqk" and part[1:].isdigit()}
    return (label.split()[0], int(fields.get("d", 0)), int(fields.get("q", 0)), int(fields.get("k", 0)),
            label.endswith("causal"))


def ceilings_table(df: pd.DataFrame) -> str:
    rows = df[df["family"] == "ceiling"]
    if rows.empty:
        return ""
    lines = ["| ceiling | measured | what |", "|---|---:|---|"]
    for _, r in rows.sort_values("variant").iterrows():
        unit, _, what = str(r.get("note", "")).partition(": ")
        value = r["ceiling_tflops"]
        lines.append(f"| `{r['variant']}` | {value:.0f} {unit} | {what} |" if value >= 100 else
                     f"| `{r['variant']}` | {value:.2f} {unit} | {what} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Which rows are published, and grouped how

def _is_cpu(gpu) -> bool:
    """A row measured without a GPU (compare.env writes gpu='cpu'): never part of a published table."""
    return str(gpu).strip().lower() in ("", "cpu", "nan", "none")


def published(df: pd.DataFrame) -> pd.DataFrame:
    """The rows the published tables are built from: GPU rows only (CPU runs are smoke tests, not results).
    `load_results` already reads only the CSVs directly in the data folder, not its subfolders."""
    return df[~df["gpu"].map(_is_cpu)] if "gpu" in df else df.iloc[0:0]


def by_gpu(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(GPU name, its rows) for every GPU in `df`'s published rows, the GPU with the most rows first: each
    table and each header is about one GPU, never a mix."""
    rows = published(df)
    groups = [(str(gpu), group) for gpu, group in rows.groupby("gpu", sort=True)]
    return sorted(groups, key=lambda item: -len(item[1]))


def _environments(rows: pd.DataFrame) -> str:
    envs = rows[["driver", "cuda", "torch", "triton"]].drop_duplicates().sort_values(["driver", "cuda", "torch", "triton"])
    return "; ".join(f"driver {e.driver}, CUDA {e.cuda}, torch {e.torch}, triton {e.triton}" for e in envs.itertuples())


def environment_line(rows: pd.DataFrame) -> str:
    """One GPU's environment: driver, CUDA, torch, triton (each combination once) and the commits."""
    commits = ", ".join(sorted(rows["git_commit"].unique()))
    return f"{rows['gpu'].iloc[0]}, {_environments(rows)}, commit(s) {commits}"


TIMING = ("TFLOP/s (median of single calls, each a CUDA-graph replay of one API call with L2 flushed before it, "
          "so host-side API work is not timed; see compare/bench.py)")


# ---------------------------------------------------------------------------------------------------------
# The README: findings and one headline table

# (format, backend) rows of the README's headline table, in this order; a row without data is left out
HEADLINE_ROWS = [
    ("bf16", "cuda:hopper"), ("bf16", "cuda:v5"), ("bf16", "triton:fa2-ws"), ("bf16", "triton:fa2-tma"),
    ("bf16", "sdpa:cudnn"), ("bf16", "sdpa:flash"),
    ("fp8", "cuda:hopper-fp8"), ("fp8", "triton:fp8-ws"), ("fp8", "triton:fp8"),
    ("mxfp8", "cuda:hopper-mxfp8"), ("mxfp8", "triton:mxfp8-dequant"), ("mxfp8", "triton:mxfp8-dot-scaled"),
    ("nvfp4", "cuda:hopper-nvfp4"), ("nvfp4", "triton:nvfp4-dequant"),
]
MAX_HEADLINE_ROWS = 15
TRITON_16BIT = ["triton:fa2", "triton:fa2-tma", "triton:fa2-ws"]
TRITON_FP8 = ["triton:fp8", "triton:fp8-ws"]
TRITON_MXFP8 = ["triton:mxfp8-dequant", "triton:mxfp8-dot-scaled"]
TRITON_NVFP4 = ["triton:nvfp4-dequant", "triton:nvfp4-dot-scaled"]


def headline_tflops_table(df: pd.DataFrame, head_dim: int = HEADLINE_HEAD_DIM) -> str:
    """TFLOP/s of the HEADLINE_ROWS backends at `head_dim` on the 16k-token grid (non-causal / causal per
    seqlen) and at the founding shape (16-bit only): at most MAX_HEADLINE_ROWS rows."""
    rows = passed(df)
    grid = grid_rows(rows)
    grid = grid[grid["head_dim"] == head_dim]
    founding = rows
    for column, value in FOUNDING_SHAPE.items():
        founding = founding[founding[column] == value]
    header = ["format", "backend"] + [f"{s // 1024}k" for s in HEADLINE_SEQLENS] + ["founding shape"]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for fmt, label in HEADLINE_ROWS:
        mine = grid[(grid["label"] == label) & (grid["format"] == fmt)]
        if mine.empty:
            continue

        def rate(frame, seqlen=None, causal=None):
            if seqlen is not None:
                frame = frame[(frame["seqlen_q"] == seqlen) & (frame["causal"] == causal)]
            return "-" if frame.empty else f"{frame['tflops'].max():.0f}"

        cells = [f"{rate(mine, s, False)} / {rate(mine, s, True)}" for s in HEADLINE_SEQLENS]
        at_founding = rate(founding[(founding["label"] == label) & (founding["format"] == fmt)])
        lines.append(f"| {fmt} | `{label}` | " + " | ".join(cells) + f" | {at_founding} |")
    if len(lines) - 2 > MAX_HEADLINE_ROWS:
        raise ValueError(f"the headline table has {len(lines) - 2} rows, more than {MAX_HEADLINE_ROWS}")
    return "\n".join(lines)


def _grid_ratio(rows: pd.DataFrame, top: list[str], top_fmt: str, bottom: list[str], bottom_fmt: str) -> pd.Series:
    """Fastest `top` over fastest `bottom` per case of the 16k-token grid (index: CASE)."""
    grid = grid_rows(passed(rows))
    sides = _best(grid, top, top_fmt).add_suffix("_top").join(_best(grid, bottom, bottom_fmt).add_suffix("_bottom"),
                                                               how="inner")
    ratio = (sides["tflops_top"] / sides["tflops_bottom"]).dropna()
    ratio.attrs["cross_run"] = bool((sides["run_top"] != sides["run_bottom"]).reindex(ratio.index).any())
    return ratio


def _runs(*ratios: pd.Series) -> str:
    """A sentence noting that a finding's two sides come from different sweeps, or ''."""
    return (". Its two sides come from different sweeps, so the ratio also carries the GPU's power state between them"
            if any(r.attrs.get("cross_run") for r in ratios) else "")


def _span(values) -> str:
    values = sorted(float(v) for v in values)
    low, high = f"{values[0]:.2f}", f"{values[-1]:.2f}"
    return f"{low}×" if low == high else f"{low}–{high}×"


def _tally(ratio: pd.Series, rival: str) -> str:
    """'ahead in all N cases', or how many it loses to `rival` and where it loses most."""
    wins, losses = int((ratio > 1).sum()), ratio[ratio < 1]
    if losses.empty:
        return f"ahead in {wins} of {len(ratio)} cases" if wins < len(ratio) else f"ahead in all {len(ratio)} cases"
    return (f"ahead in {wins} of {len(ratio)} cases; {rival} is ahead in {len(losses)}, most at "
            f"{_where(losses.idxmin())}: {losses.min():.2f}×")


def _seq(n) -> str:
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _where(key: tuple) -> str:
    head_dim, seqlen_q, _, causal = key
    return f"d{int(head_dim)} {_seq(seqlen_q)}{' causal' if causal else ''}"


def _head_dims(ratio: pd.Series) -> str:
    dims = sorted({int(d) for d in ratio.index.get_level_values("head_dim")})
    return "d" + "/".join(str(d) for d in dims)


def findings(df: pd.DataFrame, paired_dir: Path | None = None) -> list[str]:
    """The README's findings for one GPU's rows: each a sentence whose every number is computed here from the
    committed CSVs (the 16k-token grid, and the side-by-side CSVs for FlashAttention-4). A finding whose
    data is missing is left out."""
    rows = passed(df)
    gpu = str(df["gpu"].iloc[0]) if len(df) else None
    out = []

    vs_cudnn = _grid_ratio(rows, ["cuda:hopper"], "bf16", ["sdpa:cudnn"], "bf16")
    if not vs_cudnn.empty:
        seqlens = vs_cudnn.index.get_level_values("seqlen_q")
        long, short = vs_cudnn[seqlens >= 4096], vs_cudnn[seqlens <= 1024]
        parts = []
        if not long.empty:
            parts.append(f"{_span(long)} cuDNN's speed at 4k–16k tokens ({_tally(long, 'cuDNN')})")
        if not short.empty:
            parts.append(f"{_span(short)} at {_seq(short.index.get_level_values('seqlen_q').min())}–1k tokens "
                         f"({_tally(short, 'cuDNN')})")
        out.append(f"**bf16 against cuDNN**, the fastest SDPA backend ({_head_dims(vs_cudnn)}, causal and not): "
                   f"`cuda:hopper` is " + "; ".join(parts) + _runs(vs_cudnn) + ".")

    if paired_dir is not None:
        fa4 = [r for (first, second, _), r in _newest_paired(paired_dir, gpu).items()
               if first == "cuda:hopper" and second.startswith("fa4:") and "ratio" in r]
        if fa4:
            ratios = sorted(r["ratio"] for r in fa4)
            behind = sum(r < 1 for r in ratios)
            out.append(f"**bf16 against FlashAttention-4** (`fa4:cute`, timed side by side in interleaved rounds, "
                       f"{len(fa4)} cases): `cuda:hopper` is {ratios[0]:.3f}–{ratios[-1]:.3f}× FA4's speed; FA4 is "
                       f"ahead in {behind} of {len(fa4)}.")

    vs_triton = _grid_ratio(rows, ["cuda:hopper"], "bf16", TRITON_16BIT, "bf16")
    ladder = _grid_ratio(rows, ["cuda:v5"], "bf16", ["sdpa:flash"], "bf16")
    if not vs_triton.empty:
        grid = grid_rows(rows)
        triton = grid[(grid["format"] == "bf16") & grid["label"].isin(TRITON_16BIT)]
        most = triton.loc[triton.groupby(CASE)["tflops"].idxmax(), "label"].value_counts().idxmax()
        text = (f"**CUDA against Triton, bf16** ({_head_dims(vs_triton)}, "
                f"{_seq(vs_triton.index.get_level_values('seqlen_q').min())}–"
                f"{_seq(vs_triton.index.get_level_values('seqlen_q').max())} tokens): `cuda:hopper` is "
                f"{_span(vs_triton)} the best Triton kernel, mostly `{most}` ({_tally(vs_triton, 'Triton')})"
                + _runs(vs_triton))
        if not ladder.empty:
            text += (f". The Ampere-style mma.sync ladder's last step, `cuda:v5`, is {_span(ladder)} "
                     f"FlashAttention-2 (`sdpa:flash`; {_tally(ladder, 'FA2')})" + _runs(ladder))
        out.append(text + ".")

    low_precision = []  # fp8 and the block-scaled formats: one finding
    fp8 = _grid_ratio(rows, ["cuda:hopper-fp8"], "fp8", TRITON_FP8, "fp8")
    if not fp8.empty:
        mine = grid_rows(rows)
        mine = mine[mine["label"] == "cuda:hopper-fp8"]
        peak = mine.loc[mine["tflops"].idxmax()]
        key = (peak["head_dim"], peak["seqlen_q"], peak["seqlen_k"], peak["causal"])
        low_precision.append(f"**fp8 (e4m3)** ({_head_dims(fp8)}): `cuda:hopper-fp8` is {_span(fp8)} the best Triton "
                             f"fp8 kernel ({_tally(fp8, 'Triton')}){_runs(fp8)} and peaks at {peak['tflops']:.0f} "
                             f"TFLOP/s ({_where(key)}).")

    mx = _grid_ratio(rows, ["cuda:hopper-mxfp8"], "mxfp8", TRITON_MXFP8, "mxfp8")
    nv = _grid_ratio(rows, ["cuda:hopper-nvfp4"], "nvfp4", TRITON_NVFP4, "nvfp4")
    mx_fp8 = _grid_ratio(rows, ["cuda:hopper-mxfp8"], "mxfp8", ["cuda:hopper-fp8"], "fp8")
    if not mx.empty or not nv.empty:
        parts = [f"{name} {_span(r)} the best Triton variant ({_tally(r, 'Triton')})"
                 for name, r in (("MXFP8", mx), ("NVFP4", nv)) if not r.empty]
        text = "**Block-scaled formats** (tiles expanded exactly to 16 bits, then wgmma): " + "; ".join(parts)
        if not mx_fp8.empty:
            text += (f". sm_90 has no block-scaled MMA, so MXFP8 runs at {_span(mx_fp8)} the speed of plain fp8 "
                     f"(`cuda:hopper-fp8`)" + _runs(mx_fp8))
        low_precision.append(text + ".")
    if low_precision:
        out.append(" ".join(low_precision))
    return out


def _decode_where(key: tuple) -> str:
    batch, heads_q, heads_kv, seqlen_k = (int(x) for x in key)
    return f"b{batch} h{heads_q}/{heads_kv} k{_seq(seqlen_k)}"


def _tally_at(ratio: pd.Series, rival: str, where, all_text: str) -> str:
    """'ahead in all N{all_text}', or how many it loses to `rival` and where (where(case key)) it loses most."""
    wins, losses = int((ratio > 1).sum()), ratio[ratio < 1]
    if losses.empty:
        return f"ahead in all {len(ratio)}{all_text}"
    return (f"ahead in {wins} of {len(ratio)}; {rival} is ahead in {len(losses)}, most at "
            f"{where(losses.idxmin())}: {losses.min():.2f}×")


def _decode_tally(ratio: pd.Series, rival: str) -> str:
    return _tally_at(ratio, rival, _decode_where, " cases")


def decode_findings(df: pd.DataFrame, elsewhere: pd.DataFrame | None = None) -> list[str]:
    """The README's decode finding: the decode kernels against cuDNN and against the prefill kernels they replace,
    single-token decode (Sq = 1) of one decode sweep through the dense call, and the same kernels' KV-cache calls
    (paged against contiguous, an e4m3 cache against one in q's dtype), every number computed here. `elsewhere`:
    the decode sweep's rows on other GPUs; where `df` has no KV-cache calls, the first of those GPUs whose rows have
    them gives that sentence, naming its GPU, environment and commit."""
    rows = decode_calls(df)
    cuda = decode_ratio(rows, "cuda:decode", "sdpa:cudnn")
    if cuda.empty:
        return []
    triton = decode_ratio(rows, "triton:decode", "sdpa:cudnn")
    before = decode_ratio(rows, "cuda:decode", "cuda:hopper")
    one = decode_data(df)
    one = one[one["label"] == "cuda:decode"]  # (K and V bytes per second: figure 6's)
    peak, at = one["tbps"].max(), _decode_where(tuple(one.loc[one["tbps"].idxmax(), DECODE_CASE]))
    read = ceiling_value(df, "dram.read")
    dims = "/".join(str(int(d)) for d in sorted(one["head_dim"].unique()))
    text = (f"**Decode** (bf16 d{dims}, one query token against a contiguous cache of "
            f"{_seq(one['seqlen_k'].min())}–{_seq(one['seqlen_k'].max())} keys, batch {int(one['batch'].min())}–"
            f"{int(one['batch'].max())}, {len(cuda)} cases of one run): the split-KV `cuda:decode` runs at "
            f"{_span(cuda)} cuDNN's speed ({_decode_tally(cuda, 'cuDNN')}) and reads K and V at up to "
            f"{peak:.2f} TB/s" + (f", {100 * peak / read:.0f}% of the read ceiling measured in the same run ({at})"
                                  if read > 0 else f" ({at})"))
    if not triton.empty:
        text += f"; `triton:decode` at {_span(triton)} ({_decode_tally(triton, 'cuDNN')})"
    skipped = len(decode_eager_cases(rows, "cuda:decode", "sdpa:cudnn"))
    if skipped:
        text += (f". {skipped} more {'cases are' if skipped > 1 else 'case is'} left out: cuDNN's graph replay "
                 "there did not reproduce its output, and its eager timing carries the host's launch time")
    if not before.empty:
        text += f". Against the prefill kernel `cuda:hopper` on the same calls it is {_span(before)} faster"
    versus = decode_ratio(rows, "cuda:decode", "triton:decode")
    if not versus.empty:
        text += (f". Against `triton:decode` (figure 9) it runs at {_span(versus)} its speed "
                 f"({_decode_tally(versus, 'Triton')})")
    caches = _cache_sentence(df, "in the same run")
    if not caches and elsewhere is not None:
        for _, rows in elsewhere.groupby("gpu", sort=True):
            caches = _cache_sentence(rows, f"in another run ({environment_line(rows)}), each ratio within it")
            if caches:
                break
    return [text + "." + (" " + caches if caches else "")]


def _verdict(ratios: pd.Series, target: float) -> str:
    """'met', or in how many of the cases the target was missed."""
    missed = int((ratios.round(2) < target).sum())
    return "met" if not missed else "missed" if missed == len(ratios) else f"missed in {missed} of {len(ratios)}"


def _cache_sentence(df: pd.DataFrame, run: str) -> str:
    """The decode kernels' KV-cache calls (compare.cache_sweep) against each other within `df`'s run (`run` says
    which): pages against a contiguous cache, an e4m3 cache against one in q's dtype, with the issue's targets (0.95x
    at pages of 64 keys and more, 1.8x)."""
    parts = []
    for label in ("cuda:decode", "triton:decode"):
        paged, fp8 = cache_ratios(df, label)
        said = []
        if paged:
            large = [ratio for size, ratio in paged.items() if size >= 64]
            said.append(f"pages of {'/'.join(map(str, paged))} keys at {_span(pd.concat(list(paged.values())))} the "
                        "contiguous cache's speed" + (f" ({_span(pd.concat(large))} from 64 keys up; target 0.95×: "
                                                      f"{_verdict(pd.concat(large), 0.95)})" if large else ""))
        if not fp8.empty:
            said.append(f"an e4m3 cache at {_span(fp8)} the bf16 cache's speed (target 1.8×: {_verdict(fp8, 1.8)})")
        if said:
            cases = len(pd.concat([*paged.values(), fp8]).index.unique())
            parts.append(f"`{label}` runs " + " and ".join(said) + f" ({cases} case{'s' if cases > 1 else ''})")
    if not parts:
        return ""
    return f"Through `attention_with_kvcache` {run}: " + "; ".join(parts) + "."


LOCAL_CASE = ["head_dim", "causal", "window_left", "window_right", "softcap"]


def _local_rates(rows: pd.DataFrame) -> pd.DataFrame:
    """TFLOP/s (on the FLOPs done) per local-sweep case (LOCAL_CASE) and backend label."""
    return rows.pivot_table(index=LOCAL_CASE, columns="label", values="tflops", aggfunc="max")


def _local_where(key: tuple) -> str:
    head_dim, causal, left, right, softcap = key
    window = "" if (left, right) == (-1, -1) else f" window {_seq(left)}" + ("" if right < 0 else f"+{_seq(right)}")
    return f"d{int(head_dim)}{' causal' if causal else ''}{window}{f' softcap {softcap:g}' if softcap else ''}"


def local_findings(df: pd.DataFrame) -> list[str]:
    """The README's local-attention finding: `cuda:hopper` with windows and softcap against the one Triton kernel
    that takes them and against its own dense rows, one local sweep (figures/data/local), every number computed
    here."""
    rows = passed(df)
    rates = _local_rates(rows) if not rows.empty else pd.DataFrame()
    if "cuda:hopper" not in rates or "triton:fa2" not in rates:
        return []
    index = rates.index.to_frame(index=False)
    local = ((index["window_left"] >= 0) | (index["window_right"] >= 0)).to_numpy()
    capped = (index["softcap"] > 0).to_numpy()
    windows = rates[local & ~capped]
    versus_triton = (windows["cuda:hopper"] / windows["triton:fa2"]).dropna()
    # each local case against the same backend's dense row with the same head_dim and mask
    dense = rates[~local & ~capped]["cuda:hopper"].droplevel(["window_left", "window_right", "softcap"])
    own = windows["cuda:hopper"] / dense.reindex(windows.index.droplevel(["window_left", "window_right",
                                                                          "softcap"])).to_numpy()
    cap = rates[capped & ~local]["cuda:hopper"].droplevel(["window_left", "window_right", "softcap"])
    cap_cost = (cap / dense.reindex(cap.index).to_numpy()).dropna()
    sizes = sorted(int(w) for w in index.loc[local, "window_left"].unique() if w >= 0)
    seqlens = "/".join(_seq(n) for n in sorted(rows["seqlen_k"].unique()))
    worst = own.dropna().idxmin()
    text = (f"**Local attention** (bf16, one sequence of {seqlens} keys, windows of {_seq(sizes[0])}–{_seq(sizes[-1])} "
            f"keys, TFLOP/s on the FLOPs done, {len(versus_triton)} window cases of one run): `cuda:hopper` is "
            f"{_span(versus_triton)} `triton:fa2`, the one Triton kernel with windows, and runs at "
            f"{_span(own.dropna())} its own dense rate on the same mask (lowest at {_local_where(worst)})")
    if not cap_cost.empty:
        text += f"; softcap {float(index.loc[capped, 'softcap'].max()):g} runs at {_span(cap_cost)} of its rate without it"
    return [text + "."]


VARLEN_CASE = ["lengths", "head_dim", "causal", "window_left"]


def _varlen_where(key: tuple) -> str:
    lengths, head_dim, causal, left = key
    return f"{lengths} d{int(head_dim)}{' causal' if causal else ''}{f' window {_seq(left)}' if left >= 0 else ''}"


def _varlen_tally(ratio: pd.Series, rival: str) -> str:
    return _tally_at(ratio, rival, _varlen_where, "")


def varlen_findings(df: pd.DataFrame) -> list[str]:
    """The README's packed-batch finding: `cuda:hopper`'s varlen path against torch's varlen_attn, `triton:fa2`'s,
    its own dense kernel on the batch padded to the longest sequence, and cuDNN's on the same padded batch, one
    varlen sweep (figures/data/varlen), every number computed here."""
    rows = passed(df)
    rows = rows[(rows["lengths"] != "") & (rows["softcap"] == 0)] if not rows.empty else rows
    if rows.empty:
        return []
    rates = rows.assign(label=rows["label"] + ":" + rows["packing"]).pivot_table(
        index=VARLEN_CASE, columns="label", values="tflops", aggfunc="max")
    ours = "cuda:hopper:packed"
    if ours not in rates or "torch:varlen_attn:packed" not in rates:
        return []
    versus_torch = (rates[ours] / rates["torch:varlen_attn:packed"]).dropna()
    parts = [f"`cuda:hopper` is {_span(versus_torch)} torch's `varlen_attn` (FlashAttention-2; "
             f"{_varlen_tally(versus_torch, '`varlen_attn`')})"]
    if "triton:fa2:packed" in rates:
        versus_triton = (rates[ours] / rates["triton:fa2:packed"]).dropna()
        parts.append(f"{_span(versus_triton)} `triton:fa2`'s varlen path ({_varlen_tally(versus_triton, 'Triton')})")
    index = rates.index.to_frame(index=False)
    equal = (index["lengths"] == "equal").to_numpy()
    if "cuda:hopper:padded" in rates and equal.any():
        own = (rates[ours] / rates["cuda:hopper:padded"])[equal].dropna()
        if not own.empty:
            parts.append(f"on equal lengths {_span(own)} its own dense kernel on the same batch")
    longtail = (index["lengths"] == "longtail").to_numpy()
    if "sdpa:cudnn:padded" in rates and longtail.any():
        padded = (rates[ours] / rates["sdpa:cudnn:padded"])[longtail].dropna()
        if not padded.empty:
            parts.append(f"on the long-tailed mix {_span(padded)} cuDNN on the batch padded to its longest sequence")
    mixes = ", ".join(dict.fromkeys(m for m in ("longtail", "uniform", "equal") if m in set(rows["lengths"])))
    dims = "/".join(f"d{int(d)}" for d in sorted(rows["head_dim"].unique()))
    text = (f"**Packed variable-length batches** (bf16, {mixes} length mixes, {dims}, causal and not, TFLOP/s on the "
            f"packed batch's FLOPs, {len(versus_torch)} cases of one run): "
            + ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1])
    return [text + "."]


MLA_CASE = ["batch", "heads_q", "seqlen_q", "seqlen_k"]


def _mla_where(key: tuple) -> str:
    batch, heads_q, seqlen_q, seqlen_k = (int(x) for x in key)
    return f"b{batch} h{heads_q} q{seqlen_q} k{_seq(seqlen_k)}"


def mla_findings(df: pd.DataFrame) -> list[str]:
    """The README's MLA decode finding: `cuda:decode`'s MLA kernel against the read ceiling (the fewest query heads,
    memory-bound), against the bf16 wgmma ceiling (the most, compute-bound) and against `triton:decode`, one mla
    sweep (figures/data/mla), every number computed here."""
    rows = mla_data(df)
    if rows.empty or "cuda:decode" not in set(rows["label"]):
        return []
    read, wgmma = ceiling_value(df, "dram.read"), ceiling_value(df, "wgmma.bf16")
    cuda = rows[rows["label"] == "cuda:decode"]
    parts = []
    few, many = cuda[cuda["heads_q"] == cuda["heads_q"].min()], cuda[cuda["heads_q"] == cuda["heads_q"].max()]
    if read > 0:
        best = few.loc[few["tbps"].idxmax()]
        parts.append(f"reads the latent cache at up to {best['tbps']:.2f} TB/s at {int(best['heads_q'])} query heads, "
                     f"{100 * best['tbps'] / read:.0f}% of the read ceiling measured in the "
                     f"same run ({_mla_where(tuple(best[MLA_CASE]))})")
    if wgmma > 0:
        best = many.loc[many["tflops"].idxmax()]
        parts.append(f"reaches {best['tflops']:.0f} TFLOP/s at {int(best['heads_q'])} heads, "
                     f"{100 * best['tflops'] / wgmma:.0f}% of the bf16 wgmma ceiling "
                     f"({_mla_where(tuple(best[MLA_CASE]))}; the wgmma kernel)")
    times = rows.pivot_table(index=MLA_CASE, columns="label", values="ms_p50", aggfunc="min")
    if "triton:decode" in times:
        versus = (times["triton:decode"] / times["cuda:decode"]).dropna()
        parts.append(f"runs at {_span(versus)} `triton:decode`'s speed "
                     f"({_tally_at(versus, 'Triton', _mla_where, ' cases')})")
    pages = "/".join(sorted(set(cuda["page_size"].astype(str))))
    text = (f"**MLA decode** (bf16, Q/K 576 against one latent head, V its first 512 columns, pages of {pages} keys, "
            f"{int(rows['heads_q'].min())}–{int(rows['heads_q'].max())} query heads, batch {int(rows['batch'].min())}–"
            f"{int(rows['batch'].max())}, {_seq(rows['seqlen_k'].min())}–{_seq(rows['seqlen_k'].max())} keys, "
            f"{len(cuda)} cases of one run, figure 10): `cuda:decode` " + "; ".join(parts))
    return [text + "."]


def _headdims_where(key: tuple) -> str:
    dims, causal = key
    return f"d{dims.replace('/', 'v')}{' causal' if causal else ''}"


# The head dims held to its target: 0.9x or more of the FLOP rate of the kernel each ran on before it had a
# kernel of its own (d80, d96: d128's; d192: d256's), same run, same mask.
HEADDIMS_TARGET = {"80": 128, "96": 128, "192": 256}
HEADDIMS_TARGET_RATIO = 0.9
COMMON_HEAD_DIMS = (64, 128, 256)  # the head dims every backend here has kernels for; the finding is about the others


def _slashed(dims) -> str:
    return " / ".join(map(str, dims))


def headdims_findings(df: pd.DataFrame) -> list[str]:
    """The README's head-dim finding (one headdims sweep, figures/data/headdims): `cuda:hopper`'s kernels between
    others (d192) against their neighbours' FLOP rates, its Q/K / V pairs (192/128) against their Q/K width's kernel,
    the head dims it runs on a wider kernel against that kernel's own rate, the issue's target, and cuDNN and
    `triton:fa2` at the head dims outside 64 / 128 / 256."""
    rows = headdims_data(df)
    rates = rows.pivot_table(index=["dims", "causal"], columns="label", values="tflops", aggfunc="max")
    if "cuda:hopper" not in rates:
        return []
    hopper = rates["cuda:hopper"]
    widths = rows.drop_duplicates("dims").set_index("dims")["width"]

    def versus(dims: str, causal: bool, kernel: int) -> float:
        return hopper.get((dims, causal), math.nan) / hopper.get((str(kernel), causal), math.nan)

    padded = [key for key in rates.index if key[0] not in OWN_KERNEL_DIMS]
    own = pd.Series({(dims, c): versus(dims, c, next(d for d in KERNEL_HEAD_DIMS if d >= widths[dims]))
                     for dims, c in padded}, dtype=float).dropna()
    shape = rows.iloc[0]
    text = (f"**Head dims** (bf16, {int(shape['batch'])} × {_seq(shape['seqlen_q'])} tokens, {int(shape['heads_q'])} "
            f"heads, causal and not, {len(rates)} cases of one run, figure 11): ")
    inner = []  # cuda:hopper's kernels besides the common ones, against the common ones beside them
    for dim in KERNEL_HEAD_DIMS:
        below = [d for d in COMMON_HEAD_DIMS if d < dim]
        above = [d for d in COMMON_HEAD_DIMS if d > dim]
        if dim in COMMON_HEAD_DIMS or not below or not above:
            continue
        below, above = below[-1], above[0]
        up = pd.Series({c: versus(str(dim), c, above) for c in (False, True)}).dropna()
        down = pd.Series({c: versus(str(dim), c, below) for c in (False, True)}).dropna()
        if not up.empty and not down.empty:
            inner.append(f"its own d{dim} kernel runs at {_span(up)} the d{above} kernel's FLOP rate and "
                         f"{_span(down)} d{below}'s")
    for pair in KERNEL_PAIRS:  # against the kernel of its Q/K width
        qk, v = pair.split("/")
        wide = pd.Series({c: versus(pair, c, int(qk)) for c in (False, True)}).dropna()
        if not wide.empty:
            inner.append(f"its own Q/K {qk} with V {v} kernel runs at {_span(wide)} the d{qk} kernel's FLOP rate")
    if not own.empty:
        order = sorted(own.index, key=lambda k: (widths[k[0]], "/" in k[0], k[0]))
        names = [f"Q/K {d.replace('/', ' with V ')}" if "/" in d else f"d{d}"
                 for d in dict.fromkeys(d for d, _ in order)]
        verb = "run" if len(names) > 1 else "runs"
        names = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        inner.append(f"at {names}, which {verb} on the kernel of the next of {_slashed(KERNEL_HEAD_DIMS)} with zero "
                     f"columns, {_span(own)} that kernel's own FLOP rate (lowest at {_headdims_where(own.idxmin())})")
    if not inner:
        return []
    text += "`cuda:hopper`: " + "; ".join(inner)
    held = pd.Series({(dims, c): versus(dims, c, kernel) for dims, kernel in HEADDIMS_TARGET.items()
                      for c in (False, True)}, dtype=float).dropna()
    if not held.empty:
        met = held[held >= HEADDIMS_TARGET_RATIO]
        dims = list(dict.fromkeys(d for d, _ in held.index))
        text += (f". The issue's target ({' / '.join(f'd{d}' for d in dims)} at {HEADDIMS_TARGET_RATIO}× or more of the "
                 f"rate of the kernel they ran on without one of their own: "
                 + ", ".join(f"d{d} on d{HEADDIMS_TARGET[d]}" for d in dims)
                 + f") is met in {len(met)} of {len(held)} cases (lowest: {_headdims_where(held.idxmin())}, "
                 f"{held.min():.2f}×)")
    extra = [key for key in rates.index if widths[key[0]] not in COMMON_HEAD_DIMS or "/" in key[0]]
    rivals = [f"{_span(ratio)} {name}'s speed ({_tally_at(ratio, name, _headdims_where, ' cases')})"
              for rival, name in (("sdpa:cudnn", "cuDNN"), ("triton:fa2", "`triton:fa2`")) if rival in rates
              for ratio in [(hopper / rates[rival]).loc[extra].dropna()]]
    if rivals:
        text += f". At the head dims besides {_slashed(COMMON_HEAD_DIMS)}: " + "; ".join(rivals)
    return [text + "."]


def readme_findings(data_dir: Path) -> str:
    groups = by_gpu(load_results(data_dir))
    if not groups:
        return "(no GPU results)"
    gpu, rows = groups[0]
    others = [name for name, _ in groups[1:]]
    items = findings(rows, Path(data_dir) / "paired")
    below = []  # the other sweeps' findings, each from its subfolder of data_dir
    for name, folder, section in (("decode", "decode", decode_findings), ("local attention", "local", local_findings),
                                  ("packed batches", "varlen", varlen_findings), ("MLA decode", "mla", mla_findings),
                                  ("head dims", "headdims", headdims_findings)):
        if (Path(data_dir) / folder).is_dir():
            sub = load_results(Path(data_dir) / folder)
            mine = sub[sub["gpu"] == gpu]
            extra = (decode_findings(mine, elsewhere=sub[sub["gpu"] != gpu]) if section is decode_findings
                     else section(mine))
            items += extra
            below += [name] if extra else []
    head = (f"Measured on {gpu} ({_environments(rows)}), prefill at 16k tokens per batch"
            + (f" ({', '.join(below[:-1]) + ' and ' * (len(below) > 1) + below[-1]}: below)" if below else "") + ", every number passed the oracle"
            + (f"; the other GPUs ({', '.join(others)}) are in docs/results.md" if others else "") + ":")
    return "\n".join([head, ""] + [f"{i}. {text}" for i, text in enumerate(items, 1)])


def readme_headline(data_dir: Path) -> str:
    groups = by_gpu(load_results(data_dir))
    if not groups:
        return "(no GPU results)"
    gpu, rows = groups[0]
    return "\n".join([f"{TIMING}, {gpu}, head_dim {HEADLINE_HEAD_DIM}, 16k tokens per batch; cells are non-causal / "
                      f"causal; founding shape: b1 h8 q4096 k8192 d128, non-causal:", "", headline_tflops_table(rows)])


# ---------------------------------------------------------------------------------------------------------
# docs/results.md: every table, one section per GPU

def gpu_section(rows: pd.DataFrame, paired_dir: Path | None) -> str:
    gpu = str(rows["gpu"].iloc[0])
    parts = [f"### {gpu}", "", f"{TIMING}, {environment_line(rows)}. Every number passed the oracle on the same "
             f"inputs. {not_drawn_note(rows) or 'No row failed the oracle or raised.'}",
             "", "Headline speed ratios (> 1: the first is faster; cells are non-causal / causal, 16k tokens per "
             "batch; founding shape: b1 h8 q4096 k8192 d128, non-causal):", "", headline_table(rows)]
    side_by_side = paired_table(paired_dir, gpu) if paired_dir is not None else ""
    if side_by_side:
        parts += ["", "Side by side (`python -m compare paired`, `figures/data/paired/`): each case timed for both "
                  "backends back to back, in interleaved rounds with the order reversed every other round; ratio "
                  "= median of the per-round ratios (> 1: the first is faster), with their range; TFLOP/s = "
                  "medians over the rounds. A case measured in several calls shows its newest; the older "
                  "rounds stay in their CSVs:", "", side_by_side]
    parts += ["", "Every passing row (TFLOP/s):", "", tflops_table(rows)]
    ceilings = ceilings_table(rows)
    if ceilings:
        parts += ["", "Ceilings measured in the same runs (the denominators of %SOL):", "", ceilings]
    return "\n".join(parts)


def report(data_dir: Path) -> str:
    """docs/results.md's generated block: one section per GPU (CPU rows and subfolders' CSVs left out)."""
    df = load_results(data_dir)
    groups = by_gpu(df)
    if not groups:
        return "(no GPU results)"
    paired_dir = Path(data_dir) / "paired"
    return "\n\n".join(gpu_section(rows, paired_dir if paired_dir.is_dir() else None) for _, rows in groups)


# ---------------------------------------------------------------------------------------------------------
# Generated blocks in the docs

README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "docs" / "results.md"
# document -> {block name: generator(data_dir) -> markdown}
BLOCKS = {README: {"findings": readme_findings, "headline": readme_headline}, RESULTS: {"results": report}}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin (python -m compare report --update-readme) -->", f"<!-- {name}:end -->"


BEGIN, END = markers("results")


def block(text: str, name: str = "results") -> str:
    """The part of `text` between block `name`'s markers (exclusive); ValueError if they are missing."""
    begin, end = markers(name)
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"expected one pair of markers {begin} ... {end}")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


readme_block = block


def replace_block(text: str, name: str, body: str) -> str:
    block(text, name)  # raises without the markers
    begin, end = markers(name)
    head, rest = text.split(begin, 1)
    # A markdown table runs until a blank line: without one, the end marker's line (and whatever follows it)
    # would render as one more row of a body that ends with a table.
    body = body.rstrip("\n")
    closing = "\n\n" if body.rsplit("\n", 1)[-1].startswith("|") else "\n"
    return head + begin + "\n" + body + closing + end + rest.split(end, 1)[1]


def outside_blocks(text: str, names) -> str:
    """`text` with every named generated block (markers included) cut out: the hand-written prose."""
    for name in names:
        begin, end = markers(name)
        head, rest = text.split(begin, 1)
        text = head + rest.split(end, 1)[1]
    return text


def generated(data_dir: Path) -> dict[Path, dict[str, str]]:
    return {doc: {name: make(data_dir) for name, make in blocks.items()} for doc, blocks in BLOCKS.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=REPO_ROOT / "figures" / "data",
                        help="folder of results CSVs (default figures/data; its CSVs directly, not subfolders)")
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite the generated blocks of README.md and docs/results.md")


def run(args: argparse.Namespace) -> int:
    if not args.data.is_dir():
        raise ValueError(f"no results folder {args.data}")
    if not args.update_readme:
        print(report(args.data))
        return 0
    for doc, bodies in generated(args.data).items():
        text = doc.read_text()
        for name, body in bodies.items():
            text = replace_block(text, name, body)
        if text != doc.read_text():
            doc.write_text(text)
            print(f"updated {doc.relative_to(REPO_ROOT)}")
        else:
            print(f"{doc.relative_to(REPO_ROOT)} is up to date")
    return 0
