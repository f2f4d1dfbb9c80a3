"""The developer driver (scripts/dev.py, its data scripts/dev.toml, its parts scripts/devtools/) cannot run its
GPU work here, but its configuration must parse and name what the C++ defines, every subcommand must answer
--help and refuse bad arguments clearly, and its machinery (the check loop, the stage runner, interleaved
rounds, the same-bits comparison, the paired summary, the profile and trace readers) must behave."""

import csv
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
DEV = SCRIPTS / "dev.py"
CSRC = REPO / "cuda_impl" / "csrc"
sys.path.insert(0, str(SCRIPTS))

import dev  # noqa: E402
from devtools import core, families, paired, profile, same_bits, trace  # noqa: E402

ABLATIONS = {"no-overlap": "no_overlap", "no-pingpong": "no_pingpong", "no-persistent": "no_persistent",
             "no-cluster": "no_cluster", "no-split": "no_split"}
SUBCOMMANDS = ["hopper", "hopper-fp8", "hopper-mx", "ladder", "triton", "sanitize", "same-bits", "paired", "build",
               "ptxas", "list", "profile", "trace"]


def run_dev(*args, env=None, timeout=120):
    import os

    full_env = {k: v for k, v in os.environ.items() if k != "DEV_BASELINE_LIB"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(DEV), *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=REPO)


# --- configuration ---------------------------------------------------------------------------------------

def test_toml_parses_and_every_shape_makes_a_case():
    cfg = core.config(core.CONFIG_PATH)
    assert set(cfg["families"]) == {"hopper", "hopper-fp8", "hopper-mx", "ladder", "triton"}
    count = 0
    for name, fam in cfg["families"].items():
        assert fam["kind"] in ("16bit", "fp8", "mx", "triton"), name
        for key in ("check", "time", "sanitize", "sanitize_split"):
            expanded = families.expand(fam, fam.get(key, []))
            assert expanded or key not in fam, f"{name}.{key}: no case a variant takes"
            count += len(expanded)
    assert count > 200
    assert len(same_bits.items(cfg["same-bits"])) > 400
    assert len(paired.cases(cfg["paired"])) == 36


def test_the_builds_are_the_five_standing_ablations_and_the_trace_build_each_with_one_define():
    builds = core.config()["builds"]
    assert set(core.ablations()) == set(ABLATIONS)
    for name, enum in ABLATIONS.items():
        assert builds[name]["define"] == f"-DFA_HOPPER_ABLATION={enum}"
        assert builds[name]["variant"] == "hopper"
        assert core.flags_of(name) == (builds[name]["define"],)
    assert builds["trace"]["define"] == "-DFA_HOPPER_TRACE=1" and set(builds) == {*ABLATIONS, "trace"}
    assert core.flags_of("default") == () and core.flags_of("baseline") == ("baseline",)
    with pytest.raises(core.UsageError, match="unknown build 'no-overlaps'"):
        core.flags_of("no-overlaps")


def test_every_ablation_define_is_one_the_hopper_config_knows():
    config_cuh = CSRC / "hopper" / "config.cuh"
    if not config_cuh.exists():
        pytest.skip("cuda_impl/csrc/hopper/config.cuh does not exist yet (the Hopper kernels' config table)")
    text = config_cuh.read_text()
    assert "FA_HOPPER_ABLATION" in text
    enum = re.search(r"enum\s+class\s+HopperAblation\s*(?::\s*\w+\s*)?\{([^}]*)\}", text)
    assert enum, "config.cuh declares no `enum class HopperAblation { ... }`"
    values = {v.split("=")[0].strip() for v in enum.group(1).split(",") if v.strip()}
    for name, define in ((n, b["define"]) for n, b in core.builds().items() if b.get("ablation", True)):
        macro, _, value = define.removeprefix("-D").partition("=")
        assert macro == "FA_HOPPER_ABLATION" and value in values, f"{name}: {value} not in HopperAblation {values}"


def test_the_trace_define_and_buffer_layout_match_the_kernel():
    headers = [p for p in CSRC.rglob("*") if p.suffix in (".cu", ".cuh") and "FA_HOPPER_TRACE" in p.read_text()]
    assert headers, "no source under cuda_impl/csrc reads FA_HOPPER_TRACE"
    (header,) = [p for p in CSRC.rglob("*trace.cuh")]
    text = header.read_text()
    for name in ("CTAS", "ROLES", "ITEMS", "EVENTS"):
        assert int(re.search(rf"constexpr int {name} = (\d+);", text).group(1)) == getattr(trace, name), name
    consumer = re.search(r"enum ConsumerMark : int \{([^}]*)\}", text).group(1)
    assert [m.split("=")[0].strip() for m in consumer.split(",")][0] == "Q_LANDED" and "Q_LANDED = 1" in consumer
    assert consumer.replace(" ", "").split(",")[-1].strip() == "STORED" and trace.STORED == 7


