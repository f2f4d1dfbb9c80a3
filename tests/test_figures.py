"""Figures from a hand-written results CSV (tests/fixtures/results-h200.csv), on CPU.

The fixture holds cuda:v1, cuda:v5, triton:fa2, sdpa:flash on the 16k-token grid (seqlen 1k/4k, head_dim
64/128, causal and not, bf16; one fp8 cell), the founding shape with sdpa:cudnn too, and one cuda:v5 row that
failed the oracle with an absurd 99999 TFLOP/s (bf16, d64, seqlen 1024, causal).
"""

import argparse
import math
import shutil
from pathlib import Path

import matplotlib
import pandas as pd
import PIL
import pytest
from matplotlib.colors import TwoSlopeNorm, to_rgb
from PIL import Image

from compare import bench, figures

FIXTURE = Path(__file__).parent / "fixtures" / "results-h200.csv"
REFERENCE_DIR = figures.REPO_ROOT / "figures" / "reference"
FAIL_TFLOPS = 99999.0
STEMS = ("fig1_tflops_vs_seqlen", "fig2_ladder", "fig3_cuda_vs_triton", "fig4_accuracy_vs_speed", "fig5_roofline",
         "figA1_tflops_grid")


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(FIXTURE, d / FIXTURE.name)
    return d


@pytest.fixture
def results(data_dir):
    return figures.load_results(data_dir)


@pytest.fixture(scope="module")
def drawn_once(tmp_path_factory):
    """The fixture's figures, drawn once for the module (drawing takes seconds): (folder, files written)."""
    base = tmp_path_factory.mktemp("drawn")
    (base / "data").mkdir()
    shutil.copy(FIXTURE, base / "data" / FIXTURE.name)
    written = figures.generate(base / "data", base / "figs", REFERENCE_DIR, log=lambda _: None)
    return base, written


def test_schema_mirrors_the_bench_driver():
    assert set(figures.REQUIRED_COLUMNS) <= set(bench.COLUMNS)
    assert list(pd.read_csv(FIXTURE, nrows=0).columns) == bench.COLUMNS


def test_all_figures_regenerate(drawn_once):
    base, written = drawn_once
    out = base / "figs"
    names = {p.name for p in written}
    assert names == {f"{stem}.{ext}" for stem in STEMS for ext in ("png", "pdf")}
    assert all(p.parent == out and p.stat().st_size > 1000 for p in written)


