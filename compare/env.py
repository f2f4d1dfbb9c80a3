"""The environment a measurement was taken in: one flat dict, recorded in every results row."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    """Short commit of the checkout, suffixed '-dirty' when tracked files differ from it.
    FA2_GIT_COMMIT overrides it, for copies of a checkout without .git (e.g. a remote GPU machine)."""
    if os.environ.get("FA2_GIT_COMMIT"):
        return os.environ["FA2_GIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


def _nvidia_smi(query: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def sm_clock_mhz() -> str:
    """Current SM clock of GPU 0 as nvidia-smi reports it ('' without a GPU or nvidia-smi)."""
    return _nvidia_smi("clocks.sm") if torch.cuda.is_available() else ""


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return triton.__version__


@functools.lru_cache(maxsize=None)
def environment(device: str) -> dict:
    """Static facts about this machine; `device` is 'cuda' or 'cpu'."""
    env = {
        "git_commit": git_commit(),
        "host_python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _triton_version(),
        "cuda": torch.version.cuda or "",
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sm_count=props.multi_processor_count,
                   compute_capability=f"{props.major}.{props.minor}", driver=_nvidia_smi("driver_version"))
    else:
        env.update(gpu="cpu", sm_count=0, compute_capability="", driver="")
    return env


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
