"""Triton FlashAttention-2 forward: `attention(q, k, v, causal=, scale=, variant=, return_lse=)`.

Variants (VARIANTS): "fa2" (pointer loads, portable, runs under TRITON_INTERPRET=1), "fa2-tma" (TMA
descriptors, sm_90+), "fa2-ws" (Gluon, warp-specialised, sm_90), "fp8" / "fp8-ws" (e4m3 with per-head
descales), the MXFP8 / NVFP4 kernels, "decode" (split-KV, also behind attention_with_kvcache: decode against a
contiguous or paged KV cache; attention_mla_decode: MLA's Q/K 576 against one latent cache, V its first 512 columns);
attention_varlen (packed variable-length batches, "fa2"). variant=None runs select_variant(q, k, v): the fastest for the GPU,
format, head_dim and length (DEFAULT_VARIANTS). The kernels run behind torch.library ops
(`triton_fa::fwd`, `fwd_fp8`, `fwd_blocked`), so `attention` works under torch.compile.
"""
from triton_impl.frontend import (attention, attention_mla_decode, attention_varlen, attention_with_kvcache,
                                  last_config, select_variant, unavailable_reason)
from triton_impl.variants import DEFAULT_VARIANTS, VARIANTS

__all__ = ["attention", "attention_mla_decode", "attention_varlen", "attention_with_kvcache", "last_config",
           "select_variant", "unavailable_reason", "VARIANTS", "DEFAULT_VARIANTS"]