def test_scripts_name_no_build_define_but_the_two_standing_ones():
    seen = {}
    for path in SCRIPTS.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".sh", ".toml", ".md"):
            for macro in re.findall(r"\bFA_[A-Z0-9_]+", path.read_text()):
                seen.setdefault(macro, set()).add(path.name)
    assert set(seen) <= {"FA_HOPPER_ABLATION", "FA_HOPPER_TRACE"}, seen


def test_same_bits_covers_every_variant_and_head_dim_the_library_takes():
    import cuda_impl

    table = core.config()["same-bits"]["variants"]
    assert set(table) == {"v1", "v2", "v3", "v4", "v5", "hopper", "hopper-fp8", "hopper-mxfp8", "hopper-nvfp4"}
    for variant, spec in table.items():
        kernel_dims = (64, 80, 96, 128, 192, 256) if variant == "hopper" else (64, 128, 256)  # (hopper_kernel_dim)
        takes = cuda_impl.VARIANTS[variant]["head_dims"]
        assert tuple(spec["head_dims"]) == tuple(d for d in takes if d in kernel_dims)
        assert set(spec["formats"]) == set(cuda_impl.VARIANTS[variant]["formats"]) & set(core.ALL_FORMATS)
    todo = same_bits.items()
    got = {(i.variant, i.case.fmt, i.case.head_dim, i.case.causal) for i in todo}
    for variant, spec in table.items():
        for fmt in spec["formats"]:
            for d in spec["head_dims"]:
                assert {(variant, fmt, d, False), (variant, fmt, d, True)} <= got
    cases = [i.case for i in todo]
    assert any(c.causal and c.seqlen_q > c.seqlen_k for c in cases)
    assert any(c.causal and c.seqlen_q < c.seqlen_k for c in cases)
    assert any(c.heads_q == 8 and c.heads_kv == 2 for c in cases) and any(c.batch == 2 for c in cases)
    assert {300, 517, 1000, 1999} <= {c.seqlen_q for c in cases}
    hopper = [i.case for i in todo if i.variant == "hopper" and i.case.fmt == "bf16"]

    def has(**kw):
        return any(all(getattr(c, k) == v for k, v in kw.items()) for c in hopper)

    assert has(causal=False, head_dim=128, seqlen_k=1024)                      # <= 1024 keys
    assert any(not c.causal and c.head_dim == 128 and 2048 <= c.seqlen_k <= 4096 for c in hopper)
    tiles = {math.ceil(c.seqlen_q / 128) % 2 for c in hopper if not c.causal and c.head_dim == 128 and c.seqlen_k > 4096
             and c.seqlen_k == 4608}
    assert tiles == {0, 1}                                                     # even and odd query tiles
    assert any(c.causal and c.head_dim == 64 and c.seqlen_q <= 1024 for c in hopper)
    assert any(c.causal and c.head_dim == 64 and c.seqlen_q > 1024 for c in hopper)
    for d in (64, 128):
        assert has(batch=4, heads_q=16, seqlen_q=2048, head_dim=d, causal=False)  # more items than 132 SMs
    labels = [(i.variant, i.label) for i in todo]
    assert len(labels) == len(set(labels)), "a case twice"
    assert same_bits.items() == todo, "the list must be fixed"


# --- the command line ------------------------------------------------------------------------------------

def test_every_subcommand_answers_help():
    choices = dev.parser()._subparsers._group_actions[0].choices
    assert set(SUBCOMMANDS) <= set(choices)
    top = run_dev("--help")
    assert top.returncode == 0 and all(name in top.stdout for name in SUBCOMMANDS), top.stderr
    for name in choices:
        r = run_dev(name, "--help")
        assert r.returncode == 0 and f"usage: dev.py {name}" in r.stdout, (name, r.stderr[-2000:])
    assert "DEV_BASELINE_LIB" in run_dev("same-bits", "--help").stdout


