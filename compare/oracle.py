"""The one test oracle every backend is held to.

* ``reference``: float64 attention (with LSE) on given inputs, softmax(Q K^T) V with V's own head_dim (which
  ``Case.head_dim_v`` may set apart from Q's and K's); causal is bottom-right aligned
  (query i sees key j iff j <= i + Sk - Sq); a query that sees no key gives out 0 and LSE -inf.
  ``rows`` restricts it to a subset of query rows (the row-sampled mode for big shapes,
  cost O(rows * Sk * D) per head).
* ``plain_attention``: a plain PyTorch implementation in the kernel's own precision (16-bit matmuls
  with fp32 softmax; for quantized formats, dequantized inputs and the format's own quantization of P,
  ``compare.formats.quantize_p``). For fp8 on a GPU, S = Q K^T goes through the fp8 tensor cores
  (``torch._scaled_mm`` with fast accumulation), because Hopper's fp8 MMA accumulates with fewer bits
  than fp32 and every fp8 kernel on it inherits that error. Its error sets the tolerance.
* ``check``: the FlashAttention rule, ``max|out - ref| <= 2 * max|out_lp - ref| + atol_floor``, with
  ``atol_floor`` one unit of the output dtype's precision at the output's magnitude (fp32 outputs: four, times
  the largest scaled score, ``FLOOR_ULPS``); LSE alike. NaN never passes; rows that see no key must give exactly
  0 and -inf. On CUDA the call allocates from a fresh memory pool filled with NaN (``poisoned_allocations``), so
  an element the kernel never writes shows up as NaN; on CPU a fresh allocation is usually zeros, which fails on
  magnitude instead.
* Local attention and softcap (``Case.window``, ``Case.softcap``), as FlashAttention defines them: keys
  ``diag - left .. diag + right`` around the bottom-right diagonal ``diag = i + Sk - Sq`` (-1: unbounded; causal
  sets right to 0), and scaled scores replaced by ``softcap * tanh(s / softcap)``; reference and plain alike,
  and a backend is called with ``window=`` / ``softcap=`` only where a case sets them.

Inputs are drawn fresh per check from a float32 master tensor: ``normal`` (N(0,1)), ``shifted``
(N(0,1) + 1, correlated scores) or ``large`` (4 N(0,1), peaky softmax). For the paper the verdict also
reports the relative L2 error against float64 attention on the *unquantized* master inputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from dataclasses import dataclass

import torch

from . import formats

DISTRIBUTIONS = ("normal", "shifted", "large")
# Above this many (query, key) score elements per call the oracle samples query rows.
FULL_REFERENCE_LIMIT = 1 << 24
# The rule's floor in units of the output dtype's precision at the output's magnitude: 1 for 16-bit outputs. fp32
# outputs: a score s carries rounding of about eps |s| from the order and place of its scaling (sdpa:math scales q
# and k by sqrt(scale) each), which moves p by p eps |s|, so there twice plain's error is no bound (sdpa:math on a
# strided K measured 2.8x plain's error on one CPU): the floor is 4 ulps times max(1, the largest |scaled score|).
FLOOR_ULPS = {torch.float32: 4}
SAMPLED_ROWS = 256


@dataclass(frozen=True)
class Case:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool = False
    fmt: str = "bf16"
    scale: float | None = None
    dist: str = "normal"
    seed: int = 0
    window: tuple[int, int] = (-1, -1)  # local attention (left, right) keys around the diagonal; -1: unbounded
    softcap: float = 0.0                # > 0: scores become softcap * tanh(scaled score / softcap)
    head_dim_v: int | None = None       # V's (and the output's) head_dim; None: head_dim

    def __post_init__(self):
        for field in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "head_dim_v"):
            value = getattr(self, field)
            if value is not None and value < 1:
                raise ValueError(f"Case.{field} must be >= 1, got {value}")
        object.__setattr__(self, "window", as_window(self.window))
        check_softcap(self.softcap)
        if self.heads_q % self.heads_kv:
            raise ValueError(f"heads_q ({self.heads_q}) must be a multiple of heads_kv ({self.heads_kv})")
        if self.fmt not in formats.FORMATS and self.fmt != "fp32":
            raise ValueError(f"unknown format {self.fmt!r}; known: {sorted(formats.FORMATS)} and 'fp32'")
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {self.dist!r}; known: {DISTRIBUTIONS}")

    @property
    def quantized(self) -> bool:
        return self.fmt in formats.FORMATS and formats.FORMATS[self.fmt].quantized

    @property
    def out_dtype(self) -> torch.dtype:
        """The output dtype of a kernel for this case: the input dtype, bf16 for quantized formats."""
        if self.fmt == "fp32":
            return torch.float32
        return formats.FORMATS[self.fmt].torch_dtype or torch.bfloat16

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def v_dim(self) -> int:
        """V's and the output's head_dim."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def local(self) -> bool:
        return self.window != (-1, -1)

    def extra_kwargs(self) -> dict:
        """The keyword arguments beyond (causal, scale, return_lse) a backend call needs for this case: window and
        softcap where they are set (so that backends without them still take every other case)."""
        kw = {}
        if self.local:
            kw["window"] = self.window
        if self.softcap:
            kw["softcap"] = self.softcap
        return kw

    def shape_str(self) -> str:
        mask = "causal" if self.causal else "full"
        extra = (f" win{self.window[0]},{self.window[1]}" if self.local else "") + (
            f" cap{self.softcap:g}" if self.softcap else "")
        return (f"{self.fmt} b{self.batch} h{self.heads_q}/{self.heads_kv} q{self.seqlen_q} k{self.seqlen_k} "
                f"{self.dims_str()} {mask}{extra} {self.dist}")

    def dims_str(self) -> str:
        """'d128', or 'd192v128' where V's head_dim differs."""
        return f"d{self.head_dim}" + (f"v{self.v_dim}" if self.v_dim != self.head_dim else "")

    def replace(self, **kw) -> "Case":
        return dataclasses.replace(self, **kw)


