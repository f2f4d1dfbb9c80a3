"""Figures from a hand-written results CSV (tests/fixtures/results-h200.csv), on CPU.

The fixture holds cuda:v1, cuda:v5, triton:fa2, sdpa:flash on the 16k-token grid (seqlen 1k/4k, head_dim
64/128, causal and not, bf16; one fp8 cell), the founding shape with sdpa:cudnn too, and one cuda:v5 row that
failed the oracle with an absurd 99999 TFLOP/s (bf16, d64, seqlen 1024, causal).
"""

import math
import shutil
from pathlib import Path

import matplotlib
import pandas as pd
import PIL
import pytest
from matplotlib.colors import TwoSlopeNorm, to_rgb
from PIL import Image

from compare import bench, figures, results

FIXTURE = Path(__file__).parent / "fixtures" / "results-h200.csv"
REFERENCE_DIR = results.REPO_ROOT / "figures" / "reference"
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
def loaded(data_dir):
    return results.load_results(data_dir)


@pytest.fixture(scope="module")
def drawn_once(tmp_path_factory):
    """The fixture's figures, drawn once for the module (drawing takes seconds): (folder, files written)."""
    base = tmp_path_factory.mktemp("drawn")
    (base / "data").mkdir()
    shutil.copy(FIXTURE, base / "data" / FIXTURE.name)
    written = figures.generate(base / "data", base / "figs", REFERENCE_DIR, log=lambda _: None)
    return base, written


def test_schema_mirrors_the_bench_driver():
    assert set(results.REQUIRED_COLUMNS) <= set(bench.COLUMNS)
    assert list(pd.read_csv(FIXTURE, nrows=0).columns) == bench.COLUMNS


def test_all_figures_regenerate(drawn_once):
    base, written = drawn_once
    out = base / "figs"
    names = {p.name for p in written}
    assert names == {f"{stem}.{ext}" for stem in STEMS for ext in ("png", "pdf")}
    assert all(p.parent == out and p.stat().st_size > 1000 for p in written)


def test_figures_subcommand_of_the_cli_draws_from_the_data_it_is_given(tmp_path, capsys):
    """`python -m compare figures --data X --out Y` (compare.cli.main, what `python -m compare` runs), on a data
    folder with only the founding-shape rows: figure 2 (and the figures drawable from those rows) land in Y,
    the figures that need the grid are skipped with a message, and the ladder's bars are X's numbers."""
    from compare import cli
    founding = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False).query("seqlen_k == '8192'")
    (tmp_path / "x").mkdir()
    founding.to_csv(tmp_path / "x" / "founding.csv", index=False)
    out = tmp_path / "y"
    assert cli.main(["figures", "--data", str(tmp_path / "x"), "--out", str(out),
                     "--reference", str(tmp_path / "none")]) == 0
    printed = capsys.readouterr().out
    written = sorted(p.name for p in out.iterdir())
    assert "fig2_ladder.png" in written and "fig2_ladder.pdf" in written and str(out / "fig2_ladder.png") in printed
    assert f"wrote {len(written)} file(s)" in printed
    assert not any(name.startswith(("fig1_", "fig3_", "figA1_")) for name in written)  # no grid rows in X
    assert "skip fig3_cuda_vs_triton" in printed


def _bars(ax) -> dict[str, float]:
    """label -> bar length of a horizontal bar chart."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    return dict(zip(labels, [bar.get_width() for bar in ax.patches]))


def test_ladder_draws_one_bar_per_founding_row_with_its_speed(loaded, tmp_path):
    """Figure 2's bars: the fixture's bf16 rows at b1 h8 q4096 k8192 d128 (numbers written out here)."""
    fig = figures.fig_ladder(loaded, figures.Style(loaded), tmp_path / "no-reference")
    assert len(fig.axes) == 1
    assert _bars(fig.axes[0]) == {"cuda:v1": 250.0, "cuda:v5": 400.0, "triton:fa2": 380.0, "sdpa:cudnn": 633.0,
                                  "sdpa:flash": 349.0}
    texts = {t.get_text().split()[0] for t in fig.axes[0].texts}
    assert texts == {"250", "400", "380", "633", "349"}


def _drawn_lines(fig, style) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(panel title, label) -> the (x, y) points of the marker line drawn in that colour."""
    by_colour = {to_rgb(c): label for label, c in style.color.items()}
    drawn = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_marker() not in (None, "", "None", "_", "|") and len(line.get_xdata()):  # not error caps
                key = (ax.get_title(), by_colour[to_rgb(line.get_color())])
                assert key not in drawn, key
                drawn[key] = list(zip(map(float, line.get_xdata()), map(float, line.get_ydata())))
    return drawn


