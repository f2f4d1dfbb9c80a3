"""Figure 12 (compare.figures.fig_beyond_prefill): the best CUDA over the best Triton speed per case of the local,
varlen, headdims and mla sweeps, from results rows written here (no GPU)."""

import numpy as np
import pytest

from compare import figures, results
import results_rows


def _row(label, tflops, **case):
    backend, variant = label.split(":")
    row = results_rows.row(timestamp="2026-12-04T00:00:00+00:00", sweep="x", backend=backend, variant=variant,
                           family=backend if backend in ("cuda", "triton") else "peer", format="bf16", batch=1,
                           heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_k=4096, head_dim=128, causal=True,
                           window_left=-1, window_right=-1, softcap=0, ms_p20=1, ms_p50=1, ms_p80=1, tflops=tflops,
                           oracle="pass")
    row.update(case)
    row.setdefault("head_dim_v", row["head_dim"])
    return row


def _load(tmp_path, name, rows):
    return results_rows.write_and_load(tmp_path / name, rows, name)


def _sweeps(tmp_path):
    local = _load(tmp_path, "local", [
        _row("cuda:hopper", 400, head_dim=128, window_left=1024),
        _row("triton:fa2", 200, head_dim=128, window_left=1024),
        _row("cuda:hopper", 300, head_dim=64, window_left=1024), _row("triton:fa2", 250, head_dim=64, window_left=1024),
        _row("triton:fa2-ws", 500, head_dim=128),  # dense: not a local cell
        _row("cuda:hopper", 100, head_dim=256, window_left=1024, oracle="fail"), _row("triton:fa2", 90, head_dim=256,
                                                                                      window_left=1024)])
    varlen = _load(tmp_path, "varlen", [
        _row("cuda:hopper", 300, lengths="longtail", packing="packed"),
        _row("triton:fa2", 150, lengths="longtail", packing="packed"),
        _row("triton:fa2", 600, lengths="longtail", packing="padded"),  # the padded batch is no Triton varlen row
        _row("cuda:hopper", 200, lengths="uniform", packing="packed", causal=False),
        _row("triton:fa2", 250, lengths="uniform", packing="packed", causal=False)])
    headdims = _load(tmp_path, "headdims", [
        _row("cuda:hopper", 450, head_dim=96, causal=False), _row("triton:fa2", 300, head_dim=96, causal=False),
        _row("cuda:hopper", 500, head_dim=192, head_dim_v=128), _row("triton:fa2", 400, head_dim=192, head_dim_v=128),
        _row("sdpa:cudnn", 900, head_dim=192, head_dim_v=128)])
    mla = _load(tmp_path, "mla", [
        _row("cuda:decode", 60, batch=32, heads_q=16, heads_kv=1, seqlen_q=1, seqlen_k=8192, head_dim=576,
             head_dim_v=512, packing="latent", page_size=64, causal=False),
        _row("triton:decode", 40, batch=32, heads_q=16, heads_kv=1, seqlen_q=1, seqlen_k=8192, head_dim=576,
             head_dim_v=512, packing="latent", page_size=64, causal=False)])
    return local, varlen, headdims, mla


def test_each_panel_holds_the_best_cuda_over_the_best_triton_per_case(tmp_path):
    panels = {title: grid for title, grid, _, _ in results.beyond_prefill_ratios(*_sweeps(tmp_path))}
    assert list(panels) == ["local attention, causal, 4k keys", "packed variable-length batches",
                            "head dims, 4 x 4k tokens", "MLA decode, pages of 64"]
    local = panels["local attention, causal, 4k keys"]
    assert list(local.index) == ["d64", "d128", "d256"] and list(local.columns) == ["1k"]  # narrowest first
    assert local.loc["d128", "1k"] == pytest.approx(2.0) and local.loc["d64", "1k"] == pytest.approx(1.2)
    assert np.isnan(local.loc["d256", "1k"])  # the CUDA row failed the oracle: no ratio
    varlen = panels["packed variable-length batches"]
    assert list(varlen.columns) == ["longtail causal", "uniform full"]
    assert varlen.loc["d128", "longtail causal"] == pytest.approx(2.0)  # not against the padded 600
    assert varlen.loc["d128", "uniform full"] == pytest.approx(0.8)
    dims = panels["head dims, 4 x 4k tokens"]
    assert list(dims.columns) == ["96", "192/128"]
    assert dims.loc["full", "96"] == pytest.approx(1.5) and dims.loc["causal", "192/128"] == pytest.approx(1.25)
    assert panels["MLA decode, pages of 64"].loc["h16 q1", "b32 8k"] == pytest.approx(1.5)


def test_figure_12_draws_a_panel_per_sweep_and_needs_both_families(tmp_path):
    local, varlen, headdims, mla = _sweeps(tmp_path)
    fig = figures.fig_beyond_prefill(local, varlen, headdims, mla)
    assert sum(ax.get_visible() for ax in fig.axes if ax.get_title()) == 4
    only_cuda = headdims[headdims["family"] == "cuda"]
    empty = local.iloc[0:0]
    with pytest.raises(figures.NothingToDraw):
        figures.fig_beyond_prefill(empty, empty, only_cuda, empty)
