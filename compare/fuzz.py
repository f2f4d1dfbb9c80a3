"""Property-based fuzzing of the backends against the one oracle (``compare.oracle``), with hypothesis.

Every example is drawn within what a backend declares (``compare.backends.Backend``: formats, head_dims, GQA,
``max_seqlen_q``, ``causal_unequal``, ``min_seqlen_k``) and held to the oracle:

* dense (``mode="dense"``, every backend): a ``DenseExample`` = an ``oracle.Case`` (batch, heads_q, GQA ratio,
  Sq, Sk incl. 1 and odd tails, head_dim (or a declared (D, Dv) pair), causal, dist normal/shifted/large, a custom
  scale, fmt among the
  backend's formats incl. fp8/mxfp8/nvfp4 where declared, a local window and a softcap where declared) plus a
  layout for each of q, k, v (16-bit and fp32 only; quantized containers are passed as built): ``contiguous``;
  ``bshd``: a (B, H, S, D) view of (B, S, H, D) storage; ``offset``: a slice, at a non-zero storage offset, of a
  larger NaN-filled buffer with padded rows; ``bshd-offset``: both; ``misaligned``: contiguous strides but a start
  one element past a 16-byte boundary. The NaN around a slice shows any read past the view. Judged by
  ``oracle.check``.
* varlen (``mode="varlen"``, backends whose variant declares packed batches, through the package's
  ``attention_varlen``): a ``VarlenExample`` = an ``oracle.VarlenCase`` (1..5 sequences, lengths 0 and tile edges,
  causal, GQA, windows and caps where declared), packed contiguously. Judged by ``oracle.check_varlen``.
* KV cache (``mode="kvcache"``, backends with ``attention_with_kvcache``: the decode variants of
  ``triton_impl`` / ``cuda_impl``, recognised by ``max_seqlen_q`` and the package's function): a ``KVExample`` =
  an ``oracle.KVCase`` (page size 16..256 or a contiguous cache, per-sequence lengths incl. 0, spare capacity,
  hostile block tables, Sq 1..64, causal, a q-dtype or e4m3 cache, a declared (D, Dv) pair with V a cache of its
  own or a view of K's first columns, as MLA's latent cache) plus a layout of q (``contiguous``,
  ``bhsd``: a view of (B, Hq, Sq, D) storage, ``offset``) and of the caches (``contiguous``, ``offset``: a slice
  of a larger NaN-filled buffer, whole pages and a padded head_dim). Judged by ``oracle.check_kvcache``.

Outcomes of one example: *passed*; *refused*: the backend raised ``ValueError`` / ``TypeError`` /
``NotImplementedError`` with a message (the contract's way of naming an unsupported input); or a *failure*:
any other exception (``crash``, CUDA errors included), a refusal without a message or in the words of a Python
error rather than a constraint (``silent-refusal``, ``crash``), NaN in the output or LSE (``nan``), a verdict
outside the oracle's bound (``wrong``), or a backend call that runs past the per-example time limit
(``timeout``; SIGALRM in the main thread). hypothesis then shrinks the failure to a minimal example, which is
logged and written out as JSON and as a ``repr`` that rebuilds it (``replay`` runs the file again). Two
conditions stop the whole run instead, since nothing after them can be trusted in this process: a CUDA error
that leaves the context unusable (``cuda-context-lost``), and -- with ``hard_exit`` (the CLI) -- a call that
ignores the alarm past twice the limit (``hang``, exit 1 from a watchdog thread after writing the files).

Budget: ``budget_s`` is shared among the targets in turn (each gets an equal part of what is left);
``max_examples`` caps each target's count so that a run with a fixed ``seed`` is reproducible whatever the
machine's speed. Shrinking a failure found near the end of a target's share may run past it by the
shrink grace (its share again, at least 10 s). Shapes are bounded per ``Profile``: ``gpu`` (larger, several
tiles and splits), ``cpu`` (SDPA math and other CPU backends) and ``interpret`` (Triton's interpreter, small;
no bf16 there, since Triton 3.6's interpreter multiplies bf16 dots on raw bits).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import hypothesis
import torch
from hypothesis import HealthCheck, Phase, Verbosity, strategies as st

from . import backends, bench, kvcache, oracle

DENSE_LAYOUTS = ("contiguous", "bshd", "offset", "bshd-offset", "misaligned")
KV_Q_LAYOUTS = ("contiguous", "bhsd", "offset")
KV_CACHE_LAYOUTS = ("contiguous", "offset")
MODES = ("dense", "kvcache", "varlen")
REFUSALS = (ValueError, TypeError, NotImplementedError)
# Formats left out under Triton's interpreter: its bf16 dots multiply raw bits (see the sweeps' cpu.toml).
INTERPRETER_EXCLUDED_FORMATS = ("bf16",)
KV_Q_FORMATS = ("bf16", "fp16", "fp32")
SHRINK_GRACE_MIN_S = 10.0  # shrinking may run this long (or the target's share, if longer) past the share
# A refusal phrased as Python's own errors is a bug that happens to be a TypeError/ValueError, not a constraint.
_PYTHON_ERROR = re.compile(
    r"object is not (subscriptable|callable|iterable)|unsupported operand type|takes \d+ positional argument|"
    r"got an unexpected keyword argument|missing \d+ required (positional|keyword)|values to unpack|"
    r"can't multiply sequence|must be real number, not|invalid literal for int\(\)|object cannot be interpreted")


@dataclass(frozen=True)
class Profile:
    """Bounds on the drawn shapes (work = B * Hq * Sq * Sk * D of one call)."""
    name: str
    max_batch: int
    max_heads_kv: int
    groups: tuple[int, ...]          # GQA ratios heads_q / heads_kv
    max_heads_q: int
    max_len: int
    work_limit: int
    special_lengths: tuple[int, ...]  # tile edges, drawn besides uniform lengths
    any_head_dims: tuple[int, ...]   # for backends that take any head_dim
    kv_max_batch: int
    kv_max_len: int
    kv_max_seqlen_q: int
    kv_work_limit: int
    example_timeout_s: float         # default per-call limit


_EDGES = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)
PROFILES = {
    "gpu": Profile("gpu", max_batch=4, max_heads_kv=8, groups=(1, 2, 4, 8), max_heads_q=32, max_len=2048,
                   work_limit=1 << 31, special_lengths=_EDGES + (511, 513, 1023, 1025, 2047, 2048),
                   any_head_dims=(64, 128, 32, 96, 256, 80), kv_max_batch=8, kv_max_len=8192, kv_max_seqlen_q=64,
                   kv_work_limit=1 << 31, example_timeout_s=180.0),
    "cpu": Profile("cpu", max_batch=3, max_heads_kv=4, groups=(1, 2, 4), max_heads_q=8, max_len=384,
                   work_limit=1 << 22, special_lengths=_EDGES, any_head_dims=(64, 32, 128, 80, 256),
                   kv_max_batch=4, kv_max_len=512, kv_max_seqlen_q=64, kv_work_limit=1 << 24, example_timeout_s=60.0),
    "interpret": Profile("interpret", max_batch=2, max_heads_kv=2, groups=(1, 2, 4), max_heads_q=4, max_len=96,
                         work_limit=1 << 19, special_lengths=_EDGES[:12], any_head_dims=(64, 128),
                         kv_max_batch=3, kv_max_len=128, kv_max_seqlen_q=16, kv_work_limit=1 << 19,
                         example_timeout_s=120.0),
}


@dataclass(frozen=True)
class DenseExample:
    case: oracle.Case
    layouts: tuple[str, str, str] = ("contiguous", "contiguous", "contiguous")   # of q, k, v

    def describe(self) -> str:
        lay = "" if set(self.layouts) == {"contiguous"} else " layouts " + "/".join(self.layouts)
        return self.case.shape_str() + (f" scale {self.case.scale:g}" if self.case.scale else "") + \
            f" seed {self.case.seed}" + lay


@dataclass(frozen=True)
class KVExample:
    case: oracle.KVCase
    q_layout: str = "contiguous"
    cache_layout: str = "contiguous"

    def describe(self) -> str:
        lay = "" if (self.q_layout, self.cache_layout) == ("contiguous",) * 2 else \
            f" q {self.q_layout} cache {self.cache_layout}"
        cap = f" capacity {self.case.capacity}" if self.case.capacity else ""
        return self.case.shape_str() + cap + f" seed {self.case.seed}" + lay


@dataclass(frozen=True)
class VarlenExample:
    case: oracle.VarlenCase

    def describe(self) -> str:
        return self.case.shape_str() + (f" scale {self.case.scale:g}" if self.case.scale else "") + \
            f" seed {self.case.seed}"


@dataclass
class Target:
    """One thing to fuzz: a backend in one mode, with the callable the oracle runs."""
    backend: backends.Backend
    mode: str                        # "dense" | "kvcache" | "varlen"
    fn: Callable
    profile: Profile

    @property
    def name(self) -> str:
        return f"{self.backend.name} {self.mode}"


# ---------------------------------------------------------------- failures


class FuzzFailure(AssertionError):
    kind = "wrong"


class WrongAnswer(FuzzFailure):
    kind = "wrong"


class NaNOutput(FuzzFailure):
    kind = "nan"


class ExampleTimeout(FuzzFailure):
    kind = "timeout"


class SilentRefusal(FuzzFailure):
    kind = "silent-refusal"


class _Refused(Exception):
    def __init__(self, exc: BaseException):
        super().__init__(f"{type(exc).__name__}: {_first_line(exc)}")


class _Stop(BaseException):
    """Leaves hypothesis without a verdict: the target's time is up, or the whole run must end."""
    def __init__(self, why: str, failure: "Failure | None" = None):
        super().__init__(why)
        self.why, self.failure = why, failure