@dataclass(frozen=True)
class Inputs:
    """What a backend receives (q, k, v) and what the references are computed from."""
    q: object                    # torch.Tensor or formats.QuantTensor
    k: object
    v: object
    q_master: torch.Tensor       # float32, before rounding to the format
    k_master: torch.Tensor
    v_master: torch.Tensor

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The values the kernel actually sees, as float64 (B, H, S, D) tensors."""
        return tuple(_values(x).double() for x in (self.q, self.k, self.v))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str                  # '' when passed
    max_abs_err: float
    lp_max_abs_err: float
    bound: float
    lse_err: float | None
    lse_bound: float | None
    rel_l2: float                # vs float64 reference on the (quantized) inputs the kernel saw
    rel_l2_unquantized: float    # vs float64 reference on the unquantized master inputs
    rows_checked: int            # query rows per (batch, head) that were compared

    def summary(self) -> str:
        status = "PASS" if self.passed else f"FAIL ({self.reason})"
        return (f"{status}: max err {self.max_abs_err:.3g}, bound {self.bound:.3g} (plain {self.lp_max_abs_err:.3g}), "
                f"relL2 {self.rel_l2:.3g}, vs unquantized {self.rel_l2_unquantized:.3g}")


def _values(x) -> torch.Tensor:
    return x.dequantize(torch.float32) if isinstance(x, formats.QuantTensor) else x


def make_inputs(case: Case, device: str | torch.device = "cpu") -> Inputs:
    """Fresh random inputs for `case`, drawn on `device` from the case's seed."""
    gen = torch.Generator(device=device).manual_seed(case.seed)
    shape_q = (case.batch, case.heads_q, case.seqlen_q, case.head_dim)
    shape_kv = (case.batch, case.heads_kv, case.seqlen_k, case.head_dim)
    shape_v = (*shape_kv[:3], case.v_dim)
    masters = [torch.randn(s, generator=gen, device=device, dtype=torch.float32) for s in (shape_q, shape_kv, shape_v)]
    if case.dist == "shifted":
        masters = [m + 1.0 for m in masters]
    elif case.dist == "large":
        masters = [m * 4.0 for m in masters]
    q, k, v = masters
    if case.quantized:
        lp = formats.quantize_attention_inputs(q, k, v, case.fmt)
    else:
        lp = tuple(m.to(case.out_dtype) for m in (q, k, v))
    return Inputs(*lp, q_master=q, k_master=k, v_master=v)


def _heads_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (Hq, R, K) @ b (Hkv, K, N) -> (Hq, R, N), query head h against KV head h // (Hq / Hkv) (GQA's grouping),
    without repeating b's heads: memory follows the KV heads (MLA's one latent head against 128 query heads and
    64k keys would otherwise take tens of GB in float64)."""
    heads_q, rows, inner = a.shape
    heads_kv = b.shape[0]
    if heads_q == heads_kv:
        return torch.matmul(a, b)
    return torch.matmul(a.reshape(heads_kv, heads_q // heads_kv * rows, inner), b).reshape(heads_q, rows, -1)


def check_window(window) -> None:
    """window = (left, right), FlashAttention's local attention: ints >= -1 (-1: unbounded on that side)."""
    if (not isinstance(window, tuple) or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window)):
        raise ValueError(f"window must be a tuple (left, right) of ints >= -1 (-1: unbounded), got {window!r}")


def as_window(window) -> tuple[int, int]:
    """window checked (check_window) and returned as a tuple; a list (JSON, a recorded fuzz example, a user's
    [left, right]) is taken as the tuple it spells."""
    window = tuple(window) if isinstance(window, list) else window
    check_window(window)
    return window


def check_softcap(softcap) -> None:
    """softcap: a finite number >= 0 (0: no cap)."""
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not (0 <= softcap < math.inf):
        raise ValueError(f"softcap must be a finite number >= 0, got {softcap!r}")


def takes_head_dims(head_dims, head_dim_pairs, head_dim: int, head_dim_v: int) -> bool:
    """Whether a kernel declaring `head_dims` (equal Q/K and V head dims) and `head_dim_pairs` ((Q/K, V) pairs
    besides them) takes Q/K head_dim `head_dim` with V head_dim `head_dim_v`."""
    return head_dim in head_dims if head_dim_v == head_dim else (head_dim, head_dim_v) in head_dim_pairs


def visible_range(row, seqlen_q: int, seqlen_k: int, causal: bool, window=(-1, -1)):
    """(first, last) key a query row sees, bottom-right aligned as FlashAttention: with diag = row + Sk - Sq, keys
    diag - left .. diag + right (right = 0 under causal; -1 = unbounded), clipped to 0 .. Sk - 1 by the caller.
    Works on ints and on integer tensors of rows."""
    left, right = window
    diag = row + (seqlen_k - seqlen_q)
    right = 0 if causal else right
    first = diag - left if left >= 0 else diag * 0 - seqlen_k
    last = diag + right if right >= 0 else diag * 0 + 2 * seqlen_k
    return first, last


def _visible(rows: torch.Tensor, seqlen_q: int, seqlen_k: int, causal: bool, device,
             window=(-1, -1)) -> torch.Tensor | None:
    """Boolean (R, Sk) mask of keys each query row may see, None when every key is visible."""
    if not causal and window == (-1, -1):
        return None
    first, last = visible_range(rows[:, None], seqlen_q, seqlen_k, causal, window)
    keys = torch.arange(seqlen_k, device=device)[None, :]
    return (keys >= first) & (keys <= last)


def _softcapped(s: torch.Tensor, softcap: float) -> torch.Tensor:
    """softcap * tanh(s / softcap) on scaled scores (no change for softcap 0)."""
    return torch.tanh(s / softcap) * softcap if softcap else s


