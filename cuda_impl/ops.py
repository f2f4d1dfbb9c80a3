"""The torch.library custom op "cuda_fa::fwd" (with a fake implementation for torch.compile)."""

from __future__ import annotations

import torch

from cuda_impl import _lib


@torch.library.custom_op("cuda_fa::fwd", mutates_args=(), device_types="cuda")
def fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, variant: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Hq, Sq, D) in q's dtype, lse (B, Hq, Sq) float32). Inputs are validated by the caller."""
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    _lib.launch_forward(variant, q, k, v, out, lse, causal=causal, scale=scale)
    return out, lse


@fwd.register_fake
def _fwd_fake(q, k, v, causal, scale, variant):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)
