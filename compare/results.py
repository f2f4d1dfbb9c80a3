"""The committed results CSVs as tables: loading, and the selections and ratios the figures (compare.figures) draw
and the README's findings (compare.report) quote, so that both read the same rows the same way. Torch-free, like
compare.schema: pandas alone.

``load_results`` reads the CSVs directly in one folder (the schema of ``compare.bench``), keeps the newest row per
(gpu, case) and labels each row ``backend:variant``; ``passed`` keeps the rows that may be read as speeds. Each
``*_data`` function is what one figure draws (its docstring says which); the ``*_ratio`` functions are the
same-run ratios both the figures and the findings report.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .schema import CASE_COLUMNS, EAGER, LATER_CASE_COLUMNS

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_COLUMNS = ["gpu", "driver", "cuda", "torch", "triton"]
REQUIRED_COLUMNS = (["timestamp", "git_commit"] + ENV_COLUMNS
                    + [c for c in CASE_COLUMNS if c not in LATER_CASE_COLUMNS]
                    + ["ms_p20", "ms_p50", "ms_p80", "tflops", "ceiling", "ceiling_tflops", "pct_sol",
                       "rel_l2_unquantized", "oracle"])
# The same measurement recorded by several runs (other commits or versions): the newest one is kept.
DEDUP_KEY = ["gpu"] + CASE_COLUMNS
NUMERIC = ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "head_dim_v", "window_left",
           "window_right", "softcap", "ms_p20", "ms_p50", "ms_p80", "tflops", "ceiling_tflops", "pct_sol",
           "rel_l2_unquantized"]
SHAPE_COLUMNS = ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal"]

GRID_TOKENS = 16384  # the paper sweep keeps batch * seqlen fixed so every point does the same work per token
FOUNDING_SHAPE = dict(batch=1, heads_q=8, heads_kv=8, seqlen_q=4096, seqlen_k=8192, head_dim=128, causal=False)
FOUNDING_FORMAT = "bf16"
FORMAT_ORDER = ["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]
# Bytes per stored element; block scales are ignored. Quantized formats write a bf16 output.
ELEMENT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}
OUTPUT_BYTES = {"fp16": 2.0, "fp32": 4.0}  # every other format writes bf16
# Figure 1 (the headline): head_dim and formats of its panels, each causal and not.
HEADLINE_HEAD_DIM = 128
HEADLINE_FORMATS = ("bf16", "fp8")
DECODE_CASE = ["batch", "heads_q", "heads_kv", "seqlen_k"]
CACHE_CASE = ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal", "window_left",
              "window_right"]
KERNEL_HEAD_DIMS = (64, 80, 96, 128, 192, 256)  # the head dims cuda:hopper has kernels for; the others run on the next
KERNEL_PAIRS = ("192/128",)  # Q/K / V pairs cuda:hopper has kernels of their own for (P V at V's width)
# figure 11's `dims` that have a cuda:hopper kernel of their own
OWN_KERNEL_DIMS = frozenset(map(str, KERNEL_HEAD_DIMS)) | frozenset(KERNEL_PAIRS)
LENGTH_MIXES = ("longtail", "uniform", "equal")  # the varlen sweep's length mixes, in the order they are shown


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


def not_drawn_note(selection: pd.DataFrame) -> str:
    """Which rows are missing from the plot and why: rejected by the oracle, or raised (a refused variant)."""
    parts = []
    for status, why in (("fail", "failed the oracle"), ("error", "raised an error")):
        rows = selection[selection["oracle"] == status]
        if len(rows):
            parts.append(f"{len(rows)} row(s) {why} ({', '.join(sorted(rows['label'].unique()))})")
    return "Not shown: " + "; ".join(parts) + "." if parts else ""


def seqlen_tick(n) -> str:
    n = int(n)  # seqlens arrive as floats from the CSV
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def format_key(fmt: str):
    return (FORMAT_ORDER.index(fmt) if fmt in FORMAT_ORDER else len(FORMAT_ORDER), fmt)


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
        formats = sorted(at["format"].unique(), key=format_key)[:1]
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


def ceiling_value(df: pd.DataFrame, name: str) -> float:
    """The measured ceiling `name` (compare.ceilings) of the rows' run, NaN where they hold none."""
    if "backend" not in df or "variant" not in df:
        return float("nan")
    return float(df.loc[(df["backend"] == "ceiling") & (df["variant"] == name), "ceiling_tflops"].max())