def test_headline_lines_are_the_fixture_speeds(loaded):
    """Figure 1's lines: per panel the fastest CUDA variant (v5), the fastest Triton one (fa2) and the SDPA peer,
    TFLOP/s against seqlen, from the fixture (numbers written out here; v5's failed 99999 row is at d64)."""
    fig = figures.fig_tflops_vs_seqlen(loaded)
    labels = results.headline_data(loaded)
    style = figures.Style.qualitative(dict(zip(labels["label"], labels["family"])))
    want = {
        ("bf16, head_dim 128, non-causal", "cuda:v5"): [(1024, 378.0), (4096, 420.0)],
        ("bf16, head_dim 128, non-causal", "triton:fa2"): [(1024, 315.0), (4096, 350.0)],
        ("bf16, head_dim 128, non-causal", "sdpa:flash"): [(1024, 310.5), (4096, 345.0)],
        ("bf16, head_dim 128, causal", "cuda:v5"): [(1024, 302.4), (4096, 336.0)],
        ("bf16, head_dim 128, causal", "triton:fa2"): [(1024, 252.0), (4096, 280.0)],
        ("bf16, head_dim 128, causal", "sdpa:flash"): [(1024, 248.4), (4096, 276.0)],
        ("fp8, head_dim 128, non-causal", "cuda:v5"): [(4096, 700.0)],
        ("fp8, head_dim 128, non-causal", "triton:fa2"): [(4096, 800.0)],
    }
    drawn = _drawn_lines(fig, style)
    assert drawn.keys() == want.keys()
    for key, points in want.items():
        assert drawn[key] == pytest.approx(points), key
    assert "not measured" in {t.get_text() for ax in fig.axes for t in ax.texts}  # fp8 causal: no row


def test_accuracy_points_are_medians_over_the_shared_shapes():
    """Figure 4: one point per (backend, format) at (median TFLOP/s, median rel L2 vs unquantized) over the
    shapes every backend of the format passed, recomputed here from the CSV."""
    raw = pd.read_csv(FIXTURE)
    raw = raw[(raw["oracle"] == "pass") & (raw["tflops"] > 0)].assign(label=lambda d: d["backend"] + ":" + d["variant"])
    shape = ["batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal", "format"]
    raw = raw.assign(shape=raw[shape].astype(str).agg(" ".join, axis=1))
    want = set()
    for fmt, group in raw.groupby("format"):
        common = set.intersection(*(set(g["shape"]) for _, g in group.groupby("label")))
        for label, g in group[group["shape"].isin(common)].groupby("label"):
            want.add((label, fmt, round(g["tflops"].median(), 6), round(g["rel_l2_unquantized"].median(), 9)))
    loaded = results.load_results(FIXTURE.parent)
    style = figures.Style(loaded)
    fig = figures.fig_accuracy(loaded, style)
    by_colour = {to_rgb(c): label for label, c in style.color.items()}
    by_marker = {m: f for f, m in figures.FORMAT_MARKERS.items()}
    drawn = set()
    for line in fig.axes[0].get_lines():
        if line.get_marker() not in (None, "", "None", "_", "|") and len(line.get_xdata()) == 1:  # not error caps
            drawn.add((by_colour[to_rgb(line.get_color())], by_marker[line.get_marker()],
                       round(float(line.get_xdata()[0]), 6), round(float(line.get_ydata()[0]), 9)))
    assert drawn == want
    # bf16: sdpa:cudnn ran only the founding shape, so every bf16 point is its row there; fp8: v5 and fa2
    assert {(label, fmt, x) for label, fmt, x, _ in want} == {
        ("cuda:v1", "bf16", 250.0), ("cuda:v5", "bf16", 400.0), ("triton:fa2", "bf16", 380.0),
        ("sdpa:flash", "bf16", 349.0), ("sdpa:cudnn", "bf16", 633.0), ("cuda:v5", "fp8", 700.0),
        ("triton:fa2", "fp8", 800.0)}


