"""What every subcommand of scripts/dev.py shares: its configuration (scripts/dev.toml), shape strings, named
builds and the baseline library, a stage run in a child process under a time limit (a kernel waiting on a
barrier that never completes becomes a reported timeout, not a lost device call), a check loop that survives a
crashing kernel (after a device fault the CUDA context is gone: the later checks are reported as SKIP and
counted as failed), interleaved timing rounds, and the GPU's clock and power.

Nothing here imports torch at module level: `dev.py --help` and the CPU tests run without a GPU."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import tomllib
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

SCRIPTS = Path(__file__).resolve().parent.parent
REPO = SCRIPTS.parent
DEV_PY = SCRIPTS / "dev.py"
CONFIG_PATH = SCRIPTS / "dev.toml"
BASELINE = "baseline"  # the build name (and _lib key) of DEV_BASELINE_LIB
FORMATS_16BIT = ("bf16", "fp16")
ALL_FORMATS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4")
DISTRIBUTIONS = ("normal", "shifted", "large")

if str(REPO) not in sys.path:  # the packages of the checkout this driver belongs to
    sys.path.insert(0, str(REPO))


class UsageError(Exception):
    """A bad argument or configuration entry; dev.py prints it and exits with status 2."""


# --- configuration ---------------------------------------------------------------------------------------

_CONFIG: dict | None = None


def config(path: Path | None = None) -> dict:
    """scripts/dev.toml (or `path`), parsed once."""
    global _CONFIG
    if path is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)
    if _CONFIG is None:
        with open(CONFIG_PATH, "rb") as f:
            _CONFIG = tomllib.load(f)
    return _CONFIG


def family(name: str) -> dict:
    families = config()["families"]
    if name not in families:
        raise UsageError(f"unknown family {name!r}; known: {', '.join(families)}")
    return families[name]


# --- shapes ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A parsed shape string (see dev.toml); fmt / head_dim None: filled in by the family or the variant."""

    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int | None = None
    fmt: str | None = None
    causal: bool = False
    dist: str = "normal"
    scale: float | None = None
    text: str = ""

    def case(self, fmt: str | None = None, head_dim: int | None = None, seed: int = 0):
        """The compare.oracle.Case of this shape (fmt / head_dim where the shape leaves them open)."""
        from compare import oracle

        fmt = self.fmt or fmt
        head_dim = self.head_dim or head_dim
        if fmt is None or head_dim is None:
            raise UsageError(f"shape {self.text!r}: no {'format' if fmt is None else 'head_dim'} given")
        return oracle.Case(self.batch, self.heads_q, self.heads_kv, self.seqlen_q, self.seqlen_k, head_dim,
                           causal=self.causal, fmt=fmt, scale=self.scale, dist=self.dist, seed=seed)


def parse_shape(text: str) -> Shape:
    """'[FORMAT] bB hHQ[/HKV] qSQ [kSK] [dD] [causal|full] [normal|shifted|large] [scale=X]' -> Shape."""
    fields: dict = {}
    for token in text.split():
        key = None
        try:
            if token in ALL_FORMATS:
                key, value = "fmt", token
            elif token in ("causal", "full"):
                key, value = "causal", token == "causal"
            elif token in DISTRIBUTIONS:
                key, value = "dist", token
            elif token.startswith("scale="):
                key, value = "scale", float(token[6:])
            elif token[0] == "h":
                hq, _, hkv = token[1:].partition("/")
                key, value = "heads", (int(hq), int(hkv or hq))
            elif token[0] in "bqkd":
                key = {"b": "batch", "q": "seqlen_q", "k": "seqlen_k", "d": "head_dim"}[token[0]]
                value = int(token[1:])
        except (ValueError, IndexError):
            key = None
        if key is None:
            raise UsageError(f"shape {text!r}: cannot read {token!r} (want [FORMAT] bB hHQ[/HKV] qSQ [kSK] [dD] "
                             f"[causal] [{'|'.join(DISTRIBUTIONS)}] [scale=X])")
        if key in fields:
            raise UsageError(f"shape {text!r}: {key} given twice")
        fields[key] = value
    missing = [k for k in ("batch", "heads", "seqlen_q") if k not in fields]
    if missing:
        raise UsageError(f"shape {text!r}: missing {', '.join(missing)}")
    hq, hkv = fields.pop("heads")
    shape = Shape(heads_q=hq, heads_kv=hkv, seqlen_k=fields.pop("seqlen_k", fields["seqlen_q"]), text=text, **fields)
    if min(shape.batch, hq, hkv, shape.seqlen_q, shape.seqlen_k, shape.head_dim or 1) < 1 or hq % hkv:
        raise UsageError(f"shape {text!r}: sizes must be >= 1 and HQ a multiple of HKV")
    return shape


def shapes(texts: Iterable[str]) -> list[Shape]:
    return [parse_shape(t) for t in texts]