def test_command_line_arguments_reach_the_generator(data_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    figures.add_arguments(parser)
    out = tmp_path / "cli-out"
    args = parser.parse_args(["--data", str(data_dir), "--out", str(out), "--reference", str(tmp_path / "none")])
    assert figures.run(args) == 0
    printed = capsys.readouterr().out
    assert "wrote 12 file(s)" in printed and str(out / "fig2_ladder.png") in printed


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


# ---------------------------------------------------------------- reproducible files

def _generate_bytes(data_dir, out):
    figures.generate(data_dir, out, REFERENCE_DIR, log=lambda _: None)
    return _read_bytes(out)


def _read_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_files_are_the_same_bytes_run_to_run_and_carry_no_date_or_version(drawn_once, data_dir, tmp_path):
    first = _read_bytes(drawn_once[0] / "figs")
    second = _generate_bytes(data_dir, tmp_path / "two")
    assert first.keys() == second.keys() and len(first) == 2 * len(STEMS)
    assert [name for name in first if first[name] != second[name]] == []
    for name, content in first.items():
        if name.endswith(".pdf"):
            for stamp in (b"/CreationDate", b"/ModDate", b"/Producer", b"/Creator", b"atplotlib"):
                assert stamp not in content, (name, stamp)
        else:
            with Image.open(drawn_once[0] / "figs" / name) as image:
                assert image.text == {}, name  # no Software (matplotlib version) chunk, nothing else
            assert b"atplotlib" not in content, name


def test_a_users_matplotlibrc_does_not_change_the_files(drawn_once, data_dir, tmp_path):
    plain = _read_bytes(drawn_once[0] / "figs")
    with matplotlib.rc_context({"lines.linewidth": 4.0, "axes.facecolor": "yellow", "font.size": 15,
                                "pdf.fonttype": 42, "axes.prop_cycle": matplotlib.cycler(color=["g"])}):
        styled = _generate_bytes(data_dir, tmp_path / "styled")
    assert [name for name in plain if plain[name] != styled[name]] == []


@pytest.mark.skipif(matplotlib.__version__ != figures.DRAWN_WITH["matplotlib"]
                    or PIL.__version__ != figures.DRAWN_WITH["PIL"],
                    reason=f"the committed figures were drawn with {figures.DRAWN_WITH}: other versions may "
                           "rasterise or compress differently")
def test_the_committed_figures_are_what_the_committed_data_draws(tmp_path):
    """A fresh clone that runs `python -m compare figures` gets the committed bytes: the tree stays clean."""
    committed_dir = figures.REPO_ROOT / "figures"
    regenerated = _generate_bytes(committed_dir / "data", tmp_path / "regen")
    committed = {p.name: p.read_bytes() for p in sorted(committed_dir.iterdir())
                 if p.suffix in (".png", ".pdf")}
    assert sorted(regenerated) == sorted(committed), "figures/ holds other files than the generator writes"
    stale = [name for name in committed if committed[name] != regenerated[name]]
    assert stale == [], f"regenerate with `python -m compare figures`: {stale} differ"


# ---------------------------------------------------------------- figure 1 (headline) and A1 (the grid)

def test_headline_panels_are_d128_bf16_and_fp8_both_masks(results):
    assert figures.headline_panels(results) == [("bf16", 128, False), ("bf16", 128, True),
                                                ("fp8", 128, False), ("fp8", 128, True)]
    only_d64 = results[results["head_dim"] == 64]
    assert figures.headline_panels(only_d64) == [("bf16", 64, False), ("bf16", 64, True)]


def test_headline_keeps_the_fastest_cuda_and_triton_and_the_peers(results):
    drawn = figures.headline_data(results)
    per_panel = drawn.groupby(["format", "causal"])["label"].unique().map(sorted).to_dict()
    assert per_panel[("bf16", False)] == ["cuda:v5", "sdpa:flash", "triton:fa2"]
    assert per_panel[("bf16", True)] == ["cuda:v5", "sdpa:flash", "triton:fa2"]
    assert (drawn["head_dim"] == 128).all() and (drawn["oracle"] == "pass").all()


def test_a_failed_row_never_makes_a_variant_the_fastest(results):
    boosted = results.copy()
    is_v1 = (boosted["label"] == "cuda:v1") & (boosted["head_dim"] == 128) & ~boosted["causal"] \
        & (boosted["format"] == "bf16")
    boosted.loc[is_v1, ["tflops", "oracle"]] = [FAIL_TFLOPS, "fail"]
    drawn = figures.headline_data(boosted)
    panel = drawn[(drawn["format"] == "bf16") & ~drawn["causal"]]
    assert set(panel["label"]) == {"cuda:v5", "triton:fa2", "sdpa:flash"}


def test_headline_has_few_panels_and_colours_and_markers_that_differ(results):
    fig = figures.fig_tflops_vs_seqlen(results)
    assert len(fig.axes) == 4
    labels = sorted(set(figures.headline_data(results)["label"]))
    families = dict(zip(results["label"], results["family"]))
    style = figures.Style.qualitative({lab: families[lab] for lab in labels})
    colours = [to_rgb(style.color[lab]) for lab in labels]
    assert len(set(colours)) == len(labels)
    assert len({style.marker[lab] for lab in labels}) == len(labels)
    # Told apart: every pair differs by a clear step in RGB, not two shades of one hue.
    for i, a in enumerate(colours):
        for b in colours[i + 1:]:
            assert sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 > 0.25, (a, b)
    # The colours on the axes are the style's: one line per drawn (panel, label).
    drawn_colours = {to_rgb(line.get_color()) for ax in fig.axes for line in ax.get_lines() if line.get_marker()}
    assert drawn_colours == set(colours)


def test_appendix_grid_has_every_panel_and_backend(results):
    fig = figures.fig_tflops_grid(results, figures.Style(results))
    rows = figures.seqlen_data(results)
    n_columns = len({(d, c) for d, c in zip(rows["head_dim"], rows["causal"])})
    assert len(fig.axes) == rows["format"].nunique() * n_columns
    legend_texts = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert set(rows["label"]) <= legend_texts


# ---------------------------------------------------------------- figure 3's colour scale

def test_ratio_colours_centre_on_one_and_show_a_tenth(results):
    fig = figures.fig_cuda_vs_triton(results)
    mesh = fig.axes[0].collections[0]
    norm = mesh.norm
    assert isinstance(norm, TwoSlopeNorm) and norm.vcenter == 1.0
    assert norm(1.0) == pytest.approx(0.5)
    assert norm(1.1) - norm(1.0) > 0.15 and norm(1.2) - norm(1.1) > 0.15  # 1.0, 1.1, 1.2: three colours
    assert norm(0.9) < 0.5 - 0.15
    cmap = mesh.get_cmap()
    white, light = cmap(norm(1.0)), cmap(norm(1.1))
    assert sum((x - y) ** 2 for x, y in zip(white[:3], light[:3])) ** 0.5 > 0.15
    # Every cell is annotated with its ratio: bf16 d128 4k non-causal is 420 / 350 = 1.20.
    texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert "1.20" in texts