def test_roofline_points_and_ceilings_are_the_rows(loaded):
    """Figure 5: a point per passing row at (its arithmetic intensity, its TFLOP/s), and a dotted line at each
    measured compute ceiling of the fixture (mma.sync.bf16 642, gemm.bf16 700, gemm.fp8 1259)."""
    fig = figures.fig_roofline(loaded, figures.Style(loaded))
    ax = fig.axes[0]
    points = sorted((round(float(x), 6), float(y)) for c in ax.collections for x, y in c.get_offsets())
    rows = loaded[(loaded["oracle"] == "pass")]
    want = sorted((round(float(x), 6), float(y)) for x, y in zip(results.arithmetic_intensity(rows), rows["tflops"]))
    assert points == want and len(points) == 38 and max(y for _, y in points) == 800.0
    ceilings = sorted({float(line.get_ydata()[0]) for line in ax.get_lines() if line.get_linestyle() == ":"})
    assert ceilings == [642.0, 700.0, 1259.0]


def test_failed_row_is_loaded_but_never_drawn_as_a_speed(loaded):
    failed = loaded[loaded["oracle"] != "pass"]
    assert failed["tflops"].tolist() == [FAIL_TFLOPS]
    for select in (results.seqlen_data, results.ladder_data, results.accuracy_data, results.roofline_data):
        drawn = select(loaded)
        assert not drawn.empty, select.__name__
        assert (drawn["oracle"] == "pass").all(), select.__name__
        assert drawn["tflops"].max() < 1000, select.__name__


def test_heatmap_ratio_is_best_cuda_over_best_triton(loaded):
    table = results.cuda_triton_ratio(loaded).set_index(["format", "causal", "head_dim", "seqlen"])
    # bf16 d128 4k non-causal: best CUDA is v5 (420), Triton fa2 350.
    assert table.loc[("bf16", False, 128, 4096), "ratio"] == pytest.approx(420 / 350)
    # bf16 d64 1k causal: v5 failed the oracle (99999), so v1's 300*0.9*0.85*0.8 = 183.6 is the best CUDA.
    cell = table.loc[("bf16", True, 64, 1024)]
    assert cell["best_cuda"] == pytest.approx(183.6)
    assert cell["ratio"] == pytest.approx(183.6 / 214.2)
    assert table.loc[("fp8", False, 128, 4096), "ratio"] == pytest.approx(700 / 800)


def test_heatmap_cell_with_one_side_only_is_blank_not_zero(loaded):
    no_triton_here = ~((loaded["family"] == "triton") & (loaded["format"] == "bf16") & (loaded["head_dim"] == 128)
                       & (loaded["seqlen_q"] == 1024) & ~loaded["causal"])
    table = results.cuda_triton_ratio(loaded[no_triton_here]).set_index(["format", "causal", "head_dim", "seqlen"])
    assert math.isnan(table.loc[("bf16", False, 128, 1024), "ratio"])


def test_newest_row_wins_across_csvs(data_dir, loaded):
    original = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    is_v1_cell = ((original["variant"] == "v1") & (original["seqlen_k"] == "4096") & (original["head_dim"] == "128")
                  & (original["causal"] == "False") & (original["format"] == "bf16"))
    older, newer = original[is_v1_cell].copy(), original[is_v1_cell].copy()
    older[["timestamp", "git_commit", "tflops"]] = ["2026-11-01T00:00:00+00:00", "old000", "1.0"]
    newer[["timestamp", "git_commit", "tflops"]] = ["2026-12-01T00:00:00+00:00", "new999", "333.0"]
    older.to_csv(data_dir / "a-older.csv", index=False)
    newer.to_csv(data_dir / "z-newer.csv", index=False)
    merged = results.load_results(data_dir)
    assert len(merged) == len(loaded)
    cell = merged[(merged["label"] == "cuda:v1") & (merged["seqlen_k"] == 4096) & (merged["head_dim"] == 128)
                  & ~merged["causal"] & (merged["format"] == "bf16")]
    assert cell["tflops"].tolist() == [333.0] and cell["git_commit"].tolist() == ["new999"]


def test_arithmetic_intensity_of_the_founding_shape(loaded):
    row = results.ladder_data(loaded).query("label == 'cuda:v5'")
    flop = 4 * 8 * 128 * 4096 * 8192
    minimal_bytes = 2 * (2 * 8 * 4096 * 128 + 2 * 8 * 8192 * 128)  # q + out, k + v, 2 bytes each
    assert results.arithmetic_intensity(row).item() == pytest.approx(flop / minimal_bytes, rel=1e-5)


