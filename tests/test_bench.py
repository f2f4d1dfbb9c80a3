"""The benchmark driver end to end on CPU with the SDPA math peer, plus FLOP counting, sweeps, merge."""

import csv
import itertools

import pytest
import torch

from compare import bench, oracle, sweeps
from conftest import load_shapes_table


@pytest.mark.parametrize("sq,sk", [(1, 1), (7, 30), (30, 7), (64, 64), (100, 1)])
def test_attention_pairs_bottom_right_is_exact(sq, sk):
    brute = sum(sum(1 for j in range(sk) if j <= i + sk - sq) for i in range(sq))
    assert bench.attention_pairs(sq, sk, causal=True) == brute
    assert bench.attention_pairs(sq, sk, causal=False) == sq * sk


def test_flops_formula():
    case = oracle.Case(2, 8, 2, 100, 100, 64, causal=True)
    assert bench.flops(case) == 4 * 2 * 8 * 64 * (100 * 101 // 2)
    # Q K^T at 192, P V at V's 128 columns
    assert bench.flops(case.replace(head_dim=192, head_dim_v=128)) == 2 * 2 * 8 * (192 + 128) * (100 * 101 // 2)


def test_named_sweeps_load():
    assert {"quick", "seed", "paper"} <= set(sweeps.available())
    quick = sweeps.load("quick")
    seqlens = {c.seqlen_q for c in quick.cases}
    assert {1024, 4096, 16384} <= seqlens
    assert all(c.batch * c.seqlen_q == 16384 for c in quick.cases if c.seqlen_q == c.seqlen_k)
    seed = sweeps.load("seed")
    assert {(c.batch, c.heads_q, c.seqlen_q, c.seqlen_k, c.head_dim) for c in seed.cases} == {(1, 8, 4096, 8192, 128)}


def test_bad_sweep_names_and_keys(tmp_path):
    with pytest.raises(ValueError, match="named sweeps"):
        sweeps.load("nope")
    with pytest.raises(ValueError, match="unknown keys"):
        load_shapes_table(tmp_path, "seqlen = 8\nhead_dimm = 64")


def test_shard_partitions_exactly():
    items = list(range(10))
    parts = [sweeps.shard(items, f"{i}/3") for i in range(3)]
    assert sorted(itertools.chain(*parts)) == items
    with pytest.raises(ValueError):
        sweeps.shard(items, "3/3")


def _tiny_sweep(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('backends = ["sdpa:math"]\nformats = ["fp32", "bf16"]\n'
                    "[[shapes]]\nbatch = 1\nheads_q = 2\nheads_kv = [1, 2]\nseqlen_q = 40\nseqlen_k = 72\n"
                    "head_dim = 64\ncausal = [false, true]\n")
    return sweeps.load(str(path))


def test_driver_end_to_end_on_cpu_with_resume(tmp_path):
    sweep = _tiny_sweep(tmp_path)
    out = tmp_path / "run.csv"
    logs = []
    bench.run(sweep, out=out, rep_ms=5, progress=False, log=logs.append)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8
    assert list(rows[0]) == bench.COLUMNS
    for r in rows:
        assert r["oracle"] == "pass", r
        assert float(r["tflops"]) > 0 and float(r["ms_p20"]) <= float(r["ms_p50"]) <= float(r["ms_p80"])
        assert r["gpu"] == "cpu" and r["git_commit"] and r["torch"]
        assert float(r["rel_l2"]) < 1e-2
    assert "TFLOP/s" in logs[-1]
    # Same commit, same machine: nothing left to measure.
    logs.clear()
    bench.run(sweep, out=out, rep_ms=5, progress=False, log=logs.append)
    assert len(list(csv.DictReader(out.open()))) == 8
    assert "0 to measure, 8 already" in logs[0]


def test_failing_backend_row_is_kept_marked_and_not_timed(tmp_path, monkeypatch):
    from compare import backends
    real = backends.get("sdpa:math")

    def wrong(q, k, v, *, causal=False, scale=None, return_lse=False):
        return real(q, k, v, causal=causal, scale=1.0)
    broken = backends.Backend(name="sdpa:math", family="peer", formats=("fp32",), head_dims=None, run=wrong,
                              availability=lambda: None, returns_lse=False)
    monkeypatch.setitem(backends.registry(), "sdpa:math", broken)
    out = tmp_path / "fail.csv"
    bench.run(_tiny_sweep(tmp_path), out=out, rep_ms=5, progress=False, log=lambda s: None)
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["oracle"] == "fail" and r["tflops"] == "" and r["ms_p50"] == "" for r in rows)


def test_merge_joins_shards_exactly(tmp_path):
    sweep = _tiny_sweep(tmp_path)
    parts = []
    for i in range(2):
        part = tmp_path / f"part{i}.csv"
        bench.run(sweep, out=part, shard=f"{i}/2", rep_ms=5, progress=False, log=lambda s: None)
        parts.append(part)
    merged = tmp_path / "merged.csv"
    assert bench.merge(parts, merged) == 8
    keys = [tuple(r[c] for c in bench.KEY_COLUMNS) for r in csv.DictReader(merged.open())]
    assert len(set(keys)) == 8
    assert bench.merge(parts + parts, merged) == 8  # duplicates collapse


def test_ceilings_become_rows_the_figures_can_read():
    rows = bench.ceiling_rows({"mma.sync.bf16": 611.0, "dram": 4.24})
    assert [(r["variant"], r["ceiling_tflops"], r["oracle"]) for r in rows] == [("mma.sync.bf16", 611.0, "n/a"),
                                                                                 ("dram", 4.24, "n/a")]
    assert rows[1]["note"].startswith("TB/s")


def test_a_backends_tile_choice_lands_in_the_note_of_its_timed_rows(tmp_path, monkeypatch):
    import dataclasses

    from compare import backends
    real = backends.get("sdpa:math")
    tuned = dataclasses.replace(real, last_config=lambda: "64x128 w4 s3")
    monkeypatch.setitem(backends.registry(), "sdpa:math", tuned)
    out = tmp_path / "cfg.csv"
    bench.run(_tiny_sweep(tmp_path), out=out, rep_ms=5, progress=False, log=lambda s: None)
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["oracle"] == "pass" and r["note"] == "config 64x128 w4 s3" for r in rows)


def test_triton_last_config_names_the_autotuners_pick(monkeypatch):
    import triton

    import triton_impl
    from triton_impl.kernels import fp8_tma, tuning
    assert triton_impl.last_config("no-such-variant") is None
    assert tuning._TUNERS["fp8"] is fp8_tma._fp8_fwd_tuned
    tuner = tuning._TUNERS["fp8"]
    monkeypatch.setattr(tuner, "best_config", triton.Config({"BLOCK_M": 64, "BLOCK_N": 128}, num_warps=4,
                                                            num_stages=2, maxnreg=168), raising=False)
    assert triton_impl.last_config("fp8") == "64x128 w4 s2 r168"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_capture_is_checked_and_refuses_what_it_cannot_replay():
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    graph, why = bench.capture_graph(lambda: x * 2)
    assert graph is not None and why == ""
    graph, why = bench.capture_graph(lambda: x * float(x.sum().item()))  # a host sync cannot be captured
    assert graph is None and why
    p20, p50, p80, how = bench.time_call(lambda: x * 2, "cuda", warmup_ms=5, rep_ms=10, graph=True)
    assert 0 < p20 <= p50 <= p80 and how == ""


def test_a_run_without_out_writes_to_scratch_never_to_the_published_data(monkeypatch, tmp_path):
    environment = {"gpu": "NVIDIA H200", "git_commit": "abc1234"}
    monkeypatch.delenv(bench.OUT_ENV, raising=False)
    path = bench.default_output("quick", environment)
    assert path == bench.env_mod.REPO_ROOT / "runs" / "quick-h200-abc1234.csv"
    assert bench.DATA_DIR not in path.parents
    gitignore = (bench.env_mod.REPO_ROOT / ".gitignore").read_text().split()
    assert "/runs/" in gitignore
    monkeypatch.setenv(bench.OUT_ENV, str(tmp_path / "mine"))
    assert bench.default_output("quick", {**environment, "gpu": "cpu"}) == tmp_path / "mine" / "quick-cpu-abc1234.csv"
    monkeypatch.setenv(bench.OUT_ENV, "")
    assert bench.default_output("quick", environment).parent == bench.SCRATCH_DIR


def test_run_without_out_lands_in_the_scratch_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(bench.OUT_ENV, str(tmp_path / "scratch"))
    out = bench.run(_tiny_sweep(tmp_path), rep_ms=5, progress=False, log=lambda s: None)
    assert out.parent == tmp_path / "scratch" and out.exists()
    assert len(list(csv.DictReader(out.open()))) == 8
