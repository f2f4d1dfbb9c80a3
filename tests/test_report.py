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