@pytest.mark.parametrize("args, env, message", [
    (["hopper", "--rounds", "0"], {}, "--rounds: a positive integer, got 0"),
    (["hopper", "--builds", "no-overlaps"], {}, "'no-overlaps' is not an ablation build of family hopper"),
    (["hopper-fp8", "--builds", "no-split"], {}, "'no-split' is not an ablation build of family hopper-fp8"),
    (["sanitize", "hoper"], {}, "invalid choice: 'hoper'"),
    (["sanitize", "hopper", "--build", "fast"], {}, "unknown build 'fast'"),
    (["same-bits"], {}, "same-bits needs the baseline library: set DEV_BASELINE_LIB"),
    (["same-bits", "--baseline", "/no/such/libcuda_fa.so"], {}, "no file /no/such/libcuda_fa.so"),
    (["same-bits", "--variants", "v9"], {"DEV_BASELINE_LIB": __file__}, "'v9' is not in dev.toml"),
    (["paired"], {}, "paired needs the baseline library"),
    (["paired", "--formats", "fp4"], {"DEV_BASELINE_LIB": __file__}, "no case of dev.toml [paired] matches"),
    (["build", "no-pipelining"], {}, "unknown build 'no-pipelining'"),
    (["profile", "--stalls", "x.csv", "--per", "0"], {}, "--per: a positive number of units"),
    (["profile"], {}, "give at least one CASE"),
    (["trace", "4,16,16,4096,4096"], {}, "bad case '4,16,16,4096,4096'"),
    (["frobnicate"], {}, "invalid choice: 'frobnicate'"),
])
def test_argument_errors_are_refused_with_a_clear_message(args, env, message):
    r = run_dev(*args, env=env)
    assert r.returncode != 0 and message in r.stderr + r.stdout, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr


def test_shape_strings_are_read_and_bad_ones_refused():
    s = core.parse_shape("fp16 b2 h8/2 q300 k517 d128 causal large scale=0.3")
    assert (s.fmt, s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k, s.head_dim) == ("fp16", 2, 8, 2, 300, 517, 128)
    assert s.causal and s.dist == "large" and s.scale == 0.3
    s = core.parse_shape("b1 h16 q4096")
    assert (s.fmt, s.heads_kv, s.seqlen_k, s.head_dim, s.causal) == (None, 16, 4096, None, False)
    assert s.case("bf16", 64).shape_str() == "bf16 b1 h16/16 q4096 k4096 d64 full normal"
    for bad, why in [("b1 h8/3 q10", "multiple"), ("b1 h8 q10 q20", "given twice"), ("b1 q10", "missing heads"),
                     ("b1 h8 q10 causual", "cannot read 'causual'"), ("b1 h8 q1k", "cannot read 'q1k'")]:
        with pytest.raises(core.UsageError, match=why):
            core.parse_shape(bad)
    with pytest.raises(core.UsageError, match="no head_dim"):
        core.parse_shape("bf16 b1 h8 q10").case()


def test_a_family_expands_formats_to_the_variants_that_take_them():
    mx = families.expand(core.family("hopper-mx"), ["b1 h2 q128 d128", "nvfp4 b1 h2 q128 d64", "b1 h2 q64 d256"])
    assert [(v, c.fmt, c.head_dim) for v, c in mx] == [("hopper-mxfp8", "mxfp8", 128), ("hopper-nvfp4", "nvfp4", 128),
                                                       ("hopper-nvfp4", "nvfp4", 64)]  # no MX kernel at d256
    tri = families.expand(core.family("triton"), ["b1 h2 q128 d256"])
    assert sorted({v for v, _ in tri}) == ["fa2", "fa2-tma", "fa2-ws", "fp8"]  # fp8-ws takes no d256
    assert families.expand(core.family("ladder"), ["b1 h2 q64"], head_dims={64})[0][1].head_dim == 64
    assert families.family_builds("hopper", core.family("hopper"), "none", True) == ["default", "baseline"]
    assert families.family_builds("hopper", core.family("hopper"), "all", False) == ["default", *ABLATIONS]
    assert families.family_builds("ladder", core.family("ladder"), None, False) == ["default"]


# --- machinery ------------------------------------------------------------------------------------------

def test_checks_go_on_after_a_failure_and_an_exception(capsys):
    def boom():
        raise RuntimeError("kernel fault")

    failures, total = core.run_checks([("a", lambda: (True, "fine")), ("b", boom), ("c", lambda: (False, "off"))])
    assert (failures, total) == (2, 3)
    out = capsys.readouterr().out
    assert "PASS a: fine" in out and "FAIL b: RuntimeError: kernel fault" in out and "FAIL c: off" in out


