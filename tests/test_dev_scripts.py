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
                                  "bench_quant_gpu"])
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
