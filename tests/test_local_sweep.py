"""The local-attention sweep (compare/sweeps/local.toml) end to end on the CPU: its cases, the results columns
that tell its rows apart (head_dim_v, window, softcap), older CSVs without them, figure 7 and the README
finding, each number of which must be the data's."""
import csv
import re

import pandas as pd
import pytest

from compare import bench, figures, oracle, report, results, sweeps
from compare.schema import COLUMNS, LATER_CASE_COLUMNS, shape_label
from conftest import load_shapes_table

FIXTURE = results.REPO_ROOT / "tests" / "fixtures" / "results-h200.csv"


def test_the_sweep_holds_windows_caps_and_their_dense_rows():
    cases = sweeps.load("local").cases
    windows = {(c.head_dim, c.causal, c.window, c.softcap) for c in cases}
    for head_dim in (64, 128, 256):
        assert (head_dim, True, (-1, -1), 0.0) in windows  # the dense row each window line is read against
        assert (head_dim, True, (4096, -1), 0.0) in windows
    assert (128, False, (2048, 2048), 0.0) in windows and (128, False, (-1, -1), 0.0) in windows
    assert (128, True, (-1, -1), 30.0) in windows and (128, True, (4096, -1), 30.0) in windows


def test_sweep_keys_are_checked(tmp_path):
    with pytest.raises(ValueError, match="window"):
        load_shapes_table(tmp_path, "batch = 1\nheads_q = 2\nseqlen = 64\nhead_dim = 64\nwindow_left = -3")


def test_rows_carry_the_case_columns_and_resume_keys_match_the_csv():
    backend = type("B", (), dict(backend="cuda", family="cuda", variant="hopper"))()
    case = oracle.Case(1, 2, 2, 64, 64, 192, causal=True, window=(16, -1), softcap=30.0, head_dim_v=128)
    run = dict(git_commit="abc", gpu="NVIDIA H200", driver="1", torch="2.11", triton="3.6.0")
    fields = {**run, **bench._case_fields(backend, case)}
    assert (fields["head_dim_v"], fields["window_left"], fields["window_right"], fields["softcap"]) == (128, 16, -1, 30.0)
    written = bench.csv_cells(fields)
    assert bench._key(fields) == bench._key(written)  # the key of a row to measure equals its CSV row's
    plain = {**run, **bench._case_fields(backend, oracle.Case(1, 2, 2, 64, 64, 64))}
    assert bench.csv_cells(plain)["softcap"] == "0" and bench._key(plain) == bench._key(bench.csv_cells(plain))
    assert shape_label(fields) == "bf16 b1 h2/2 q64 k64 d192v128 causal win16,-1 cap30"
    assert shape_label(plain) == "bf16 b1 h2/2 q64 k64 d64"


def test_older_csvs_read_as_their_dense_cases(tmp_path):
    """A CSV written before the later columns: load_results fills them with what the rows meant."""
    frame = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False).drop(columns=list(LATER_CASE_COLUMNS), errors="ignore")
    (tmp_path / "old.csv").write_text(frame.to_csv(index=False))
    old = results.load_results(tmp_path)
    now = results.load_results(FIXTURE.parent)
    cases = old[old["backend"] != "ceiling"]
    assert (cases["head_dim_v"] == cases["head_dim"]).all()
    assert (cases["window_left"] == -1).all() and (cases["window_right"] == -1).all() and (cases["softcap"] == 0).all()
    assert len(old) == len(now)
    assert report.readme_findings(tmp_path) == report.readme_findings(FIXTURE.parent)


def _local_csv(path, rates: dict) -> None:
    """A local-sweep CSV: one passing row per ((backend, variant), head_dim, causal, window_left, softcap) with its
    TFLOP/s; every row's time is the rate's inverse (the findings use rates)."""
    rows = []
    for ((backend, variant), head_dim, causal, left, softcap), tflops in rates.items():
        row = {c: "" for c in COLUMNS}
        row.update(timestamp="2026-12-02T00:00:00+00:00", sweep="local", git_commit="0" * 40, gpu="NVIDIA H200",
                   driver="1", cuda="13.0", torch="2.11", triton="3.6.0", backend=backend,
                   family="peer" if backend == "sdpa" else backend, variant=variant, format="bf16", batch=1,
                   heads_q=16, heads_kv=16, seqlen_q=32768, seqlen_k=32768, head_dim=head_dim, causal=causal,
                   head_dim_v=head_dim, window_left=left, window_right=-1, softcap=softcap, ms_p20=1 / tflops,
                   ms_p50=1 / tflops, ms_p80=1 / tflops, tflops=tflops, ceiling="wgmma.bf16", ceiling_tflops=800,
                   pct_sol=100 * tflops / 800, rel_l2_unquantized=0.001, oracle="pass")
        rows.append(row)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


