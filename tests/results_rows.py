"""Hand-made rows of the results CSV (compare.schema) for the CPU tests of the figures and the README findings,
written as a CSV and read back as compare.figures and compare.report read the committed data."""
import csv
from pathlib import Path

import pandas as pd

from compare import results, schema

# the environment columns of every hand-made row: one H200 run
ENVIRONMENT = dict(timestamp="2026-12-03T00:00:00+00:00", git_commit="0" * 40, gpu="NVIDIA H200", driver="1",
                   cuda="13.0", torch="2.11", triton="3.6.0")


def row(**cells) -> dict:
    """A results row: every column blank, ENVIRONMENT's, then `cells`."""
    return {**{c: "" for c in schema.COLUMNS}, **ENVIRONMENT, **cells}


def write_and_load(folder: Path, rows, name: str = "results") -> pd.DataFrame:
    """`rows` written as `folder`/`name`.csv, then the folder read by compare.results.load_results."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=schema.COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return results.load_results(folder)
