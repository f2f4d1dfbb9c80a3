"""Registry of named attention backends with declared capabilities.

Names are ``<backend>:<variant>``: ``sdpa:flash``, ``sdpa:cudnn``, ``sdpa:efficient``, ``sdpa:math``
(torch SDPA peers), ``torch:varlen_attn`` (torch's FlashAttention-2 varlen forward, packed batches only),
``fa4:cute`` (FlashAttention-4's CuTe-DSL forward, where the ``flash-attn-4`` wheel imports), ``triton:<variant>``
and ``cuda:<variant>`` (read from each package's ``VARIANTS``).
Asking for a backend that cannot run here raises ``BackendUnavailable`` with the reason (no GPU, arch
too old, package missing); nothing is ever substituted.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import formats, oracle
from .kvcache import MLA_HEAD_DIM, MLA_HEAD_DIM_V

SIXTEEN_BIT = ("bf16", "fp16")


class BackendUnavailable(RuntimeError):
    """The backend exists but cannot run on this machine; the message says why."""


@dataclass(frozen=True)
class Backend:
    name: str                       # "<backend>:<variant>"
    family: str                     # "peer" | "triton" | "cuda"
    formats: tuple[str, ...]
    head_dims: tuple[int, ...] | None   # None: any head_dim the implementation accepts
    run: Callable = field(repr=False)   # run(q, k, v, *, causal, scale, return_lse)
    availability: Callable[[], str | None] = field(repr=False)
    returns_lse: bool = True
    gqa: bool = True
    causal_unequal: bool = True     # bottom-right causal with seqlen_q != seqlen_k
    min_seqlen_k: int = 1
    max_seqlen_q: int | None = None  # decode kernels: at most this many query tokens
    local: bool = False             # takes window=(left, right) (local attention)
    softcap: bool = False           # takes softcap=
    varlen: bool = False            # takes packed batches: run_varlen
    # run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal, scale, window=,
    # softcap=, return_lse): attention_varlen's call (its package's, or a peer's)
    run_varlen: Callable | None = field(default=None, repr=False)
    dense: bool = True              # takes dense (B, H, S, D) cases (False: a peer for packed batches only)
    min_cc: tuple[int, int] | None = None   # None: runs on CPU too
    max_cc: tuple[int, int] | None = None
    ceiling: str = "mma.sync"       # instruction family: "mma.sync" or "wgmma", or a full name of compare.ceilings
    description: str = ""
    last_config: Callable[[], str | None] = field(default=lambda: None, repr=False)  # autotuned tile choice
    head_dim_pairs: tuple[tuple[int, int], ...] = ()  # (Q/K, V) head dims it takes besides equal ones in head_dims
    latent_pairs_only: bool = False  # the pairs only as one latent KV cache in q's dtype (MLA: V = K's first columns)
    # run_mla(q, kv_cache, *, cache_seqlens, block_table, causal, scale, return_lse): attention_mla_decode's call
    # (compare.cache_sweep: MLA decode against a paged latent cache); None: no MLA sweep case
    run_mla: Callable | None = field(default=None, repr=False)
    # run_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table, k_descale=, v_descale=, causal, scale, window=,
    # return_lse): attention_with_kvcache's call (compare.cache_sweep); None: no KV-cache sweep case
    run_kvcache: Callable | None = field(default=None, repr=False)

    @property
    def backend(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def variant(self) -> str:
        return self.name.split(":", 1)[1]

    def ceiling_for(self, fmt: str) -> str:
        """Name of the measured ceiling (compare.ceilings) this backend is judged against for `fmt`:
        its instruction family at the precision the tensor cores see. Block-scaled formats run bf16
        wgmma after upcasts on sm_90 unless a variant names its own ceiling (e.g. "wgmma.e4m3")."""
        if self.ceiling not in ("mma.sync", "wgmma"):
            return self.ceiling
        if self.ceiling == "mma.sync":
            return "mma.sync.fp16" if fmt == "fp16" else "mma.sync.bf16"
        return "wgmma.e4m3" if fmt == "fp8" else "wgmma.bf16"

    def unavailable_reason(self) -> str | None:
        if self.min_cc is not None:
            if not torch.cuda.is_available():
                return "no CUDA GPU visible to torch"
            cc = torch.cuda.get_device_capability(0)
            if cc < self.min_cc:
                return f"needs compute capability >= {self.min_cc[0]}.{self.min_cc[1]}, this GPU is {cc[0]}.{cc[1]}"
            if self.max_cc is not None and cc > self.max_cc:
                return f"built for compute capability <= {self.max_cc[0]}.{self.max_cc[1]}, this GPU is {cc[0]}.{cc[1]}"
        return self.availability()

    def unsupported_reason(self, case) -> str | None:
        """Why this backend does not accept `case` by its declared capabilities (None: it does). A benchmark's
        packed batch (compare.varlen.SweepCase: has `padded`) needs run_varlen, or the dense call when padded."""
        padded = getattr(case, "padded", None)
        if padded is None and not self.dense:
            return "packed batches only"
        if padded is False and not self.varlen:
            return "no packed batches (no attention_varlen)"
        if padded and not self.dense:
            return "packed batches only (no dense call for the padded batch)"
        if getattr(case, "mla", False) and self.run_mla is None:
            return "no MLA decode against a latent cache (attention_mla_decode)"
        if getattr(case, "kvcache", False) and not case.mla and self.run_kvcache is None:
            return "no decode against a KV cache (attention_with_kvcache)"
        if case.fmt not in self.formats:
            return f"format {case.fmt} not in {self.formats}"
        v_dim = getattr(case, "v_dim", case.head_dim)  # (a case type without one: V's head_dim is Q's)
        if self.head_dims is not None and not oracle.takes_head_dims(self.head_dims, self.head_dim_pairs,
                                                                     case.head_dim, v_dim):
            if v_dim == case.head_dim:
                return f"head_dim {case.head_dim} not in {self.head_dims}"
            return f"Q/K head_dim {case.head_dim} with V head_dim {v_dim} not in {self.head_dim_pairs}"
        if self.latent_pairs_only and v_dim != case.head_dim and not (
                getattr(case, "latent", False) and getattr(case, "kv_fmt", "") == "same"):
            return (f"Q/K head_dim {case.head_dim} with V head_dim {v_dim} only as one latent KV cache in q's dtype "
                    "(V a view of K's first columns: attention_mla_decode)")
        if not self.gqa and case.heads_q != case.heads_kv:
            return "no GQA/MQA"
        if case.seqlen_k < self.min_seqlen_k:
            return f"seqlen_k < {self.min_seqlen_k}"
        if self.max_seqlen_q is not None and case.seqlen_q > self.max_seqlen_q:
            return f"seqlen_q > {self.max_seqlen_q} (a decode kernel)"
        if case.causal and case.seqlen_q != case.seqlen_k and not self.causal_unequal:
            return "causal with seqlen_q != seqlen_k (its causal mask is top-left aligned)"
        if getattr(case, "local", False) and not self.local:
            return "a local window (no window= argument)"
        if getattr(case, "softcap", 0.0) and not self.softcap:
            return "softcap (no softcap= argument)"
        return None

    def __call__(self, q, k, v, *, causal=False, scale=None, return_lse=False, **extra):
        """extra: window= / softcap= where the backend declares them (compare.oracle.Case.extra_kwargs)."""
        return self.run(q, k, v, causal=causal, scale=scale, return_lse=return_lse, **extra)


# --- torch SDPA peers -------------------------------------------------------------------------

_SDPA = {  # variant -> (SDPBackend attribute, needs GPU, description)
    "flash": ("FLASH_ATTENTION", True, "torch SDPA, FlashAttention-2 kernel"),
    "cudnn": ("CUDNN_ATTENTION", True, "torch SDPA, cuDNN fused attention"),
    "efficient": ("EFFICIENT_ATTENTION", True, "torch SDPA, memory-efficient (xFormers) kernel"),
    "math": ("MATH", False, "torch SDPA, unfused math reference (any device)"),
}
# Limits seen on an H200 with torch 2.11 ("No available kernel"): the efficient kernel takes no
# enable_gqa, cuDNN refuses a key length of 1.
_SDPA_LIMITS = {"efficient": dict(gqa=False), "cudnn": dict(min_seqlen_k=2)}


def _sdpa_runner(variant: str) -> Callable:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    kernel = getattr(SDPBackend, _SDPA[variant][0])

    def run(q, k, v, *, causal=False, scale=None, return_lse=False):
        if return_lse:
            raise ValueError(f"sdpa:{variant} does not return the LSE")
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"sdpa:{variant} takes plain tensors, got {type(x).__name__} for {name}")
        sq, sk = q.shape[-2], k.shape[-2]
        mask = None
        if causal and sq != sk:
            if variant != "math":
                raise ValueError(f"sdpa:{variant}: causal with seqlen_q != seqlen_k is top-left aligned "
                                 "in SDPA; refused rather than computing a different mask")
            keys = torch.arange(sk, device=q.device)
            mask = keys[None, :] <= torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        with sdpa_kernel([kernel]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                                  scale=scale, enable_gqa=q.shape[1] != k.shape[1])

    return run


def _sdpa_backends() -> list[Backend]:
    out = []
    for variant, (_, gpu, description) in _SDPA.items():
        out.append(Backend(
            name=f"sdpa:{variant}", family="peer",
            formats=SIXTEEN_BIT + (() if gpu else ("fp32",)),
            head_dims=None, run=_sdpa_runner(variant), availability=lambda: None, returns_lse=False,
            causal_unequal=variant == "math", min_cc=(8, 0) if gpu else None, **_SDPA_LIMITS.get(variant, {}),
            # FA2 and the efficient kernel are mma.sync kernels; cuDNN uses Hopper's wgmma.
            ceiling="wgmma" if variant == "cudnn" else "mma.sync", description=description))
    return out


# --- torch's varlen_attn peer (FlashAttention-2 on packed batches) ------------------------------


def _torch_varlen_error() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError as exc:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn: {exc}"
    return None


def _torch_varlen_run(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False, scale=None,
                      window=(-1, -1), softcap=0.0, return_lse=False):
    """torch.nn.attention.varlen.varlen_attn with this harness's arguments: causal as the window's right side 0
    (FlashAttention-2's bottom-right mask; or is_causal where the torch version takes that instead), GQA where the
    version takes enable_gqa, the LSE through its AuxRequest. No softcap argument: refused."""
    import inspect
    from torch.nn.attention.varlen import AuxRequest, varlen_attn
    takes = inspect.signature(varlen_attn).parameters
    if softcap:
        raise NotImplementedError("torch varlen_attn takes no softcap")
    kw = {"scale": scale} if "scale" in takes else {}
    if "is_causal" in takes:
        if tuple(window) != (-1, -1):
            raise NotImplementedError(f"torch {torch.__version__}'s varlen_attn takes no window")
        kw["is_causal"] = causal
    else:
        kw["window_size"] = (window[0], 0 if causal else window[1])
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" not in takes:
            raise NotImplementedError(f"torch {torch.__version__}'s varlen_attn takes no GQA")
        kw["enable_gqa"] = True
    if return_lse:
        kw["return_aux"] = AuxRequest(lse=True)
    return varlen_attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **kw)


def _torch_varlen_backends() -> list[Backend]:
    return [Backend(
        name="torch:varlen_attn", family="peer", formats=SIXTEEN_BIT, head_dims=None,
        run=_refuse("torch:varlen_attn takes packed batches only"), availability=_torch_varlen_error,
        dense=False, varlen=True, run_varlen=_torch_varlen_run, local=True, min_cc=(8, 0),
        description="torch.nn.attention.varlen.varlen_attn (FlashAttention-2's varlen forward)")]


# --- FlashAttention-4 peer ---------------------------------------------------------------------

FA4_MODULE = "flash_attn.cute"


@functools.lru_cache(maxsize=None)
def _fa4_import_error() -> str | None:
    """Why FlashAttention-4 cannot be imported here (None: it can). Cached: the import is slow."""
    try:
        importlib.import_module(FA4_MODULE)
    except Exception as exc:  # a broken install raises more than ImportError (its DSL loads native libraries)
        return f"{FA4_MODULE} (wheel flash-attn-4) could not be imported: {type(exc).__name__}: {exc}"
    return None


def _fa4_versions() -> str:
    """The installed FA4 and CuTe-DSL versions, recorded as the rows' config."""
    from importlib.metadata import PackageNotFoundError, version
    parts = []
    for dist in ("flash-attn-4", "nvidia-cutlass-dsl"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} ?")
    return ", ".join(parts)


def _fa4_run(q, k, v, *, causal=False, scale=None, return_lse=False):
    """FA4 on (B, H, S, D) tensors. It takes (B, S, H, D): the transposed views are passed as they are
    (FA4 accepts any 16-byte-aligned strides), so no copy is timed; its causal mask is bottom-right and
    its LSE natural-log, as the oracle's."""
    module = importlib.import_module(FA4_MODULE)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"fa4:cute takes plain tensors, got {type(x).__name__} for {name}")
    out, lse = module.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                      softmax_scale=scale, causal=causal, return_lse=return_lse)
    out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


