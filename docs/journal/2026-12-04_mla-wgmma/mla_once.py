"""A few calls of cuda_impl.attention_mla_decode on one MLA case (full 64-key pages), for a profiler to pick one:
python3 <this file> BATCH HEADS SEQLEN_Q KEYS."""

import sys

import torch

import cuda_impl
from compare import oracle

batch, heads, seqlen_q, keys = (int(x) for x in sys.argv[1:5])
case = oracle.KVCase(batch, heads, 1, seqlen_q, (keys,) * batch, 576, page_size=64, causal=seqlen_q > 1,
                     scale=576 ** -0.5, head_dim_v=512, latent=True)
inputs = oracle.make_kvcache_inputs(case, "cuda")
for _ in range(4):
    cuda_impl.attention_mla_decode(inputs.q, inputs.k_cache, cache_seqlens=inputs.cache_seqlens,
                                   block_table=inputs.block_table, causal=case.causal, scale=case.scale)
torch.cuda.synchronize()
