"""Figures from a hand-written results CSV (tests/fixtures/results-h200.csv), on CPU.

The fixture holds cuda:v1, cuda:v5, triton:fa2, sdpa:flash on the 16k-token grid (seqlen 1k/4k, head_dim
64/128, causal and not, bf16; one fp8 cell), the founding shape with sdpa:cudnn too, and one cuda:v5 row that
failed the oracle with an absurd 99999 TFLOP/s (bf16, d64, seqlen 1024, causal).
"""

import argparse
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from compare import bench, figures

FIXTURE = Path(__file__).parent / "fixtures" / "results-h200.csv"
REFERENCE_DIR = figures.REPO_ROOT / "figures" / "reference"
FAIL_TFLOPS = 99999.0


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(FIXTURE, d / FIXTURE.name)
    return d


@pytest.fixture
def results(data_dir):
    return figures.load_results(data_dir)


def test_schema_mirrors_the_bench_driver():
    assert set(figures.REQUIRED_COLUMNS) <= set(bench.COLUMNS)
    assert list(pd.read_csv(FIXTURE, nrows=0).columns) == bench.COLUMNS


def test_all_figures_regenerate(data_dir, tmp_path):
    out = tmp_path / "figs"
    written = figures.generate(data_dir, out, REFERENCE_DIR, log=lambda _: None)
    names = {p.name for p in written}
    for stem in ("fig1_tflops_vs_seqlen", "fig2_ladder", "fig3_cuda_vs_triton", "fig4_accuracy_vs_speed",
                 "fig5_roofline"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert all(p.parent == out and p.stat().st_size > 1000 for p in written)


def test_command_line_arguments_reach_the_generator(data_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    figures.add_arguments(parser)
    out = tmp_path / "cli-out"
    args = parser.parse_args(["--data", str(data_dir), "--out", str(out), "--reference", str(tmp_path / "none")])
    assert figures.run(args) == 0
    printed = capsys.readouterr().out
    assert "wrote 10 file(s)" in printed and str(out / "fig2_ladder.png") in printed


def test_failed_row_is_loaded_but_never_drawn_as_a_speed(results):
    failed = results[results["oracle"] != "pass"]
    assert failed["tflops"].tolist() == [FAIL_TFLOPS]
    for select in (figures.seqlen_data, figures.ladder_data, figures.accuracy_data, figures.roofline_data):
        drawn = select(results)
        assert not drawn.empty, select.__name__
        assert (drawn["oracle"] == "pass").all(), select.__name__
        assert drawn["tflops"].max() < 1000, select.__name__


def test_heatmap_ratio_is_best_cuda_over_best_triton(results):
    table = figures.cuda_triton_ratio(results).set_index(["format", "causal", "head_dim", "seqlen"])
    # bf16 d128 4k non-causal: best CUDA is v5 (420), Triton fa2 350.
    assert table.loc[("bf16", False, 128, 4096), "ratio"] == pytest.approx(420 / 350)
    # bf16 d64 1k causal: v5 failed the oracle (99999), so v1's 300*0.9*0.85*0.8 = 183.6 is the best CUDA.
    cell = table.loc[("bf16", True, 64, 1024)]
    assert cell["best_cuda"] == pytest.approx(183.6)
    assert cell["ratio"] == pytest.approx(183.6 / 214.2)
    assert table.loc[("fp8", False, 128, 4096), "ratio"] == pytest.approx(700 / 800)


def test_heatmap_cell_with_one_side_only_is_blank_not_zero(results):
    no_triton_here = ~((results["family"] == "triton") & (results["format"] == "bf16") & (results["head_dim"] == 128)
                       & (results["seqlen_q"] == 1024) & ~results["causal"])
    table = figures.cuda_triton_ratio(results[no_triton_here]).set_index(["format", "causal", "head_dim", "seqlen"])
    assert math.isnan(table.loc[("bf16", False, 128, 1024), "ratio"])


def test_newest_row_wins_across_csvs(data_dir, results):
    original = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    is_v1_cell = ((original["variant"] == "v1") & (original["seqlen_k"] == "4096") & (original["head_dim"] == "128")
                  & (original["causal"] == "False") & (original["format"] == "bf16"))
    older, newer = original[is_v1_cell].copy(), original[is_v1_cell].copy()
    older[["timestamp", "git_commit", "tflops"]] = ["2026-11-01T00:00:00+00:00", "old000", "1.0"]
    newer[["timestamp", "git_commit", "tflops"]] = ["2026-12-01T00:00:00+00:00", "new999", "333.0"]
    older.to_csv(data_dir / "a-older.csv", index=False)
    newer.to_csv(data_dir / "z-newer.csv", index=False)
    merged = figures.load_results(data_dir)
    assert len(merged) == len(results)
    cell = merged[(merged["label"] == "cuda:v1") & (merged["seqlen_k"] == 4096) & (merged["head_dim"] == 128)
                  & ~merged["causal"] & (merged["format"] == "bf16")]
    assert cell["tflops"].tolist() == [333.0] and cell["git_commit"].tolist() == ["new999"]


def test_arithmetic_intensity_of_the_founding_shape(results):
    row = figures.ladder_data(results).query("label == 'cuda:v5'")
    flop = 4 * 8 * 128 * 4096 * 8192
    minimal_bytes = 2 * (2 * 8 * 4096 * 128 + 2 * 8 * 8192 * 128)  # q + out, k + v, 2 bytes each
    assert figures.arithmetic_intensity(row).item() == pytest.approx(flop / minimal_bytes, rel=1e-5)


def test_tflops_bounds_bracket_the_median(results):
    rows = figures.seqlen_data(results)
    low, high = figures.tflops_bounds(rows)
    assert (low < rows["tflops"]).all() and (rows["tflops"] < high).all()


def test_figures_without_data_are_skipped_with_a_message(data_dir, tmp_path):
    peers_only = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False).query("family == 'peer'")
    peers_dir = tmp_path / "peers"
    peers_dir.mkdir()
    peers_only.to_csv(peers_dir / "peers.csv", index=False)
    messages = []
    written = figures.generate(peers_dir, tmp_path / "out", REFERENCE_DIR, log=messages.append)
    assert not any("fig3" in p.name for p in written)
    assert any(m.startswith("skip fig3_cuda_vs_triton") for m in messages)
    assert any("fig1" in p.name for p in written)

    empty = tmp_path / "empty"
    empty.mkdir()
    assert figures.generate(empty, tmp_path / "out2", REFERENCE_DIR, log=messages.append) == []


def test_a_foreign_csv_is_refused(tmp_path):
    (tmp_path / "other.csv").write_text("kind,impl,ms\nattn,x,1.0\n")
    with pytest.raises(ValueError, match="missing columns"):
        figures.load_results(tmp_path)


def test_archived_csvs_are_not_drawn(data_dir, results):
    original = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    newer_but_archived = original.copy()
    newer_but_archived[["timestamp", "git_commit", "tflops"]] = ["2030-01-01T00:00:00+00:00", "arch000", "1.0"]
    (data_dir / "archive").mkdir()
    newer_but_archived.to_csv(data_dir / "archive" / "paper-old.csv", index=False)
    merged = figures.load_results(data_dir)
    assert len(merged) == len(results) and "arch000" not in set(merged["git_commit"])


def test_caption_tells_oracle_failures_from_refusals():
    rows = pd.DataFrame({"oracle": ["pass", "fail", "error", "error"],
                         "label": ["cuda:v1", "cuda:v5", "triton:x", "triton:x"]})
    note = figures.not_drawn_note(rows)
    assert note == "Not shown: 1 row(s) failed the oracle (cuda:v5); 2 row(s) raised an error (triton:x)."
    assert figures.not_drawn_note(rows[rows["oracle"] == "pass"]) == ""
