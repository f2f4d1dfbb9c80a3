"""The paper figures, regenerated from the committed result CSVs alone (no GPU; torch is not imported).

``generate()`` reads every CSV directly in ``figures/data/`` (the schema of ``compare.bench``; the decode, local,
varlen, MLA and head-dim sweeps' in ``decode/``, ``local/``, ``varlen/``, ``mla/`` and ``headdims/``), keeps the
newest row per (gpu, case), and draws eleven figures and one appendix figure, each as PNG and PDF:

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

from .schema import CASE_COLUMNS, EAGER, LATER_CASE_COLUMNS

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_FOR_CAPTION = ["gpu", "driver", "cuda", "torch", "triton"]
REQUIRED_COLUMNS = (["timestamp", "git_commit"] + ENV_FOR_CAPTION
                    + [c for c in CASE_COLUMNS if c not in LATER_CASE_COLUMNS]
                    + ["ms_p20", "ms_p50", "ms_p80", "tflops", "ceiling", "ceiling_tflops", "pct_sol",
                       "rel_l2_unquantized", "oracle"])
# The same measurement recorded by several runs (other commits or versions): the newest one is drawn.
DEDUP_KEY = ["gpu"] + CASE_COLUMNS
NUMERIC = ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "head_dim_v", "window_left",
           "window_right", "softcap", "ms_p20", "ms_p50", "ms_p80", "tflops", "ceiling_tflops", "pct_sol",
           "rel_l2_unquantized"]

GRID_TOKENS = 16384  # the paper sweep keeps batch * seqlen fixed so every point does the same work per token
FOUNDING_SHAPE = dict(batch=1, heads_q=8, heads_kv=8, seqlen_q=4096, seqlen_k=8192, head_dim=128, causal=False)
FOUNDING_FORMAT = "bf16"
FOUNDING_REFERENCE = "rtx5090-founding-ladder.csv"
FORMAT_ORDER = ["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]
FORMAT_MARKERS = {"bf16": "o", "fp16": "s", "fp8": "^", "mxfp8": "D", "nvfp4": "v"}
# Bytes per stored element; block scales are ignored. Quantized formats write a bf16 output.
ELEMENT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}
OUTPUT_BYTES = {"fp16": 2.0, "fp32": 4.0}  # every other format writes bf16
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

# Figure 1 (the headline): head_dim and formats of its panels, each causal and not.
HEADLINE_HEAD_DIM = 128
HEADLINE_FORMATS = ("bf16", "fp8")
# Okabe-Ito colours (told apart also by colour-blind readers), a few per family, handed out in order.
HEADLINE_COLORS = {"cuda": ["#D55E00", "#E69F00", "#882255"], "triton": ["#0072B2", "#009E73", "#56B4E9"],
                   "peer": ["#000000", "#8C8C8C", "#CC79A7"]}
# Figure 3: the ratio's colour scale, centred on 1.0; ratios outside it take the end colours (the cells are
# annotated with their value), so that 1.0-1.2 differences stay visible beside ratios of 3.
RATIO_COLOR_RANGE = (0.8, 1.25)


class NothingToDraw(Exception):
    """A figure has no rows to draw; the message says which rows it needed."""


# ---------------------------------------------------------------- data

def load_results(data_dir: Path) -> pd.DataFrame:
    """Every results CSV directly in `data_dir` (not its subfolders: figures/data/paired holds the side-by-side
    runs the report reads), typed, newest row per (gpu, case), with a `label` column."""
    paths = sorted(Path(data_dir).glob("*.csv"))
    frames = []
    for path in paths:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{path} is not a compare.bench results CSV: missing columns {missing}")
        for column, default in LATER_CASE_COLUMNS.items():  # a CSV from before the column: its dense meaning
            if column not in frame.columns:
                frame[column] = frame["head_dim"] if default is None else default
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=REQUIRED_COLUMNS + list(LATER_CASE_COLUMNS) + ["label"])
    df = pd.concat(frames, ignore_index=True)
    for column in NUMERIC:
        df[column] = pd.to_numeric(df[column].replace("", np.nan), errors="coerce")
    df["causal"] = df["causal"].str.lower().map({"true": True, "false": False})
    df["time"] = pd.to_datetime(df["timestamp"], utc=True, errors="coerce")
    df = df.sort_values("time", kind="stable").drop_duplicates(DEDUP_KEY, keep="last")
    df["label"] = df["backend"] + ":" + df["variant"]
    return df.reset_index(drop=True)


def passed(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that may be drawn as speeds: oracle passed and a positive rate was recorded."""
    return df[(df["oracle"] == "pass") & (df["tflops"] > 0)]


