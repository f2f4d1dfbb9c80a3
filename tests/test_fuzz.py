"""The property-based fuzzer (compare.fuzz, `python -m compare fuzz`): the CPU profile CI runs, and proof that it
catches faults.

* CPU profile: the fuzzer on sdpa:math (in this process) and on the Triton interpreter (`python -m compare fuzz`
  in a subprocess with TRITON_INTERPRET=1 and no GPU visible, since TRITON_INTERPRET must be set before any
  @triton.jit runs), each with a fixed seed and a cap on examples, so that CI draws the same examples every run.
* Fault injection: deliberately wrong backends (output * 1.01, NaN in one row, a RuntimeError past a length, a
  call that never returns, a wrong KV-cache decode) are reported as failures with a shrunk minimal case; a
  ValueError naming a constraint is "refused", not failed.
* CLI: one-line errors with exit status 2, exit status 1 on a failure.
"""
import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("hypothesis")

from compare import backends, cli, fuzz, oracle  # noqa: E402
from compare.oracle import Case, KVCase, VarlenCase  # noqa: E402,F401  (eval of the written reprs)
from compare.fuzz import DenseExample, KVExample, VarlenExample  # noqa: E402,F401
from kv_reference import kv_reference  # noqa: E402
from varlen_reference import packed_reference  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MATH = backends.get("sdpa:math")
CPU = fuzz.PROFILES["cpu"]
# The fault-injection tests shrink, which reruns a backend many times: smaller shapes than the CPU profile's.
SMALL = dataclasses.replace(CPU, name="small", max_len=128, work_limit=1 << 18, kv_max_batch=3, kv_max_len=96,
                            kv_max_seqlen_q=16, kv_work_limit=1 << 18)


def _fake(name, run, **kw):
    return dataclasses.replace(MATH, name=f"fake:{name}", run=run, **kw)


def _fuzz(backend, tmp_path, mode="dense", fn=None, profile=SMALL, **kw):
    target = fuzz.Target(backend, mode, fn or backend, profile)
    kw = {"budget_s": 30, "seed": 0, "max_examples": 40, **kw}
    return fuzz.fuzz([target], out=tmp_path / backend.name.replace(":", "-"), log=lambda line: None, **kw)


def _only_failure(report, kind):
    assert len(report.failures) == 1, report.summary()
    failure = report.failures[0]
    assert failure.kind == kind and failure.shrunk, report.summary()
    written = json.loads((report.out / "failures.json").read_text())
    assert len(written) == 1 and written[0]["kind"] == kind
    assert eval(written[0]["repr"]) == failure.example  # the written repr rebuilds the minimal example
    assert fuzz.example_from_json(failure.mode, written[0]["example"]) == failure.example
    return failure.example


# ------------------------------------------------------------------ the CPU profile

def test_sdpa_math_holds_to_the_oracle(tmp_path):
    report = _fuzz(MATH, tmp_path, profile=CPU, max_examples=15)
    assert report.ok, report.summary()
    stats = report.stats[0]
    assert stats.examples == 15 and stats.passed == 15, report.summary()
    log = (report.out / "log.txt").read_text()
    assert "layouts" in log  # non-contiguous q/k/v were drawn


def test_a_fixed_seed_draws_the_same_examples(tmp_path):
    def recording(calls):
        def run(q, k, v, **kw):
            calls.append((tuple(q.shape), tuple(k.shape), q.dtype, q.stride(), k.stride(), v.stride(), kw["causal"],
                          kw["scale"]))
            return MATH(q, k, v, **kw)
        return run
    first, second, other = [], [], []
    for calls, seed, sub in ((first, 3, "a"), (second, 3, "b"), (other, 4, "c")):
        report = _fuzz(_fake("rec", recording(calls)), tmp_path / sub, seed=seed, max_examples=8)
        assert report.ok, report.summary()
    assert first == second and len(first) == 8
    assert first != other


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_interpreter_profile(tmp_path):
    """triton:fa2 (fp16), triton:fp8 and triton:decode (dense and KV cache) under TRITON_INTERPRET=1, through the
    CLI as a user runs it on a machine without a GPU."""
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-m", "compare", "fuzz", "--backends", "triton:fa2", "triton:fp8",
                          "triton:decode", "--budget-s", "60", "--max-examples", "6", "--seed", "0", "--out",
                          str(tmp_path / "interp")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-4000:]
    out = run.stdout
    assert "fuzz on cpu, seed 0" in out and "0 failed" in out, out
    for target in ("triton:fa2 dense", "triton:fp8 dense", "triton:decode dense", "triton:decode kvcache"):
        line = next(l for l in out.splitlines() if l.strip().startswith(target + " "))
        assert int(line.split()[2]) == 6, line  # every target ran its 6 examples
    assert json.loads((tmp_path / "interp" / "failures.json").read_text()) == []