@dataclass
class Failure:
    target: str                      # "<backend> <mode>"
    backend: str
    mode: str
    kind: str                        # wrong | nan | timeout | crash | silent-refusal | flaky | cuda-context-lost | hang
    message: str
    example: DenseExample | KVExample
    shrunk: bool                     # False: hypothesis did not finish shrinking (time, abort, flaky)
    detail: str = ""                 # traceback

    def to_json(self) -> dict:
        return {"target": self.target, "backend": self.backend, "mode": self.mode, "kind": self.kind,
                "message": self.message, "shrunk": self.shrunk, "repr": repr(self.example),
                "example": dataclasses.asdict(self.example), "traceback": self.detail}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else ""


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def classify(exc: BaseException) -> tuple[str, str]:
    """(kind, one-line message) of an exception that failed an example."""
    if isinstance(exc, FuzzFailure):
        return exc.kind, _first_line(exc)
    name = type(exc).__name__
    if "Flaky" in name:
        return "flaky", f"{name}: the failure did not reproduce on a rerun (nondeterministic?): {_first_line(exc)}"
    return "crash", f"{name}: {_first_line(exc)}{_where(exc)}"


def example_from_json(mode: str, data: dict) -> DenseExample | KVExample | VarlenExample:
    if mode == "varlen":
        return VarlenExample(oracle.VarlenCase(**data["case"]))
    if mode == "dense":
        return DenseExample(oracle.Case(**data["case"]), tuple(data["layouts"]))
    case = dict(data["case"], cache_seqlens=tuple(data["case"]["cache_seqlens"]))
    return KVExample(oracle.KVCase(**case), data["q_layout"], data["cache_layout"])


