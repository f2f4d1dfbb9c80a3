"""The headdims sweep (compare/sweeps/headdims.toml): its cases, figure 11 and the README's head-dim finding, from
results rows written here (no GPU)."""
import csv

import pytest

from compare import figures, report, schema, sweeps


def test_the_sweep_asks_for_the_dims_models_use_and_the_192_128_pair():
    sweep = sweeps.load("headdims")
    dims = {(c.head_dim, c.head_dim_v, c.causal) for c in sweep.cases}
    assert {(d, None, causal) for d in (64, 80, 96, 128, 160, 192, 256) for causal in (False, True)} <= dims
    assert {(192, 128, False), (192, 128, True)} <= dims
    assert {c.batch * c.seqlen_q for c in sweep.cases} == {16384}
    assert "cuda:hopper" in sweep.backends and "sdpa:cudnn" in sweep.backends


def _row(label, tflops, head_dim, head_dim_v=None, causal=False):
    backend, variant = label.split(":")
    row = {c: "" for c in schema.COLUMNS}
    row.update(timestamp="2026-12-03T00:00:00+00:00", sweep="headdims", git_commit="0" * 40, gpu="NVIDIA H200",
               driver="1", cuda="13.0", torch="2.11", triton="3.6.0", backend=backend, variant=variant,
               family=backend if backend != "sdpa" else "peer", format="bf16", batch=4, heads_q=16, heads_kv=16,
               seqlen_q=4096, seqlen_k=4096, head_dim=head_dim, head_dim_v=head_dim_v or head_dim, causal=causal,
               window_left=-1, window_right=-1, softcap=0, ms_p20=1, ms_p50=1, ms_p80=1, tflops=tflops,
               oracle="pass")
    return row


# cuda:hopper: d96 on the d128 kernel (0.75 of its rate), d192 and 192/128 on the d256 one (0.8, 0.6)
ROWS = [("cuda:hopper", 600, 128), ("cuda:hopper", 450, 96), ("cuda:hopper", 700, 256), ("cuda:hopper", 560, 192),
        ("cuda:hopper", 420, 192, 128), ("sdpa:cudnn", 500, 96), ("sdpa:cudnn", 700, 192),
        ("sdpa:cudnn", 600, 192, 128), ("sdpa:cudnn", 580, 128)]


def _results(folder):
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "headdims.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=schema.COLUMNS)
        writer.writeheader()
        writer.writerows([_row(*r) for r in ROWS])
    return figures.load_results(folder)


def test_the_head_dim_finding_is_computed_from_the_rows(tmp_path):
    (text,) = report.headdims_findings(_results(tmp_path))
    assert "at d96, d192 and Q/K 192 with V 128, which run on the kernel of the next of 64 / 128 / 256" in text
    # 450 / 600 = 0.75, 560 / 700 = 0.80, 420 / 700 = 0.60
    assert "`cuda:hopper` runs at 0.60–0.80× that kernel's own FLOP rate" in text
    assert "lowest at d192v128)" in text
    # against cuDNN at the padded dims only: 450 / 500 = 0.90, 560 / 700 = 0.80, 420 / 600 = 0.70
    assert "0.70–0.90× cuDNN's speed there (ahead in 0 of 3; cuDNN is ahead in 3, most at d192v128: 0.70×)" in text


def test_figure_11_draws_each_backend_over_the_head_dims(tmp_path):
    rows = _results(tmp_path)
    fig = figures.fig_headdims(rows)
    (ax,) = fig.axes
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["96", "128*", "192", "192/128", "256*"]
    lines = {len(line.get_xdata()) for line in ax.get_lines()}
    assert lines == {5, 4}  # cuda:hopper at all five, cuDNN at four


def test_the_head_dim_finding_and_figure_need_their_rows(tmp_path):
    assert report.headdims_findings(figures.load_results(tmp_path)) == []
    with pytest.raises(figures.NothingToDraw):
        figures.fig_headdims(figures.load_results(tmp_path))
