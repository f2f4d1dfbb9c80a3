"""A reference attention_with_kvcache for the CPU tests (test_kvcache_api, test_fuzz): gather the keys each
sequence holds through its block table, then the float64 oracle reference."""
import math

import torch

from compare import oracle


def kv_reference(q, k_cache, v_cache, *, cache_seqlens, block_table=None, causal=False, scale=None,
                 return_lse=False, k_descale=None, v_descale=None, window=(-1, -1)):
    """attention_with_kvcache in float64 torch, reading the pages the block table names for each length."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    scale = scale or head_dim ** -0.5
    out = q.new_zeros(*q.shape[:3], v_cache.shape[-1])  # V's head_dim (MLA: the latent's 512 of 576)
    lse = torch.full((batch, heads_q, seqlen_q), -math.inf)
    for b in range(batch):
        length = int(cache_seqlens[b])
        if length == 0:
            continue
        if block_table is None:
            k, v = k_cache[b, :length], v_cache[b, :length]
        else:
            pages = block_table[b, :-(-length // k_cache.shape[1])].long()
            k, v = (c[pages].reshape(-1, *c.shape[2:])[:length] for c in (k_cache, v_cache))
        k, v = k.double(), v.double()
        if k_descale is not None:
            k, v = k * k_descale[b][None, :, None], v * v_descale[b][None, :, None]
        o, l = oracle.reference(q[b:b + 1].transpose(1, 2), k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                causal=causal, scale=scale, window=window)
        out[b], lse[b] = o[0].transpose(0, 1).to(q.dtype), l[0].float()
    return (out, lse) if return_lse else out
