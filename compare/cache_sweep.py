"""The KV-cache sweep cases: decode against a cache whose every sequence holds `seqlen_k` keys, as the driver
(compare.bench) and the registry's capability checks (compare.backends) read them. Two calls:

* a backend's `attention_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table, k_descale, v_descale,
  causal, scale, return_lse)`: GQA heads, a contiguous `(B, capacity, Hkv, D)` or paged `(blocks, page_size, Hkv,
  D)` cache, in q's dtype or e4m3 with per-(batch, KV head) descales (`cache_case`);
* its `attention_mla_decode(q, kv_cache, *, cache_seqlens, block_table, head_dim_v, causal, scale, return_lse)`:
  DeepSeek's multi-head latent attention, one latent head of 576 columns (512 latent + 64 rotary) in a paged cache,
  V its first 512 columns (a view, never a second copy) (`mla_case`).

The oracle (compare.oracle.check_kvcache) judges each sequence as a dense case of its own length; the caches must
come back unchanged. The results CSV tells the cases apart by `packing` (PACKINGS), `page_size` and `kv_format`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import oracle
from .kvcache import MLA_HEAD_DIM, MLA_HEAD_DIM_V

LATENT, PAGED, CONTIGUOUS = "latent", "paged", "contiguous"  # the results CSV's `packing` cell of these rows
PACKINGS = (LATENT, PAGED, CONTIGUOUS)
CACHES = (PAGED, CONTIGUOUS)  # a sweep's `cache` key (compare.sweeps)


@dataclass(frozen=True)
class SweepCase:
    """A benchmark's KV-cache case: `case` a compare.oracle.KVCase whose sequences all hold the same keys, one latent
    head in a paged cache where it is MLA's."""
    case: oracle.KVCase

    def __post_init__(self):
        c = self.case
        if len(set(c.cache_seqlens)) != 1:
            raise ValueError(f"a KV-cache sweep case holds one length in every sequence, got {c.cache_seqlens}")
        if c.latent and (c.heads_kv != 1 or c.page_size is None):
            raise ValueError(f"an MLA sweep case is one latent head in a paged cache, got {c.shape_str()}")

    # what the registry's capability checks and the driver read off a case
    kvcache = True  # run through attention_with_kvcache, or attention_mla_decode where `mla`
    mla = property(lambda self: self.case.latent)
    latent = property(lambda self: self.case.latent)
    kv_fmt = property(lambda self: self.case.kv_fmt)
    fmt = property(lambda self: self.case.fmt)
    head_dim = property(lambda self: self.case.head_dim)
    v_dim = property(lambda self: self.case.v_dim)
    heads_q = property(lambda self: self.case.heads_q)
    heads_kv = property(lambda self: self.case.heads_kv)
    causal = property(lambda self: self.case.causal)
    window = property(lambda self: self.case.window)
    local = property(lambda self: self.case.window != (-1, -1))
    softcap = 0.0
    scale = property(lambda self: self.case.scale)
    batch = property(lambda self: self.case.batch)
    seqlen_q = property(lambda self: self.case.seqlen_q)
    seqlen_k = property(lambda self: self.case.cache_seqlens[0])
    page_size = property(lambda self: self.case.page_size)
    quantized = False  # (the MMAs run in q's dtype: an e4m3 cache is read as e4m3 and widened)

    @property
    def packing(self) -> str:
        return LATENT if self.case.latent else PAGED if self.case.page_size else CONTIGUOUS

    @property
    def kv_format(self) -> str:
        """The results CSV's `kv_format` cell: "" for a cache in q's dtype, else the cache's format."""
        return "" if self.case.kv_fmt == "same" else self.case.kv_fmt

    @property
    def sequences(self) -> tuple[tuple[int, int], ...]:
        """(query tokens, keys) of every sequence (compare.bench.flops counts their pairs)."""
        return tuple((self.case.seqlen_q, n) for n in self.case.cache_seqlens)

    def replace(self, **changes) -> "SweepCase":
        """The same case with the KVCase's fields changed (seed=...)."""
        return SweepCase(dataclasses.replace(self.case, **changes))

    def shape_str(self) -> str:
        return self.case.shape_str()


def mla_case(*, batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, page_size: int, causal: bool,
             fmt: str) -> SweepCase:
    """An MLA case of `batch` sequences of `seqlen_k` keys each (compare.sweeps: a shapes table with latent = true),
    the softmax scale 576 ** -0.5."""
    return SweepCase(oracle.KVCase(batch=batch, heads_q=heads_q, heads_kv=1, seqlen_q=seqlen_q,
                                   cache_seqlens=(seqlen_k,) * batch, head_dim=MLA_HEAD_DIM, page_size=page_size,
                                   causal=causal, fmt=fmt, head_dim_v=MLA_HEAD_DIM_V, latent=True))


def cache_case(*, batch: int, heads_q: int, heads_kv: int, seqlen_q: int, seqlen_k: int, head_dim: int,
               page_size: int | None, kv_fmt: str, causal: bool, fmt: str,
               window: tuple[int, int] = (-1, -1)) -> SweepCase:
    """A GQA case of `batch` sequences of `seqlen_k` keys each (compare.sweeps: a shapes table with `cache`), in a
    contiguous cache (page_size None) or pages of `page_size` keys, the cache in q's dtype (kv_fmt "same") or e4m3
    ("fp8")."""
    return SweepCase(oracle.KVCase(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q,
                                   cache_seqlens=(seqlen_k,) * batch, head_dim=head_dim, page_size=page_size,
                                   causal=causal, fmt=fmt, kv_fmt=kv_fmt, window=window))
