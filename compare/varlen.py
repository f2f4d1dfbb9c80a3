"""The checks of `attention_varlen` (packed variable-length batches), shared by both backends (torch only; no kernel).

Layouts (FlashAttention's `flash_attn_varlen_func`): q (total_q, Hq, D), k (total_k, Hkv, D) and v (total_k, Hkv,
Dv), the sequences packed one after another (Dv, V's head_dim: D unless a backend declares others; which pairs it
takes, the backend checks); cu_seqlens_q / cu_seqlens_k (B + 1,) int32, sequence b's tokens at cu_seqlens[b] ..
cu_seqlens[b + 1] - 1 (cu_seqlens[0] = 0, non-decreasing, the last = the total); max_seqlen_q / max_seqlen_k, ints
at least the longest sequence (the kernels size their grids by them). Output (total_q, Hq, Dv) in q's dtype and LSE
(Hq, total_q) float32. A sequence with no keys gives 0 and LSE -inf; so does a query row whose local window holds no
key.

`check_inputs` looks at shapes, dtypes, devices and strides only (no host sync: graph-capturable, the lengths stay
on the device). `check_values` reads the lengths (one host sync) and turns unsorted offsets, totals that disagree
with the tensors and max_seqlen below a sequence's length into a ValueError; tests and debugging call it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from . import oracle
from .checks import need

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class Layout:
    """What the kernels need to know of a checked call, read off the shapes alone."""
    batch: int
    heads_q: int
    heads_kv: int
    head_dim: int          # Q's and K's
    head_dim_v: int        # V's and the output's
    total_q: int
    total_k: int


def check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, window=(-1, -1),
                 softcap=0.0) -> Layout:
    """Shapes, dtypes, devices, strides and the scalar arguments; never reads device memory."""
    for name, x in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        need(isinstance(x, torch.Tensor), f"{name} must be a torch.Tensor, got {type(x).__name__}", TypeError)
    for name, x in (("q", q), ("k", k), ("v", v)):
        need(x.dim() == 3, f"{name} must be (total_tokens, heads, head_dim), got shape {tuple(x.shape)}")
        need(x.dtype in DTYPES, f"{name}: dtype {x.dtype} not supported (bfloat16, float16, float32)", TypeError)
        need(x.stride(-1) == 1, f"{name} must have a unit head_dim stride, got strides {x.stride()}")
    need(q.dtype == k.dtype == v.dtype, f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}", TypeError)
    need(k.shape[:2] == v.shape[:2],
          f"k and v must have the same (total_tokens, heads), got {tuple(k.shape)} and {tuple(v.shape)}")
    need(q.shape[2] == k.shape[2], f"q and k must have the same head_dim, got {q.shape[2]} and {k.shape[2]}")
    need(k.shape[1] >= 1 and q.shape[1] % k.shape[1] == 0,
          f"heads of q ({q.shape[1]}) must be a multiple of the heads of k and v ({k.shape[1]})")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        need(cu.dtype == torch.int32, f"{name} must be int32, got {cu.dtype}", TypeError)
        need(cu.dim() == 1 and cu.numel() >= 2, f"{name} must be (batch + 1,) with batch >= 1, got shape "
                                                 f"{tuple(cu.shape)}")
        need(cu.is_contiguous(), f"{name} must be contiguous")
    need(cu_seqlens_q.numel() == cu_seqlens_k.numel(),
          f"cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got {cu_seqlens_q.numel()} and "
          f"{cu_seqlens_k.numel()}")
    devices = {x.device for x in (q, k, v, cu_seqlens_q, cu_seqlens_k)}
    need(len(devices) == 1, f"all tensors must be on one device, got {sorted(map(str, devices))}")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        need(isinstance(m, int) and not isinstance(m, bool) and m >= 0, f"{name} must be an int >= 0, got {m!r}",
              TypeError if not isinstance(m, int) or isinstance(m, bool) else ValueError)
    oracle.check_window(window)
    oracle.check_softcap(softcap)
    return Layout(batch=cu_seqlens_q.numel() - 1, heads_q=q.shape[1], heads_kv=k.shape[1], head_dim=q.shape[2],
                  head_dim_v=v.shape[2], total_q=q.shape[0], total_k=k.shape[0])


def check_values(layout: Layout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) -> None:
    """The lengths themselves (one host sync): offsets from 0, non-decreasing, ending at the totals, max_seqlen at
    least every sequence's length."""
    for name, cu, total, longest in (("cu_seqlens_q", cu_seqlens_q, layout.total_q, max_seqlen_q),
                                     ("cu_seqlens_k", cu_seqlens_k, layout.total_k, max_seqlen_k)):
        offsets = cu.tolist()
        need(offsets[0] == 0, f"{name}[0] must be 0, got {offsets[0]}")
        lengths = [b - a for a, b in zip(offsets, offsets[1:])]
        bad = next((i for i, n in enumerate(lengths) if n < 0), None)
        if bad is not None:
            raise ValueError(f"{name} must be non-decreasing; it falls at sequence {bad} "
                             f"({offsets[bad]} -> {offsets[bad + 1]})")
        need(offsets[-1] == total, f"{name}[-1] = {offsets[-1]} but the packed tensor holds {total} tokens")
        need(max(lengths) <= longest, f"max_seqlen ({longest}) is below the longest sequence of {name} "
                                       f"({max(lengths)})")


