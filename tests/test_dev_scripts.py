"""The GPU dev scripts cannot run here, but they must import, parse their arguments, and share a check
loop and a stage runner that behave (scripts/devkit.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import devkit  # noqa: E402


@pytest.mark.parametrize("name", ["dev_cuda_gpu", "dev_hopper_gpu", "dev_hopper_fp8_gpu", "dev_hopper_mx_gpu",
                                  "dev_gluon_gpu", "bench_quant_gpu", "probe_lse_gpu", "profile_gpu",
                                  "bench_api_overhead_gpu", "trace_hopper_gpu"])
def test_dev_script_imports_and_parses_help(name):
    r = subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_checks_go_on_after_a_failure_and_an_exception(capsys):
    def boom():
        raise RuntimeError("kernel fault")

    failures, total = devkit.run_checks([("a", lambda: (True, "fine")), ("b", boom), ("c", lambda: (False, "off"))])
    assert (failures, total) == (2, 3)
    out = capsys.readouterr().out
    assert "PASS a: fine" in out and "FAIL b: RuntimeError: kernel fault" in out and "FAIL c: off" in out


def test_a_hung_stage_becomes_a_timeout(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(30)\n")
    assert devkit.run_stage(str(script), "correctness", 1) == 124


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

    medians = devkit.interleaved_medians("case", [candidate("a"), candidate("b", True), candidate("c")], 3, time_ms,
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

    case = oracle.Case(1, 2, 2, 17, 23, 64, fmt="fp32", seed=3)
    ok, detail = devkit.oracle_check(plain, case, device="cpu")
    assert ok and "PASS" in detail


def test_lse_probe_flags_a_biased_lse_and_not_an_exact_one(monkeypatch, capsys):
    import torch

    import probe_lse_gpu
    from compare import backends

    class ExactPlusBias:
        returns_lse = True

        def __init__(self, bias):
            self.bias = bias

        def __call__(self, q, k, v, *, causal, scale, return_lse):
            s = (q.double() @ k.double().transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
            return None, torch.logsumexp(s, -1) + self.bias

    fakes = {"exact": ExactPlusBias(0.0), "biased": ExactPlusBias(1e-2)}
    monkeypatch.setattr(probe_lse_gpu, "DEVICE", "cpu")
    monkeypatch.setattr(backends, "get", fakes.__getitem__)
    probe_lse_gpu.probe_length(["exact", "biased"], [128], seed=0, include_paper=False)
    lines = {line.split()[2]: line for line in capsys.readouterr().out.splitlines() if line.startswith("    128")}
    assert "FAIL" not in lines["exact"] and "FAIL" in lines["biased"]
    assert float(lines["biased"].split()[4]) == pytest.approx(1e-2, rel=1e-6)  # mean signed error = the bias


PROFILE_RAW = """==PROF== Connected to process
"ID","Kernel Name","gpu__time_duration.sum","gpc__cycles_elapsed.avg.per_second","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
"","","ns","hz","inst","inst"
"0","spin_kernel(long)","1,000","1700000000","0","0"
"1","transpose_kernel","3,000","1750000000","0.5","0.1"
"2","fwd_hopper_kernel","1,234,500","1750000000","0.5","1.2"
"3","spin_kernel(long)","1,000","1700000000","0","0"
"4","cudnn_fwd","900,000","1690000000","0.7","0.1"
"""


def test_profile_splits_kernels_at_markers_and_keeps_each_cases_longest(tmp_path, capsys):
    import profile_gpu

    (tmp_path / "ncu-raw.csv").write_text(PROFILE_RAW)
    profile_gpu.report(tmp_path / "ncu-raw.csv", ["cuda:hopper@1,1,1,64,64,128", "sdpa:cudnn@1,1,1,64,64,128"],
                       tmp_path)
    import csv

    with open(tmp_path / "profile.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["case"], r["kernel"], r["ms"], r["GHz"]) for r in rows] == [
        ("cuda:hopper@1,1,1,64,64,128", "fwd_hopper_kernel", "1.234", "1.75"),
        ("sdpa:cudnn@1,1,1,64,64,128", "cudnn_fwd", "0.9", "1.69")]
    assert rows[0]["top stalls (warps per issue)"] == "barrier 1.20, wait 0.50"
    assert rows[0]["tensor%"] == "-"  # not collected in this raw file
    with pytest.raises(SystemExit, match="2 marker kernels for 3 cases"):
        profile_gpu.report(tmp_path / "ncu-raw.csv", ["a", "b", "c"], tmp_path)


def test_profile_case_text_parses_and_rejects_short_shapes():
    import profile_gpu

    name, flags, case = profile_gpu.parse_case("cuda:hopper-fp8@2,16,4,1000,2000,64,causal,fp8")
    assert name == "cuda:hopper-fp8" and flags == ()
    assert (case.batch, case.heads_q, case.heads_kv, case.seqlen_q, case.seqlen_k, case.head_dim) == \
        (2, 16, 4, 1000, 2000, 64)
    assert case.causal and case.fmt == "fp8"
    assert profile_gpu.parse_case("sdpa:cudnn@1,8,8,4096,8192,128")[2].fmt == "bf16"
    name, flags, case = profile_gpu.parse_case("cuda:hopper[-DA=0,-DB=1]@4,16,16,4096,4096,128")
    assert (name, flags, case.fmt, case.causal) == ("cuda:hopper", ("-DA=0", "-DB=1"), "bf16", False)
    assert profile_gpu.parse_case("cuda:hopper-fp8[-DA=0]@1,8,8,64,64,128,fp8")[1] == ("-DA=0",)
    for bad in ("cuda:v5@1,8,8", "cuda:hopper[-DA=0@1,8,8,64,64,128", "sdpa:cudnn[-DA=0]@1,8,8,64,64,128",
                "cuda:hopper[-DA=0]@1,8,8,64,64,128,fp8"):
        with pytest.raises(SystemExit, match="bad case"):
            profile_gpu.parse_case(bad)


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
    import csv

    import profile_gpu

    (tmp_path / "ncu-raw.csv").write_text(CYCLES_RAW)
    cases = ["cuda:hopper@1,1,1,64,64,128", "cuda:hopper[-DX=0]@1,1,1,64,64,128"]
    profile_gpu.cycles_report(tmp_path / "ncu-raw.csv", cases, 3, tmp_path)
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
        profile_gpu.cycles_report(tmp_path / "ncu-raw.csv", cases, 4, tmp_path)


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
    import profile_gpu

    (kernel,) = profile_gpu.stall_summary(PROFILE_SOURCE)  # the marker kernel is left out
    assert kernel["name"].startswith("void fa::fwd_hopper_kernel") and kernel["samples"] == 100
    assert list(kernel["by_class"]) == ["MUFU", "WARPGROUP.DEPBAR", "BRA"]
    assert kernel["by_class"] == pytest.approx({"MUFU": 0.6, "WARPGROUP.DEPBAR": 0.3, "BRA": 0.1})
    # the "(Not Issued)" columns are not counted twice
    assert kernel["by_reason"] == pytest.approx({"wait": 0.72, "barrier": 0.28})
    assert [(share, source, why[0]) for share, source, why in kernel["top"]] == [
        (0.6, "MUFU.EX2 R1, R2", "wait"), (0.3, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "barrier"),
        (0.1, "@!P0  BRA 0x10", "wait")]
    assert kernel["executed"] == 0 and kernel["executed_by_opcode"] == {}  # a dump without the column


# Executed instructions per SASS line: the count that found session 16's zero-extended e4m3 packs
PROFILE_SOURCE_EXECUTED = '''"Kernel Name","void fa::fwd_hopper_fp8_kernel<64, 1, 1>(Fp8FwdParams)",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_wait"
"0x0","F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R1, R2, R3, RZ","10","400","10"
"0x10","LOP3.LUT R1, R1, 0xffff, RZ, 0xc0, !PT","5","400","5"
"0x20","@!P0  LOP3.LUT R4, R4, 0xffff, RZ, 0xc0, !PT","5","200","5"
"0x30","MUFU.EX2 R5, R6","80","800","80"
'''


def test_stall_summary_counts_executed_instructions_by_opcode_per_unit(capsys):
    import profile_gpu

    (kernel,) = profile_gpu.stall_summary(PROFILE_SOURCE_EXECUTED)
    assert kernel["executed"] == 1800
    # predicates stripped, so both LOP3 lines add up; most first
    assert kernel["executed_by_opcode"] == {"MUFU.EX2": 800, "LOP3.LUT": 600,
                                            "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C": 400}
    assert list(kernel["executed_by_opcode"])[:2] == ["MUFU.EX2", "LOP3.LUT"]
    profile_gpu.print_stalls(PROFILE_SOURCE_EXECUTED, per=100)
    assert ("executed per unit (/100): 18; by opcode: MUFU.EX2 8, LOP3.LUT 6, "
            "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C 4") in capsys.readouterr().out
    profile_gpu.print_stalls(PROFILE_SOURCE_EXECUTED)
    assert "executed: 1800; by opcode: MUFU.EX2 800," in capsys.readouterr().out


def test_profile_per_units_must_be_positive(tmp_path):
    dump = tmp_path / "sass.csv"
    dump.write_text(PROFILE_SOURCE_EXECUTED)
    run = lambda per: subprocess.run([sys.executable, str(SCRIPTS / "profile_gpu.py"), "--stalls", str(dump),  # noqa: E731
                                      "--per", per], capture_output=True, text=True, timeout=120)
    refused = run("0")
    assert refused.returncode == 2 and "--per: a positive number of units" in refused.stderr
    ok = run("200")
    assert ok.returncode == 0 and "executed per unit (/200): 9; by opcode: MUFU.EX2 4," in ok.stdout


def test_trace_phases_of_a_synthetic_timeline():
    import trace_hopper_gpu as th

    trace = [[[[0] * th.EVENTS for _ in range(th.ITEMS)] for _ in range(th.ROLES)] for _ in range(th.CTAS)]
    # CTA 3, consumer 1: two items of 5 tiles, a loop tile of 1000 cycles; the producer's marks beside them.
    for item, start in enumerate((100, 7000)):
        marks = trace[3][2][item]
        marks[th.BEGIN:th.STORED + 1] = [start, start + 50, start + 60, start + 800, start + 1500, start + 5500,
                                         start + 6200, start + 6600]
        trace[3][0][item][th.TILES] = 5
        trace[3][0][item][th.Q_ISSUED] = start - 900
        trace[3][0][item][th.K0_ISSUED] = start - 800
    rows = th.item_rows(trace, "case")
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
    import trace_hopper_gpu as th

    assert th.parse_case("4,16,16,4096,4096,128,causal") == ((4, 16, 16, 4096, 4096, 128), True)
    for bad in ("4,16,16,4096,4096", "4,16,16,4096,4096,128,causual", "4,16,16,4k,4096,128"):
        with pytest.raises(SystemExit):
            th.parse_case(bad)