def _fa4_backends() -> list[Backend]:
    return [Backend(
        name="fa4:cute", family="peer", formats=SIXTEEN_BIT, head_dims=None, run=_fa4_run,
        availability=_fa4_import_error, min_cc=(8, 0), ceiling="wgmma", last_config=_fa4_versions,
        description="FlashAttention-4, CuTe-DSL forward (its sm90 path on Hopper)")]


# --- project backends (triton_impl, cuda_impl) --------------------------------------------------

_CEILING = {"triton": "wgmma", "cuda": "mma.sync"}  # Triton emits wgmma on sm_90


def _package_backends(family: str, module_name: str) -> list[Backend]:
    try:
        module = importlib.import_module(module_name)
        variants = module.VARIANTS
    except (ImportError, AttributeError) as exc:  # the package itself failed: one entry that says why
        reason = f"{module_name} could not be loaded: {exc}"
        return [Backend(name=f"{family}:*", family=family, formats=(), head_dims=(), run=_refuse(reason),
                        availability=lambda: reason, description=reason)]
    out = []
    for variant, caps in variants.items():
        def run(q, k, v, *, causal=False, scale=None, return_lse=False, _variant=variant, **extra):
            return module.attention(q, k, v, causal=causal, scale=scale, variant=_variant, return_lse=return_lse,
                                    **extra)

        def run_varlen(q, k, v, *args, _variant=variant, **kwargs):
            return module.attention_varlen(q, k, v, *args, variant=_variant, **kwargs)

        # the decode variant serves attention_with_kvcache, and attention_mla_decode where it takes MLA's head dims
        kvcache = variant == "decode" and hasattr(module, "attention_with_kvcache")
        mla = variant == "decode" and (MLA_HEAD_DIM, MLA_HEAD_DIM_V) in caps.get("head_dim_pairs", ()) and hasattr(
            module, "attention_mla_decode")

        out.append(Backend(
            # fp32 is accepted by some kernels for interpreter tests only; the compared formats are the
            # design's (on the H200, triton:fa2 in fp32 exceeds 2x torch's fp32 error: exp2 with the
            # scale folded in costs ~1e-6 relative, see docs/journal/2026-11-29_triton.md).
            name=f"{family}:{variant}", family=family, formats=tuple(f for f in caps["formats"] if f in formats.FORMATS),
            head_dims=tuple(caps["head_dims"]), head_dim_pairs=tuple(caps.get("head_dim_pairs", ())),
            latent_pairs_only=bool(caps.get("latent_pairs_only")),
            run=run, availability=lambda _v=variant: module.unavailable_reason(_v),
            # under TRITON_INTERPRET=1 the Triton kernels run on the CPU: triton_impl says which can
            min_cc=tuple(caps["min_cc"]) if caps.get("min_cc") and not (family == "triton" and interpreting())
            else None,
            max_cc=tuple(caps["max_cc"]) if caps.get("max_cc") else None, max_seqlen_q=caps.get("max_seqlen_q"),
            local=bool(caps.get("local")), softcap=bool(caps.get("softcap")), varlen=bool(caps.get("varlen")),
            run_varlen=run_varlen if caps.get("varlen") else None,
            run_mla=module.attention_mla_decode if mla else None,
            run_kvcache=module.attention_with_kvcache if kvcache else None,
            ceiling=caps.get("ceiling", _CEILING[family]), description=caps.get("description", ""),
            last_config=(lambda _v=variant: module.last_config(_v)) if hasattr(module, "last_config")
            else (lambda: None)))
    return out