def _all_rows(seqlen_q: int, rows: torch.Tensor | None, device) -> torch.Tensor:
    return torch.arange(seqlen_q, device=device) if rows is None else rows.to(device)


def _largest_score(q, k, rows: torch.Tensor, scale: float) -> float:
    """max |scale * q k^T| over the query rows `rows` (masked keys included: a bound, not the visible maximum)."""
    return max((float((_heads_matmul(q[b][:, rows].double(), k[b].double().transpose(-1, -2)) * scale).abs().max())
                for b in range(q.shape[0])), default=0.0)


def reference(q, k, v, *, causal: bool, scale: float, rows: torch.Tensor | None = None, window=(-1, -1),
              softcap: float = 0.0):
    """float64 attention on (B, H, S, D) tensors (v's D its own). Returns (out, lse) for the selected query rows, out
    with v's head_dim. window and softcap as FlashAttention: local attention (left, right) around the bottom-right
    diagonal, and scaled scores capped to softcap * tanh(s / softcap) before the softmax."""
    q, k, v = (x.double() for x in (q, k, v))
    rows = _all_rows(q.shape[2], rows, q.device)
    out = torch.empty(q.shape[0], q.shape[1], rows.numel(), v.shape[3], dtype=torch.float64, device=q.device)
    lse = torch.empty(q.shape[0], q.shape[1], rows.numel(), dtype=torch.float64, device=q.device)
    visible = _visible(rows, q.shape[2], k.shape[2], causal, q.device, window)
    for b in range(q.shape[0]):  # one batch at a time bounds memory to H * R * Sk
        s = _softcapped(_heads_matmul(q[b, :, rows], k[b].transpose(-1, -2)) * scale, softcap)
        if visible is not None:
            s = s.masked_fill(~visible, -math.inf)
        lse[b] = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[b, ..., None]).nan_to_num(0.0)  # rows with no key: exp(nan) -> 0
        out[b] = _heads_matmul(p, v[b])
    return out, lse


def plain_attention(inputs: Inputs, case: Case, rows: torch.Tensor | None = None):
    """A plain PyTorch implementation in the kernel's precision; returns (out float64, lse float64)."""
    scale = case.softmax_scale
    q, k, v = inputs.q, inputs.k, inputs.v
    rows = _all_rows(case.seqlen_q, rows, inputs.q_master.device)
    if case.quantized:
        q, k, v = (_values(x) for x in (q, k, v))  # float32 dequantized values
    visible = _visible(rows, case.seqlen_q, case.seqlen_k, case.causal, q.device, case.window)
    outs, lses = [], []
    fp8_cores = case.fmt == "fp8" and inputs.q_master.is_cuda
    for b in range(case.batch):
        if fp8_cores:
            s = _fp8_tensor_core_scores(inputs.q, inputs.k, b, rows) * scale
        else:
            s = _heads_matmul(q[b, :, rows], k[b].transpose(-1, -2)).float() * scale  # 16-bit matmul rounds S
        s = _softcapped(s, case.softcap)
        if visible is not None:
            s = s.masked_fill(~visible, -math.inf)
        m = s.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)
        p = torch.exp(s - m)
        denom = p.sum(dim=-1, keepdim=True)
        if case.quantized:
            o = _heads_matmul(formats.quantize_p(p, case.fmt), v[b]) / denom
        else:
            o = _heads_matmul(p.to(v.dtype), v[b]).float() / denom
        outs.append(o.nan_to_num(0.0).to(case.out_dtype))
        lses.append((m + torch.log(denom)).squeeze(-1))
    return torch.stack(outs).double(), torch.stack(lses).double()


def _fp8_tensor_core_scores(q: formats.QuantTensor, k: formats.QuantTensor, b: int, rows: torch.Tensor):
    """Q K^T (descaled, fp32) of batch `b` for query `rows`, computed by cuBLAS on fp8 tensor cores
    with fast (unpromoted) accumulation, one (head) GEMM at a time; zero padding to multiples of 16."""
    heads_q, heads_kv = q.data.shape[1], k.data.shape[1]
    r, sk = rows.numel(), k.data.shape[2]
    as_bytes = lambda x: x.view(torch.uint8)
    q_rows = as_bytes(q.data[b]).index_select(1, rows)
    q_rows = torch.nn.functional.pad(q_rows, (0, 0, 0, -r % 16)).view(torch.float8_e4m3fn)
    k_all = torch.nn.functional.pad(as_bytes(k.data[b]), (0, 0, 0, -sk % 16)).view(torch.float8_e4m3fn)
    out = torch.empty(heads_q, r, sk, dtype=torch.float32, device=q.data.device)
    for h in range(heads_q):
        hk = h // (heads_q // heads_kv)
        s = torch._scaled_mm(q_rows[h].contiguous(), k_all[hk].contiguous().t(), q.scale[b, h].reshape(()).clone(),
                             k.scale[b, hk].reshape(()).clone(), out_dtype=torch.float32, use_fast_accum=True)
        out[h] = s[:r, :sk]
    return out


# The caching allocator serves requests up to 1 MiB from 2 MiB segments (its small pool), larger ones from their own.
SMALL_REQUEST = 1 << 20
POISON_LARGE_MIN = 20 << 20


