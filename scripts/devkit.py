"""What the Hopper dev scripts (scripts/dev_hopper*_gpu.py) share: a timestamped log line, a stage run in
a child process under a time limit (a kernel waiting on a barrier that never completes becomes a
reported timeout, not a lost device call), a check loop that survives a crashing kernel (after a
device fault the CUDA context is gone, so the later checks are reported as SKIP and counted as failed),
and interleaved timing rounds."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import traceback
from typing import Callable, Iterable


# Oracle cases every kernel's dev script starts with: tails on both axes with GQA (causal Sq < Sk and not),
# causal Sq > Sk (rows that see no key), MQA with 'large' inputs at head_dim 64.
AWKWARD_CASES = [
    dict(batch=2, heads_q=8, heads_kv=2, seqlen_q=300, seqlen_k=517, head_dim=128, causal=True),
    dict(batch=2, heads_q=8, heads_kv=2, seqlen_q=300, seqlen_k=517, head_dim=128, causal=False),
    dict(batch=1, heads_q=4, heads_kv=4, seqlen_q=517, seqlen_k=300, head_dim=128, causal=True),
    dict(batch=1, heads_q=4, heads_kv=1, seqlen_q=1000, seqlen_k=1000, head_dim=64, causal=True, dist="large"),
]


def baseline_build() -> dict[str, tuple[str, ...]]:
    """{"baseline": ("baseline",)} when DEV_BASELINE_LIB names a prebuilt libcuda_fa.so (another commit's,
    built on the dev machine and carried), else {}. The library is registered under that pseudo flag
    tuple, so `_lib.launch_*(..., extra_flags=("baseline",))` runs its kernels beside this checkout's:
    how a change that has no build flag to switch it off is timed against the code before it. Its
    parameter blocks are checked against this checkout's, as for any library."""
    path = os.environ.get("DEV_BASELINE_LIB")
    if not path:
        return {}
    from cuda_impl import _lib

    _lib.register_library(("baseline",), path)
    return {"baseline": ("baseline",)}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_stage(script: str, stage: str, timeout_s: float, *args: str) -> int:
    """`python script --stage STAGE ARGS...` in a child process; 124 when it outlives timeout_s."""
    try:
        return subprocess.run([sys.executable, script, "--stage", stage, *args], check=False,
                              timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        log(f"{stage}: TIMEOUT after {timeout_s} s (kernel hang? check the barrier protocol)")
        return 124


def run_checks(checks: Iterable[tuple[str, Callable[[], tuple[bool, str]]]]) -> tuple[int, int]:
    """Run fn() -> (ok, detail) for each (name, fn), logging PASS/FAIL/SKIP; returns (failures, total)."""
    failures = total = 0
    poisoned = False
    for name, fn in checks:
        total += 1
        if poisoned:
            log(f"SKIP {name} (CUDA context lost earlier)")
            failures += 1
            continue
        try:
            ok, detail = fn()
        except Exception as exc:  # noqa: BLE001 - report every check, keep going
            ok, detail = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            traceback.print_exc(limit=2)
            poisoned = _context_lost()
        failures += not ok
        log(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    return failures, total


def interleaved_medians(label: str, candidates: list[tuple[str, Callable[[], object]]], rounds: int,
                        time_ms: Callable[[Callable[[], object]], float],
                        note: Callable[[str, float], str] = lambda name, ms: "") -> dict[str, float]:
    """Each (name, fn) timed once per round by time_ms(fn), the order reversed on odd rounds; returns each
    name's median in ms. The H200 runs at its power cap, so its clock drifts by several % within a call:
    interleaving keeps a drift from favouring whichever candidate runs first. A candidate that raises is
    logged and left out of the later rounds (a missing peer must not hide the rest); note(name, ms) adds to
    each timing's log line."""
    times: dict[str, list[float]] = {}
    failed: set[str] = set()
    for round_ in range(rounds):
        for name, fn in candidates if round_ % 2 == 0 else candidates[::-1]:
            if name in failed:
                continue
            try:
                ms = time_ms(fn)
            except Exception as exc:  # noqa: BLE001 - a missing peer must not hide the rest
                failed.add(name)
                log(f"{label} {name:12} failed: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            times.setdefault(name, []).append(ms)
            log(f"{label} {name:12} {ms:8.3f} ms (round {round_}){note(name, ms)}")
    return {name: statistics.median(ms) for name, ms in times.items()}


def oracle_check(run, case, device: str = "cuda") -> tuple[bool, str]:
    """compare.oracle.check of `run` on `case`, as run_checks wants it: (passed, summary)."""
    from compare import oracle

    verdict = oracle.check(run, case, device=device)
    return verdict.passed, verdict.summary()


def _context_lost() -> bool:
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a device fault: later launches cannot run
        return True
    return False
