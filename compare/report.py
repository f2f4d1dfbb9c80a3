"""Markdown tables of the committed results, for the README (``python -m compare report``).

The README's results block is this module's output between two marker lines; ``--update-readme``
rewrites it, and a test fails when the README and the committed CSVs disagree, so no number in the
README is typed by hand.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from . import paired
from .figures import FOUNDING_SHAPE, REPO_ROOT, grid_rows, load_results, not_drawn_note, passed
from .schema import shape_label

BEGIN, END = "<!-- results:begin (python -m compare report --update-readme) -->", "<!-- results:end -->"
README = REPO_ROOT / "README.md"


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


def paired_table(paired_dir: Path) -> str:
    """The side-by-side ratios of the paired CSVs (compare.paired) in `paired_dir`: a row per comparison and
    case, from the newest CSV (by its rows' timestamps) that measured it, so that a case measured again after
    a change shows its current ratio once; '' when there is none."""
    newest: dict[tuple[str, str, str], tuple[str, str]] = {}  # (first, second, case) -> (time, table row)
    for path in sorted(Path(paired_dir).glob("*.csv")):
        rows = paired.read(path)
        if not rows:
            continue
        commit = rows[0]["git_commit"][:7]  # short, as the file names have it
        measured = max(r["timestamp"] for r in rows)
        for first, second in paired.pairs(rows):
            for r in paired.ratios(rows, first, second):
                what = f"| `{first}` / `{second}` | {r['case']} |"
                if "ratio" not in r:
                    line = f"{what} - | - | 0 | - | {commit} |"
                else:
                    rates = (f"{r['tflops_first']:.0f} / {r['tflops_second']:.0f}" if "tflops_first" in r else "-")
                    line = (f"{what} {r['ratio']:.3f} | [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}] | "
                            f"{r['rounds']} | {rates} | {commit} |")
                key = (first, second, r["case"])
                if key not in newest or measured > newest[key][0]:
                    newest[key] = (measured, line)
    if not newest:
        return ""
    order = sorted(newest, key=lambda key: (key[0], key[1], _case_order(key[2])))
    return "\n".join(["| comparison | case | ratio | [min, max] | rounds | TFLOP/s | commit |",
                      "|---|---|---:|---|---:|---|---|"] + [newest[key][1] for key in order])


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


def report(data_dir: Path) -> str:
    df = load_results(data_dir)
    if df.empty:
        return "(no results)"
    env = df.iloc[-1]
    commits = ", ".join(sorted(df["git_commit"].unique()))
    parts = [f"TFLOP/s (median of single calls, each a CUDA-graph replay of one API call with L2 flushed "
             f"before it, so host-side API work is not timed; see compare/bench.py), {env['gpu']}, "
             f"driver {env['driver']}, CUDA "
             f"{env['cuda']}, torch {env['torch']}, triton {env['triton']}, commit(s) {commits}. Every number passed "
             f"the oracle on the same inputs. {not_drawn_note(df) or 'No row failed the oracle or raised.'}",
             "", "Headline speed ratios from the same data (> 1: the first is faster; cells are non-causal / causal, "
             "16k tokens per batch; founding shape: b1 h8 q4096 k8192 d128, non-causal):", "", headline_table(df),
             "", "Every passing row:", "", tflops_table(df)]
    side_by_side = paired_table(Path(data_dir) / "paired")
    if side_by_side:
        parts[6:6] = ["", "Side by side (`python -m compare paired`, `figures/data/paired/`): each case timed for both "
                      "backends back to back, in interleaved rounds with the order reversed every other round; ratio "
                      "= median of the per-round ratios (> 1: the first is faster), with their range; TFLOP/s = "
                      "medians over the rounds. A case measured in several calls shows its newest; the older "
                      "rounds stay in their CSVs:", "", side_by_side]
    ceilings = ceilings_table(df)
    if ceilings:
        parts += ["", "Ceilings measured in the same run (the denominators of %SOL):", "", ceilings]
    return "\n".join(parts)


def readme_block(text: str) -> str:
    """The part of `text` between the markers (exclusive); ValueError if they are missing."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"README has no results markers ({BEGIN} ... {END})")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=REPO_ROOT / "figures" / "data")
    parser.add_argument("--update-readme", action="store_true", help="rewrite the README's results block")


def run(args: argparse.Namespace) -> int:
    if not args.data.is_dir():
        raise ValueError(f"no results folder {args.data}")
    text = report(args.data)
    if args.update_readme:
        readme = README.read_text()
        readme_block(readme)  # raises without the markers
        head, rest = readme.split(BEGIN, 1)
        README.write_text(head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1])
        print(f"updated {README}")
    else:
        print(text)
    return 0