def test_a_hung_stage_becomes_a_timeout(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(30)\n")
    assert core.run_stage(["--stage", "check"], 1, script=script) == 124
    done = tmp_path / "done.py"
    done.write_text("import sys\nsys.exit(3)\n")
    assert core.run_stage([], 30, script=done) == 3


def test_interleaved_rounds_reverse_the_order_and_drop_a_failing_candidate(capsys):
    order = []
    timings = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def candidate(name, fails=False):
        def fn():
            order.append(name)
            if fails:
                raise RuntimeError("no such backend")
        return name, fn

    def time_ms(fn):
        fn()
        return next(timings)

    medians = core.interleaved_medians("case", [candidate("a"), candidate("b", True), candidate("c")], 3, time_ms,
                                       lambda name, ms: f" note-{name}")
    assert order == ["a", "b", "c", "c", "a", "a", "c"]  # b tried once; round 1 runs backwards
    assert medians == {"a": 4.0, "c": 3.0}  # a: 1, 4, 5; c: 2, 3, 6
    out = capsys.readouterr().out
    assert "b            failed: RuntimeError: no such backend" in out and "(round 2) note-c" in out


def test_oracle_check_returns_the_verdict_for_run_checks():
    import torch

    from compare import oracle

    def plain(q, k, v, *, causal=False, scale=None, return_lse=False):
        s = (q @ k.transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
        out = torch.softmax(s, dim=-1) @ v
        return (out, torch.logsumexp(s, dim=-1)) if return_lse else out

    ok, detail = core.oracle_check(plain, oracle.Case(1, 2, 2, 17, 23, 64, fmt="fp32", seed=3), device="cpu")
    assert ok and "PASS" in detail
    ok, detail = core.oracle_check(lambda q, k, v, **kw: tuple(x * 1.01 for x in plain(q, k, v, **kw)),
                                   oracle.Case(1, 2, 2, 17, 23, 64, fmt="fp32", seed=3), device="cpu")
    assert not ok and "FAIL" in detail


# --- same-bits on fake launchers -------------------------------------------------------------------------

def _cpu_items(n=3):
    from compare import oracle

    return [same_bits.Item("fake", oracle.Case(1, 2, 2, 8 + i, 8 + i, 16, fmt="bf16", seed=i), f"case{i}")
            for i in range(n)]


def _cpu_inputs(item):
    import torch

    g = torch.Generator().manual_seed(item.case.seed)
    return torch.randn(item.case.batch, item.case.heads_q, item.case.seqlen_q, item.case.head_dim, generator=g)


def _cpu_outputs(q):
    import torch

    return (torch.full(q.shape, math.nan, dtype=torch.bfloat16), torch.full(q.shape[:-1], math.nan))


def _write(q, out, lse):
    out.copy_(q.to(out.dtype))
    lse.copy_(q.sum(-1))


def _flip_one_bit(t):
    import torch

    bits = t.view(torch.int16 if t.element_size() == 2 else torch.int32)
    bits.view(-1)[5] ^= 1


def test_same_bits_identical_outputs_pass_and_one_bit_of_difference_fails(tmp_path, capsys):
    def launch(item, q, library, out, lse):
        _write(q, out, lse)
        if library == "baseline" and item.label == "case1":
            _flip_one_bit(out)
        if library == "baseline" and item.label == "case2":
            _flip_one_bit(lse)

    identical, total = same_bits.run(_cpu_items(), _cpu_inputs, launch, _cpu_outputs, tmp_path / "sb.csv")
    assert (identical, total) == (1, 3)
    rows = same_bits.read_rows(tmp_path / "sb.csv")
    assert [(r["case"], r["identical_out"], r["identical_lse"]) for r in rows] == [
        ("case0", True, True), ("case1", False, True), ("case2", True, False)]
    assert rows[0]["max_abs_diff"] == 0.0 and 0 < rows[1]["max_abs_diff"] < 0.1 and rows[1]["max_abs_diff_lse"] == 0
    assert 0 < rows[2]["max_abs_diff_lse"] < 1e-3
    with open(tmp_path / "sb.csv") as f:
        assert next(csv.reader(f))[:6] == ["case", "variant", "format", "identical_out", "identical_lse", "max_abs_diff"]
    out = capsys.readouterr().out
    assert "same bits: 1 / 3 identical" in out.splitlines()[-1] and "DIFFERS fake case1" in out


def test_same_bits_poisons_outputs_so_an_unwritten_element_differs(tmp_path):
    def launch(item, q, library, out, lse):
        assert bool(out.isnan().all()) and bool(lse.isnan().all()), "outputs must come NaN-filled"
        _write(q, out, lse)
        if library == "new":
            out.view(-1)[3] = math.nan  # one element this library did not write

    identical, total = same_bits.run(_cpu_items(1), _cpu_inputs, launch, _cpu_outputs, tmp_path / "sb.csv")
    (row,) = same_bits.read_rows(tmp_path / "sb.csv")
    assert identical == 0 and not row["identical_out"] and row["identical_lse"]
    assert row["max_abs_diff"] == math.inf and row["nan_out_new"] == 1 and row["nan_out_baseline"] == 0


def test_same_bits_keeps_going_after_an_error_and_stops_after_a_lost_context(tmp_path):
    calls = []

    def launch(item, q, library, out, lse):
        calls.append((item.label, library))
        if item.label == "case0" and library == "baseline":
            raise RuntimeError("cuda_impl hopper: refused")
        _write(q, out, lse)

    same_bits.run(_cpu_items(), _cpu_inputs, launch, _cpu_outputs, tmp_path / "a.csv")
    rows = same_bits.read_rows(tmp_path / "a.csv")
    assert rows[0]["error"] == "baseline: RuntimeError: cuda_impl hopper: refused"
    assert [same_bits.identical_row(r) for r in rows] == [False, True, True]
    calls.clear()
    identical, _ = same_bits.run(_cpu_items(), _cpu_inputs, launch, _cpu_outputs, tmp_path / "b.csv",
                                 context_lost=lambda: True)
    assert identical == 0 and calls == [("case0", "new"), ("case0", "baseline")]
    assert [r["error"] for r in same_bits.read_rows(tmp_path / "b.csv")][1:] == ["not run: CUDA context lost"] * 2


def test_same_bits_reports_a_hung_case_and_goes_on_after_it(tmp_path, monkeypatch, capsys):
    """The parent runs the cases in a child with a time limit; a child that hangs (124) leaves its rows, the
    next case is written as a timeout and a fresh child starts after it."""
    import argparse

    todo = same_bits.items()[:5]
    monkeypatch.setattr(same_bits, "items", lambda variants=None: todo)
    out = tmp_path / "sb.csv"
    starts = []

    def fake_stage(argv, timeout_s, label=None):
        start = int(argv[argv.index("--start") + 1])
        starts.append(start)
        with out.open("a" if start else "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=same_bits.FIELDS)
            if not start:
                writer.writeheader()
            for item in todo[start:]:
                if item is todo[1]:
                    return 124  # hangs in the second case
                writer.writerow(dict(case=item.label, variant=item.variant, format=item.case.fmt,
                                     identical_out=True, identical_lse=True, max_abs_diff=0, error=""))
        return 0

    monkeypatch.setattr(core, "run_stage", fake_stage)
    args = argparse.Namespace(baseline=__file__, variants=None, out=str(out), stage=None, start=0)
    assert same_bits.main(args) == 1
    rows = same_bits.read_rows(out)
    assert starts == [0, 2] and len(rows) == 5
    assert rows[1]["error"].startswith("timeout") and [same_bits.identical_row(r) for r in rows] == [
        True, False, True, True, True]
    assert "same bits: 4 / 5 identical" in capsys.readouterr().out


def test_the_timing_table_is_one_per_format_with_the_headline_over_the_first_peer():
    fam = dict(core.family("hopper-mx"), headline="hopper-nvfp4")
    rows = [("mxfp8", "mx case", {"hopper-mxfp8": 400.0, "triton:mxfp8-dequant": 200.0}, {}, "1700 MHz 500 W"),
            ("nvfp4", "nv case", {"hopper-nvfp4": 300.0, "triton:nvfp4-dequant": 250.0}, {"x": 0.5}, "1800 MHz")]
    text = families.table(fam, rows, 3)
    mx, nv = text.split("\n\nnvfp4: ")
    assert "ratio = hopper-mxfp8 / triton:mxfp8-dequant" in mx and "nvfp4" not in mx
    assert mx.splitlines()[-1].split()[-5:] == ["2.000", "1700", "MHz", "500", "W"]
    assert "ratio = hopper-nvfp4 / triton:nvfp4-dequant" in nv and nv.splitlines()[-2].split()[-3] == "1.200"
    assert nv.splitlines()[-1].split() == ["diff:", "x", "5.00e-01"]


def test_same_bits_compares_raw_bits_not_values():
    import torch

    zero, negative_zero = torch.zeros(4), torch.zeros(4)
    negative_zero[1] = -0.0
    lse = torch.full((2,), -math.inf)
    same = same_bits.compare_outputs((zero, lse), (zero.clone(), lse.clone()))
    assert same["identical_out"] and same["identical_lse"] and same["max_abs_diff"] == 0.0
    signed = same_bits.compare_outputs((zero, lse), (negative_zero, lse))
    assert not signed["identical_out"] and signed["max_abs_diff"] == 0.0  # equal values, other bits
    shape = same_bits.compare_outputs((zero, lse), (torch.zeros(5), lse))
    assert not shape["identical_out"] and "shapes differ" in shape["error"]


def test_launch_inputs_are_prepared_as_the_public_path_prepares_them_and_outputs_come_poisoned():
    import torch

    from compare import oracle
    from devtools import kernels

    assert [kernels.kind_of(v) for v in ("v1", "v5", "hopper", "hopper-fp8", "hopper-mxfp8", "hopper-nvfp4")] == \
        ["16bit", "16bit", "16bit", "fp8", "mx", "mx"]
    for fmt, dtype in (("fp16", torch.float16), ("fp8", torch.bfloat16), ("nvfp4", torch.bfloat16)):
        inputs = oracle.make_inputs(oracle.Case(2, 4, 2, 33, 50, 64, fmt=fmt, seed=1), "cpu")
        first, second = same_bits.gpu_outputs(inputs), same_bits.gpu_outputs(inputs)
        out, lse = first
        assert out.shape == (2, 4, 33, 64) and out.dtype == dtype and lse.shape == (2, 4, 33)
        assert lse.dtype == torch.float32 and bool(out.isnan().all()) and bool(lse.isnan().all())
        assert out.data_ptr() != second[0].data_ptr()  # fresh for each launch
    v = oracle.make_inputs(oracle.Case(1, 2, 2, 16, 333, 64, fmt="fp8", seed=1), "cpu").v
    vt = kernels.padded_vt(v)
    assert v.data.stride(-2) % 16 and vt.stride(-2) % 16 == 0 and vt.shape == v.data.shape
    assert torch.equal(vt.view(torch.uint8), v.data.view(torch.uint8))
    aligned = oracle.make_inputs(oracle.Case(1, 2, 2, 16, 320, 64, fmt="fp8", seed=1), "cpu").v
    assert kernels.padded_vt(aligned) is aligned.data


# --- paired ---------------------------------------------------------------------------------------------

def test_paired_default_list_and_ratio_of_baseline_time_to_new_time():
    got = {(c.fmt, c.head_dim, c.seqlen_q, c.causal) for c in paired.cases()}
    expected = {(f, d, s, c) for f, ds in (("bf16", (64, 80, 96, 128, 256)), ("fp8", (128, 256)), ("mxfp8", (128,)),
                                           ("nvfp4", (128,))) for d in ds for s in (4096, 16384) for c in (False, True)}
    assert got == expected
    # 2048 model columns; d80 / d96 as the headdims sweep runs them, at 16 heads
    assert all(c.batch * c.seqlen_q == 16384 and c.heads_q * c.head_dim == (2048 if c.head_dim not in (80, 96)
                                                                              else 16 * c.head_dim)
               for c in paired.cases())

    def row(backend, ms, round_, variant="hopper", fmt="bf16"):
        return dict(backend=backend, variant=variant, format=fmt, batch=4, heads_q=16, heads_kv=16, seqlen_q=4096,
                    seqlen_k=4096, head_dim=128, causal=False, oracle="pass", ms_p50=ms, tflops=100 / ms,
                    note=f"round {round_}")

    rows = [row("cuda", 1.0, 0), row("baseline", 1.02, 0), row("sdpa", 1.1, 0, "cudnn"),
            row("cuda", 1.0, 1), row("baseline", 1.04, 1), row("sdpa", 1.1, 1, "cudnn"),
            row("cuda", 1.0, 2), row("baseline", 1.00, 2), row("sdpa", 1.1, 2, "cudnn")]
    text = paired.summary(rows, {"bf16": ("cuda:hopper", "baseline:hopper")}, 0.015)
    line = next(x for x in text.splitlines() if x.startswith("bf16 b4"))
    assert "1.020  [1.000, 1.040]  3" in line and line.endswith("<-")  # baseline 2% slower: flagged
    assert text.splitlines()[-1] == "paired: 0 / 1 cases within +-1.5%"


# --- profile (Nsight Compute) ---------------------------------------------------------------------------

PROFILE_RAW = """==PROF== Connected to process
"ID","Kernel Name","gpu__time_duration.sum","gpc__cycles_elapsed.avg.per_second","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
"","","ns","hz","inst","inst"
"0","spin_kernel(long)","1,000","1700000000","0","0"
"1","transpose_kernel","3,000","1750000000","0.5","0.1"
"2","fwd_hopper_kernel","1,234,500","1750000000","0.5","1.2"
"3","spin_kernel(long)","1,000","1700000000","0","0"
"4","cudnn_fwd","900,000","1690000000","0.7","0.1"
"""


def test_profile_splits_kernels_at_markers_and_keeps_each_cases_longest(tmp_path):
    (tmp_path / "ncu-raw.csv").write_text(PROFILE_RAW)
    profile.report(tmp_path / "ncu-raw.csv", ["cuda:hopper@1,1,1,64,64,128", "sdpa:cudnn@1,1,1,64,64,128"], tmp_path)
    with open(tmp_path / "profile.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["case"], r["kernel"], r["ms"], r["GHz"]) for r in rows] == [
        ("cuda:hopper@1,1,1,64,64,128", "fwd_hopper_kernel", "1.234", "1.75"),
        ("sdpa:cudnn@1,1,1,64,64,128", "cudnn_fwd", "0.9", "1.69")]
    assert rows[0]["top stalls (warps per issue)"] == "barrier 1.20, wait 0.50"
    assert rows[0]["tensor%"] == "-"  # not collected in this raw file
    with pytest.raises(SystemExit, match="2 marker kernels for 3 cases"):
        profile.report(tmp_path / "ncu-raw.csv", ["a", "b", "c"], tmp_path)


def test_profile_case_text_names_builds_of_the_toml_and_rejects_bad_cases():
    name, build, case = profile.parse_case("cuda:hopper-fp8@2,16,4,1000,2000,64,causal,fp8")
    assert name == "cuda:hopper-fp8" and build == ""
    assert (case.batch, case.heads_q, case.heads_kv, case.seqlen_q, case.seqlen_k, case.head_dim) == \
        (2, 16, 4, 1000, 2000, 64)
    assert case.causal and case.fmt == "fp8"
    assert profile.parse_case("sdpa:cudnn@1,8,8,4096,8192,128")[2].fmt == "bf16"
    assert profile.parse_case("cuda:hopper[no-pingpong]@4,16,16,4096,4096,128")[1] == "no-pingpong"
    assert profile.parse_case("cuda:hopper-fp8[baseline]@1,8,8,64,64,128,fp8")[1] == "baseline"
    assert profile.parse_case("cuda:v5[lib=/x/libcuda_fa.so]@1,8,8,64,64,128")[1] == "lib=/x/libcuda_fa.so"
    for bad in ("cuda:v5@1,8,8", "cuda:hopper[no-split@1,8,8,64,64,128", "sdpa:cudnn[baseline]@1,8,8,64,64,128",
                "cuda:hopper[fast]@1,8,8,64,64,128", "cuda:hopper-fp8[no-split]@1,8,8,64,64,128,fp8",
                "cuda:hopper@1,8,3,64,64,128"):
        with pytest.raises(SystemExit, match="bad case"):
            profile.parse_case(bad)


# ncu's raw CSV of --cycles: a marker kernel before each of six launches (two cases, three rounds)
CYCLES_LAUNCHES = [("1,000,000", "600,000", "1650000000"), ("2,000,000", "1,200,000", "1650000000"),
                   ("1,100,000", "700,000", "1570000000"), ("2,000,000", "1,100,000", "1800000000"),
                   ("1,050,000", "650,000", "1610000000"), ("2,200,000", "1,300,000", "1700000000")]
CYCLES_RAW = "\n".join(
    ['"ID","Kernel Name","gpc__cycles_elapsed.max","gpu__time_duration.sum","gpc__cycles_elapsed.avg.per_second"',
     '"","","cycle","ns","hz"']
    + [f'"{2 * i + k}","{name}","{c}","{ns}","{hz}"' for i, launch in enumerate(CYCLES_LAUNCHES)
       for k, (name, c, ns, hz) in enumerate([("spin_kernel(long)", "900", "1,000", "1700000000"),
                                              ("fwd_hopper_kernel", *launch)])]) + "\n"


def test_cycles_report_takes_rounds_in_case_order_and_medians_per_case(tmp_path, capsys):
    (tmp_path / "ncu-raw.csv").write_text(CYCLES_RAW)
    cases = ["cuda:hopper@1,1,1,64,64,128", "cuda:hopper[no-split]@1,1,1,64,64,128"]
    profile.cycles_report(tmp_path / "ncu-raw.csv", cases, 3, tmp_path)
    with open(tmp_path / "cycles.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["case"], r["round"], r["cycles"]) for r in rows] == [
        (cases[0], "0", "1000000"), (cases[1], "0", "2000000"), (cases[0], "1", "1100000"),
        (cases[1], "1", "2000000"), (cases[0], "2", "1050000"), (cases[1], "2", "2200000")]
    assert rows[0]["ms"] == "0.60000" and rows[0]["GHz"] == "1.650"
    table = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert table[cases[0]][1:3] == ["1.0500", "9.52%"]  # median 1.05 M cycles, spread (1.1 - 1.0) / 1.05
    assert table[cases[1]][1:4] == ["2.0000", "10.00%", "1.2000"]
    with pytest.raises(SystemExit, match="marker kernels"):
        profile.cycles_report(tmp_path / "ncu-raw.csv", cases, 4, tmp_path)


PROFILE_SOURCE = '''"Kernel Name","at::cuda::<unnamed>::spin_kernel(long)",
"Address","Source","Warp Stall Sampling (All Samples)","stall_wait"
"0x0","NANOSLEEP 0x10","5","5"
"Kernel Name","void fa::fwd_hopper_kernel<bf16, 128, 128, 1>(FwdParams)",
"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_wait","stall_barrier (Not Issued)"
"0x10","WARPGROUP.DEPBAR.LE gsb0, 0x1","30","28","2","28"
"0x20","@!P0  BRA 0x10","10","0","10","0"
"0x30","MUFU.EX2 R1, R2","60","0","60","0"
'''


def test_stall_summary_shares_samples_by_instruction_class_and_reason():
    (kernel,) = profile.stall_summary(PROFILE_SOURCE)  # the marker kernel is left out
    assert kernel["name"].startswith("void fa::fwd_hopper_kernel") and kernel["samples"] == 100
    assert list(kernel["by_class"]) == ["MUFU", "WARPGROUP.DEPBAR", "BRA"]
    assert kernel["by_class"] == pytest.approx({"MUFU": 0.6, "WARPGROUP.DEPBAR": 0.3, "BRA": 0.1})
    # the "(Not Issued)" columns are not counted twice
    assert kernel["by_reason"] == pytest.approx({"wait": 0.72, "barrier": 0.28})
    assert [(share, source, why[0]) for share, source, why in kernel["top"]] == [
        (0.6, "MUFU.EX2 R1, R2", "wait"), (0.3, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "barrier"),
        (0.1, "@!P0  BRA 0x10", "wait")]
    assert kernel["executed"] == 0 and kernel["executed_by_opcode"] == {}  # a dump without the column


PROFILE_SOURCE_EXECUTED = '''"Kernel Name","void fa::fwd_hopper_fp8_kernel<64, 1, 1>(Fp8FwdParams)",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_wait"
"0x0","F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R1, R2, R3, RZ","10","400","10"
"0x10","LOP3.LUT R1, R1, 0xffff, RZ, 0xc0, !PT","5","400","5"
"0x20","@!P0  LOP3.LUT R4, R4, 0xffff, RZ, 0xc0, !PT","5","200","5"
"0x30","MUFU.EX2 R5, R6","80","800","80"
'''


def test_stall_summary_counts_executed_instructions_by_opcode_per_unit(tmp_path, capsys):
    (kernel,) = profile.stall_summary(PROFILE_SOURCE_EXECUTED)
    assert kernel["executed"] == 1800
    # predicates stripped, so both LOP3 lines add up; most first
    assert kernel["executed_by_opcode"] == {"MUFU.EX2": 800, "LOP3.LUT": 600,
                                            "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C": 400}
    profile.print_stalls(PROFILE_SOURCE_EXECUTED, per=100)
    assert ("executed per unit (/100): 18; by opcode: MUFU.EX2 8, LOP3.LUT 6, "
            "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C 4") in capsys.readouterr().out
    dump = tmp_path / "sass.csv"
    dump.write_text(PROFILE_SOURCE_EXECUTED)
    ok = run_dev("profile", "--stalls", str(dump), "--per", "200")
    assert ok.returncode == 0 and "executed per unit (/200): 9; by opcode: MUFU.EX2 4," in ok.stdout


# --- trace ----------------------------------------------------------------------------------------------

def test_trace_phases_of_a_synthetic_timeline():
    th = trace
    timeline = [[[[0] * th.EVENTS for _ in range(th.ITEMS)] for _ in range(th.ROLES)] for _ in range(th.CTAS)]
    # CTA 3, consumer 1: two items of 5 tiles, a loop tile of 1000 cycles; the producer's marks beside them.
    for item, start in enumerate((100, 7000)):
        marks = timeline[3][2][item]
        marks[th.BEGIN:th.STORED + 1] = [start, start + 50, start + 60, start + 800, start + 1500, start + 5500,
                                         start + 6200, start + 6600]
        timeline[3][0][item][th.TILES] = 5
        timeline[3][0][item][th.Q_ISSUED] = start - 900
        timeline[3][0][item][th.K0_ISSUED] = start - 800
    rows = th.item_rows(timeline, "case")
    assert [(r["cta"], r["consumer"], r["item"], r["tiles"]) for r in rows] == [(3, 1, 0, 5), (3, 1, 1, 5)]
    first = rows[0]
    assert (first["q_wait"], first["turn_wait"], first["s0"], first["softmax0"]) == (50, 10, 740, 700)
    assert (first["tile"], first["last_pv"], first["store"], first["gap"]) == (1000, 700, 400, 300)
    # outside = next begin - begin - loop = 6900 - 4000; boundary = outside - one tile
    assert (first["outside"], first["boundary"]) == (2900, 1900)
    assert (first["prod_q_issue"], first["prod_k0_issue"]) == (-900, -800)
    assert rows[1]["gap"] != rows[1]["gap"]  # the CTA's last item has no next one: NaN
    summary = th.summary(rows, "case")
    assert (summary["items"], summary["tiles"], summary["boundary"], summary["tile"]) == (2, 5, 1900, 1000)


def test_trace_case_text_is_checked():
    assert trace.parse_case("4,16,16,4096,4096,128,causal") == ((4, 16, 16, 4096, 4096, 128), True)
    for bad in ("4,16,16,4096,4096", "4,16,16,4096,4096,128,causual", "4,16,16,4k,4096,128"):
        with pytest.raises(SystemExit):
            trace.parse_case(bad)