def grid_shapes(grid: dict) -> list[Shape]:
    """A [[paired.grid]] entry: formats x head_dims x seqlens x causal at batch * seqlen = tokens and
    heads * head_dim = model_dim."""
    out = []
    tokens, model_dim = grid.get("tokens", 16384), grid.get("model_dim", 2048)
    for fmt in grid["formats"]:
        for d in grid["head_dims"]:
            for s in grid["seqlens"]:
                for causal in grid["causal"]:
                    text = f"{fmt} b{max(tokens // s, 1)} h{model_dim // d} q{s} d{d}" + (" causal" if causal else "")
                    out.append(parse_shape(text))
    return out


def head_dim_filter(values: str | None) -> set[int] | None:
    """--head-dim '64,128' -> {64, 128}."""
    if not values:
        return None
    try:
        dims = {int(v) for v in values.split(",") if v}
    except ValueError:
        raise UsageError(f"--head-dim: integers separated by commas, got {values!r}") from None
    return dims or None


# --- builds ----------------------------------------------------------------------------------------------

def builds() -> dict[str, dict]:
    return config()["builds"]


def ablations() -> list[str]:
    return [name for name, b in builds().items() if b.get("ablation", True)]


def flags_of(name: str) -> tuple[str, ...]:
    """The _lib key of a build: () for this checkout's default library, ("baseline",) for DEV_BASELINE_LIB
    (registered by register_baseline), else the build's one define."""
    if name in ("default", ""):
        return ()
    if name == BASELINE:
        return (BASELINE,)
    if name not in builds():
        raise UsageError(f"unknown build {name!r}; known: default, {BASELINE}, {', '.join(builds())}")
    return (builds()[name]["define"],)


def is_built(name: str) -> bool:
    """Whether the library of build `name` is in cuda_impl/_build (built here or carried)."""
    from cuda_impl import _lib, toolchain

    return toolchain.cached_library(_lib.library_spec(flags_of(name))) is not None


def build_library(name: str) -> Path:
    from cuda_impl import _lib, toolchain

    return toolchain.build_library(_lib.library_spec(flags_of(name)))


def baseline_path(explicit: str | None = None) -> Path | None:
    path = explicit or os.environ.get("DEV_BASELINE_LIB")
    return Path(path) if path else None


def register_baseline(explicit: str | None = None) -> bool:
    """Register DEV_BASELINE_LIB (another commit's prebuilt libcuda_fa.so, carried) under the _lib key
    ("baseline",), so that `_lib.launch_*(..., extra_flags=("baseline",))` runs its kernels beside this
    checkout's. Its parameter blocks are checked against this checkout's, as for any library. False when
    no baseline is given."""
    path = baseline_path(explicit)
    if path is None:
        return False
    if not path.is_file():
        raise UsageError(f"DEV_BASELINE_LIB: no file {path}")
    from cuda_impl import _lib

    _lib.register_library((BASELINE,), path)
    return True


# --- logging, stages, checks, timing ---------------------------------------------------------------------

def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_stage(argv: list[str], timeout_s: float, label: str | None = None, script: Path = DEV_PY) -> int:
    """`python script ARGV...` in a child process; 124 when it outlives timeout_s (it is killed)."""
    label = label or " ".join(argv)
    try:
        return subprocess.run([sys.executable, str(script), *argv], check=False, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        log(f"{label}: TIMEOUT after {timeout_s:g} s (kernel hang? check the barrier protocol)")
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
            poisoned = context_lost()
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


def warm_up(fn: Callable[[], object], seconds: float) -> None:
    """Run fn back to back for `seconds` (then synchronise): the GPU leaves its idle clocks and reaches the
    power-capped state it times in, so that the first candidate of the first case is not timed colder."""
    import torch

    end = time.time() + seconds
    while time.time() < end:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def oracle_check(run, case, device: str = "cuda") -> tuple[bool, str]:
    """compare.oracle.check of `run` on `case`, as run_checks wants it: (passed, summary)."""
    from compare import oracle

    verdict = oracle.check(run, case, device=device)
    return verdict.passed, verdict.summary()


def context_lost() -> bool:
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a device fault: later launches cannot run
        return True
    return False


def gpu_state() -> str:
    """SM clock (MHz), power (W), temperature and active throttle reasons, from nvidia-smi."""
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        query = f"clocks.sm,power.draw,temperature.gpu,{reasons}"
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            clock, power, temp, active = (x.strip() for x in out.splitlines()[0].split(","))
            return f"{clock} MHz {float(power):.0f} W {temp} C reasons {active}"
        except Exception:  # noqa: BLE001 - older field name next; a missing nvidia-smi must not stop timing
            continue
    return "(nvidia-smi gave no clock)"


def out_dir(explicit: str | Path | None = None) -> Path:
    """Where results go: --out, else $OUT (the device machine's returned folder), else /tmp/out."""
    return Path(explicit or os.environ.get("OUT") or "/tmp/out")
