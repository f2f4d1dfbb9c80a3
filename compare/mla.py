"""The MLA decode sweep's case: DeepSeek's multi-head latent attention against a paged latent KV cache, as the
driver (compare.bench) and the registry's capability checks (compare.backends) read it.

One latent head per sequence, Q/K head_dim 576 (512 latent + 64 rotary columns), V the cache's first 512 columns
(a view, never a second copy): the call is the backend's `attention_mla_decode(q, kv_cache, *, cache_seqlens,
block_table, head_dim_v, causal, scale, return_lse)`. Every sequence of a sweep case holds the same number of keys
(`seqlen_k`); the oracle (compare.oracle.check_kvcache) judges each sequence as a dense case of its own length.
Bytes a call must read: every key row of 576 columns once (`cache_bytes`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import oracle
from .kvcache import MLA_HEAD_DIM, MLA_HEAD_DIM_V

PACKING = "latent"  # the results CSV's `packing` cell of an MLA row (compare.schema)


@dataclass(frozen=True)
class SweepCase:
    """A benchmark's MLA decode case: `case` a latent, paged compare.oracle.KVCase."""
    case: oracle.KVCase

    def __post_init__(self):
        c = self.case
        if not c.latent or c.heads_kv != 1 or c.page_size is None:
            raise ValueError(f"an MLA sweep case is one latent head in a paged cache, got {c.shape_str()}")

    # what the registry's capability checks and the driver read off a case
    mla = True  # run through the backend's attention_mla_decode (compare.backends.Backend.run_mla)
    latent = True
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
    seqlen_k = property(lambda self: max(self.case.cache_seqlens))
    page_size = property(lambda self: self.case.page_size)
    quantized = False

    @property
    def sequences(self) -> tuple[tuple[int, int], ...]:
        """(query tokens, keys) of every sequence (compare.bench.flops counts their pairs)."""
        return tuple((self.case.seqlen_q, n) for n in self.case.cache_seqlens)

    @property
    def cache_bytes(self) -> int:
        """Bytes of the latent rows a call must read: each sequence's keys once, all 576 columns."""
        element = 4 if self.case.fmt == "fp32" else 2
        return sum(self.case.cache_seqlens) * self.case.head_dim * element

    def replace(self, **changes) -> "SweepCase":
        """The same case with the KVCase's fields changed (seed=...)."""
        return SweepCase(dataclasses.replace(self.case, **changes))

    def shape_str(self) -> str:
        return self.case.shape_str()


def sweep_case(*, batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, page_size: int, causal: bool,
               fmt: str) -> SweepCase:
    """An MLA case of `batch` sequences of `seqlen_k` keys each (compare.sweeps: a shapes table with latent = true),
    the softmax scale 576 ** -0.5."""
    return SweepCase(oracle.KVCase(batch=batch, heads_q=heads_q, heads_kv=1, seqlen_q=seqlen_q,
                                   cache_seqlens=(seqlen_k,) * batch, head_dim=MLA_HEAD_DIM, page_size=page_size,
                                   causal=causal, fmt=fmt, head_dim_v=MLA_HEAD_DIM_V, latent=True))
