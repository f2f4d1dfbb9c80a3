"""The paper figures, regenerated from the committed result CSVs alone (no GPU; torch is not imported).

``generate()`` reads every CSV directly in ``figures/data/`` (the schema of ``compare.bench``; the decode, local,
varlen, MLA and head-dim sweeps' in ``decode/``, ``local/``, ``varlen/``, ``mla/`` and ``headdims/``), keeps the
newest row per (gpu, case) (compare.results: the rows each figure draws), and draws twelve figures and one
appendix figure, each as PNG and PDF:

1. the headline: TFLOP/s against seqlen on the 16k-token grid at head_dim 128, bf16 and fp8, causal and
   not, for the fastest CUDA and the fastest Triton variant of each panel and the PyTorch SDPA peers
   (one qualitative colour and marker per backend; bars p20..p80),
2. the optimisation ladder at the founding shape, beside the founding document's RTX 5090 numbers
   (a separate panel: another GPU, never on the same axis),
3. where custom CUDA wins: best-CUDA / best-Triton TFLOP/s over (head_dim x seqlen),
4. accuracy (relative L2 against the unquantized fp64 result) against TFLOP/s,
5. a roofline of achieved TFLOP/s against the measured ceilings recorded in the rows,
6. decode: K and V bytes per second against the KV cache's size (``decode/``),
7. local attention: TFLOP/s on the FLOPs done against the window, beside each backend's dense rate (``local/``),
8. packed variable-length batches: TFLOP/s on the packed FLOPs per length mix, beside the padded batch
   (``varlen/``),
9. where custom CUDA wins at decode: triton:decode / cuda:decode time per (batch, cache length), per GQA group
   (``decode/``),
10. MLA decode: the latent cache's bytes per second and TFLOP/s against the bytes a step reads, per query-head
    count, with the read and bf16 MMA ceilings of the same run (``mla/``),
11. head dims: TFLOP/s against the head_dim (64-256 and Q/K 192 with V 128) per backend, causal and not
    (``headdims/``),
12. where custom CUDA wins beyond dense prefill: best CUDA / best Triton speed per case of the local, varlen,
    head-dim and MLA sweeps,

A1. the full grid of figure 1: every backend, panels format x head_dim x mask.

A row whose oracle verdict is not "pass" is never drawn as a speed; captions count them. Each figure's
footer names the environment its rows came from. A figure with nothing to draw is skipped with a message.
Results from several GPUs give one set of figures per GPU (file names suffixed with the GPU).

The files are reproducible: the same CSVs and the same matplotlib (and Pillow, for PNG) give the same bytes,
so regenerating them leaves a clean tree. They carry no date and no software version (see SAVE_METADATA),
and they are drawn under matplotlib's default style, whatever the user's matplotlibrc says.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.style
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import colormaps
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure  # figures without pyplot: no GUI backend, no global figure state
from matplotlib.ticker import LogFormatter, NullFormatter

from .results import (GRID_TOKENS, KERNEL_HEAD_DIMS, OWN_KERNEL_DIMS, REPO_ROOT, SHAPE_COLUMNS, accuracy_data,
                      beyond_prefill_ratios, cuda_triton_ratio, decode_cuda_triton_ratio, decode_data, format_key,
                      founding_rows, grid_rows, headdims_data, headline_data, headline_panels, ladder_data,
                      load_results, local_data, mix_order, mla_data, not_drawn_note, passed, roofline_data, seqlen_data,
                      seqlen_tick, tflops_bounds, varlen_data)

FOUNDING_REFERENCE = "rtx5090-founding-ladder.csv"
FORMAT_MARKERS = {"bf16": "o", "fp16": "s", "fp8": "^", "mxfp8": "D", "nvfp4": "v"}
BANDWIDTH_CEILINGS = ("dram", "dram.read")  # ceiling names whose value is TB/s, not TFLOP/s
FAMILY_ORDER = {"cuda": 0, "triton": 1, "peer": 2}
LABEL_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
DPI = 150
# Nothing that changes from one run or one machine to the next goes into the files: no creation date, no
# software versions (matplotlib writes its own version into PDF Producer/Creator and PNG Software).
SAVE_METADATA = {
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    "png": {"Software": None},
}
# The versions that drew the committed figures: with these, regenerating them gives the same bytes
# (tests/test_figures.py checks it; other versions may rasterise or compress differently).
DRAWN_WITH = {"matplotlib": "3.11.2", "PIL": "13.0.0"}

# Okabe-Ito colours (told apart also by colour-blind readers), a few per family, handed out in order.
HEADLINE_COLORS = {"cuda": ["#D55E00", "#E69F00", "#882255"], "triton": ["#0072B2", "#009E73", "#56B4E9"],
                   "peer": ["#000000", "#8C8C8C", "#CC79A7"]}
# Figure 3: the ratio's colour scale, centred on 1.0; ratios outside it take the end colours (the cells are
# annotated with their value), so that 1.0-1.2 differences stay visible beside ratios of 3.
RATIO_COLOR_RANGE = (0.8, 1.25)


class NothingToDraw(Exception):
    """A figure has no rows to draw; the message says which rows it needed."""


# ---------------------------------------------------------------- style

def _variant_key(label: str):
    """Natural order, so cuda:v2 comes before cuda:v10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", label)]


