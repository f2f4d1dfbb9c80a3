"""Triton FlashAttention-2 forward: `attention(q, k, v, causal=, scale=, variant=, return_lse=)`.

Variants (see VARIANTS): "fa2" (pointer loads, portable, interpreter-friendly), "fa2-tma" (TMA
descriptors, sm_90), "fp8" (e4m3 with per-head descales, sm_90). The kernels run behind the
torch.library ops `triton_fa::fwd` and `triton_fa::fwd_fp8`, so `attention` works under torch.compile.
"""
from triton_impl.frontend import attention, last_config, unavailable_reason
from triton_impl.variants import DEFAULT_VARIANT, VARIANTS

__all__ = ["attention", "last_config", "unavailable_reason", "VARIANTS", "DEFAULT_VARIANT"]
