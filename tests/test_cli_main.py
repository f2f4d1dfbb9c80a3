"""The main command, `python -m compare run` with no arguments: on a machine without a GPU it measures the
embedded CPU sweep (SDPA math and the Triton kernels under TRITON_INTERPRET=1) in under two minutes, says so in
one line, and writes to the scratch folder, never under figures/data/; on a GPU it runs `quick`."""

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from compare import cli, sweeps

REPO = Path(__file__).resolve().parents[1]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
                 "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "TRITON_INTERPRET")


def test_cpu_sweep_is_small_and_interpreter_safe():
    sweep = sweeps.load("cpu")
    assert sweep.triton_interpret and not sweeps.load("quick").triton_interpret
    assert {c.fmt for c in sweep.cases} <= {"fp16", "fp32"}  # no bf16: the 3.6 interpreter gets bf16 dots wrong
    assert all(c.batch * c.heads_q * c.seqlen_q * c.seqlen_k <= 4 * 128 * 128 for c in sweep.cases)
    assert {"sdpa:math", "triton:*"} <= set(sweep.backends)
    assert {c.causal for c in sweep.cases} == {False, True} and any(c.heads_q != c.heads_kv for c in sweep.cases)


def test_default_sweep_is_quick_on_a_gpu_and_cpu_without(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    assert cli.default_sweep() == ("quick", "a CUDA GPU is visible (NVIDIA H200)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    name, why = cli.default_sweep()
    assert name == "cpu" and "no CUDA GPU" in why


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU machine's main command")
def test_main_command_on_cpu(tmp_path):
    data = REPO / "figures" / "data"
    before = set(data.rglob("*")) if data.exists() else set()
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(FA2_COMPARE_OUT=str(tmp_path), PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "compare", "run"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    seconds = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    first = r.stdout.splitlines()[0]
    assert first.startswith("no --sweep given: running the 'cpu' sweep") and "no CUDA GPU" in first
    assert seconds < 120, f"the CPU main command took {seconds:.0f} s"
    (out,) = tmp_path.glob("cpu-cpu-*.csv")
    assert f"wrote {out}" in r.stdout
    rows = list(csv.DictReader(out.open(newline="")))
    names = {f"{row['backend']}:{row['variant']}" for row in rows}
    assert {"sdpa:math", "triton:fa2", "triton:fa2-tma"} <= names
    assert rows and all(row["oracle"] == "pass" and float(row["ms_p50"]) > 0 for row in rows)
    assert {row["format"] for row in rows if row["backend"] == "triton"} == {"fp16"}
    assert (set(data.rglob("*")) if data.exists() else set()) == before  # nothing published by a run
