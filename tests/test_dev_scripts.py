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
                                  "bench_quant_gpu", "probe_lse_gpu"])
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
