"""Variant "fp8-ws": the e4m3 forward of `fp8` (per-head descales, V stored transposed, P cast to e4m3
unscaled) on the warp-specialized Gluon kernel of `fa2_ws` (one TMA producer warp, two consumer
warpgroups; QGMMA for both products, P from registers).

V^T's rows (Sk bytes) must be 16-byte multiples for TMA: at other lengths V^T is copied into a buffer
padded to 16 keys, and the descriptor still ends at Sk, so the padding reads as zeros.

K tiles arrive key-permuted (PERMUTED_K, as in `fp8` and `cuda:hopper-fp8`) when K is contiguous and
Sk % 16 == 0: then each score lands in the thread that the e4m3 A operand of P @ V wants it in, and P is
relabelled instead of shuffled. TMA stops at 5 dimensions, so the permuted descriptor runs over K's rows
flattened across (batch, head): a tile that runs past its head's Sk reads the next head's first keys
(or zeros past the tensor), which the key mask removes like any key past Sk. Other K keeps the 4-D
descriptor and the shuffles.
"""
import torch
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from triton_impl.kernels import fa2_ws, tuning
from triton_impl.kernels.fp8_tma import vt_via_tma


def permuted_k(k):
    """True when K's tiles can come key-permuted: contiguous rows over (batch, head, key), Sk % 16 == 0."""
    return k.is_contiguous() and k.shape[2] % 16 == 0


def permuted_k_box(block_n, head_dim):
    """The box of the key-permuted K descriptor: (16-key groups, keys 2 apart, keys 4 apart, single keys,
    head_dim) (see fa2_ws._key_of_column)."""
    return [block_n // 16, 2, 4, 2, head_dim]


def k_descriptor(k, block_n, permuted):
    """K's TMA descriptor: the 4-D one of fa2_ws, or with `permuted` a 5-D one over the flattened rows."""
    head_dim = k.shape[3]
    if not permuted:
        return fa2_ws.descriptor(k, block_n, head_dim)
    block = permuted_k_box(block_n, head_dim)
    return TensorDescriptor(k, [k.numel() // (16 * head_dim), 2, 4, 2, head_dim],
                            [16 * head_dim, 2 * head_dim, 4 * head_dim, head_dim, 1], block,
                            fa2_ws.box_layout(block, k.dtype))


def launch(q, k, vt, q_descale, k_descale, v_descale, out, lse, causal, scale, config=None):
    """q (B, Hq, Sq, D), k (B, Hkv, Sk, D), vt (B, Hkv, D, Sk) e4m3; descales (B, H) fp32 contiguous;
    out (B, Hq, Sq, D) bf16 and lse (B, Hq, Sq) fp32, fresh and contiguous."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    config = config or fa2_ws.config_for(head_dim, 1, causal, seqlen_q)
    rows, block_n = fa2_ws.ROWS.value, config["BLOCK_N"]
    vt_shape = list(vt.shape)
    permuted = permuted_k(k) and config.get("PERMUTED_K", True)  # a config may turn it off (dev ablation)
    if not vt_via_tma(vt):
        padded = torch.zeros(*vt.shape[:3], -(-seqlen_k // 16) * 16, dtype=vt.dtype, device=vt.device)
        padded[..., :seqlen_k] = vt
        vt = padded
    fa2_ws.record_launch("fp8-ws", config, " k-permuted" if permuted else "")
    return fa2_ws._fp8_fwd_ws[fa2_ws.launch_grid(seqlen_q, batch, heads_q, config)](
        fa2_ws.descriptor(q, rows, head_dim), k_descriptor(k, block_n, permuted),
        fa2_ws.descriptor(vt, head_dim, block_n, shape=vt_shape), fa2_ws.descriptor(out, rows, head_dim),
        q_descale, k_descale, v_descale, lse,
        scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_kv, heads_q // heads_kv,
        HEAD_DIM=head_dim, BLOCK_N=block_n, STAGES=config["STAGES"], CAUSAL=causal, OVERLAP=config["OVERLAP"],
        PERMUTED_K=permuted, **fa2_ws.roles(config), num_warps=4)