def interpreting() -> bool:
    """TRITON_INTERPRET is set: the Triton kernels run on the CPU, in Triton's interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _refuse(reason: str) -> Callable:
    def run(*args, **kwargs):
        raise BackendUnavailable(reason)
    return run


_REGISTRY: dict[str, Backend] | None = None


def registry() -> dict[str, Backend]:
    """All known backends by name (built once, on first use)."""
    global _REGISTRY
    if _REGISTRY is None:
        backends = (_sdpa_backends() + _fa4_backends() + _torch_varlen_backends()
                    + _package_backends("triton", "triton_impl") + _package_backends("cuda", "cuda_impl"))
        _REGISTRY = {b.name: b for b in backends}
    return _REGISTRY


def use_triton_interpreter() -> None:
    """Switch TRITON_INTERPRET=1 on (a machine without a GPU), before any Triton kernel is imported, and build the
    registry anew, with the interpreter's availability. ValueError if a kernel module was imported already."""
    global _REGISTRY
    if interpreting():
        return
    if any(m.startswith("triton_impl.kernels.") for m in sys.modules):  # decorated before the switch
        raise ValueError("set TRITON_INTERPRET=1 before the Triton kernels are imported")
    os.environ["TRITON_INTERPRET"] = "1"
    _REGISTRY = None