def test_tflops_bounds_bracket_the_median(loaded):
    rows = results.seqlen_data(loaded)
    low, high = results.tflops_bounds(rows)
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
        results.load_results(tmp_path)


def test_archived_csvs_are_not_drawn(data_dir, loaded):
    original = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    newer_but_archived = original.copy()
    newer_but_archived[["timestamp", "git_commit", "tflops"]] = ["2030-01-01T00:00:00+00:00", "arch000", "1.0"]
    (data_dir / "archive").mkdir()
    newer_but_archived.to_csv(data_dir / "archive" / "paper-old.csv", index=False)
    merged = results.load_results(data_dir)
    assert len(merged) == len(loaded) and "arch000" not in set(merged["git_commit"])


def test_caption_tells_oracle_failures_from_refusals():
    rows = pd.DataFrame({"oracle": ["pass", "fail", "error", "error"],
                         "label": ["cuda:v1", "cuda:v5", "triton:x", "triton:x"]})
    note = results.not_drawn_note(rows)
    assert note == "Not shown: 1 row(s) failed the oracle (cuda:v5); 2 row(s) raised an error (triton:x)."
    assert results.not_drawn_note(rows[rows["oracle"] == "pass"]) == ""


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
    committed_dir = results.REPO_ROOT / "figures"
    regenerated = _generate_bytes(committed_dir / "data", tmp_path / "regen")
    committed = {p.name: p.read_bytes() for p in sorted(committed_dir.iterdir())
                 if p.suffix in (".png", ".pdf")}
    assert sorted(regenerated) == sorted(committed), "figures/ holds other files than the generator writes"
    stale = [name for name in committed if committed[name] != regenerated[name]]
    assert stale == [], f"regenerate with `python -m compare figures`: {stale} differ"


# ---------------------------------------------------------------- figure 1 (headline) and A1 (the grid)

def test_headline_panels_are_d128_bf16_and_fp8_both_masks(loaded):
    assert results.headline_panels(loaded) == [("bf16", 128, False), ("bf16", 128, True),
                                                ("fp8", 128, False), ("fp8", 128, True)]
    only_d64 = loaded[loaded["head_dim"] == 64]
    assert results.headline_panels(only_d64) == [("bf16", 64, False), ("bf16", 64, True)]


def test_headline_keeps_the_fastest_cuda_and_triton_and_the_peers(loaded):
    drawn = results.headline_data(loaded)
    per_panel = drawn.groupby(["format", "causal"])["label"].unique().map(sorted).to_dict()
    assert per_panel[("bf16", False)] == ["cuda:v5", "sdpa:flash", "triton:fa2"]
    assert per_panel[("bf16", True)] == ["cuda:v5", "sdpa:flash", "triton:fa2"]
    assert (drawn["head_dim"] == 128).all() and (drawn["oracle"] == "pass").all()


def test_a_failed_row_never_makes_a_variant_the_fastest(loaded):
    boosted = loaded.copy()
    is_v1 = (boosted["label"] == "cuda:v1") & (boosted["head_dim"] == 128) & ~boosted["causal"] \
        & (boosted["format"] == "bf16")
    boosted.loc[is_v1, ["tflops", "oracle"]] = [FAIL_TFLOPS, "fail"]
    drawn = results.headline_data(boosted)
    panel = drawn[(drawn["format"] == "bf16") & ~drawn["causal"]]
    assert set(panel["label"]) == {"cuda:v5", "triton:fa2", "sdpa:flash"}


def test_headline_has_few_panels_and_colours_and_markers_that_differ(loaded):
    fig = figures.fig_tflops_vs_seqlen(loaded)
    assert len(fig.axes) == 4
    labels = sorted(set(results.headline_data(loaded)["label"]))
    families = dict(zip(loaded["label"], loaded["family"]))
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


def test_appendix_grid_has_every_panel_and_backend(loaded):
    fig = figures.fig_tflops_grid(loaded, figures.Style(loaded))
    rows = results.seqlen_data(loaded)
    n_columns = len({(d, c) for d, c in zip(rows["head_dim"], rows["causal"])})
    assert len(fig.axes) == rows["format"].nunique() * n_columns
    legend_texts = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert set(rows["label"]) <= legend_texts


# ---------------------------------------------------------------- figure 3's colour scale

def test_ratio_colours_centre_on_one_and_show_a_tenth(loaded):
    fig = figures.fig_cuda_vs_triton(loaded)
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