def grid_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The 16k-token sweep grid: seqlen_q == seqlen_k and batch * seqlen == 16384."""
    return df[(df["seqlen_q"] == df["seqlen_k"]) & (df["batch"] * df["seqlen_q"] == GRID_TOKENS)]


def seqlen_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 1 draws."""
    return passed(grid_rows(df))


def founding_rows(df: pd.DataFrame) -> pd.DataFrame:
    mask = df["format"] == FOUNDING_FORMAT
    for column, value in FOUNDING_SHAPE.items():
        mask &= df[column] == value
    return df[mask]


def ladder_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 2 draws (this run's side)."""
    return passed(founding_rows(df))


SHAPE_COLUMNS = ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal"]


def accuracy_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 4 draws: per format, only the shapes that every backend of that format passed, so that
    the medians of different backends are taken over the same work (backends cover different head_dims)."""
    rows = passed(df)
    rows = rows[rows["rel_l2_unquantized"] > 0]
    kept = []
    for _, group in rows.groupby("format"):
        per_backend = [set(map(tuple, g[SHAPE_COLUMNS].values)) for _, g in group.groupby("label")]
        common = set.intersection(*per_backend)
        kept.append(group[[tuple(v) in common for v in group[SHAPE_COLUMNS].values]])
    return pd.concat(kept) if kept else rows


def roofline_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 5 draws, with the arithmetic intensity of each row."""
    rows = passed(df)
    rows = rows[rows["format"].isin(list(ELEMENT_BYTES))]
    return rows.assign(intensity=arithmetic_intensity(rows))


def tflops_bounds(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """TFLOP/s at the p80 and p20 times: the same work divided by the slower and faster launch."""
    return df["tflops"] * df["ms_p50"] / df["ms_p80"], df["tflops"] * df["ms_p50"] / df["ms_p20"]


def family_best(rows: pd.DataFrame, cells: list[str]) -> pd.DataFrame:
    """The best CUDA and the best Triton TFLOP/s of `rows` per `cells` (columns "cuda", "triton"; NaN where a family
    has no row)."""
    best = rows[rows["family"].isin(["cuda", "triton"])].pivot_table(
        index=cells, columns="family", values="tflops", aggfunc="max")
    return best.reindex(columns=["cuda", "triton"])


def cuda_triton_ratio(df: pd.DataFrame) -> pd.DataFrame:
    """Best CUDA over best Triton TFLOP/s per (format, causal, head_dim, seqlen) of the grid, among rows that
    passed the oracle. A cell holds a ratio only when both families have a passing row there (else NaN)."""
    best = family_best(passed(grid_rows(df)), ["format", "causal", "head_dim", "seqlen_q"])
    best["ratio"] = best["cuda"] / best["triton"]
    return best.reset_index().rename(columns={"seqlen_q": "seqlen", "cuda": "best_cuda", "triton": "best_triton"})


def arithmetic_intensity(df: pd.DataFrame) -> pd.Series:
    """FLOP per byte of minimal traffic: q, k, v read once and the output written once. The FLOPs are the
    driver's exact count (tflops x median time) so causal masks and tails count as the driver counted them."""
    element = df["format"].map(ELEMENT_BYTES)
    out = df["format"].map(OUTPUT_BYTES).fillna(2.0)
    q_and_out = df["batch"] * df["heads_q"] * df["seqlen_q"] * df["head_dim"]
    k_and_v = 2 * df["batch"] * df["heads_kv"] * df["seqlen_k"] * df["head_dim"]
    total_bytes = q_and_out * (element + out) + k_and_v * element
    flop = df["tflops"] * df["ms_p50"] * 1e9
    return flop / total_bytes


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


def not_drawn_note(selection: pd.DataFrame) -> str:
    """Which rows are missing from the plot and why: rejected by the oracle, or raised (a refused variant)."""
    parts = []
    for status, why in (("fail", "failed the oracle"), ("error", "raised an error")):
        rows = selection[selection["oracle"] == status]
        if len(rows):
            parts.append(f"{len(rows)} row(s) {why} ({', '.join(sorted(rows['label'].unique()))})")
    return "Not shown: " + "; ".join(parts) + "." if parts else ""


def _seqlen_tick(n) -> str:
    n = int(n)  # seqlens arrive as floats from the CSV
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _legend(fig: Figure, style: Style, labels, format_markers=None) -> None:
    """Backend legend right of the axes (never over data). Where the marker encodes the format instead of
    the backend, backends show as colour patches and a second block lists the format markers."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if format_markers is not None:
        handles = [Patch(color=style.color[lab], label=lab) for lab in style.ordered(labels)]
        handles.append(Patch(color="none", label=""))
        handles += [Line2D([], [], color="0.3", marker=FORMAT_MARKERS.get(f, "o"), linestyle="none", label=f)
                    for f in sorted(set(format_markers), key=_format_key)]
    else:
        handles = [Line2D([], [], color=style.color[lab], marker=style.marker[lab], label=lab)
                   for lab in style.ordered(labels)]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5),
               frameon=False, fontsize=8)


# ---------------------------------------------------------------- figures

def headline_panels(df: pd.DataFrame) -> list[tuple[str, float, bool]]:
    """The (format, head_dim, causal) panels of figure 1: HEADLINE_HEAD_DIM (else the head_dim with the most
    rows) and HEADLINE_FORMATS (else the first format measured there), non-causal then causal."""
    rows = seqlen_data(df)
    if rows.empty:
        return []
    head_dims = rows["head_dim"].value_counts()
    head_dim = HEADLINE_HEAD_DIM if HEADLINE_HEAD_DIM in head_dims.index else head_dims.index[0]
    at = rows[rows["head_dim"] == head_dim]
    formats = [f for f in HEADLINE_FORMATS if f in set(at["format"])]
    if not formats:
        formats = sorted(at["format"].unique(), key=_format_key)[:1]
    return [(fmt, head_dim, causal) for fmt in formats for causal in (False, True)]


def headline_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 1 draws: in each headline panel, the fastest CUDA and the fastest Triton variant (highest
    mean TFLOP/s over the seqlens of the panel, among the variants measured at the most seqlens there) and
    every peer. Only rows that passed the oracle count."""
    rows = seqlen_data(df)
    kept = []
    for fmt, head_dim, causal in headline_panels(df):
        panel = rows[(rows["format"] == fmt) & (rows["head_dim"] == head_dim) & (rows["causal"] == causal)]
        chosen = set(panel.loc[panel["family"] == "peer", "label"])
        for family in ("cuda", "triton"):
            mine = panel[panel["family"] == family]
            if mine.empty:
                continue
            score = mine.groupby("label").agg(n=("seqlen_q", "nunique"), mean=("tflops", "mean"))
            score = score[score["n"] == score["n"].max()]
            chosen.add(score["mean"].idxmax())
        kept.append(panel[panel["label"].isin(chosen)])
    return pd.concat(kept) if kept else rows.iloc[:0]


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
            ax.set_xticks(seqlens, [_seqlen_tick(s) for s in seqlens])
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
    formats = sorted(rows["format"].unique(), key=_format_key)
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
    ax.set_xticklabels([str(s) if named else _seqlen_tick(int(s)) for s in grid.columns], rotation=0)
    ax.set_yticklabels([str(v) if named else str(int(v)) for v in grid.index], rotation=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def fig_cuda_vs_triton(df: pd.DataFrame) -> Figure:
    table = cuda_triton_ratio(df)
    table = table[table["ratio"].notna()]
    if table.empty:
        raise NothingToDraw("no grid cell has passing rows from both a CUDA and a Triton backend")
    panels = sorted({(f, c) for f, c in zip(table["format"], table["causal"])}, key=lambda p: (_format_key(p[0]), p[1]))
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


def decode_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 6 draws: passing single-token decode rows, with the K and V bytes they must read once and the
    bandwidth that gives (K and V bytes per second, as the README's decode finding; Q and O add under 1% at the
    sweep's shapes)."""
    rows = passed(df)
    rows = rows[(rows["seqlen_q"] == 1) & rows["format"].isin(list(ELEMENT_BYTES))]
    element = rows["format"].map(ELEMENT_BYTES)
    kv_bytes = 2 * rows["batch"] * rows["heads_kv"] * rows["seqlen_k"] * rows["head_dim"] * element
    return rows.assign(kv_gb=kv_bytes / 1e9, tbps=kv_bytes / (rows["ms_p50"] * 1e-3) / 1e12,
                       group=rows["heads_q"] // rows["heads_kv"],
                       eager=rows["note"].astype(str).str.startswith(EAGER))


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


DECODE_CASE = ["batch", "heads_q", "heads_kv", "seqlen_k"]


def decode_ratio(rows: pd.DataFrame, top: str, bottom: str) -> pd.Series:
    """`bottom`'s median time over `top`'s per single-token decode case of `rows` (passing rows of one decode
    sweep; above 1: `top` is faster), indexed by DECODE_CASE. A case where one side is a graph replay and the other
    an eager timing (host launch time included: at decode sizes most of it) is left out (decode_eager_cases)."""
    one = rows[rows["seqlen_q"] == 1]
    times = one.pivot_table(index=DECODE_CASE, columns="label", values="ms_p50", aggfunc="min")
    if top not in times or bottom not in times:
        return pd.Series(dtype=float)
    ratio = (times[bottom] / times[top]).dropna()
    return ratio.drop(decode_eager_cases(rows, top, bottom), errors="ignore")


def decode_eager_cases(rows: pd.DataFrame, top: str, bottom: str) -> pd.Index:
    """Single-token decode cases where exactly one of `top` and `bottom` was timed eagerly."""
    pair = rows[(rows["seqlen_q"] == 1) & rows["label"].isin([top, bottom])]
    eager = pair.assign(eager=pair["note"].astype(str).str.startswith(EAGER)).pivot_table(
        index=DECODE_CASE, columns="label", values="eager", aggfunc="max")
    if top not in eager or bottom not in eager:
        return pd.Index([])
    return eager.index[(eager[top] != eager[bottom]) & eager[top].notna() & eager[bottom].notna()]


def decode_cuda_triton_ratio(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 9 draws: decode_ratio of cuda:decode against triton:decode (triton's time over cuda's; above 1:
    CUDA faster) on figure 6's rows, with each case's GQA group."""
    ratio = decode_ratio(decode_data(df), "cuda:decode", "triton:decode")
    if ratio.empty:
        return pd.DataFrame(columns=[*DECODE_CASE, "ratio", "group"])
    ratio = ratio.rename("ratio").reset_index()
    return ratio.assign(group=ratio["heads_q"] // ratio["heads_kv"])


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


def local_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 7 draws: passing causal rows of the local sweep without a cap, windowed (window_left >= 0) and
    dense (the reference each windowed line is read against)."""
    rows = passed(df)
    return rows[rows["causal"] & (rows["softcap"] == 0) & (rows["window_right"] < 0)]


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
        ax.set_xticks(sizes, [_seqlen_tick(w) for w in sizes])
        ax.xaxis.set_minor_formatter(NullFormatter())
        keys = "/".join(_seqlen_tick(k) for k in sorted(panel["seqlen_k"].unique()))
        ax.set_title(f"d{int(head_dim)}, causal, {keys} keys", fontsize=9)
        ax.set_xlabel("window (keys left of the diagonal)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylim(0, 1.08 * rows["tflops"].max())  # (shared by every panel)
    axes[0].set_ylabel("TFLOP/s on the FLOPs done")
    _legend(fig, style, rows["label"])
    _footer(fig, [environment_caption(rows), "bf16, one sequence per batch; dotted: the backend's dense causal rate; "
                  "CUDA-graph replays, median"])
    return fig


def varlen_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 8 draws: passing packed-batch rows without a window or cap, labelled by backend and packing (a
    padded row is the backend's dense call on the batch padded to the longest sequence)."""
    rows = passed(df)
    rows = rows[(rows["lengths"] != "") & (rows["window_left"] < 0) & (rows["softcap"] == 0)]
    return rows.assign(label=rows["label"] + np.where(rows["packing"] == "padded", " (padded)", ""))


def fig_varlen(df: pd.DataFrame) -> Figure:
    """Figure 8: packed variable-length batches, TFLOP/s on the packed batch's FLOPs, one panel per head_dim, bars
    per (length mix, mask) and backend; padded rows hatched."""
    rows = varlen_data(df)
    if rows.empty:
        raise NothingToDraw("no passing packed-batch rows in the varlen data")
    style = Style.qualitative(dict(zip(rows["label"], rows["family"])))
    labels = style.ordered(rows["label"])
    mixes = [m for m in ("longtail", "uniform", "equal") if m in set(rows["lengths"])] + sorted(
        set(rows["lengths"]) - {"longtail", "uniform", "equal"})
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


def mla_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 10 draws: passing MLA decode rows (packing "latent"), with the latent cache's bytes a call must
    read (every key row of head_dim columns once: V is a view of K's first columns) and the bandwidth that gives."""
    rows = passed(df)
    rows = rows[(rows["packing"] == "latent") & rows["format"].isin(list(ELEMENT_BYTES))]
    cache_bytes = rows["batch"] * rows["seqlen_k"] * rows["head_dim"] * rows["format"].map(ELEMENT_BYTES)
    notes = rows["note"] if "note" in rows else pd.Series("", index=rows.index)  # (no CSV read: no column)
    return rows.assign(cache_gb=cache_bytes / 1e9, tbps=cache_bytes / (rows["ms_p50"] * 1e-3) / 1e12,
                       eager=notes.astype(str).str.startswith(EAGER))


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


def _format_key(fmt: str):
    return (FORMAT_ORDER.index(fmt) if fmt in FORMAT_ORDER else len(FORMAT_ORDER), fmt)


# ---------------------------------------------------------------- driver

def _gpu_slug(gpu: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu.replace("NVIDIA ", "").lower()).strip("-")


KERNEL_HEAD_DIMS = (64, 80, 96, 128, 192, 256)  # the head dims cuda:hopper has kernels for; the others run on the next


def headdims_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 11 draws: passing dense rows of the headdims sweep, with `dims`, the x tick ('96', '192/128')."""
    rows = passed(df)
    rows = rows[(rows["lengths"] == "") & (rows["window_left"] < 0) & (rows["softcap"] == 0)]
    v = rows["head_dim_v"].fillna(rows["head_dim"]).astype(int)
    dims = rows["head_dim"].astype(int).astype(str) + np.where(v != rows["head_dim"], "/" + v.astype(str), "")
    return rows.assign(dims=dims, width=np.maximum(rows["head_dim"], v))


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
        ax.set_xticks(range(len(order)), [d + ("*" if d in map(str, KERNEL_HEAD_DIMS) else "") for d in order])
        shape = panel.iloc[0]
        ax.set_title(f"{'causal' if causal else 'non-causal'}, b{int(shape['batch'])} h{int(shape['heads_q'])}, "
                     f"{_seqlen_tick(shape['seqlen_q'])} tokens each", fontsize=9)
        ax.set_xlabel("head_dim (Q/K, or Q/K / V)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylim(0, 1.08 * rows["tflops"].max())
    axes[0].set_ylabel("TFLOP/s on the head dims asked for")
    _legend(fig, style, rows["label"])
    _footer(fig, [environment_caption(rows), "bf16; *: a cuda:hopper kernel of its own, the others run on the next "
                  f"of {' / '.join(map(str, KERNEL_HEAD_DIMS))} with zero columns; CUDA-graph replays, median"])
    return fig


def _best_ratio(rows: pd.DataFrame, index, columns) -> pd.DataFrame:
    """Best CUDA over best Triton TFLOP/s (the same FLOPs: the time ratio) per (index, columns) cell of `rows`, NaN
    where one family has no row; `index` and `columns` name columns of `rows` (a cell's labels)."""
    best = family_best(rows, [index, columns])
    return (best["cuda"] / best["triton"]).unstack(columns)


def _dims_order(rows: pd.DataFrame) -> list[str]:
    """The 'd64', 'd128', ... row labels of `rows`' head dims, narrowest first."""
    return [f"d{int(d)}" for d in sorted(rows["head_dim"].unique())]


def beyond_prefill_ratios(local: pd.DataFrame, varlen: pd.DataFrame, headdims: pd.DataFrame,
                          mla: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str, str]]:
    """What figure 12 draws: for each sweep beyond dense prefill that has both a CUDA and a Triton row, the best
    CUDA / best Triton speed per case, as (title, grid of ratios with its row and column labels, x label, y label).
    Local: causal windows without a cap per (head_dim, window); varlen: the packed batches (not the padded ones) per
    (head_dim, mix and mask); head dims: per (mask, head dims); MLA decode: per (heads and query tokens, batch and
    cache length)."""
    panels = []
    rows = local_data(local)
    rows = rows[rows["window_left"] >= 0]
    if not rows.empty:
        grid = _best_ratio(rows.assign(row=rows["head_dim"].astype(int).map("d{}".format),
                                       col=rows["window_left"].astype(int)), "row", "col")
        grid = grid.loc[_dims_order(rows)]
        grid.columns = [_seqlen_tick(c) for c in grid.columns]
        keys = "/".join(_seqlen_tick(k) for k in sorted(rows["seqlen_k"].unique()))
        panels.append((f"local attention, causal, {keys} keys", grid, "window (keys left of the diagonal)", "head_dim"))
    rows = varlen_data(varlen)
    rows = rows[rows["packing"] != "padded"]
    if not rows.empty:
        mixes = [m for m in ("longtail", "uniform", "equal") if m in set(rows["lengths"])] + sorted(
            set(rows["lengths"]) - {"longtail", "uniform", "equal"})
        rows = rows.assign(row=rows["head_dim"].astype(int).map("d{}".format),
                           col=rows["lengths"] + np.where(rows["causal"], " causal", " full"))
        grid = _best_ratio(rows, "row", "col")
        order = [f"{m} {c}" for m in mixes for c in ("causal", "full")]
        grid = grid.loc[_dims_order(rows), [c for c in order if c in grid.columns]]
        panels.append(("packed variable-length batches", grid, "length mix, mask", "head_dim"))
    rows = headdims_data(headdims)
    if not rows.empty:
        order = rows.drop_duplicates("dims").sort_values(["width", "head_dim"])["dims"].tolist()
        grid = _best_ratio(rows.assign(row=np.where(rows["causal"], "causal", "full")), "row", "dims")
        panels.append(("head dims, 4 x 4k tokens", grid[[d for d in order if d in grid.columns]],
                       "head_dim (Q/K, or Q/K / V)", "mask"))
    rows = mla_data(mla)
    if not rows.empty:
        rows = rows.sort_values(["heads_q", "seqlen_q", "batch", "seqlen_k"])
        number = lambda column: rows[column].astype(int).astype(str)  # noqa: E731
        rows = rows.assign(row="h" + number("heads_q") + " q" + number("seqlen_q"),
                           col="b" + number("batch") + " " + rows["seqlen_k"].astype(int).map(_seqlen_tick))
        grid = _best_ratio(rows, "row", "col").loc[list(dict.fromkeys(rows["row"])), list(dict.fromkeys(rows["col"]))]
        pages = "/".join(str(int(p)) for p in sorted(rows["page_size"].dropna().unique()))
        panels.append((f"MLA decode, pages of {pages}", grid, "batch, cache length", "query heads, tokens"))
    return [(title, grid, x, y) for title, grid, x, y in panels if grid.notna().any().any()]


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
    decode_dir = Path(data_dir) / "decode"
    decode = load_results(decode_dir) if decode_dir.is_dir() else df.iloc[0:0]
    local_dir = Path(data_dir) / "local"
    local = load_results(local_dir) if local_dir.is_dir() else df.iloc[0:0]
    varlen_dir = Path(data_dir) / "varlen"
    varlen = load_results(varlen_dir) if varlen_dir.is_dir() else df.iloc[0:0]
    mla_dir = Path(data_dir) / "mla"
    mla = load_results(mla_dir) if mla_dir.is_dir() else df.iloc[0:0]
    headdims_dir = Path(data_dir) / "headdims"
    headdims = load_results(headdims_dir) if headdims_dir.is_dir() else df.iloc[0:0]
    for gpu in gpus:
        rows = df[df["gpu"] == gpu]
        decode_rows = decode[decode["gpu"] == gpu]
        local_rows = local[local["gpu"] == gpu]
        varlen_rows = varlen[varlen["gpu"] == gpu]
        mla_rows = mla[mla["gpu"] == gpu]
        headdims_rows = headdims[headdims["gpu"] == gpu]
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