# Length mixes of the benchmarks' packed batches: (name, what it models).
LENGTH_MIXES = {
    "longtail": "document lengths, log-normal around a mean of about 2k tokens, cut to 64..16k, one 16k sequence",
    "uniform": "lengths uniform in 1..4k",
    "equal": "every sequence 4k long (the dense batch packed)",
}


def length_mix(name: str, tokens: int, seed: int = 0) -> tuple[int, ...]:
    """Sequence lengths of mix `name` (LENGTH_MIXES) summing to about `tokens` (the last one cut to fit exactly),
    reproducible from `seed` (CPU generator, whatever the machine)."""
    if name not in LENGTH_MIXES:
        raise ValueError(f"length mix {name!r}: known {sorted(LENGTH_MIXES)}")
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    if name == "equal":
        return (4096,) * max(1, tokens // 4096)
    gen = torch.Generator().manual_seed(seed)
    lengths = [16384] if name == "longtail" and tokens > 16384 else []
    while sum(lengths) < tokens:
        if name == "longtail":  # log-normal, sigma 1: mean exp(mu + 1/2) = 2000
            n = float(torch.empty(1).log_normal_(mean=math.log(2000) - 0.5, std=1.0, generator=gen))
            lengths.append(int(min(max(n, 64), 16384)))
        else:
            lengths.append(int(torch.randint(1, 4097, (1,), generator=gen)))
    lengths[-1] -= sum(lengths) - tokens
    return tuple(n for n in lengths if n > 0)


@dataclass(frozen=True)
class SweepCase:
    """A benchmark's packed batch: `case` drawn from length mix `mix`, run packed (the backend's varlen call) or
    padded (its dense call on the batch padded to the longest sequence, judged as that dense case; the driver
    still counts the packed batch's FLOPs, so a padded row's rate is the useful work per second)."""
    case: oracle.VarlenCase
    mix: str
    padded: bool = False

    # what the registry's capability checks and the driver read off a case
    fmt = property(lambda self: self.case.fmt)
    head_dim = property(lambda self: self.case.head_dim)
    v_dim = property(lambda self: self.case.dense(0).v_dim)
    heads_q = property(lambda self: self.case.heads_q)
    heads_kv = property(lambda self: self.case.heads_kv)
    causal = property(lambda self: self.case.causal)
    window = property(lambda self: self.case.window)
    softcap = property(lambda self: self.case.softcap)
    local = property(lambda self: self.case.window != (-1, -1))
    scale = property(lambda self: self.case.scale)
    batch = property(lambda self: self.case.batch)
    seqlen_q = property(lambda self: max(self.case.seqlens_q))
    seqlen_k = property(lambda self: max(self.case.seqlens_k))
    quantized = False

    @property
    def sequences(self) -> tuple[tuple[int, int], ...]:
        """(query tokens, keys) of every sequence (compare.bench.flops counts their pairs, padded or not)."""
        return tuple(zip(self.case.seqlens_q, self.case.seqlens_k))

    def padded_case(self) -> oracle.Case:
        """The dense case of the padded batch: every sequence as long as the longest."""
        c = self.case
        return oracle.Case(batch=c.batch, heads_q=c.heads_q, heads_kv=c.heads_kv, seqlen_q=self.seqlen_q,
                           seqlen_k=self.seqlen_k, head_dim=c.head_dim, causal=c.causal, fmt=c.fmt, scale=c.scale,
                           dist=c.dist, seed=c.seed, window=c.window, softcap=c.softcap, head_dim_v=c.head_dim_v)

    def replace(self, **changes) -> "SweepCase":
        """The same batch with the VarlenCase's fields changed (seed=...)."""
        return SweepCase(dataclasses.replace(self.case, **changes), self.mix, self.padded)

    def shape_str(self) -> str:
        return f"{self.case.shape_str()} {self.mix}{' padded' if self.padded else ''}"