@contextlib.contextmanager
def poisoned_allocations(device: torch.device | str, nbytes: int):
    """Inside, the current thread's allocations on a CUDA `device` come from a fresh memory pool whose first
    blocks were filled with NaN and freed: two small-pool segments and a large one of max(2 nbytes, 20 MiB). The
    call's output (nbytes at most) and LSE then start out NaN, so an element the kernel never writes reads NaN --
    whatever free blocks earlier work left in the shared pool (one may hold a previous call's correct output).
    Nothing on a CPU device."""
    if torch.device(device).type != "cuda":
        yield
        return
    with torch.cuda.device(torch.device(device).index):  # the pool belongs to the device it is created on
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            junk = [torch.empty(SMALL_REQUEST // 4, dtype=torch.float32, device=device) for _ in range(4)]
            junk.append(torch.empty(max(2 * nbytes, POISON_LARGE_MIN) // 4, dtype=torch.float32, device=device))
            for block in junk:
                block.fill_(math.nan)
            del junk, block
            yield


def _pick_rows(case: Case, device, max_rows: int | None) -> torch.Tensor | None:
    work = case.batch * case.heads_q * case.seqlen_q * case.seqlen_k
    limit = SAMPLED_ROWS if max_rows is None else max_rows
    if (max_rows is None and work <= FULL_REFERENCE_LIMIT) or case.seqlen_q <= limit:
        return None
    gen = torch.Generator().manual_seed(case.seed + 1)
    rows = torch.randperm(case.seqlen_q, generator=gen)[:limit]
    # Always include both ends: first rows are most masked under causal, last rows hold the tail.
    rows = torch.cat([torch.tensor([0, case.seqlen_q - 1]), rows]).unique()
    return rows.to(device)


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (a - b).abs()
    return math.inf if torch.isnan(d).any() else float(d.max()) if d.numel() else 0.0


def _rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    denom = float(torch.linalg.vector_norm(b))
    diff = float(torch.linalg.vector_norm((a - b).nan_to_num(math.inf)))
    return diff / denom if denom > 0 else diff


def check(fn, case: Case, *, device: str | torch.device = "cpu", returns_lse: bool = True,
          max_rows: int | None = None, inputs: Inputs | None = None) -> Verdict:
    """Run ``fn(q, k, v, causal=, scale=, return_lse=)`` on fresh inputs for `case` and judge it.

    ``max_rows`` forces the row-sampled mode with that many rows (None: automatic by size)."""
    inputs = inputs or make_inputs(case, device)
    out_bytes = case.batch * case.heads_q * case.seqlen_q * case.v_dim * 4
    with poisoned_allocations(device, out_bytes):
        result = fn(inputs.q, inputs.k, inputs.v, causal=case.causal, scale=case.scale, return_lse=returns_lse,
                    **case.extra_kwargs())
    out, lse = result if returns_lse else (result, None)
    expected = (case.batch, case.heads_q, case.seqlen_q, case.v_dim)
    if tuple(out.shape) != expected:
        raise ValueError(f"backend returned out of shape {tuple(out.shape)}, expected {expected}")
    return judge(out, lse, inputs, case, rows=_pick_rows(case, out.device, max_rows))


def lse_error_bound(plain_err: float, ref_lse: torch.Tensor, largest_score: float = 0.0) -> float:
    """The LSE acceptance bound: twice the plain implementation's max error, plus 4 fp32 ulps of the largest
    reference LSE or scaled score (at least 1): the final log's rounding, and the fp32 rounding a score carries,
    which a softcap squeezes out of the LSE's magnitude but not out of the score. ref_lse: the finite entries."""
    magnitude = max(float(ref_lse.abs().max()) if ref_lse.numel() else 0.0, largest_score, 1.0)
    return 2.0 * plain_err + 4 * torch.finfo(torch.float32).eps * magnitude


def judge(out: torch.Tensor, lse: torch.Tensor | None, inputs: Inputs, case: Case,
          rows: torch.Tensor | None = None, plain=None) -> Verdict:
    """Apply the acceptance rule to an output (and LSE) computed by a kernel for `inputs`. `plain`: the
    (out, lse) of the plain implementation where it is not plain_attention's (fp8 KV caches)."""
    idx = _all_rows(case.seqlen_q, rows, out.device)
    out = out[:, :, idx].double()
    q, k, v = inputs.dequantized()
    masking = dict(window=case.window, softcap=case.softcap)
    ref, ref_lse = reference(q, k, v, causal=case.causal, scale=case.softmax_scale, rows=idx, **masking)
    ref_unq, _ = reference(inputs.q_master, inputs.k_master, inputs.v_master, causal=case.causal,
                           scale=case.softmax_scale, rows=idx, **masking)
    lp, lp_lse = plain_attention(inputs, case, rows=idx) if plain is None else plain

    magnitude = max(float(ref.abs().max()) if ref.numel() else 0.0, 1e-6)
    floor = FLOOR_ULPS.get(case.out_dtype, 1) * torch.finfo(case.out_dtype).eps * magnitude
    # the largest scaled score bounds both floors below; one more Q K^T, so only where one of them needs it
    largest_score = _largest_score(q, k, idx, case.softmax_scale) \
        if case.out_dtype == torch.float32 or lse is not None else 0.0
    if case.out_dtype == torch.float32:
        floor *= max(1.0, largest_score)
    err, lp_err = _max_abs(out, ref), _max_abs(lp, ref)
    bound = 2.0 * lp_err + floor
    reasons = []
    if torch.isnan(out).any():
        reasons.append(f"{int(torch.isnan(out).sum())} NaN outputs")
    elif err > bound:
        reasons.append(f"max abs err {err:.3g} > bound {bound:.3g}")
    empty = torch.isneginf(ref_lse)
    if empty.any() and bool((out[empty] != 0).any()):
        reasons.append("rows that see no key are not exactly 0")

    lse_err = lse_bound = None
    if lse is not None:
        got = lse[:, :, idx].double()
        if bool((torch.isneginf(got) != empty).any()):
            reasons.append("LSE -inf pattern differs from the reference (rows that see no key)")
        finite = ~empty
        lse_err, lp_lse_err = _max_abs(got[finite], ref_lse[finite]), _max_abs(lp_lse[finite], ref_lse[finite])
        lse_bound = lse_error_bound(lp_lse_err, ref_lse[finite], largest_score)
        if lse_err > lse_bound:
            reasons.append(f"LSE err {lse_err:.3g} > bound {lse_bound:.3g}")

    return Verdict(passed=not reasons, reason="; ".join(reasons), max_abs_err=err, lp_max_abs_err=lp_err,
                   bound=bound, lse_err=lse_err, lse_bound=lse_bound, rel_l2=_rel_l2(out, ref),
                   rel_l2_unquantized=_rel_l2(out, ref_unq), rows_checked=idx.numel())


# ---------------------------------------------------------------- KV-cache (decode) mode
#
# attention_with_kvcache's inputs: q (B, Sq, Hq, D), a cache (num_blocks, page_size, Hkv, D) read through
# block_table (B, max_blocks), or a contiguous (B, capacity, Hkv, D) cache, and cache_seqlens (B,). The oracle
# gathers each sequence's keys and judges it as a dense case of its own length. Every cache entry that no
# sequence may read (rows at or past its length, pages no block-table entry in range names) holds NaN, so a
# kernel that reads one shows it; hostile tables put -1 and out-of-range page numbers where a sequence
# needs no page.

KV_FORMATS = ("same", "fp8")  # the cache in q's dtype, or e4m3 with per-(batch, KV head) descales


@dataclass(frozen=True)
class KVCase:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    cache_seqlens: tuple[int, ...]  # keys each sequence attends to (cache length after any append)
    head_dim: int
    page_size: int | None = None    # None: a contiguous (B, capacity, Hkv, D) cache
    capacity: int | None = None     # keys per sequence the cache holds (default: the longest, in whole pages)
    causal: bool = False
    fmt: str = "bf16"               # q's dtype: bf16 / fp16 / fp32
    kv_fmt: str = "same"
    scale: float | None = None
    dist: str = "normal"
    hostile: bool = False           # block-table entries past each sequence's pages: -1 and num_blocks + 7
    seed: int = 0
    head_dim_v: int | None = None   # V's (and the output's) head_dim; None: head_dim
    latent: bool = False            # MLA: one cache, V its first head_dim_v columns (v_cache a view of k_cache)
    window: tuple[int, int] = (-1, -1)  # local attention on each sequence's keys, as Case.window

    def __post_init__(self):
        object.__setattr__(self, "window", as_window(self.window))
        for field in ("batch", "heads_q", "heads_kv", "seqlen_q", "head_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"KVCase.{field} must be >= 1, got {getattr(self, field)}")
        if not 1 <= self.v_dim <= self.head_dim and self.latent:
            raise ValueError(f"KVCase.latent: V's head_dim {self.v_dim} must be within K's {self.head_dim}")
        if len(self.cache_seqlens) != self.batch:
            raise ValueError(f"KVCase.cache_seqlens has {len(self.cache_seqlens)} lengths for batch {self.batch}")
        if min(self.cache_seqlens) < 0 or max(self.cache_seqlens) > self.keys_capacity:
            raise ValueError(f"KVCase.cache_seqlens {self.cache_seqlens} outside 0..{self.keys_capacity}")
        if self.heads_q % self.heads_kv:
            raise ValueError(f"heads_q ({self.heads_q}) must be a multiple of heads_kv ({self.heads_kv})")
        if self.fmt not in ("bf16", "fp16", "fp32") or self.kv_fmt not in KV_FORMATS:
            raise ValueError(f"KVCase formats: q bf16/fp16/fp32, cache {KV_FORMATS}; got {self.fmt}/{self.kv_fmt}")
        if self.page_size is not None and self.page_size < 1:
            raise ValueError(f"KVCase.page_size must be >= 1, got {self.page_size}")

    @property
    def keys_capacity(self) -> int:
        longest = max(max(self.cache_seqlens), 1)
        if self.capacity is not None:
            return self.capacity
        return longest if self.page_size is None else -(-longest // self.page_size) * self.page_size

    @property
    def pages_per_seq(self) -> int:
        return -(-self.keys_capacity // self.page_size)

    @property
    def v_dim(self) -> int:
        """V's and the output's head_dim."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    def dense(self, b: int) -> Case:
        """Sequence b as a dense case (batch 1, its own length)."""
        return Case(batch=1, heads_q=self.heads_q, heads_kv=self.heads_kv, seqlen_q=self.seqlen_q,
                    seqlen_k=max(self.cache_seqlens[b], 1), head_dim=self.head_dim, causal=self.causal,
                    fmt=self.fmt, scale=self.scale, dist=self.dist, seed=self.seed, head_dim_v=self.head_dim_v,
                    window=self.window)

    def shape_str(self) -> str:
        lengths = ",".join(map(str, self.cache_seqlens)) if len(set(self.cache_seqlens)) > 1 else \
            str(self.cache_seqlens[0])
        cache = "contiguous" if self.page_size is None else f"page{self.page_size}"
        kv = "" if self.kv_fmt == "same" else f" kv-{self.kv_fmt}"
        dims = f"d{self.head_dim}" + (f"v{self.v_dim}" if self.v_dim != self.head_dim else "")
        return (f"{self.fmt}{kv} b{self.batch} h{self.heads_q}/{self.heads_kv} q{self.seqlen_q} k{lengths} "
                f"{dims}{' latent' if self.latent else ''} {cache} {'causal' if self.causal else 'full'} {self.dist}"
                + (" hostile" if self.hostile else "")
                + (f" win{self.window[0]},{self.window[1]}" if self.window != (-1, -1) else ""))

    def replace(self, **kw) -> "KVCase":
        return dataclasses.replace(self, **kw)


@dataclass(frozen=True)
class KVInputs:
    """What attention_with_kvcache receives, and the dense per-sequence values the references use."""
    q: torch.Tensor                      # (B, Sq, Hq, D)
    k_cache: torch.Tensor                # paged (num_blocks, page_size, Hkv, D) or contiguous (B, capacity, Hkv, D)
    v_cache: torch.Tensor
    cache_seqlens: torch.Tensor          # (B,) int32
    block_table: torch.Tensor | None     # (B, max_blocks) int32
    k_descale: torch.Tensor | None       # (B, Hkv) float32, fp8 caches only
    v_descale: torch.Tensor | None
    q_master: torch.Tensor               # (B, Hq, Sq, D) float32
    k_master: torch.Tensor               # (B, Hkv, capacity, D) float32
    v_master: torch.Tensor
    k_dense: torch.Tensor                # (B, Hkv, capacity, D): what the cache holds (q's dtype or e4m3), dense
    v_dense: torch.Tensor

    def kwargs(self, case: KVCase) -> dict:
        """The keyword arguments of attention_with_kvcache for these inputs (no return_lse)."""
        kw = dict(cache_seqlens=self.cache_seqlens, block_table=self.block_table, causal=case.causal,
                  scale=case.scale)
        if self.k_descale is not None:
            kw.update(k_descale=self.k_descale, v_descale=self.v_descale)
        if case.window != (-1, -1):
            kw["window"] = case.window
        return kw


_Q_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _to_fp8_per_head(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, H, S, D) float32 -> e4m3 values and (B, H) descales (amax / 448, 1 for all-zero heads)."""
    amax = x.abs().amax(dim=(2, 3))
    descale = torch.where(amax > 0, amax / torch.finfo(torch.float8_e4m3fn).max, torch.ones_like(amax))
    return (x / descale[:, :, None, None]).to(torch.float8_e4m3fn), descale.float()


def _scatter_cache(values: torch.Tensor, case: KVCase, pages: torch.Tensor | None, num_blocks: int):
    """(B, Hkv, capacity, D) values -> the cache layout (sequence b's page i at pages[b, i]), NaN wherever no
    sequence may read."""
    b, h, cap, d = values.shape
    rows = values.transpose(1, 2)  # (B, capacity, Hkv, D)
    valid = torch.arange(cap, device=values.device)[None, :] < torch.tensor(case.cache_seqlens,
                                                                          device=values.device)[:, None]
    rows = rows.masked_fill(~valid[:, :, None, None], math.nan)
    if pages is None:
        return rows.contiguous()
    p = case.page_size
    padded = torch.nn.functional.pad(rows, (0, 0, 0, 0, 0, case.pages_per_seq * p - cap), value=math.nan)
    cache = torch.full((num_blocks, p, h, d), math.nan, dtype=values.dtype, device=values.device)
    cache[pages.flatten()] = \
        padded.reshape(b * case.pages_per_seq, p, h, d)
    return cache


def make_kvcache_inputs(case: KVCase, device: str | torch.device = "cpu") -> KVInputs:
    """Fresh random inputs for `case` on `device`: pages of the sequences scattered in a random order over a
    cache with spare (NaN) pages."""
    gen = torch.Generator(device=device).manual_seed(case.seed)
    cap = case.keys_capacity
    shapes = ((case.batch, case.heads_q, case.seqlen_q, case.head_dim),
              (case.batch, case.heads_kv, cap, case.head_dim), (case.batch, case.heads_kv, cap, case.v_dim))
    masters = [torch.randn(s, generator=gen, device=device, dtype=torch.float32) for s in shapes]
    masters = [m + 1.0 for m in masters] if case.dist == "shifted" else \
        [m * 4.0 for m in masters] if case.dist == "large" else masters
    q_master, k_master, v_master = masters
    if case.latent:  # V is K's first columns, the values and (fp8) the descales too
        v_master = k_master[..., :case.v_dim]
    dtype = _Q_DTYPES[case.fmt]
    if case.kv_fmt == "fp8":
        (k_lp, k_descale), (v_lp, v_descale) = _to_fp8_per_head(k_master), _to_fp8_per_head(v_master)
        if case.latent:
            v_lp, v_descale = k_lp[..., :case.v_dim], k_descale
    else:
        k_lp, v_lp, k_descale, v_descale = k_master.to(dtype), v_master.to(dtype), None, None

    pages, block_table, num_blocks = None, None, 0
    if case.page_size is not None:
        num_blocks = case.batch * case.pages_per_seq + 3  # spare pages no entry names (NaN)
        perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(case.seed + 1))
        pages = perm[:case.batch * case.pages_per_seq].reshape(case.batch, case.pages_per_seq).to(device)
        table = pages.clone()
        if case.hostile:  # only in the table handed out: the cache is laid out through `pages`
            for b, length in enumerate(case.cache_seqlens):
                needed = -(-length // case.page_size)
                table[b, needed::2] = -1
                table[b, needed + 1::2] = num_blocks + 7
        block_table = table.to(torch.int32)
    # NaN-filled rows: compute in float32, then cast (e4m3fn and 16-bit both keep NaN).
    as_cache = lambda lp: _scatter_cache(lp.float(), case, pages, num_blocks).to(lp.dtype) \
        if lp.dtype == torch.float8_e4m3fn else _scatter_cache(lp, case, pages, num_blocks)
    k_cache = as_cache(k_lp)
    v_cache = k_cache[..., :case.v_dim] if case.latent else as_cache(v_lp)
    return KVInputs(q=q_master.to(dtype).transpose(1, 2).contiguous(), k_cache=k_cache,
                    v_cache=v_cache, cache_seqlens=torch.tensor(case.cache_seqlens, dtype=torch.int32,
                                                                       device=device),
                    block_table=block_table, k_descale=k_descale, v_descale=v_descale, q_master=q_master,
                    k_master=k_master, v_master=v_master, k_dense=k_lp, v_dense=v_lp)


def _plain_fp8_cache(q: torch.Tensor, k_raw: torch.Tensor, v_raw: torch.Tensor, k_descale: torch.Tensor,
                     v_descale: torch.Tensor, case: Case):
    """The plain implementation for an e4m3 cache of one sequence (q (1, Hq, Sq, D), k_raw / v_raw (1, Hkv, L, D),
    descales (Hkv,)): e4m3 values are exact in q's 16-bit type, so S = (q k_raw^T) in 16-bit matmuls times
    scale * k_descale, and O = (P v_raw) * v_descale / l. Returns (out, lse) float64."""
    dtype = case.out_dtype
    k, v = k_raw.to(dtype), v_raw.to(dtype)
    group = case.heads_q // case.heads_kv
    k_descale, v_descale = (d.repeat_interleave(group)[:, None, None] for d in (k_descale, v_descale))
    s = _softcapped(_heads_matmul(q[0], k[0].transpose(-1, -2)).float() * (case.softmax_scale * k_descale),
                    case.softcap)
    visible = _visible(_all_rows(case.seqlen_q, None, q.device), case.seqlen_q, case.seqlen_k, case.causal, q.device,
                       case.window)
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    m = s.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    o = (_heads_matmul(p.to(dtype), v[0]).float() * v_descale / denom).nan_to_num(0.0).to(dtype)
    return o[None].double(), (m + torch.log(denom)).squeeze(-1)[None].double()


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.element_size() == 1 else x.view(torch.int16 if x.element_size() == 2 else torch.int32)


def check_kvcache(fn, case: KVCase, *, device: str | torch.device = "cpu", inputs: KVInputs | None = None) -> Verdict:
    """Run ``fn(q, k_cache, v_cache, **inputs.kwargs(case), return_lse=True)`` and judge each sequence as a dense
    case of its own length (the FlashAttention rule per sequence); a sequence of length 0 must give exactly 0 and
    LSE -inf. The caches must come back bit for bit unchanged."""
    inputs = inputs or make_kvcache_inputs(case, device)
    cache_before = (_bits(inputs.k_cache).clone(), _bits(inputs.v_cache).clone())
    with poisoned_allocations(device, case.batch * case.heads_q * case.seqlen_q * case.v_dim * 4):
        out, lse = fn(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case), return_lse=True)
    expected = (case.batch, case.seqlen_q, case.heads_q, case.v_dim)
    if tuple(out.shape) != expected or tuple(lse.shape) != (case.batch, case.heads_q, case.seqlen_q):
        raise ValueError(f"backend returned out {tuple(out.shape)} / lse {tuple(lse.shape)}, expected {expected} / "
                         f"{(case.batch, case.heads_q, case.seqlen_q)}")
    reasons, verdicts = [], []
    if not (torch.equal(cache_before[0], _bits(inputs.k_cache)) and torch.equal(cache_before[1], _bits(inputs.v_cache))):
        reasons.append("the cache was modified")
    for b, length in enumerate(case.cache_seqlens):
        out_b, lse_b = out[b:b + 1].transpose(1, 2), lse[b:b + 1]
        if length == 0:
            if bool((out_b != 0).any()) or not bool(torch.isneginf(lse_b).all()):
                reasons.append(f"sequence {b} (no keys): out is not 0 / lse not -inf")
            continue
        dense = case.dense(b)
        k_b, v_b = inputs.k_dense[b:b + 1, :, :length], inputs.v_dense[b:b + 1, :, :length]
        q_b = inputs.q[b:b + 1].transpose(1, 2)
        masters = (inputs.q_master[b:b + 1], inputs.k_master[b:b + 1, :, :length],
                   inputs.v_master[b:b + 1, :, :length])
        if case.kv_fmt == "fp8":
            plain = _plain_fp8_cache(q_b, k_b, v_b, inputs.k_descale[b], inputs.v_descale[b], dense)
            values = lambda x, descale: x.float() * descale[b][None, :, None, None]
            seq_inputs = Inputs(q_b, values(k_b, inputs.k_descale), values(v_b, inputs.v_descale), *masters)
        else:
            plain = None
            seq_inputs = Inputs(q_b, k_b, v_b, *masters)
        v = judge(out_b, lse_b, seq_inputs, dense, plain=plain)
        verdicts.append(v)
        if not v.passed:
            reasons.append(f"sequence {b} (length {length}): {v.reason}")
    return _combined(verdicts, reasons, rows_checked=case.seqlen_q)


def _combined(verdicts: list[Verdict], reasons: list[str], rows_checked: int) -> Verdict:
    """One verdict for a call judged sequence by sequence: failed with every reason, the worst errors, the
    tightest bounds."""
    worst = lambda name: max((getattr(v, name) for v in verdicts if getattr(v, name) is not None), default=0.0)
    return Verdict(passed=not reasons, reason="; ".join(reasons), max_abs_err=worst("max_abs_err"),
                   lp_max_abs_err=worst("lp_max_abs_err"), bound=min((v.bound for v in verdicts), default=0.0),
                   lse_err=worst("lse_err"), lse_bound=min((v.lse_bound for v in verdicts if v.lse_bound), default=0.0),
                   rel_l2=worst("rel_l2"), rel_l2_unquantized=worst("rel_l2_unquantized"), rows_checked=rows_checked)


# ---------------------------------------------------------------- varlen (packed sequences) mode
#
# attention_varlen's inputs (compare.varlen has the layouts): q (total_q, Hq, D), k and v (total_k, Hkv, D), the
# sequences packed one after another at the offsets cu_seqlens_q / cu_seqlens_k (B + 1,) int32. Each sequence is
# drawn as a dense case of its own (seed per sequence) and judged as one (the FlashAttention rule per sequence);
# a sequence with queries but no keys must give exactly 0 and LSE -inf.

VARLEN_FORMATS = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class VarlenCase:
    seqlens_q: tuple[int, ...]
    seqlens_k: tuple[int, ...]
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool = False
    fmt: str = "bf16"
    scale: float | None = None
    dist: str = "normal"
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    seed: int = 0
    head_dim_v: int | None = None    # V's (and the output's) head_dim; None: head_dim

    def __post_init__(self):
        for name in ("seqlens_q", "seqlens_k", "window"):
            if isinstance(getattr(self, name), list):  # from JSON
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.seqlens_q or len(self.seqlens_q) != len(self.seqlens_k):
            raise ValueError(f"VarlenCase: one query and one key length per sequence, got {len(self.seqlens_q)} "
                             f"and {len(self.seqlens_k)}")
        if min(self.seqlens_q + self.seqlens_k) < 0:
            raise ValueError("VarlenCase: lengths must be >= 0")
        if self.fmt not in VARLEN_FORMATS:
            raise ValueError(f"VarlenCase.fmt: {VARLEN_FORMATS}, got {self.fmt!r}")
        self.dense(0)  # heads, head_dim, window, softcap, dist checked as a dense case

    @property
    def batch(self) -> int:
        return len(self.seqlens_q)

    def dense(self, b: int) -> Case:
        """Sequence b as a dense case (batch 1, its own lengths, at least 1 for drawing; its own seed)."""
        return Case(batch=1, heads_q=self.heads_q, heads_kv=self.heads_kv, seqlen_q=max(self.seqlens_q[b], 1),
                    seqlen_k=max(self.seqlens_k[b], 1), head_dim=self.head_dim, causal=self.causal, fmt=self.fmt,
                    scale=self.scale, dist=self.dist, seed=self.seed * 7919 + b, window=self.window,
                    softcap=self.softcap, head_dim_v=self.head_dim_v)

    def shape_str(self) -> str:
        lengths = lambda ns: ",".join(map(str, ns)) if len(ns) <= 6 else f"{len(ns)} seqs, max {max(ns)}"
        dims = self.dense(0).dims_str()
        extra = self.dense(0).shape_str().split(f"{dims} ", 1)[1]
        return (f"{self.fmt} varlen h{self.heads_q}/{self.heads_kv} q[{lengths(self.seqlens_q)}] "
                f"k[{lengths(self.seqlens_k)}] {dims} {extra}")


@dataclass(frozen=True)
class VarlenInputs:
    q: torch.Tensor                  # (total_q, Hq, D)
    k: torch.Tensor                  # (total_k, Hkv, D)
    v: torch.Tensor                  # (total_k, Hkv, Dv)
    cu_seqlens_q: torch.Tensor       # (B + 1,) int32
    cu_seqlens_k: torch.Tensor
    sequences: tuple[Inputs, ...]    # per sequence, (1, H, S, D) with its true lengths, masters included

    def kwargs(self, case: VarlenCase) -> dict:
        """The keyword arguments of attention_varlen for these inputs (no return_lse)."""
        kw = dict(cu_seqlens_q=self.cu_seqlens_q, cu_seqlens_k=self.cu_seqlens_k,
                  max_seqlen_q=max(case.seqlens_q), max_seqlen_k=max(case.seqlens_k), causal=case.causal,
                  scale=case.scale)
        return {**kw, **case.dense(0).extra_kwargs()}


def make_varlen_inputs(case: VarlenCase, device: str | torch.device = "cpu") -> VarlenInputs:
    """Fresh random packed inputs for `case`: each sequence drawn as its dense case, cut to its lengths."""
    sequences = []
    for b, (sq, sk) in enumerate(zip(case.seqlens_q, case.seqlens_k)):
        full = make_inputs(case.dense(b), device)
        cut = lambda x, n: x[:, :, :n]
        sequences.append(Inputs(cut(full.q, sq), cut(full.k, sk), cut(full.v, sk), cut(full.q_master, sq),
                                cut(full.k_master, sk), cut(full.v_master, sk)))
    pack = lambda xs: torch.cat([x[0].transpose(0, 1) for x in xs]).contiguous()
    offsets = lambda ns: torch.tensor([0, *itertools.accumulate(ns)], dtype=torch.int32, device=device)
    return VarlenInputs(q=pack([s.q for s in sequences]), k=pack([s.k for s in sequences]),
                        v=pack([s.v for s in sequences]), cu_seqlens_q=offsets(case.seqlens_q),
                        cu_seqlens_k=offsets(case.seqlens_k), sequences=tuple(sequences))


def check_varlen(fn, case: VarlenCase, *, device: str | torch.device = "cpu",
                 inputs: VarlenInputs | None = None, returns_lse: bool = True) -> Verdict:
    """Run ``fn(q, k, v, **inputs.kwargs(case), return_lse=returns_lse)`` -> out (total_q, Hq, Dv) (and lse (Hq,
    total_q)) and judge each sequence as a dense case of its own lengths (row-sampled, as check, where big)."""
    inputs = inputs or make_varlen_inputs(case, device)
    total_q = sum(case.seqlens_q)
    v_dim = case.dense(0).v_dim
    with poisoned_allocations(device, total_q * case.heads_q * v_dim * 4):
        result = fn(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case), return_lse=returns_lse)
    out, lse = result if returns_lse else (result, None)
    expected = (total_q, case.heads_q, v_dim)
    if tuple(out.shape) != expected or (lse is not None and tuple(lse.shape) != (case.heads_q, total_q)):
        raise ValueError(f"backend returned out {tuple(out.shape)} / lse {None if lse is None else tuple(lse.shape)}, "
                         f"expected {expected} / {(case.heads_q, total_q)}")
    reasons, verdicts = [], []
    starts = inputs.cu_seqlens_q.tolist()
    for b, (sq, sk) in enumerate(zip(case.seqlens_q, case.seqlens_k)):
        if sq == 0:
            continue
        out_b = out[starts[b]:starts[b] + sq].transpose(0, 1)[None]    # (1, Hq, Sq, D)
        lse_b = None if lse is None else lse[:, starts[b]:starts[b] + sq][None]
        if sk == 0:
            if bool((out_b != 0).any()) or (lse_b is not None and not bool(torch.isneginf(lse_b).all())):
                reasons.append(f"sequence {b} (no keys): out is not 0 / lse not -inf")
            continue
        dense = case.dense(b).replace(seqlen_q=sq, seqlen_k=sk)
        v = judge(out_b, lse_b, inputs.sequences[b], dense, rows=_pick_rows(dense, out.device, None))
        verdicts.append(v)
        if not v.passed:
            reasons.append(f"sequence {b} (q {sq}, k {sk}): {v.reason}")
    return _combined(verdicts, reasons, rows_checked=total_q)