class Style:
    """One colour and marker per backend label across all figures: CUDA in reds, Triton in blues, peers
    in greys to black (told apart by their markers)."""

    FAMILY_COLORMAPS = {"cuda": ("Reds", 0.4, 0.95), "triton": ("Blues", 0.4, 0.95), "peer": ("Greys", 0.95, 0.45)}

    def __init__(self, df: pd.DataFrame):
        self.family = dict(zip(df["label"], df["family"]))
        self.labels = sorted(self.family, key=lambda lab: (FAMILY_ORDER.get(self.family[lab], 3), _variant_key(lab)))
        self.color, self.marker = {}, {}
        for family in dict.fromkeys(self.family[lab] for lab in self.labels):
            members = [lab for lab in self.labels if self.family[lab] == family]
            cmap_name, start, stop = self.FAMILY_COLORMAPS.get(family, ("Greens", 0.4, 0.95))
            cmap = colormaps[cmap_name]
            positions = np.linspace(start, stop, len(members)) if len(members) > 1 else [(start + stop) / 2]
            for i, (lab, pos) in enumerate(zip(members, positions)):
                self.color[lab] = cmap(pos)
                self.marker[lab] = LABEL_MARKERS[i % len(LABEL_MARKERS)]

    @classmethod
    def qualitative(cls, family: dict[str, str]) -> "Style":
        """A few labels (figure 1): one distinct Okabe-Ito colour and one distinct marker per label."""
        style = cls.__new__(cls)
        style.family = dict(family)
        style.labels = sorted(style.family, key=lambda lab: (FAMILY_ORDER.get(style.family[lab], 3),
                                                             _variant_key(lab)))
        style.color, style.marker = {}, {}
        spare = iter(colormaps["tab10"].colors)
        used = {fam: 0 for fam in HEADLINE_COLORS}
        for i, lab in enumerate(style.labels):
            fam = style.family[lab]
            palette = HEADLINE_COLORS.get(fam, [])
            k = used.get(fam, 0)
            style.color[lab] = palette[k] if k < len(palette) else next(spare)
            used[fam] = k + 1
            style.marker[lab] = LABEL_MARKERS[i % len(LABEL_MARKERS)]
        return style

    def ordered(self, labels) -> list[str]:
        present = set(labels)
        return [lab for lab in self.labels if lab in present]


# ---------------------------------------------------------------- captions

def _summarise(values, limit: int = 3) -> str:
    uniq = sorted({str(v) for v in values if str(v) not in ("", "nan")})
    if not uniq:
        return "?"
    return "/".join(uniq[:limit]) + (f" +{len(uniq) - limit} more" if len(uniq) > limit else "")


def environment_caption(df: pd.DataFrame) -> str:
    """gpu, driver, CUDA, torch, triton, commits and the date range of the rows a figure drew."""
    times = df["time"].dropna()
    span = "?"
    if len(times):
        first, last = times.min().strftime("%Y-%m-%d %H:%M"), times.max().strftime("%Y-%m-%d %H:%M")
        span = first if first == last else f"{first} to {last}"
    return (f"{_summarise(df['gpu'])} | driver {_summarise(df['driver'])} | CUDA {_summarise(df['cuda'])} | "
            f"torch {_summarise(df['torch'])} | triton {_summarise(df['triton'])} | "
            f"commit {_summarise(df['git_commit'])} | {span} UTC")


def _footer(fig: Figure, lines: list[str]) -> None:
    """Caption below the axes, wrapped to the figure's width; savefig(bbox_inches='tight') grows the
    canvas to hold it."""
    width = int(fig.get_figwidth() * 17)  # characters of 7.5 pt text per inch, roughly
    wrapped = "\n".join(textwrap.fill(line, width) for line in lines if line)
    fig.text(0.0, -0.01, wrapped, ha="left", va="top", fontsize=7.5, color="0.25")