# ---------------------------------------------------------------- targets


def profile_for(backend: backends.Backend, device: str) -> Profile:
    if torch.device(device).type == "cuda":
        return PROFILES["gpu"]
    return PROFILES["interpret"] if backend.family == "triton" and backends.interpreting() else PROFILES["cpu"]


def formats_for(backend: backends.Backend, profile: Profile) -> tuple[str, ...]:
    if profile.name == "interpret":
        return tuple(f for f in backend.formats if f not in INTERPRETER_EXCLUDED_FORMATS)
    return tuple(backend.formats)


_PACKAGES = {"triton": "triton_impl", "cuda": "cuda_impl"}


def _package_function(backend: backends.Backend, name: str) -> Callable | None:
    """`name` of the package behind `backend` (triton_impl / cuda_impl), or None."""
    if backend.family not in _PACKAGES:
        return None
    try:
        module = importlib.import_module(_PACKAGES[backend.family])
    except ImportError:
        return None
    return getattr(module, name, None)


def kvcache_function(backend: backends.Backend) -> Callable | None:
    """The package's attention_with_kvcache when `backend` is its decode variant (it declares max_seqlen_q)."""
    return None if backend.max_seqlen_q is None else _package_function(backend, "attention_with_kvcache")


def varlen_function(backend: backends.Backend) -> Callable | None:
    """`backend`'s packed-batch call (its package's attention_varlen bound to its variant, or a peer's), when it
    declares packed batches."""
    return backend.run_varlen if backend.varlen else None


def _mode_function(backend: backends.Backend, mode: str) -> Callable | None:
    if mode == "dense":
        return backend if backend.dense else None
    return kvcache_function(backend) if mode == "kvcache" else varlen_function(backend)


def targets_for(chosen: list[backends.Backend], device: str, modes=MODES) -> tuple[list[Target], dict[str, str]]:
    """The targets of `chosen` backends in `modes`, and {target: why not} for those left out."""
    out, skipped = [], {}
    for b in chosen:
        profile = profile_for(b, device)
        for mode in modes:
            fn = _mode_function(b, mode)
            name = f"{b.name} {mode}"
            if fn is None:
                continue  # no attention_with_kvcache / attention_varlen: not a target, nothing to report
            fmts = formats_for(b, profile) if mode == "dense" else \
                tuple(f for f in formats_for(b, profile) if f in KV_Q_FORMATS)
            if not fmts:
                skipped[name] = f"no format of {b.formats} runs under this profile ({profile.name})"
                continue
            out.append(Target(b, mode, fn, profile))
    return out, skipped


# ---------------------------------------------------------------- strategies


def _lengths(profile: Profile, upper: int, lower: int = 1):
    upper = max(lower, upper)
    ints = st.integers(lower, upper)
    edges = [n for n in profile.special_lengths if lower <= n <= upper]
    return st.one_of(ints, st.sampled_from(edges)) if edges else ints


def _heads(draw, profile: Profile, gqa: bool) -> tuple[int, int]:
    heads_kv = draw(st.integers(1, profile.max_heads_kv))
    groups = [g for g in profile.groups if heads_kv * g <= profile.max_heads_q] if gqa else [1]
    return heads_kv * draw(st.sampled_from(groups or [1])), heads_kv


_SCALES = st.one_of(st.none(), st.sampled_from((0.5, 0.125, 1.3)))