def get(name: str) -> Backend:
    """The backend called `name`; ValueError listing the known names if there is none."""
    reg = registry()
    if name not in reg:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(sorted(reg))}")
    return reg[name]


def require(name: str) -> Backend:
    """The backend called `name`, or BackendUnavailable saying why it cannot run here."""
    backend = get(name)
    reason = backend.unavailable_reason()
    if reason:
        raise BackendUnavailable(f"backend {name} cannot run here: {reason}")
    return backend


def select(patterns: list[str] | None) -> tuple[list[Backend], dict[str, str]]:
    """Backends matching shell-style `patterns` (None: all). Explicit names (no wildcard) must be
    available, else BackendUnavailable; wildcard matches that cannot run are returned as skipped
    {name: reason} so that callers report them."""
    reg = registry()
    chosen, skipped = [], {}
    for pattern in patterns or ["*"]:
        if not any(ch in pattern for ch in "*?["):
            backend = require(pattern)
            if backend not in chosen:
                chosen.append(backend)
            continue
        matches = [b for name, b in sorted(reg.items()) if fnmatch.fnmatchcase(name, pattern)]
        if not matches:
            raise ValueError(f"no backend matches {pattern!r}; known: {', '.join(sorted(reg))}")
        for b in matches:
            reason = b.unavailable_reason()
            if reason:
                skipped[b.name] = reason
            elif b not in chosen:
                chosen.append(b)
    return chosen, skipped