def _legend(fig: Figure, style: Style, labels, format_markers=None) -> None:
    """Backend legend right of the axes (never over data). Where the marker encodes the format instead of
    the backend, backends show as colour patches and a second block lists the format markers."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if format_markers is not None:
        handles = [Patch(color=style.color[lab], label=lab) for lab in style.ordered(labels)]
        handles.append(Patch(color="none", label=""))
        handles += [Line2D([], [], color="0.3", marker=FORMAT_MARKERS.get(f, "o"), linestyle="none", label=f)
                    for f in sorted(set(format_markers), key=format_key)]
    else:
        handles = [Line2D([], [], color=style.color[lab], marker=style.marker[lab], label=lab)
                   for lab in style.ordered(labels)]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5),
               frameon=False, fontsize=8)


# ---------------------------------------------------------------- figures

def _draw_seqlen_panels(fig: Figure, rows: pd.DataFrame, style: Style,
                        panels: list[list[tuple[str, float, bool] | None]], sharey) -> None:
    """One axis per (format, head_dim, causal) of `panels` (a grid, row by row); TFLOP/s against seqlen
    with p20..p80 bars, peers dashed."""
    axes = fig.subplots(len(panels), len(panels[0]), sharex=True, sharey=sharey, squeeze=False)
    seqlens = sorted(rows["seqlen_q"].unique())
    for i, line_of_panels in enumerate(panels):
        for j, key in enumerate(line_of_panels):
            ax = axes[i][j]
            fmt, head_dim, causal = key
            panel = rows[(rows["format"] == fmt) & (rows["head_dim"] == head_dim) & (rows["causal"] == causal)]
            for label in style.ordered(panel["label"]):
                line = panel[panel["label"] == label].sort_values("seqlen_q")
                low, high = tflops_bounds(line)
                ax.errorbar(line["seqlen_q"], line["tflops"], yerr=[line["tflops"] - low, high - line["tflops"]],
                            color=style.color[label], marker=style.marker[label], markersize=4, linewidth=1.3,
                            capsize=2, linestyle="--" if style.family[label] == "peer" else "-")
            if panel.empty:
                ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="0.5")
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens, [seqlen_tick(s) for s in seqlens])
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            grid_mode = sharey == "row"  # the grid: titles on the top row, the format on the y label
            if not grid_mode:
                ax.set_title(f"{fmt}, head_dim {int(head_dim)}, {'causal' if causal else 'non-causal'}", fontsize=10)
            elif i == 0:
                ax.set_title(f"head_dim {int(head_dim)}, {'causal' if causal else 'non-causal'}", fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{fmt}\nTFLOP/s" if grid_mode else "TFLOP/s")
            if i == len(panels) - 1:
                ax.set_xlabel("seqlen (batch x seqlen = 16k tokens)")
    # After plotting: set_ylim freezes the shared autoscale.
    for i, line_of_panels in enumerate(panels):
        keys = line_of_panels if sharey == "row" else [k for lp in panels for k in lp]
        chosen = pd.concat([rows[(rows["format"] == f) & (rows["head_dim"] == d) & (rows["causal"] == c)]
                            for f, d, c in keys])
        if len(chosen):
            axes[i][0].set_ylim(0, tflops_bounds(chosen)[1].max() * 1.08)


def fig_tflops_vs_seqlen(df: pd.DataFrame, style: Style | None = None) -> Figure:
    """Figure 1, the headline: few panels, few backends, one distinct colour and marker each."""
    panels = headline_panels(df)
    rows = headline_data(df)
    if rows.empty:
        raise NothingToDraw(f"no passing rows on the {GRID_TOKENS}-token grid (seqlen_q == seqlen_k)")
    selection = grid_rows(df)
    selection = selection[selection["format"].isin({p[0] for p in panels})
                          & (selection["head_dim"] == panels[0][1])]
    headline_style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    grid = [[p for p in panels if p[0] == fmt] for fmt in dict.fromkeys(p[0] for p in panels)]
    fig = Figure(figsize=(9.5, 3.3 * len(grid) + 0.6), layout="constrained")
    _draw_seqlen_panels(fig, rows, headline_style, grid, sharey=True)
    fig.suptitle(f"Forward TFLOP/s against sequence length, head_dim {int(panels[0][1])}: "
                 "fastest CUDA and Triton variant against PyTorch SDPA")
    _legend(fig, headline_style, rows["label"])
    _footer(fig, ["Per panel: the CUDA and the Triton variant with the highest mean TFLOP/s over the panel's "
                  "seqlens, and every PyTorch SDPA peer (dashed). Median call; bars: p20..p80 of the timed calls. "
                  "Every backend, head_dim and format: figure A1.",
                  environment_caption(rows), not_drawn_note(selection)])
    return fig


def fig_tflops_grid(df: pd.DataFrame, style: Style) -> Figure:
    """Figure A1: the whole grid, every backend (panels: format x (head_dim, mask))."""
    selection = grid_rows(df)
    rows = seqlen_data(df)
    if rows.empty:
        raise NothingToDraw(f"no passing rows on the {GRID_TOKENS}-token grid (seqlen_q == seqlen_k)")
    formats = sorted(rows["format"].unique(), key=format_key)
    columns = sorted({(d, c) for d, c in zip(rows["head_dim"], rows["causal"])})
    fig = Figure(figsize=(3.0 * len(columns) + 0.5, 2.5 * len(formats) + 0.4), layout="constrained")
    _draw_seqlen_panels(fig, rows, style, [[(fmt, d, c) for d, c in columns] for fmt in formats], sharey="row")
    fig.suptitle("A1. Forward TFLOP/s against sequence length, every backend "
                 "(median call; bars: p20..p80 of the timed calls)")
    _legend(fig, style, rows["label"])
    _footer(fig, ["CUDA in reds, Triton in blues, PyTorch SDPA peers in greys (dashed); markers tell the variants "
                  "of a family apart.", environment_caption(rows), not_drawn_note(selection)])
    return fig


def fig_ladder(df: pd.DataFrame, style: Style, reference_dir: Path) -> Figure:
    selection = founding_rows(df)
    rows = ladder_data(df)
    if rows.empty:
        raise NothingToDraw("no passing bf16 rows at the founding shape (b1 h8 q4096 k8192 d128, non-causal)")
    rows = rows.set_index("label").loc[style.ordered(rows["label"])].reset_index()
    reference_path = Path(reference_dir) / FOUNDING_REFERENCE
    reference = pd.read_csv(reference_path) if reference_path.exists() else None
    ratios = [3, 2] if reference is not None else [1]
    fig = Figure(figsize=(12.5 if reference is not None else 7.5, 0.42 * max(len(rows), 8) + 1.6),
                 layout="constrained")
    axes = fig.subplots(1, len(ratios), width_ratios=ratios, squeeze=False)[0]

    ax = axes[0]
    y = np.arange(len(rows))
    low, high = tflops_bounds(rows)
    ax.barh(y, rows["tflops"], xerr=[rows["tflops"] - low, high - rows["tflops"]],
            color=[style.color[lab] for lab in rows["label"]], edgecolor="black", linewidth=0.5, capsize=2)
    for yi, (_, r) in zip(y, rows.iterrows()):
        text = f"{r['tflops']:.0f}"
        if pd.notna(r["pct_sol"]):
            text += f"  ({r['pct_sol']:.0f}% of {r['ceiling']})"
        ax.text(high.iloc[yi] + rows["tflops"].max() * 0.02, yi, text, va="center", fontsize=8)
    ax.set_yticks(y, rows["label"])
    ax.invert_yaxis()
    ax.set_xlim(0, rows["tflops"].max() * (1.6 if rows["pct_sol"].notna().any() else 1.2))
    ax.set_xlabel("TFLOP/s (median; bars: p20..p80)")
    ax.set_title(f"This run: {_summarise(rows['gpu'])}, bf16, b1 h8 q4096 k8192 d128", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)

    ceilings = rows[rows["ceiling_tflops"].notna()].groupby("ceiling")["ceiling_tflops"].median()
    if len(ceilings):
        sol = ("%SOL against the ceilings measured on each row's own GPU (median: "
               + "; ".join(f"{name} = {value:.0f} TFLOP/s" for name, value in ceilings.items()) + ").")
    else:
        sol = "%SOL not shown: these rows record no measured ceiling."
    reference_note = f"Reference panel: {reference_path.name} not found."
    if reference is not None:
        ref = axes[1]
        yr = np.arange(len(reference))
        ref.barh(yr, reference["tflops"], color="0.85", edgecolor="0.3", hatch="//", linewidth=0.5)
        for yi, (_, r) in zip(yr, reference.iterrows()):
            ref.text(r["tflops"] * 1.02, yi, f"{r['tflops']:.0f}  ({r['pct_sol']:.0f}% SOL)", va="center", fontsize=8)
        ref.set_yticks(yr, reference["kernel"])
        ref.invert_yaxis()
        ref.set_xlim(0, reference["tflops"].max() * 1.45)
        ref.set_xlabel("TFLOP/s (as published)")
        ref.set_title(f"Reference, another GPU: {_summarise(reference['gpu'])}\n(founding document; not comparable)",
                      fontsize=10)
        ref.grid(True, axis="x", alpha=0.3)
        ref.set_axisbelow(True)
        reference_note = "Reference: " + reference["conditions"].iloc[0] + "."
    fig.suptitle("Optimisation ladder at the founding shape")
    _footer(fig, [sol, reference_note, environment_caption(rows), not_drawn_note(selection)])
    return fig


def _ratio_heatmap(ax, grid: pd.DataFrame, norm, xlabel: str, ylabel: str, named: bool = False) -> None:
    """A speed-ratio panel (figures 3, 9 and 12): cells annotated with two decimals, columns sequence lengths and rows
    integers, or (named) both the grid's own labels."""
    sns.heatmap(grid, ax=ax, cmap="RdBu_r", norm=norm, annot=True, fmt=".2f", cbar=False,
                linewidths=0.5, linecolor="white", annot_kws={"fontsize": 8})
    ax.set_xticklabels([str(s) if named else seqlen_tick(int(s)) for s in grid.columns], rotation=0)
    ax.set_yticklabels([str(v) if named else str(int(v)) for v in grid.index], rotation=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def fig_cuda_vs_triton(df: pd.DataFrame) -> Figure:
    table = cuda_triton_ratio(df)
    table = table[table["ratio"].notna()]
    if table.empty:
        raise NothingToDraw("no grid cell has passing rows from both a CUDA and a Triton backend")
    panels = sorted({(f, c) for f, c in zip(table["format"], table["causal"])}, key=lambda p: (format_key(p[0]), p[1]))
    full = cuda_triton_ratio(df)
    low, high = RATIO_COLOR_RANGE
    norm = TwoSlopeNorm(vmin=low, vcenter=1.0, vmax=high)
    extend = {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[
        (bool((table["ratio"] < low).any()), bool((table["ratio"] > high).any()))]
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(5.2 * ncols + 1.0, 3.0 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, (fmt, causal) in zip(axes.flat, panels):
        cells = full[(full["format"] == fmt) & (full["causal"] == causal)]
        _ratio_heatmap(ax, cells.pivot(index="head_dim", columns="seqlen", values="ratio"), norm,
                       "seqlen (16k tokens)", "head_dim")
        ax.set_title(f"{fmt}, {'causal' if causal else 'non-causal'}", fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    mappable = axes.flat[0].collections[0]
    colorbar = fig.colorbar(mappable, ax=axes, shrink=0.6, extend=extend, label="best CUDA / best Triton TFLOP/s")
    colorbar.ax.minorticks_off()
    ticks = [t for t in (0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25) if low <= t <= high]
    colorbar.set_ticks(ticks, labels=[f"{t:.2f}" for t in ticks])
    fig.suptitle("Where custom CUDA wins: > 1 (red) CUDA faster, < 1 (blue) Triton faster")
    compared = grid_rows(df)
    compared = compared[compared["family"].isin(["cuda", "triton"])]
    _footer(fig, ["Best passing variant of each family per cell; blank cells lack a passing row from one side. "
                  f"The colour scale is centred on 1.0 and spans {low:.2f} to {high:.2f}; cells beyond it take "
                  "the end colour and their number gives the ratio.",
                  environment_caption(passed(compared)), not_drawn_note(compared)])
    return fig


def fig_accuracy(df: pd.DataFrame, style: Style) -> Figure:
    rows = accuracy_data(df)
    if rows.empty:
        raise NothingToDraw("no passing rows with rel_l2_unquantized")
    fig = Figure(figsize=(8.5, 5.2), layout="constrained")
    ax = fig.subplots()
    summary = rows.groupby(["label", "format"]).agg(
        x=("tflops", "median"), x_lo=("tflops", "min"), x_hi=("tflops", "max"),
        y=("rel_l2_unquantized", "median"), y_lo=("rel_l2_unquantized", "min"),
        y_hi=("rel_l2_unquantized", "max")).reset_index()
    for _, r in summary.iterrows():
        ax.errorbar(r["x"], r["y"], xerr=[[r["x"] - r["x_lo"]], [r["x_hi"] - r["x"]]],
                    yerr=[[r["y"] - r["y_lo"]], [r["y_hi"] - r["y"]]], color=style.color[r["label"]],
                    marker=FORMAT_MARKERS.get(r["format"], "o"), markersize=7, markeredgecolor="black",
                    markeredgewidth=0.5, elinewidth=0.8, capsize=2, linestyle="none")
    ax.set_yscale("log")
    ax.set_xlim(left=0)
    ax.set_xlabel("TFLOP/s (median over shapes; bars: min..max)")
    ax.set_ylabel("relative L2 error vs unquantized fp64 (median; bars: min..max)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("Accuracy against speed, per format and backend")
    _legend(fig, style, summary["label"], format_markers=summary["format"])
    shapes = ", ".join(f"{fmt} {len(g[SHAPE_COLUMNS].drop_duplicates())}" for fmt, g in rows.groupby("format"))
    _footer(fig, [f"One point per (backend, format), over the shapes every backend of the format passed ({shapes}); "
                  "colour: backend, marker: format.",
                  environment_caption(rows), not_drawn_note(df)])
    return fig


def fig_roofline(df: pd.DataFrame, style: Style) -> Figure:
    rows = roofline_data(df)
    measured = df[df["ceiling_tflops"] > 0]
    compute = measured[~measured["ceiling"].isin(BANDWIDTH_CEILINGS)].groupby("ceiling")["ceiling_tflops"].median()
    bandwidth = measured[measured["ceiling"] == "dram"]["ceiling_tflops"].median()  # the copy ceiling, as drawn
    if rows.empty:
        raise NothingToDraw("no passing rows")
    if compute.empty:
        raise NothingToDraw("no measured compute ceiling (ceiling_tflops) in the rows")
    fig = Figure(figsize=(8.5, 5.2), layout="constrained")
    ax = fig.subplots()
    for (label, fmt), group in rows.groupby(["label", "format"]):
        ax.scatter(group["intensity"], group["tflops"], color=style.color[label],
                   marker=FORMAT_MARKERS.get(fmt, "o"), s=22, edgecolors="black", linewidths=0.3, zorder=3)
    x_lo, x_hi = rows["intensity"].min() / 4, rows["intensity"].max() * 2
    if pd.notna(bandwidth):
        x_lo = min(x_lo, compute.max() / bandwidth / 4)
    # Ceilings within 2% of each other (mma.sync bf16 and fp16) share one line and one label.
    merged: list[tuple[list[str], float]] = []
    for name, value in compute.sort_values().items():
        if merged and value / merged[-1][1] < 1.02:
            merged[-1][0].append(name)
        else:
            merged.append(([name], value))
    for k, (names, value) in enumerate(merged):
        ax.axhline(value, color="0.35", linestyle=":", linewidth=1)
        # A label goes under its line when the next ceiling is close enough for the two labels to
        # collide, and neighbouring labels alternate between the left and the right edge.
        below = k + 1 < len(merged) and merged[k + 1][1] / value < 1.25
        right = k % 2 == 1
        ax.text(x_hi / 1.1 if right else x_lo * 1.1, value * (0.97 if below else 1.03),
                f"{' / '.join(names)}: {value:.0f} TFLOP/s", fontsize=8, color="0.25",
                va="top" if below else "bottom", ha="right" if right else "left")
    if pd.notna(bandwidth):
        xs = np.geomspace(x_lo, compute.max() / bandwidth, 50)
        ax.plot(xs, bandwidth * xs, color="0.35", linestyle="-.", linewidth=1)
        ax.text(xs[-1] * 0.8, bandwidth * xs[-1] * 0.93, f"dram {bandwidth:.2f} TB/s", fontsize=8, color="0.25",
                ha="right", va="top")
        memory = f"Memory roof: measured dram {bandwidth:.2f} TB/s."
    else:
        memory = "No memory roof: the rows record no measured bandwidth ceiling (named dram)."
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(top=compute.max() * 1.6)
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))  # plain numbers, not 6x10^2
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.set_xlabel("arithmetic intensity (FLOP / byte of q, k, v read once and out written once)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    ax.set_title("Roofline: achieved rate against the measured ceilings")
    _legend(fig, style, rows["label"], format_markers=rows["format"])
    _footer(fig, [memory + " Bytes per element: 2 (bf16/fp16), 1 (fp8/mxfp8), 0.5 (nvfp4), scales ignored; "
                  "quantized formats write a bf16 output.", environment_caption(rows), not_drawn_note(df)])
    return fig


def _panel_row(panels: int, width: float) -> tuple[Figure, list]:
    """A figure of `panels` panels side by side, `width` inches each, sharing one y axis."""
    fig = Figure(figsize=(width * panels, 3.6), layout="constrained")
    return fig, fig.subplots(1, panels, squeeze=False, sharey=True)[0]


def fig_decode_bandwidth(df: pd.DataFrame) -> Figure:
    """Figure 6: decode bandwidth (K and V bytes per second) against the KV cache's size, one panel per
    GQA group, one line per backend; the copy ceiling measured in the same run dashed."""
    rows = decode_data(df)
    if rows.empty:
        raise NothingToDraw("no passing Sq = 1 rows in the decode data")
    style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    groups = sorted(rows["group"].unique())
    fig, axes = _panel_row(len(groups), 4.2)
    ceilings = df[(df["backend"] == "ceiling") & (df["variant"].isin(BANDWIDTH_CEILINGS))]
    for ax, group in zip(axes, groups):
        panel = rows[rows["group"] == group]
        for label in style.ordered(panel["label"]):
            line = panel[panel["label"] == label].groupby("kv_gb", as_index=False)["tbps"].max()
            ax.plot(line["kv_gb"], line["tbps"], color=style.color[label], marker=style.marker[label],
                    linestyle="--" if style.family[label] == "peer" else "-", linewidth=1.2, markersize=4)
            eager = panel[(panel["label"] == label) & panel["eager"]]
            ax.plot(eager["kv_gb"], eager["tbps"], linestyle="none", marker=style.marker[label], markersize=4,
                    color=style.color[label], markerfacecolor="white")
        for _, ceiling in ceilings.iterrows():
            ax.axhline(ceiling["ceiling_tflops"], color="0.4", linestyle="--", linewidth=1)
            what = "read" if ceiling["variant"].endswith(".read") else "copy"
            ax.annotate(f"DRAM {what}", (1, ceiling["ceiling_tflops"]), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=7, color="0.3")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(bottom=0)
        ax.set_title(f"{int(panel['heads_q'].iloc[0])} query heads / {int(panel['heads_q'].iloc[0] // group)} KV heads",
                     fontsize=9)
        ax.set_xlabel("KV cache read per step (GB)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("TB/s (K and V bytes / time)")
    _legend(fig, style, rows["label"])
    timing = "CUDA-graph replays, median"
    if rows["eager"].any():
        timing += "; hollow: eager timing (its graph replay did not reproduce its output; host launch time included)"
    _footer(fig, [environment_caption(rows), f"bf16 d128, Sq = 1, contiguous cache; {timing}"])
    return fig


def fig_decode_cuda_vs_triton(df: pd.DataFrame) -> Figure:
    """Figure 9: where custom CUDA wins at decode: triton:decode / cuda:decode time per (batch, cache length),
    one panel per GQA group, the colour scale of figure 3."""
    table = decode_cuda_triton_ratio(df)
    if table.empty:
        raise NothingToDraw("no decode case with graph-timed rows from both cuda:decode and triton:decode")
    groups = sorted(table["group"].unique())
    low, high = RATIO_COLOR_RANGE
    norm = TwoSlopeNorm(vmin=low, vcenter=1.0, vmax=high)
    fig = Figure(figsize=(3.6 * len(groups) + 1.2, 3.2), layout="constrained")
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for ax, group in zip(axes, groups):
        cells = table[table["group"] == group]
        _ratio_heatmap(ax, cells.pivot(index="batch", columns="seqlen_k", values="ratio"), norm,
                       "cache length (keys)", "batch")
        heads_q = int(cells["heads_q"].iloc[0])
        ax.set_title(f"{heads_q} query heads / {heads_q // int(group)} KV heads", fontsize=10)
    colorbar = fig.colorbar(axes[0].collections[0], ax=axes, shrink=0.8, label="triton:decode / cuda:decode time")
    colorbar.ax.minorticks_off()
    fig.suptitle("Where custom CUDA wins at decode: > 1 (red) CUDA faster, < 1 (blue) Triton faster")
    drawn = decode_data(df)
    drawn = drawn[drawn["label"].isin(["cuda:decode", "triton:decode"])]
    _footer(fig, [environment_caption(drawn), "bf16 d128, Sq = 1, contiguous cache; CUDA-graph replays, median; "
                  "blank cells: no such case in the sweep"])
    return fig


def fig_local(df: pd.DataFrame) -> Figure:
    """Figure 7: local attention's FLOP rate on the FLOPs done against the window (keys left of the diagonal), one
    panel per head_dim, one line per backend that takes windows; each backend's dense causal rate dotted."""
    rows = local_data(df)
    windowed = rows[rows["window_left"] >= 0]
    if windowed.empty:
        raise NothingToDraw("no passing windowed causal rows in the local data")
    style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    dims = sorted(windowed["head_dim"].unique())
    fig, axes = _panel_row(len(dims), 4.0)
    for ax, head_dim in zip(axes, dims):
        panel = rows[rows["head_dim"] == head_dim]
        for label in style.ordered(panel["label"]):
            mine = panel[panel["label"] == label]
            line = mine[mine["window_left"] >= 0].groupby("window_left", as_index=False)["tflops"].max()
            if not line.empty:
                ax.plot(line["window_left"], line["tflops"], color=style.color[label], marker=style.marker[label],
                        linewidth=1.2, markersize=4)
            dense = mine[mine["window_left"] < 0]
            if not dense.empty:
                ax.axhline(dense["tflops"].max(), color=style.color[label], linestyle=":", linewidth=1.2)
        sizes = sorted(windowed["window_left"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [seqlen_tick(w) for w in sizes])
        ax.xaxis.set_minor_formatter(NullFormatter())
        keys = "/".join(seqlen_tick(k) for k in sorted(panel["seqlen_k"].unique()))
        ax.set_title(f"d{int(head_dim)}, causal, {keys} keys", fontsize=9)
        ax.set_xlabel("window (keys left of the diagonal)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylim(0, 1.08 * rows["tflops"].max())  # (shared by every panel)
    axes[0].set_ylabel("TFLOP/s on the FLOPs done")
    _legend(fig, style, rows["label"])
    _footer(fig, [environment_caption(rows), "bf16, one sequence per batch; dotted: the backend's dense causal rate; "
                  "CUDA-graph replays, median"])
    return fig


def fig_varlen(df: pd.DataFrame) -> Figure:
    """Figure 8: packed variable-length batches, TFLOP/s on the packed batch's FLOPs, one panel per head_dim, bars
    per (length mix, mask) and backend; padded rows hatched."""
    rows = varlen_data(df)
    if rows.empty:
        raise NothingToDraw("no passing packed-batch rows in the varlen data")
    style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    labels = style.ordered(rows["label"])
    mixes = mix_order(rows)
    groups = [(mix, causal) for mix in mixes for causal in (True, False)]
    dims = sorted(rows["head_dim"].unique())
    fig, axes = _panel_row(len(dims), 5.2)
    width = 0.8 / len(labels)
    for ax, head_dim in zip(axes, dims):
        panel = rows[rows["head_dim"] == head_dim]
        for i, label in enumerate(labels):
            mine = panel[panel["label"] == label]
            heights = [mine[(mine["lengths"] == mix) & (mine["causal"] == causal)]["tflops"].max()
                       for mix, causal in groups]
            ax.bar(np.arange(len(groups)) + (i - (len(labels) - 1) / 2) * width, np.nan_to_num(heights), width,
                   color=style.color[label], hatch="//" if label.endswith("(padded)") else None,
                   edgecolor="white", linewidth=0.5, label=label)
        ax.set_xticks(np.arange(len(groups)), [f"{mix}\n{'causal' if causal else 'full'}" for mix, causal in groups],
                      fontsize=8)
        ax.set_title(f"d{int(head_dim)}, {int(panel['heads_q'].iloc[0])} heads", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("TFLOP/s on the packed batch's FLOPs")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside upper center", ncol=min(len(names), 4), fontsize=8, frameon=False)
    _footer(fig, [environment_caption(rows), "bf16, 65536 tokens per batch; longtail: log-normal lengths around 2k "
                  "with one 16k, uniform: 1..4k, equal: 16 x 4096; padded: the dense kernel on the batch padded to "
                  "the longest sequence, credited only the packed FLOPs; CUDA-graph replays, median"])
    return fig


MLA_CEILINGS = {"tbps": ("dram.read",), "tflops": ("wgmma.bf16", "mma.sync.bf16")}  # figure 10's dashed lines


def fig_mla(df: pd.DataFrame) -> Figure:
    """Figure 10: MLA decode, one column per query-head count: the latent cache's bytes per second (top) and
    TFLOP/s (bottom) against the bytes a step reads, one line per backend (Sq = 1; Sq = 2 causal as hollow
    markers), the read and the bf16 MMA ceilings measured in the same run dashed."""
    rows = mla_data(df)
    if rows.empty:
        raise NothingToDraw("no passing MLA decode rows (packing latent) in the mla data")
    style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    heads = sorted(rows["heads_q"].unique())
    fig = Figure(figsize=(4.0 * len(heads), 6.4), layout="constrained")
    axes = fig.subplots(2, len(heads), squeeze=False, sharex="col", sharey="row")
    ceilings = df[df["backend"] == "ceiling"]
    for col, count in enumerate(heads):
        panel = rows[rows["heads_q"] == count]
        for row, (metric, names) in enumerate(MLA_CEILINGS.items()):
            ax = axes[row][col]
            for label in style.ordered(panel["label"]):
                mine = panel[panel["label"] == label]
                one = mine[mine["seqlen_q"] == 1].groupby("cache_gb", as_index=False)[metric].max()
                ax.plot(one["cache_gb"], one[metric], color=style.color[label], marker=style.marker[label],
                        linewidth=1.2, markersize=4)
                more = mine[mine["seqlen_q"] > 1]
                ax.plot(more["cache_gb"], more[metric], linestyle="none", marker=style.marker[label], markersize=5,
                        color=style.color[label], markerfacecolor="white")
            for name in names:
                value = ceilings.loc[ceilings["variant"] == name, "ceiling_tflops"]
                if not value.empty:
                    ax.axhline(value.max(), color="0.4", linestyle="--", linewidth=1)
                    ax.annotate(name, (1, value.max()), xycoords=("axes fraction", "data"), ha="right",
                                va="bottom", fontsize=7, color="0.3")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_ylim(bottom=0)
            ax.grid(True, which="major", alpha=0.3)
            if row == 0:
                ax.set_title(f"{int(count)} query heads, one latent head", fontsize=9)
            else:
                ax.set_xlabel("latent cache read per step (GB)")
    axes[0][0].set_ylabel("TB/s (latent cache bytes / time)")
    axes[1][0].set_ylabel("TFLOP/s (2 Hq Sq L (576 + 512))")
    _legend(fig, style, rows["label"])
    timing = "CUDA-graph replays, median"
    if rows["eager"].any():
        timing += "; some rows eager (host launch time included)"
    _footer(fig, [environment_caption(rows), f"bf16, Q/K 576, V its first 512 columns, pages of "
                  f"{'/'.join(sorted(set(rows['page_size'].astype(str))))} keys; hollow: Sq = 2 causal; {timing}"])
    return fig


# ---------------------------------------------------------------- driver

SWEEP_FOLDERS = ("decode", "local", "varlen", "mla", "headdims")  # figures/data's subfolders, a sweep each


def _gpu_slug(gpu: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu.replace("NVIDIA ", "").lower()).strip("-")


def fig_headdims(df: pd.DataFrame) -> Figure:
    """Figure 11: TFLOP/s (on the head dims asked for) against the head_dim, one panel per mask, one line per
    backend; the head dims cuda:hopper has kernels for marked on the axis."""
    rows = headdims_data(df)
    if rows.empty or rows["dims"].nunique() < 2:
        raise NothingToDraw("no passing dense rows at two or more head dims in the headdims data")
    style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    order = rows.drop_duplicates("dims").sort_values(["width", "head_dim"])["dims"].tolist()
    position = {d: i for i, d in enumerate(order)}
    masks = sorted(rows["causal"].unique())
    fig, axes = _panel_row(len(masks), 5.0)
    for ax, causal in zip(axes, masks):
        panel = rows[rows["causal"] == causal]
        for label in style.ordered(panel["label"]):
            line = panel[panel["label"] == label].groupby("dims")["tflops"].max()
            xs = sorted(line.index, key=position.get)
            ax.plot([position[x] for x in xs], [line[x] for x in xs], color=style.color[label],
                    marker=style.marker[label], linewidth=1.2, markersize=4)
        ax.set_xticks(range(len(order)), [d + ("*" if d in OWN_KERNEL_DIMS else "") for d in order])
        shape = panel.iloc[0]
        ax.set_title(f"{'causal' if causal else 'non-causal'}, b{int(shape['batch'])} h{int(shape['heads_q'])}, "
                     f"{seqlen_tick(shape['seqlen_q'])} tokens each", fontsize=9)
        ax.set_xlabel("head_dim (Q/K, or Q/K / V)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylim(0, 1.08 * rows["tflops"].max())
    axes[0].set_ylabel("TFLOP/s on the head dims asked for")
    _legend(fig, style, rows["label"])
    _footer(fig, [environment_caption(rows), "bf16; *: a cuda:hopper kernel of its own, the others run on the next "
                  f"of {' / '.join(map(str, KERNEL_HEAD_DIMS))} with zero columns; CUDA-graph replays, median"])
    return fig


def fig_beyond_prefill(local: pd.DataFrame, varlen: pd.DataFrame, headdims: pd.DataFrame, mla: pd.DataFrame) -> Figure:
    """Figure 12: where custom CUDA wins beyond dense prefill, one panel per sweep (beyond_prefill_ratios), the colour
    scale of figure 3; decode has its own map (figure 9)."""
    panels = beyond_prefill_ratios(local, varlen, headdims, mla)
    if not panels:
        raise NothingToDraw("no sweep beyond dense prefill has passing rows from both a CUDA and a Triton backend")
    low, high = RATIO_COLOR_RANGE
    norm = TwoSlopeNorm(vmin=low, vcenter=1.0, vmax=high)
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(6.4 * ncols + 1.0, 3.4 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, (title, grid, xlabel, ylabel) in zip(axes.flat, panels):
        _ratio_heatmap(ax, grid, norm, xlabel, ylabel, named=True)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(title, fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    colorbar = fig.colorbar(axes.flat[0].collections[0], ax=axes, shrink=0.6, label="best CUDA / best Triton speed")
    colorbar.ax.minorticks_off()
    fig.suptitle("Where custom CUDA wins beyond dense prefill: > 1 (red) CUDA faster, < 1 (blue) Triton faster")
    drawn = pd.concat([local, varlen, headdims, mla])
    drawn = passed(drawn[drawn["family"].isin(["cuda", "triton"])])
    _footer(fig, [environment_caption(drawn), "bf16; best passing variant of each family per case (same FLOPs: the "
                  f"time ratio); the colour scale of figure 3 ({low:.2f} to {high:.2f}), cells beyond it take the end "
                  "colour; blank: one side has no passing row. Decode: figure 9."])
    return fig


def generate(data_dir: Path = REPO_ROOT / "figures" / "data", out_dir: Path = REPO_ROOT / "figures",
             reference_dir: Path = REPO_ROOT / "figures" / "reference", log=print) -> list[Path]:
    """Draw every figure the data supports into `out_dir` (PNG and PDF); returns the files written."""
    with matplotlib.style.context("default"):
        return _generate(data_dir, out_dir, reference_dir, log)


def _generate(data_dir: Path, out_dir: Path, reference_dir: Path, log) -> list[Path]:
    df = load_results(data_dir)
    cpu = df["gpu"] == "cpu"
    if cpu.any():
        log(f"ignoring {int(cpu.sum())} row(s) measured on a CPU: the figures compare GPU kernels")
        df = df[~cpu]
    if df.empty:
        log(f"no GPU results under {data_dir}: nothing to draw")
        return []
    style = Style(df)
    gpus = sorted(df["gpu"].unique())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    sweeps = {name: load_results(Path(data_dir) / name) if (Path(data_dir) / name).is_dir() else df.iloc[0:0]
              for name in SWEEP_FOLDERS}
    for gpu in gpus:
        rows = df[df["gpu"] == gpu]
        decode_rows, local_rows, varlen_rows, mla_rows, headdims_rows = (
            sweeps[name][sweeps[name]["gpu"] == gpu] for name in SWEEP_FOLDERS)
        suffix = "" if len(gpus) == 1 else "-" + _gpu_slug(gpu)
        makers = {
            "fig1_tflops_vs_seqlen": lambda: fig_tflops_vs_seqlen(rows, style),
            "fig2_ladder": lambda: fig_ladder(rows, style, reference_dir),
            "fig3_cuda_vs_triton": lambda: fig_cuda_vs_triton(rows),
            "fig4_accuracy_vs_speed": lambda: fig_accuracy(rows, style),
            "fig5_roofline": lambda: fig_roofline(rows, style),
            "fig6_decode_bandwidth": lambda: fig_decode_bandwidth(decode_rows),
            "fig7_local_attention": lambda: fig_local(local_rows),
            "fig8_varlen": lambda: fig_varlen(varlen_rows),
            "fig9_decode_cuda_vs_triton": lambda: fig_decode_cuda_vs_triton(decode_rows),
            "fig10_mla_decode": lambda: fig_mla(mla_rows),
            "fig11_head_dims": lambda: fig_headdims(headdims_rows),
            "fig12_cuda_vs_triton_beyond_prefill": lambda: fig_beyond_prefill(local_rows, varlen_rows, headdims_rows,
                                                                              mla_rows),
            "figA1_tflops_grid": lambda: fig_tflops_grid(rows, style),
        }
        for name, make in makers.items():
            try:
                fig = make()
            except NothingToDraw as reason:
                log(f"skip {name}{suffix}: {reason}")
                continue
            for ext in ("png", "pdf"):
                path = out_dir / f"{name}{suffix}.{ext}"
                fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata=SAVE_METADATA[ext])
                written.append(path)
    return written


def main(data_dir: Path = REPO_ROOT / "figures" / "data", out_dir: Path = REPO_ROOT / "figures",
         reference_dir: Path = REPO_ROOT / "figures" / "reference") -> list[Path]:
    written = generate(data_dir, out_dir, reference_dir)
    print(f"wrote {len(written)} file(s)" + "".join(f"\n  {p}" for p in written))
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=REPO_ROOT / "figures" / "data",
                        help="folder of results CSVs (its own files only, not subfolders)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures", help="where PNG and PDF files go")
    parser.add_argument("--reference", type=Path, default=REPO_ROOT / "figures" / "reference",
                        help=f"folder holding {FOUNDING_REFERENCE}")


def run(args: argparse.Namespace) -> int:
    if not args.data.is_dir():
        raise ValueError(f"no results folder {args.data}")
    main(args.data, args.out, args.reference)
    return 0
