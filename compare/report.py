"""Markdown tables of the committed results, for the README (``python -m compare report``).

The README's results block is this module's output between two marker lines; ``--update-readme``
rewrites it, and a test fails when the README and the committed CSVs disagree, so no number in the
README is typed by hand.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from .figures import REPO_ROOT, load_results, passed
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
    failed = int(df["oracle"].isin(["fail", "error"]).sum())
    parts = [f"TFLOP/s (median of single launches, L2 flushed), {env['gpu']}, driver {env['driver']}, CUDA "
             f"{env['cuda']}, torch {env['torch']}, triton {env['triton']}, commit(s) {commits}. Every number passed "
             f"the oracle on the same inputs; rows that failed it: {failed}.", "", tflops_table(df)]
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
