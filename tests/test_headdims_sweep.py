"""The headdims sweep (compare/sweeps/headdims.toml): its cases, figure 11 and the README's head-dim finding, from
results rows written here (no GPU)."""

import pytest

from compare import figures, report, results, sweeps
import results_rows


def test_the_sweep_asks_for_the_dims_models_use_and_the_192_128_pair():
    sweep = sweeps.load("headdims")
    dims = {(c.head_dim, c.head_dim_v, c.causal) for c in sweep.cases}
    assert {(d, None, causal) for d in (64, 80, 96, 128, 160, 192, 256) for causal in (False, True)} <= dims
    assert {(192, 128, False), (192, 128, True)} <= dims
    assert {c.batch * c.seqlen_q for c in sweep.cases} == {16384}
    assert "cuda:hopper" in sweep.backends and "sdpa:cudnn" in sweep.backends


def _row(label, tflops, head_dim, head_dim_v=None, causal=False):
    backend, variant = label.split(":")
    row = results_rows.row(sweep="headdims", backend=backend, variant=variant,
                           family=backend if backend != "sdpa" else "peer", format="bf16", batch=4, heads_q=16,
                           heads_kv=16, seqlen_q=4096, seqlen_k=4096, head_dim=head_dim,
                           head_dim_v=head_dim_v or head_dim, causal=causal, window_left=-1, window_right=-1,
                           softcap=0, ms_p20=1, ms_p50=1, ms_p80=1, tflops=tflops, oracle="pass")
    return row


# cuda:hopper: d192 on its own kernel (0.8 of d256's rate, 560 / 600 = 0.93 of d128's), d96 on its own (0.77 of
# d128's rate; no d64 row to hold it against), 192/128 on its own (0.75 of d192's rate), d160 on the d192 kernel (0.9)
ROWS = [("cuda:hopper", 600, 128), ("cuda:hopper", 460, 96), ("cuda:hopper", 700, 256), ("cuda:hopper", 560, 192),
        ("cuda:hopper", 504, 160), ("cuda:hopper", 420, 192, 128), ("sdpa:cudnn", 500, 96), ("sdpa:cudnn", 700, 192),
        ("sdpa:cudnn", 600, 192, 128), ("sdpa:cudnn", 580, 128), ("sdpa:cudnn", 480, 160)]


def _results(folder):
    return results_rows.write_and_load(folder, [_row(*r) for r in ROWS], "headdims")


def test_the_head_dim_finding_is_computed_from_the_rows(tmp_path):
    (text,) = report.headdims_findings(_results(tmp_path))
    assert "its own d192 kernel runs at 0.80× the d256 kernel's FLOP rate and 0.93× d128's" in text
    assert "its own d96 kernel" not in text  # (no d64 row)
    # 420 / 560 = 0.75 (its own kernel); d160 on the d192 kernel: 504 / 560 = 0.90
    assert "its own Q/K 192 with V 128 kernel runs at 0.75× the d192 kernel's FLOP rate" in text
    assert "at d160, which runs on the kernel of the next of 64 / 80 / 96 / 128 / 192 / 256" in text
    assert "with zero columns, 0.90× that kernel's own FLOP rate (lowest at d160)" in text
    # held to 0.9: d96 on d128 0.77, d192 on d256 0.80 (no d80 row)
    assert ("The issue's target (d96 / d192 at 0.9× or more of the rate of the kernel they ran on without one of "
            "their own: d96 on d128, d192 on d256) is met in 0 of 2 cases (lowest: d96, 0.77×)") in text
    # against cuDNN besides 64 / 128 / 256: 460 / 500 = 0.92, 504 / 480 = 1.05, 560 / 700 = 0.80, 420 / 600 = 0.70
    assert ("At the head dims besides 64 / 128 / 256: 0.70–1.05× cuDNN's speed (ahead in 1 of 4; cuDNN is ahead in "
            "3, most at d192v128: 0.70×)") in text


def test_the_head_dim_target_counts_what_reaches_it(tmp_path):
    rows = _results(tmp_path)
    faster = rows["variant"].eq("hopper") & rows["head_dim"].eq(96)
    rows.loc[faster, "tflops"] = 560  # 560 / 600 = 0.93: d96 reaches 0.9 of d128's rate
    (text,) = report.headdims_findings(rows)
    assert "is met in 1 of 2 cases (lowest: d192, 0.80×)" in text


def test_figure_11_draws_each_backend_over_the_head_dims(tmp_path):
    rows = _results(tmp_path)
    fig = figures.fig_headdims(rows)
    (ax,) = fig.axes
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["96*", "128*", "160", "192*", "192/128*", "256*"]
    lines = {len(line.get_xdata()) for line in ax.get_lines()}
    assert lines == {6, 5}  # cuda:hopper at all six, cuDNN at five


def test_the_head_dim_finding_and_figure_need_their_rows(tmp_path):
    assert report.headdims_findings(results.load_results(tmp_path)) == []
    with pytest.raises(figures.NothingToDraw):
        figures.fig_headdims(results.load_results(tmp_path))


def test_the_head_dim_finding_without_padded_dims_names_only_own_kernels(tmp_path):
    rows = _results(tmp_path)
    (text,) = report.headdims_findings(rows[~rows["head_dim"].eq(160)])
    assert "its own Q/K 192 with V 128 kernel runs at 0.75×" in text
    assert "zero columns" not in text