# ------------------------------------------------------------------ fault injection: dense

def test_a_slightly_wrong_output_fails_and_shrinks(tmp_path):
    example = _only_failure(_fuzz(_fake("wrong", lambda q, k, v, **kw: MATH(q, k, v, **kw) * 1.01), tmp_path),
                            "wrong")
    c = example.case
    assert (c.batch, c.heads_q, c.seqlen_q, c.seqlen_k) == (1, 1, 1, 1) and example.layouts == ("contiguous",) * 3


def test_nan_in_one_row_fails_and_shrinks(tmp_path):
    def nan_row(q, k, v, **kw):
        out = MATH(q, k, v, **kw).clone()
        if out.shape[2] > 2:
            out[:, :, 2] = math.nan
        return out
    example = _only_failure(_fuzz(_fake("nan", nan_row), tmp_path), "nan")
    assert example.case.seqlen_q == 3 and example.case.batch == 1


def test_a_crash_fails_and_shrinks_to_the_boundary(tmp_path):
    def crash(q, k, v, **kw):
        if k.shape[2] > 40:
            raise RuntimeError("kernel blew up past 40 keys")
        return MATH(q, k, v, **kw)
    report = _fuzz(_fake("crash", crash), tmp_path)
    example = _only_failure(report, "crash")
    assert example.case.seqlen_k == 41 and example.case.seqlen_q == 1 and example.case.batch == 1
    assert "RuntimeError: kernel blew up past 40 keys" in report.failures[0].message
    assert "FAIL fake:crash dense [crash]" in report.summary()


def test_a_python_error_dressed_as_a_type_error_is_a_crash(tmp_path):
    def buggy(q, k, v, **kw):
        if q.shape[1] != k.shape[1]:
            return kw["scale"][0]  # TypeError: 'NoneType' object is not subscriptable (scale=None)
        return MATH(q, k, v, **kw)
    example = _only_failure(_fuzz(_fake("buggy", buggy), tmp_path), "crash")
    assert (example.case.heads_q, example.case.heads_kv) == (2, 1)


def test_a_refusal_naming_the_constraint_is_refused_not_failed(tmp_path):
    def refuse(q, k, v, **kw):
        if q.shape[-1] != 64:
            raise ValueError(f"head_dim {q.shape[-1]}: fake takes 64")
        return MATH(q, k, v, **kw)
    report = _fuzz(_fake("refuse", refuse), tmp_path, max_examples=30)
    assert report.ok, report.summary()
    stats = report.stats[0]
    assert stats.refused > 0 and stats.passed > 0 and stats.refused + stats.passed == stats.examples == 30
    assert "refusals (most frequent first)" in report.summary()


def test_a_refusal_without_a_message_fails(tmp_path):
    def mute(q, k, v, **kw):
        raise NotImplementedError()
    _only_failure(_fuzz(_fake("mute", mute), tmp_path), "silent-refusal")


def test_a_call_past_the_time_limit_fails_and_shrinks(tmp_path):
    def hang(q, k, v, **kw):
        if q.shape[0] > 1:
            time.sleep(60)  # interrupted by the per-example alarm
        return MATH(q, k, v, **kw)
    start = time.monotonic()
    example = _only_failure(_fuzz(_fake("hang", hang), tmp_path, example_timeout_s=0.25), "timeout")
    assert example.case.batch == 2 and time.monotonic() - start < 30


# ------------------------------------------------------------------ fault injection: KV cache

KV_BACKEND = _fake("kv", MATH.run, formats=("fp16", "fp32"), head_dims=(32, 64), max_seqlen_q=64)


def test_kvcache_mode_holds_a_correct_decode_to_the_oracle(tmp_path):
    report = _fuzz(KV_BACKEND, tmp_path, mode="kvcache", fn=kv_reference, max_examples=12)
    assert report.ok, report.summary()
    log = (report.out / "log.txt").read_text()
    assert "hostile" in log and "page" in log and "kv-fp8" in log