def _windows(seqlen_k: int):
    """(left, right) of a local window: often none, else each side unbounded, 0, small or past the keys."""
    side = st.one_of(st.just(-1), st.just(0), st.integers(1, 40), st.integers(0, seqlen_k + 8))
    return st.one_of(st.just((-1, -1)), st.tuples(side, side))


def _dims(head_dims, backend: backends.Backend):
    """(Q/K head_dim, V's or None): one of the head dims, or now and then a (D, Dv) pair the backend declares."""
    same = st.sampled_from(head_dims).map(lambda d: (d, None))
    if not backend.head_dim_pairs:
        return same
    return st.one_of(same, st.sampled_from(backend.head_dim_pairs))


def dense_examples(backend: backends.Backend, profile: Profile):
    """Dense cases within what `backend` declares, bounded by `profile`."""
    fmts = formats_for(backend, profile)
    head_dims = tuple(backend.head_dims) if backend.head_dims else profile.any_head_dims
    max_sq = min(profile.max_len, backend.max_seqlen_q or profile.max_len)

    dims = _dims(head_dims, backend)

    @st.composite
    def draw_example(draw):
        fmt = draw(st.sampled_from(fmts))
        d, dv = draw(dims)
        batch = draw(st.integers(1, profile.max_batch))
        heads_q, heads_kv = _heads(draw, profile, backend.gqa)
        causal = draw(st.booleans())
        per_key = batch * heads_q * d
        min_sk = backend.min_seqlen_k
        if causal and not backend.causal_unequal:  # its causal mask is top-left: equal lengths only
            length = draw(_lengths(profile, min(max_sq, max(min_sk, math.isqrt(profile.work_limit // per_key))),
                                   min_sk))
            sq = sk = length
        else:
            sk = draw(_lengths(profile, min(profile.max_len, max(min_sk, profile.work_limit // per_key)), min_sk))
            sq = draw(_lengths(profile, min(max_sq, max(1, profile.work_limit // (per_key * sk)))))
        window = draw(_windows(sk)) if backend.local else (-1, -1)
        softcap = draw(st.sampled_from((0.0, 1.0, 2.5, 30.0))) if backend.softcap else 0.0
        case = oracle.Case(batch, heads_q, heads_kv, sq, sk, d, causal=causal, fmt=fmt, scale=draw(_SCALES),
                           dist=draw(st.sampled_from(oracle.DISTRIBUTIONS)), seed=draw(st.integers(0, 1 << 16)),
                           window=window, softcap=softcap, head_dim_v=dv)
        hypothesis.assume(backend.unsupported_reason(case) is None)
        if case.quantized:
            layouts = ("contiguous",) * 3
        else:
            layouts = tuple(draw(st.sampled_from(DENSE_LAYOUTS)) for _ in range(3))
        return DenseExample(case, layouts)

    return draw_example()


def varlen_examples(backend: backends.Backend, profile: Profile):
    """Packed batches for `backend`'s attention_varlen: 1..5 sequences, lengths 0 and tile edges included, each side
    within the profile's dense bounds; causal, GQA, windows and caps where declared."""
    fmts = tuple(f for f in formats_for(backend, profile) if f in oracle.VARLEN_FORMATS)
    head_dims = tuple(backend.head_dims) if backend.head_dims else profile.any_head_dims

    @st.composite
    def draw_example(draw):
        d = draw(st.sampled_from(head_dims))
        heads_q, heads_kv = _heads(draw, profile, backend.gqa)
        batch = draw(st.integers(1, 5))
        longest = max(1, min(profile.max_len, math.isqrt(profile.work_limit // (batch * heads_q * d))))
        lengths = st.one_of(st.just(0), _lengths(profile, longest))
        seqlens_q = tuple(draw(lengths) for _ in range(batch))
        seqlens_k = tuple(draw(lengths) for _ in range(batch))
        hypothesis.assume(sum(seqlens_q) > 0)
        case = oracle.VarlenCase(seqlens_q, seqlens_k, heads_q, heads_kv, d, causal=draw(st.booleans()),
                                 fmt=draw(st.sampled_from(fmts)), scale=draw(_SCALES),
                                 dist=draw(st.sampled_from(oracle.DISTRIBUTIONS)),
                                 window=draw(_windows(max(seqlens_k))) if backend.local else (-1, -1),
                                 softcap=draw(st.sampled_from((0.0, 2.5, 30.0))) if backend.softcap else 0.0,
                                 seed=draw(st.integers(0, 1 << 16)))
        return VarlenExample(case)

    return draw_example()


def kv_examples(backend: backends.Backend, profile: Profile):
    """KV-cache cases for `backend`'s attention_with_kvcache, bounded by `profile`."""
    fmts = tuple(f for f in formats_for(backend, profile) if f in KV_Q_FORMATS)
    head_dims = tuple(backend.head_dims) if backend.head_dims else profile.any_head_dims
    max_sq = min(profile.kv_max_seqlen_q, backend.max_seqlen_q or kvcache.MAX_SEQLEN_Q)
    dims = _dims(head_dims, backend)

    @st.composite
    def draw_example(draw):
        fmt = draw(st.sampled_from(fmts))
        d, dv = draw(dims)
        # a (D, Dv) pair: V a view of K's first columns (MLA) or a cache of its own, where the backend takes both
        only_latent = dv is not None and backend.latent_pairs_only
        kv_fmt = "same" if only_latent else draw(st.sampled_from(oracle.KV_FORMATS))
        latent = dv is not None and (only_latent or draw(st.booleans()))
        batch = draw(st.integers(1, profile.kv_max_batch))
        heads_q, heads_kv = _heads(draw, profile, True)
        sq = draw(st.integers(1, max_sq))
        causal = draw(st.booleans())
        page_size = draw(st.sampled_from((None,) + kvcache.PAGE_SIZES))
        longest = min(profile.kv_max_len, max(1, profile.kv_work_limit // (batch * heads_q * sq * d)))
        edges = st.sampled_from(sorted({0, 1, longest} | {n for n in profile.special_lengths if n <= longest}))
        lengths = tuple(draw(st.one_of(st.integers(0, longest), edges)) for _ in range(batch))
        hostile = draw(st.booleans()) if page_size else False
        spare = draw(st.integers(0, 2))
        capacity = None
        if spare:
            base = max(max(lengths), 1)
            step = page_size or 16
            capacity = -(-base // step) * step + spare * step
        case = oracle.KVCase(batch, heads_q, heads_kv, sq, lengths, d, page_size=page_size, capacity=capacity,
                             causal=causal, fmt=fmt, kv_fmt=kv_fmt, scale=draw(_SCALES),
                             dist=draw(st.sampled_from(oracle.DISTRIBUTIONS)), hostile=hostile,
                             seed=draw(st.integers(0, 1 << 16)), head_dim_v=dv, latent=latent)
        return KVExample(case, draw(st.sampled_from(KV_Q_LAYOUTS)), draw(st.sampled_from(KV_CACHE_LAYOUTS)))

    return draw_example()


# ---------------------------------------------------------------- layouts


def _nan_buffer(shape, dtype: torch.dtype, device) -> torch.Tensor:
    if dtype.itemsize == 1:  # e4m3fn: 0x7F is NaN
        return torch.full(shape, 0x7F, dtype=torch.uint8, device=device).view(dtype)
    return torch.full(shape, math.nan, dtype=dtype, device=device)


def relayout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A tensor equal to the 4-D `x`, in `layout` (see the module docstring); dims 1 and 2 are the ones that
    'bshd' / 'bhsd' swap in storage, dim 2 the one 'offset' slices."""
    if layout == "contiguous":
        return x
    a, b, c, d = x.shape
    pad = max(1, 16 // x.element_size())  # keeps padded rows 16-byte multiples
    if layout in ("bshd", "bhsd"):
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "offset":
        view = _nan_buffer((a, b, c + 2, d + pad), x.dtype, x.device)[:, :, 1:c + 1, :d]
    elif layout == "bshd-offset":
        view = _nan_buffer((a, c + 2, b, d + pad), x.dtype, x.device)[:, 1:c + 1, :, :d].transpose(1, 2)
    elif layout == "misaligned":
        view = _nan_buffer((x.numel() + 1,), x.dtype, x.device)[1:].view(x.shape)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    _copy(view, x)
    return view


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    if src.element_size() == 1:  # copy bits: no float8 arithmetic needed
        dst.view(torch.uint8).copy_(src.view(torch.uint8))
    else:
        dst.copy_(src)


def cache_relayout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A cache equal to `x` (N, P, H, D): 'offset' puts it inside a NaN buffer with a spare block before and
    after and a padded head_dim."""
    if layout == "contiguous":
        return x
    if layout != "offset":
        raise ValueError(f"unknown cache layout {layout!r}")
    n, p, h, d = x.shape
    pad = max(1, 16 // x.element_size())
    view = _nan_buffer((n + 2, p, h, d + pad), x.dtype, x.device)[1:n + 1, :, :, :d]
    _copy(view, x)
    return view


# ---------------------------------------------------------------- one example


def _has_nan(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and bool(torch.isnan(x).any())


def _cuda_alive() -> bool:
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").sum()) == 1.0
    except Exception:
        return False


class _Alarm:
    fired = False


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """ExampleTimeout in the main thread after `seconds` (SIGALRM); a no-op elsewhere. Yields an object whose
    `fired` says whether the alarm went off (the backend may have turned the exception into another)."""
    alarm = _Alarm()
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield alarm
        return

    def on_alarm(signum, frame):
        alarm.fired = True
        raise ExampleTimeout(f"the backend call ran past the per-example limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield alarm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Call:
    """The backend callable as the oracle calls it: refusals become _Refused, CUDA work is synchronised inside
    the time limit, and NaN in what it returned is noted."""

    def __init__(self, fn: Callable, device: str, timeout: float | None):
        self.fn, self.cuda, self.timeout = fn, torch.device(device).type == "cuda", timeout
        self.nan = False

    def __call__(self, *args, **kwargs):
        alarm = _Alarm()
        try:
            with _time_limit(self.timeout) as alarm:
                result = self.fn(*args, **kwargs)
                if self.cuda:
                    torch.cuda.synchronize()
        except ExampleTimeout:
            raise
        except BaseException as exc:
            if alarm.fired:  # the backend caught the alarm's exception and raised another
                raise ExampleTimeout(f"the backend call ran past the per-example limit of {self.timeout:g} s "
                                     f"(it then raised {type(exc).__name__})") from exc
            self._refusal(exc)
            raise
        parts = result if isinstance(result, tuple) else (result,)
        self.nan = any(_has_nan(p) for p in parts)
        return result

    @staticmethod
    def _refusal(exc: BaseException) -> None:
        """Raise _Refused when `exc` is a refusal naming a constraint, SilentRefusal when it names nothing."""
        if not isinstance(exc, REFUSALS):
            return
        text = _first_line(exc)
        if not text:
            raise SilentRefusal(f"{type(exc).__name__} without a message (a refusal must name the "
                                "constraint)") from exc
        if not _PYTHON_ERROR.search(text):  # else a Python error inside the backend, not a refusal: a crash
            raise _Refused(exc) from exc


def run_example(target: Target, example, device: str, timeout: float | None = None) -> oracle.Verdict:
    """Run one example and judge it. Returns the passing verdict; raises _Refused, a FuzzFailure, or whatever the
    backend raised."""
    call = _Call(target.fn, device, timeout)
    if isinstance(example, DenseExample):
        case = example.case
        inputs = oracle.make_inputs(case, device)
        if example.layouts != ("contiguous",) * 3:
            inputs = dataclasses.replace(inputs, **{n: relayout(getattr(inputs, n), lay)
                                                    for n, lay in zip("qkv", example.layouts)})
        verdict = oracle.check(call, case, device=device, returns_lse=target.backend.returns_lse, inputs=inputs)
    elif isinstance(example, VarlenExample):
        verdict = oracle.check_varlen(call, example.case, device=device)
    else:
        case = example.case
        inputs = oracle.make_kvcache_inputs(case, device)
        k_cache = cache_relayout(inputs.k_cache, example.cache_layout)
        v_cache = k_cache[..., :case.v_dim] if case.latent else cache_relayout(inputs.v_cache, example.cache_layout)
        inputs = dataclasses.replace(inputs, q=relayout(inputs.q, example.q_layout), k_cache=k_cache, v_cache=v_cache)
        verdict = oracle.check_kvcache(call, case, device=device, inputs=inputs)
    if call.nan:
        raise NaNOutput(f"NaN in the output or LSE: {verdict.reason or verdict.summary()}")
    if not verdict.passed:
        raise WrongAnswer(f"{verdict.reason} (max err {verdict.max_abs_err:.3g}, bound {verdict.bound:.3g}, plain "
                          f"{verdict.lp_max_abs_err:.3g}, relL2 {verdict.rel_l2:.3g})")
    return verdict


# ---------------------------------------------------------------- the run


@dataclass
class TargetStats:
    name: str
    examples: int = 0                # backend calls, shrinking included
    passed: int = 0
    refused: int = 0
    failing: int = 0                 # failing calls (shrinking included)
    seconds: float = 0.0
    note: str = ""                   # why it stopped, when not by its share of the budget
    refusals: dict[str, int] = field(default_factory=dict)


@dataclass
class Report:
    device: str
    seed: int
    budget_s: float
    out: Path
    stats: list[TargetStats] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    stopped: str = ""                # why the whole run ended early
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        n = sum(s.examples for s in self.stats)
        refused = sum(s.refused for s in self.stats)
        lines = [f"fuzz on {self.device}, seed {self.seed}, {self.seconds:.1f} s of {self.budget_s:g}: "
                 f"{len(self.stats)} targets, {n} examples, {refused} refused, {len(self.failures)} failed"]
        width = max([len(s.name) for s in self.stats] + [6])
        lines.append(f"  {'target':<{width}}  examples  passed  refused  failed   time")
        failed = {f.target for f in self.failures}
        for s in self.stats:
            note = f"  ({s.note})" if s.note else ""
            lines.append(f"  {s.name:<{width}}  {s.examples:>8}  {s.passed:>6}  {s.refused:>7}  "
                         f"{'yes' if s.name in failed else 'no':>6}  {s.seconds:>5.1f}s{note}")
        for name, why in self.skipped.items():
            lines.append(f"  skipped {name}: {why}")
        reasons = [(c, s.name, r) for s in self.stats for r, c in s.refusals.items()]
        if reasons:
            lines.append("refusals (most frequent first):")
            for count, name, reason in sorted(reasons, key=lambda t: -t[0])[:8]:
                lines.append(f"  {name} x{count}: {reason[:160]}")
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        for f in self.failures:
            lines.append(f"FAIL {f.target} [{f.kind}]{'' if f.shrunk else ' (not fully shrunk)'}: {f.message}")
            lines.append(f"  minimal example: {f.example.describe()}")
            lines.append(f"  {f.example!r}")
        lines.append(f"log and cases: {self.out}" + (f" (replay: python -m compare fuzz --replay "
                                                     f"{self.out / 'failures.json'})" if self.failures else ""))
        return "\n".join(lines)


class _Run:
    def __init__(self, out: Path, device: str, log: Callable[[str], None]):
        self.out, self.device, self.say = out, device, log
        out.mkdir(parents=True, exist_ok=True)
        self.logfile = (out / "log.txt").open("a", buffering=1)
        self.start = time.monotonic()
        self.last_progress = self.start

    def log(self, line: str) -> None:
        self.logfile.write(f"[{time.monotonic() - self.start:8.2f}s] {line}\n")

    def tell(self, line: str) -> None:
        self.log(line)
        self.say(line)

    def write_failures(self, failures: list[Failure]) -> None:
        path = self.out / "failures.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([f.to_json() for f in failures], indent=2) + "\n")
        tmp.replace(path)


def _seed_for(seed: int, target: Target) -> int:
    return zlib.crc32(f"{seed}:{target.name}".encode())


def _fuzz_target(run: _Run, target: Target, stats: TargetStats, *, seed: int, share_end: float,
                 max_examples: int | None, timeout: float | None, hard_exit: bool, report: Report) -> Failure | None:
    strategy = {"dense": dense_examples, "kvcache": kv_examples, "varlen": varlen_examples}[target.mode](
        target.backend, target.profile)
    grace = max(SHRINK_GRACE_MIN_S, share_end - time.monotonic())
    failing: list[tuple[object, BaseException]] = []
    watchdog_after = None if timeout is None else 2 * timeout + 30

    def body(example):
        now = time.monotonic()
        if not failing and now > share_end:
            raise _Stop("its share of the budget is spent")
        if failing and now > share_end + grace:
            raise _Stop("shrinking ran past the grace time")
        stats.examples += 1
        dog = _watchdog(run, report, target, example, watchdog_after) if hard_exit and watchdog_after else None
        try:
            verdict = run_example(target, example, run.device, timeout)
        except _Refused as exc:
            stats.refused += 1
            stats.refusals[str(exc)] = stats.refusals.get(str(exc), 0) + 1
            run.log(f"{target.name} refused {example.describe()}: {exc}")
            return
        except Exception as exc:
            stats.failing += 1
            failing.append((example, exc))
            kind, message = classify(exc)
            run.log(f"{target.name} FAIL[{kind}] {example.describe()}: {message}")
            if run.device.startswith("cuda") and kind == "crash" and not _cuda_alive():
                raise _Stop("a CUDA error left the context unusable; the example is not shrunk",
                            _failure(target, "cuda-context-lost", message, example, False, exc)) from exc
            raise
        finally:
            if dog is not None:
                dog.cancel()
        stats.passed += 1
        run.log(f"{target.name} pass {example.describe()}: {verdict.summary()}")
        if time.monotonic() - run.last_progress > 10:
            run.last_progress = time.monotonic()
            run.say(f"[{run.last_progress - run.start:6.1f}s] {target.name}: {stats.examples} examples, "
                    f"{stats.refused} refused, {stats.failing} failing")

    test = hypothesis.seed(_seed_for(seed, target))(hypothesis.settings(
        database=None, max_examples=max_examples or 1_000_000, deadline=None, derandomize=False,
        phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
        verbosity=Verbosity.quiet, print_blob=False)(hypothesis.given(strategy)(body)))
    try:
        test()
    except _Stop as stop:
        if stop.failure is not None:
            raise
        if failing:  # shrinking cut short: the last failing call of the first failure's type is the best so far
            stats.note = "shrinking stopped at the time limit"
            first = type(failing[0][1])
            example, exc = [f for f in failing if type(f[1]) is first][-1]
            kind, message = classify(exc)
            return _failure(target, kind, message, example, False, exc)
        return None
    except hypothesis.errors.Unsatisfiable as exc:
        stats.note = f"no valid example: {_first_line(exc)}"
        return None
    except Exception as exc:  # hypothesis re-raised the minimal failing example's exception (or a Flaky)
        if not failing:
            raise
        example, last = failing[-1]
        kind, message = classify(exc if "Flaky" in type(exc).__name__ else last)
        return _failure(target, kind, message, example, kind != "flaky", last)
    if max_examples and stats.examples >= max_examples:
        stats.note = f"max_examples {max_examples} reached"
    return None


def _failure(target: Target, kind: str, message: str, example, shrunk: bool, exc: BaseException | None) -> Failure:
    detail = "".join(traceback.format_exception(exc)) if exc is not None else ""
    return Failure(target.name, target.backend.name, target.mode, kind, message, example, shrunk, detail[-8000:])


def _watchdog(run: _Run, report: Report, target: Target, example, after: float) -> threading.Timer:
    """Ends the process (exit 1) when a call ignores the alarm: records the example first."""
    def fire():
        failure = _failure(target, "hang", f"the backend call did not return within {after:g} s and ignored the "
                                           "alarm (a hung kernel?); not shrunk", example, False, None)
        run.tell(f"FAIL {target.name} [hang]: {failure.message}: {example.describe()}")
        run.write_failures(report.failures + [failure])
        run.say(f"{example!r}")
        sys.stdout.flush()
        os._exit(1)

    timer = threading.Timer(after, fire)
    timer.daemon = True
    timer.start()
    return timer


def default_out() -> Path:
    return bench.scratch_dir() / f"fuzz-{time.strftime('%Y%m%d-%H%M%S')}"


def fuzz(targets: list[Target], *, budget_s: float, seed: int = 0, out: Path | None = None,
         device: str | None = None, max_examples: int | None = None, example_timeout_s: float | None = None,
         log: Callable[[str], None] = print, hard_exit: bool = False,
         skipped: dict[str, str] | None = None) -> Report:
    """Fuzz each target in turn for an equal part of what is left of `budget_s` (at most `max_examples` each),
    writing `out`/log.txt and `out`/failures.json. Returns the Report; `report.ok` is False on any failure."""
    if not budget_s or budget_s <= 0 or not math.isfinite(budget_s):
        raise ValueError(f"the fuzz budget must be a positive number of seconds, got {budget_s}")
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"max_examples must be >= 1, got {max_examples}")
    if example_timeout_s is not None and example_timeout_s <= 0:
        raise ValueError(f"the per-example time limit must be positive, got {example_timeout_s}")
    if not targets:
        raise ValueError("nothing to fuzz: no target" + (f" ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})"
                                                        if skipped else ""))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(out) if out is not None else default_out()
    run = _Run(out, device, log)
    report = Report(device=device, seed=seed, budget_s=budget_s, out=out, skipped=dict(skipped or {}))
    run.tell(f"fuzzing {len(targets)} targets on {device} for {budget_s:g} s (seed {seed}"
             + (f", at most {max_examples} examples each" if max_examples else "") + f"); log: {out / 'log.txt'}")
    end = run.start + budget_s
    try:
        for i, target in enumerate(targets):
            stats = TargetStats(target.name)
            report.stats.append(stats)
            now = time.monotonic()
            if now >= end or report.stopped:
                stats.note = "not reached: " + (report.stopped or "the budget is spent")
                continue
            share_end = now + (end - now) / (len(targets) - i)
            timeout = example_timeout_s or target.profile.example_timeout_s
            try:
                failure = _fuzz_target(run, target, stats, seed=seed, share_end=share_end, max_examples=max_examples,
                                       timeout=timeout, hard_exit=hard_exit, report=report)
            except _Stop as stop:
                failure, report.stopped = stop.failure, f"{target.name}: {stop.why}"
            stats.seconds = time.monotonic() - now
            if failure is not None:
                report.failures.append(failure)
                run.write_failures(report.failures)
                run.log(f"minimal failing example of {target.name}: {failure.example!r}\n{failure.detail}")
            verdict = f"FAIL [{failure.kind}] {failure.message}" if failure else "no failure"
            run.tell(f"{target.name}: {stats.examples} examples ({stats.passed} passed, {stats.refused} refused) "
                     f"in {stats.seconds:.1f} s: {verdict}")
    finally:
        report.seconds = time.monotonic() - run.start
        run.write_failures(report.failures)
        run.log("summary:\n" + report.summary())
        run.logfile.close()
    return report


# ---------------------------------------------------------------- replay


def load_failures(path: Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"fuzz --replay: no such file: {path}")
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"fuzz --replay: {path} is not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and {"backend", "mode", "example"} <= e.keys()
                                                for e in entries):
        raise ValueError(f"fuzz --replay: {path} is not a failures.json written by `compare fuzz`")
    return entries


def replay(entries: list[dict], device: str | None = None, example_timeout_s: float | None = None,
           log: Callable[[str], None] = print) -> int:
    """Run each recorded example once on its backend; the number that still fail."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    still = 0
    for entry in entries:
        backend = backends.require(entry["backend"])
        fn = backend if entry["mode"] == "dense" else kvcache_function(backend)
        if fn is None:
            raise ValueError(f"fuzz --replay: {entry['backend']} has no attention_with_kvcache")
        target = Target(backend, entry["mode"], fn, profile_for(backend, device))
        example = example_from_json(entry["mode"], entry["example"])
        try:
            verdict = run_example(target, example, device, example_timeout_s or target.profile.example_timeout_s)
            text = f"passes now: {verdict.summary()}"
        except _Refused as exc:
            text = f"refused now: {exc}"
        except Exception as exc:
            kind, message = classify(exc)
            text = f"FAIL [{kind}] {message}"
            still += 1
        log(f"{target.name} {example.describe()}: {text}")
    return still