CUDA, TRITON = ("cuda", "hopper"), ("triton", "fa2")
RATES = {
    (CUDA, 128, True, -1, 0.0): 650.0, (CUDA, 128, True, 1024, 0.0): 520.0, (CUDA, 128, True, 4096, 0.0): 585.0,
    (TRITON, 128, True, -1, 0.0): 330.0, (TRITON, 128, True, 1024, 0.0): 260.0, (TRITON, 128, True, 4096, 0.0): 300.0,
    (CUDA, 128, True, -1, 30.0): 520.0, (TRITON, 128, True, -1, 30.0): 250.0,
    (("triton", "fa2-ws"), 128, True, -1, 0.0): 640.0,
}


def test_local_finding_is_computed_from_the_rows(tmp_path):
    _local_csv(tmp_path / "local.csv", RATES)
    (text,) = report.local_findings(results.load_results(tmp_path))
    # cuda / triton per window: 520 / 260 = 2.00, 585 / 300 = 1.95; against its dense causal 650: 0.80, 0.90
    assert "`cuda:hopper` is 1.95–2.00× `triton:fa2`" in text
    assert "runs at 0.80–0.90× its own dense rate on the same mask (lowest at d128 causal window 1k)" in text
    assert "windows of 1k–4k keys" in text and "2 window cases" in text
    assert "softcap 30 runs at 0.80× of its rate without it" in text  # 520 / 650
    assert not re.search(r"\d\.\d{3}", text)  # two decimals, as the other findings


def test_local_finding_and_figure_need_their_rows(tmp_path):
    assert report.local_findings(results.load_results(tmp_path)) == []
    with pytest.raises(figures.NothingToDraw):
        figures.fig_local(results.load_results(tmp_path))


def test_figure_7_is_drawn_from_the_local_folder_only(tmp_path):
    data = tmp_path / "data"
    (data / "local").mkdir(parents=True)
    (data / FIXTURE.name).write_bytes(FIXTURE.read_bytes())
    _local_csv(data / "local" / "local.csv", RATES)
    fig = figures.fig_local(results.load_results(data / "local"))
    (ax,) = fig.axes
    solid = sorted((tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.get_lines()
                   if line.get_linestyle() == "-")
    assert solid == [((1024, 4096), (260.0, 300.0)), ((1024, 4096), (520.0, 585.0))]  # triton:fa2, cuda:hopper
    dotted = sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == ":")
    assert dotted == [330.0, 640.0, 650.0]  # each backend's dense causal rate (the capped rows are not drawn)
    written = figures.generate(data, tmp_path / "figs", results.REPO_ROOT / "figures" / "reference", log=lambda _: None)
    assert {p.name for p in written} >= {"fig7_local_attention.png", "fig7_local_attention.pdf"}
    # the dense figures do not see the local rows
    assert "local" not in results.load_results(data)["sweep"].unique()


def test_the_timed_call_is_the_judged_call():
    """measure() passes window= / softcap= to the timed calls as to the oracle's (a sweep once timed the dense
    kernel under the windowed FLOP count)."""
    from compare.backends import Backend

    calls = []

    def run(q, k, v, *, causal=False, scale=None, return_lse=False, window=(-1, -1), softcap=0.0):
        calls.append((window, softcap))
        out, lse = oracle.reference(q, k, v, causal=causal, scale=scale or q.shape[-1] ** -0.5, window=window,
                                    softcap=softcap)
        out = out.to(q.dtype)
        return (out, lse.float()) if return_lse else out

    backend = Backend(name="test:local", family="test", formats=("fp32",), head_dims=None, run=run,
                      availability=lambda: None, local=True, softcap=True)
    case = oracle.Case(1, 2, 2, 48, 64, 32, causal=True, fmt="fp32", window=(8, -1), softcap=5.0)
    row = bench.measure(backend, case, "cpu", {}, warmup_ms=1, rep_ms=1)
    assert row["oracle"] == "pass", row
    assert len(calls) >= 2 and set(calls) == {((8, -1), 5.0)}