def decode_calls(df: pd.DataFrame) -> pd.DataFrame:
    """Passing decode rows of the dense call (attention(), the peers' SDPA): not the KV-cache calls'."""
    rows = passed(df)
    return rows[rows["packing"] == ""] if "packing" in rows else rows


def decode_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 6 draws: passing single-token decode rows of the dense call, with the K and V bytes they must read
    once and the bandwidth that gives (K and V bytes per second, as the README's decode finding; Q and O add under 1%
    at the sweep's shapes)."""
    rows = decode_calls(df)
    rows = rows[(rows["seqlen_q"] == 1) & rows["format"].isin(list(ELEMENT_BYTES))]
    element = rows["format"].map(ELEMENT_BYTES)
    kv_bytes = 2 * rows["batch"] * rows["heads_kv"] * rows["seqlen_k"] * rows["head_dim"] * element
    return rows.assign(kv_gb=kv_bytes / 1e9, tbps=kv_bytes / (rows["ms_p50"] * 1e-3) / 1e12,
                       group=rows["heads_q"] // rows["heads_kv"],
                       eager=rows["note"].astype(str).str.startswith(EAGER))


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


def cache_ratios(df: pd.DataFrame, label: str) -> tuple[dict[int, pd.Series], pd.Series]:
    """`label`'s same-run speed ratios between its KV-cache calls (packing "paged" / "contiguous", compare.cache_sweep)
    on the same case (CACHE_CASE): per page size N, the contiguous cache's time over pages of N keys' (above 1: the
    paged cache is faster), both in q's dtype; and the cache in q's dtype over the e4m3 cache's, the same layout.
    Page sizes without a pair, and an empty e4m3 series, where the run holds none. Graph-timed rows only (an eager
    timing carries the host's launch time)."""
    none = ({}, pd.Series(dtype=float))
    if "packing" not in df:
        return none
    rows = passed(df)
    rows = rows[(rows["label"] == label) & rows["packing"].isin(["paged", "contiguous"])
                & ~rows["note"].astype(str).str.startswith(EAGER)]
    if rows.empty:
        return none
    page = pd.to_numeric(rows["page_size"], errors="coerce").fillna(0).astype(int)  # 0: the contiguous cache
    times = rows.assign(page=page, kv=rows["kv_format"].replace("", "same")).pivot_table(
        index=CACHE_CASE, columns=["page", "kv"], values="ms_p50", aggfunc="min")
    paged = {}
    for size in sorted(p for p, kv in times.columns if p > 0 and kv == "same"):
        if (0, "same") in times:
            paged[size] = (times[(0, "same")] / times[(size, "same")]).dropna()
    fp8 = [(times[(p, "same")] / times[(p, "fp8")]).dropna() for p in dict.fromkeys(times.columns.get_level_values(0))
           if (p, "same") in times and (p, "fp8") in times]
    return ({size: r for size, r in paged.items() if not r.empty},
            pd.concat(fp8) if fp8 else pd.Series(dtype=float))


def local_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 7 draws: passing causal rows of the local sweep without a cap, windowed (window_left >= 0) and
    dense (the reference each windowed line is read against)."""
    rows = passed(df)
    return rows[rows["causal"] & (rows["softcap"] == 0) & (rows["window_right"] < 0)]


def varlen_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 8 draws: passing packed-batch rows without a window or cap, labelled by backend and packing (a
    padded row is the backend's dense call on the batch padded to the longest sequence)."""
    rows = passed(df)
    rows = rows[(rows["lengths"] != "") & (rows["window_left"] < 0) & (rows["softcap"] == 0)]
    return rows.assign(label=rows["label"] + np.where(rows["packing"] == "padded", " (padded)", ""))


def mix_order(rows: pd.DataFrame) -> list[str]:
    """The length mixes of varlen rows: LENGTH_MIXES' order, then any other by name."""
    present = set(rows["lengths"])
    return [m for m in LENGTH_MIXES if m in present] + sorted(present - set(LENGTH_MIXES))


def mla_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 10 draws: passing MLA decode rows (packing "latent"), with the latent cache's bytes a call must
    read (every key row of head_dim columns once: V is a view of K's first columns) and the bandwidth that gives."""
    rows = passed(df)
    rows = rows[(rows["packing"] == "latent") & rows["format"].isin(list(ELEMENT_BYTES))]
    cache_bytes = rows["batch"] * rows["seqlen_k"] * rows["head_dim"] * rows["format"].map(ELEMENT_BYTES)
    notes = rows["note"] if "note" in rows else pd.Series("", index=rows.index)  # (no CSV read: no column)
    return rows.assign(cache_gb=cache_bytes / 1e9, tbps=cache_bytes / (rows["ms_p50"] * 1e-3) / 1e12,
                       eager=notes.astype(str).str.startswith(EAGER))


def headdims_data(df: pd.DataFrame) -> pd.DataFrame:
    """What figure 11 draws: passing dense rows of the headdims sweep, with `dims`, the x tick ('96', '192/128')."""
    rows = passed(df)
    rows = rows[(rows["lengths"] == "") & (rows["window_left"] < 0) & (rows["softcap"] == 0)]
    v = rows["head_dim_v"].fillna(rows["head_dim"]).astype(int)
    dims = rows["head_dim"].astype(int).astype(str) + np.where(v != rows["head_dim"], "/" + v.astype(str), "")
    return rows.assign(dims=dims, width=np.maximum(rows["head_dim"], v))


def best_ratio(rows: pd.DataFrame, index, columns) -> pd.DataFrame:
    """Best CUDA over best Triton TFLOP/s (the same FLOPs: the time ratio) per (index, columns) cell of `rows`, NaN
    where one family has no row; `index` and `columns` name columns of `rows` (a cell's labels)."""
    best = family_best(rows, [index, columns])
    return (best["cuda"] / best["triton"]).unstack(columns)


def dims_order(rows: pd.DataFrame) -> list[str]:
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
        grid = best_ratio(rows.assign(row=rows["head_dim"].astype(int).map("d{}".format),
                                       col=rows["window_left"].astype(int)), "row", "col")
        grid = grid.loc[dims_order(rows)]
        grid.columns = [seqlen_tick(c) for c in grid.columns]
        keys = "/".join(seqlen_tick(k) for k in sorted(rows["seqlen_k"].unique()))
        panels.append((f"local attention, causal, {keys} keys", grid, "window (keys left of the diagonal)", "head_dim"))
    rows = varlen_data(varlen)
    rows = rows[rows["packing"] != "padded"]
    if not rows.empty:
        mixes = mix_order(rows)
        rows = rows.assign(row=rows["head_dim"].astype(int).map("d{}".format),
                           col=rows["lengths"] + np.where(rows["causal"], " causal", " full"))
        grid = best_ratio(rows, "row", "col")
        order = [f"{m} {c}" for m in mixes for c in ("causal", "full")]
        grid = grid.loc[dims_order(rows), [c for c in order if c in grid.columns]]
        panels.append(("packed variable-length batches", grid, "length mix, mask", "head_dim"))
    rows = headdims_data(headdims)
    if not rows.empty:
        order = rows.drop_duplicates("dims").sort_values(["width", "head_dim"])["dims"].tolist()
        grid = best_ratio(rows.assign(row=np.where(rows["causal"], "causal", "full")), "row", "dims")
        panels.append(("head dims, 4 x 4k tokens", grid[[d for d in order if d in grid.columns]],
                       "head_dim (Q/K, or Q/K / V)", "mask"))
    rows = mla_data(mla)
    if not rows.empty:
        rows = rows.sort_values(["heads_q", "seqlen_q", "batch", "seqlen_k"])
        number = lambda column: rows[column].astype(int).astype(str)  # noqa: E731
        rows = rows.assign(row="h" + number("heads_q") + " q" + number("seqlen_q"),
                           col="b" + number("batch") + " " + rows["seqlen_k"].astype(int).map(seqlen_tick))
        grid = best_ratio(rows, "row", "col").loc[list(dict.fromkeys(rows["row"])), list(dict.fromkeys(rows["col"]))]
        pages = "/".join(str(int(p)) for p in sorted(rows["page_size"].dropna().unique()))
        panels.append((f"MLA decode, pages of {pages}", grid, "batch, cache length", "query heads, tokens"))
    return [(title, grid, x, y) for title, grid, x, y in panels if grid.notna().any().any()]
