"""The README's results block is generated from the committed CSVs, never typed by hand."""

import pytest

from compare import figures, report

FIXTURE_DIR = figures.REPO_ROOT / "tests" / "fixtures"


def test_readme_results_match_the_committed_data():
    data = figures.REPO_ROOT / "figures" / "data"
    if not any(data.rglob("*.csv")):
        pytest.skip("no committed results")
    block = report.readme_block(report.README.read_text())
    assert block == report.report(data), "README results are stale: run python -m compare report --update-readme"


def test_report_table_from_fixture_excludes_failed_rows():
    text = report.report(FIXTURE_DIR)
    assert "| shape |" in text and "`cuda:v1`" in text
    assert "99999" not in text  # the fixture's failing row carries a huge TFLOP/s that must not show


def test_missing_markers_is_an_error():
    with pytest.raises(ValueError, match="markers"):
        report.readme_block("no markers here")


def test_headline_ratios_use_the_fastest_passing_row_of_each_side():
    import pandas as pd

    def row(label, fmt, tflops, seqlen=1024, causal=False, oracle="pass", head_dim=128, batch=None, seqlen_k=None):
        return dict(label=label, format=fmt, tflops=tflops, oracle=oracle, head_dim=head_dim, seqlen_q=seqlen,
                    seqlen_k=seqlen_k or seqlen, causal=causal, batch=batch or 16384 // seqlen, heads_q=16)

    df = pd.DataFrame([
        row("cuda:hopper", "bf16", 300.0), row("sdpa:cudnn", "bf16", 400.0),
        row("cuda:hopper", "bf16", 900.0, causal=True, oracle="fail"), row("sdpa:cudnn", "bf16", 100.0, causal=True),
        row("triton:fa2", "bf16", 200.0), row("triton:fa2-tma", "bf16", 360.0),  # best Triton: 360
        row("cuda:hopper", "bf16", 500.0, seqlen=4096, seqlen_k=8192, batch=1),  # founding shape
        row("sdpa:cudnn", "bf16", 400.0, seqlen=4096, seqlen_k=8192, batch=1),
    ])
    lines = {line.split(" | ")[0].lstrip("| "): line for line in report.headline_table(df).splitlines()}
    assert lines["`cuda:hopper` / `sdpa:cudnn`"] == "| `cuda:hopper` / `sdpa:cudnn` | 128 | 0.75 / - | - / - | - / - | 1.25 |"
    assert "| 128 | 0.90 / - |" in lines["best Triton / `sdpa:cudnn`"]
    assert not any("fp8" in key for key in lines)  # no fp8 rows: no fp8 comparison
    other_batch = pd.DataFrame([row("cuda:hopper", "bf16", 1.0, batch=3)])
    with pytest.raises(ValueError, match="two shapes"):
        report.headline_table(pd.concat([df, other_batch]))


def test_headline_ratio_across_two_runs_is_marked_and_explained():
    import pandas as pd

    def row(label, fmt, tflops, commit, causal=False):
        return dict(label=label, format=fmt, tflops=tflops, oracle="pass", head_dim=128, seqlen_q=1024,
                    seqlen_k=1024, causal=causal, batch=16, heads_q=16, git_commit=commit)

    df = pd.DataFrame([
        row("cuda:hopper-fp8", "fp8", 600.0, "bbb"), row("triton:fp8", "fp8", 500.0, "bbb"),
        row("cuda:hopper", "bf16", 400.0, "aaa"), row("sdpa:cudnn", "bf16", 500.0, "aaa"),
        row("cuda:hopper-fp8", "fp8", 300.0, "aaa", causal=True), row("cuda:hopper", "bf16", 300.0, "aaa", causal=True),
    ])
    table = report.headline_table(df)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    assert "| 128 | 1.20 / - |" in lines["`cuda:hopper-fp8` / best Triton fp8"]  # one run: no mark
    assert "| 128 | 0.80 / - |" in lines["`cuda:hopper` / `sdpa:cudnn`"]
    assert "| 128 | 1.50† / 1.00 |" in lines["`cuda:hopper-fp8` / `cuda:hopper` bf16"]  # fp8 from bbb
    assert table.splitlines()[-1].startswith("† The two sides of this ratio come from different runs")
    same_run = df.assign(git_commit="aaa")
    assert "†" not in report.headline_table(same_run)