def test_kvcache_mode_catches_a_wrong_decode_and_shrinks(tmp_path):
    def wrong_long(q, k_cache, v_cache, **kw):
        out, lse = kv_reference(q, k_cache, v_cache, **kw)
        return (out * 1.01, lse) if int(kw["cache_seqlens"].max()) > 20 else (out, lse)
    example = _only_failure(_fuzz(KV_BACKEND, tmp_path, mode="kvcache", fn=wrong_long), "wrong")
    assert example.case.cache_seqlens == (21,) and example.case.seqlen_q == 1


# ------------------------------------------------------------------ CLI

@pytest.fixture
def in_process(monkeypatch):
    """`fuzz` may switch TRITON_INTERPRET on and rebuild the registry: undone afterwards."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    monkeypatch.setattr(backends, "_REGISTRY", backends._REGISTRY)
    return monkeypatch


def _one_line(capsys, argv, *fragments):
    rc = cli.main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_cli_user_errors_are_one_line(capsys, in_process, tmp_path):
    _one_line(capsys, ["fuzz", "--budget-s", "0"], "--budget-s must be a positive number")
    _one_line(capsys, ["fuzz", "--budget-s", "-3"], "--budget-s")
    _one_line(capsys, ["fuzz", "--backends", "zz*", "--budget-s", "5"], "no backend matches 'zz*'")
    _one_line(capsys, ["fuzz", "--backends", "nope:x", "--budget-s", "5"], "unknown backend 'nope:x'")
    _one_line(capsys, ["fuzz", "--backends", "sdpa:math", "--max-examples", "0"], "--max-examples must be >= 1")
    _one_line(capsys, ["fuzz", "--replay", str(tmp_path / "none.json")], "no such file")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["fuzz", "--budget-s", "soon"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "invalid float value" in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the explicit name is available")
def test_cli_an_explicit_gpu_backend_on_cpu_is_one_line(capsys, in_process):
    _one_line(capsys, ["fuzz", "--backends", "sdpa:flash", "--budget-s", "5"], "sdpa:flash", "no CUDA GPU")


def test_cli_runs_writes_and_replays(capsys, in_process, tmp_path):
    out = tmp_path / "ok"
    assert cli.main(["fuzz", "--backends", "sdpa:math", "--budget-s", "20", "--max-examples", "5", "--out",
                     str(out)]) == 0
    text = capsys.readouterr().out
    assert "fuzz on" in text and "5 examples, 0 refused, 0 failed" in text
    assert (out / "log.txt").is_file() and json.loads((out / "failures.json").read_text()) == []

    def crash(q, k, v, **kw):
        if q.shape[2] > 3:
            raise RuntimeError("bad tail")
        return MATH(q, k, v, **kw)
    fake = {"sdpa:math": MATH, "fake:crash": _fake("crash", crash)}
    in_process.setattr(backends, "registry", lambda: fake)
    bad = tmp_path / "bad"
    assert cli.main(["fuzz", "--backends", "fake:*", "--budget-s", "20", "--max-examples", "30", "--out",
                     str(bad)]) == 1
    text = capsys.readouterr().out
    assert "FAIL fake:crash dense [crash]" in text and "seqlen_q=4" in text and "--replay" in text
    assert cli.main(["fuzz", "--replay", str(bad / "failures.json")]) == 1  # still fails
    assert "1 still fail" in capsys.readouterr().out
    fake["fake:crash"] = _fake("crash", MATH.run)  # "fixed"
    assert cli.main(["fuzz", "--replay", str(bad / "failures.json")]) == 0
    assert "passes now" in capsys.readouterr().out


# ------------------------------------------------------------------ the varlen mode

VARLEN_BACKEND = _fake("varlen", MATH.run, formats=("fp16", "fp32"), head_dims=(32,))


def test_varlen_mode_passes_a_correct_packed_implementation(tmp_path):
    report = _fuzz(VARLEN_BACKEND, tmp_path, mode="varlen", fn=packed_reference, max_examples=15)
    assert report.ok and report.stats[0].passed == 15, report.summary()


def test_varlen_mode_finds_a_sequence_boundary_fault_and_shrinks_it(tmp_path):
    def shifted(*args, **kw):
        return packed_reference(*args, **kw, shift_keys=1)  # sequence 1 reads its keys one row late
    example = _only_failure(_fuzz(VARLEN_BACKEND, tmp_path, mode="varlen", fn=shifted, max_examples=60), "wrong")
    case = example.case
    assert case.batch == 2 and case.seqlens_q[1] >= 1 and case.seqlens_k[1] >= 1, example.describe()
