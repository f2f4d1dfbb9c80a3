"""What each Triton variant runs: formats, head dims, architectures (the contract's VARIANTS table), and how the
frontend runs it: "kernels", the module whose launch() it calls (a module without one says why in LIMITATION);
"op", the custom op that takes its inputs (fwd: 16-bit, fwd_fp8, fwd_blocked: MXFP8 / NVFP4, decode: the split-KV
decode of triton_impl.decode, for at most "max_seqlen_q" query tokens); "tma": its Q/K (and
16-bit V) are read through TMA descriptors; "gluon": written in Gluon, which Triton 3.6's interpreter cannot run.
"head_dims": the head dims it takes with V's equal to Q/K's; "head_dim_pairs": the (Q/K, V) head dims it takes
besides (output: V's head_dim).
Adding a variant is a row here and a kernel module."""

VARIANTS: dict[str, dict] = {
    "fa2": {
        "kernels": "triton_impl.kernels.fa2_pointer",
        "op": "fwd",
        "formats": ("bf16", "fp16", "fp32"),
        "head_dims": tuple(range(32, 257, 8)),  # tiles padded to the next power of two (fa2_pointer)
        "head_dim_pairs": ((192, 128),),
        "min_cc": (8, 0),
        "max_cc": None,
        "description": "FlashAttention-2 forward, pointer loads with strides (portable; runs under TRITON_INTERPRET=1)",
        "local": True,     # window=(left, right): only the key blocks the window touches (interpreter-tested)
        "softcap": True,
        "varlen": True,    # attention_varlen: packed sequences (interpreter-tested)
    },
    "fa2-tma": {
        "kernels": "triton_impl.kernels.fa2_tma",
        "op": "fwd",
        "tma": True,
        "formats": ("bf16", "fp16"),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "FlashAttention-2 forward, tensor-descriptor (TMA) loads, tuned for sm_90",
    },
    "fa2-ws": {
        "kernels": "triton_impl.kernels.fa2_ws",
        "op": "fwd",
        "tma": True,
        "gluon": True,
        "formats": ("bf16", "fp16"),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": (9, 0),
        "description": "FlashAttention-2 forward in Gluon (Triton's explicit dialect): a TMA producer warp and two "
                       "consumer warpgroups with their own instruction streams (warp specialization); wgmma, sm_90 only",
    },
    "decode": {
        "kernels": "triton_impl.kernels.decode",
        "op": "decode",
        "formats": ("bf16", "fp16", "fp32"),
        "head_dims": (64, 128, 256),
        "head_dim_pairs": ((576, 512),),  # MLA decode: Q/K 576, V 512 (attention_mla_decode)
        "min_cc": (8, 0),
        "max_cc": None,
        "max_seqlen_q": 64,
        "description": "split-KV decode (flash-decoding), pointer loads: the query tokens of all query heads of one "
                       "KV head packed into one tile, key chunks merged through their LSE in a fixed order; "
                       "contiguous or paged KV cache (attention_with_kvcache); runs under TRITON_INTERPRET=1",
    },
    "fp8": {
        "kernels": "triton_impl.kernels.fp8_tma",
        "op": "fwd_fp8",
        "tma": True,
        "formats": ("fp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "FP8 e4m3 forward, per-head descales, V stored transposed, P cast to e4m3 unscaled",
    },
    "fp8-ws": {
        "kernels": "triton_impl.kernels.fp8_ws",
        "op": "fwd_fp8",
        "tma": True,
        "gluon": True,
        "formats": ("fp8",),
        "head_dims": (64, 128),
        "min_cc": (9, 0),
        "max_cc": (9, 0),
        "description": "FP8 e4m3 forward of 'fp8' (per-head descales, V stored transposed, P cast to e4m3 unscaled) "
                       "on the warp-specialized Gluon kernel of 'fa2-ws'; QGMMA, sm_90 only",
    },
    "mxfp8-dot-scaled": {
        "kernels": "triton_impl.kernels.mx_dot_scaled",
        "op": "fwd_blocked",
        "formats": ("mxfp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "MXFP8 forward, both products tl.dot_scaled (e4m3, E8M0 per 32; P's scales in-kernel); "
                       "on sm_90 Triton upcasts to bf16 wgmma",
    },
    "mxfp8-dequant": {
        "kernels": "triton_impl.kernels.mx_dequant",
        "op": "fwd_blocked",
        "formats": ("mxfp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "MXFP8 forward, tiles dequantized exactly to bf16 in registers, bf16 wgmma, "
                       "P quantized to MXFP8 blocks of 32 keys",
    },
    "nvfp4-dot-scaled": {
        "kernels": "triton_impl.kernels.nvfp4_dot_scaled",
        "op": "fwd_blocked",
        "formats": ("nvfp4",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "NVFP4 through tl.dot_scaled: refused (NotImplementedError), Triton 3.6 cannot lower "
                       "e4m3 block scales on sm_90",
    },
    "nvfp4-dequant": {
        "kernels": "triton_impl.kernels.mx_dequant",
        "op": "fwd_blocked",
        "formats": ("nvfp4",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "NVFP4 forward, e2m1 x e4m3-scale tiles dequantized exactly to bf16, bf16 wgmma, "
                       "tensor scales in fp32, P quantized to NVFP4 blocks of 16 keys",
    },
}

# What variant=None runs (triton_impl.select_variant): the first row whose architectures, format, head_dim and
# length fit. Each row is the fastest variant that passed the oracle there in the committed sweeps
# (figures/data/paper-h200-*.csv on the H200: the Gluon kernels from d128 and from 2k tokens at d64, the pointer
# kernel for d64 up to 1k tokens, fp8-ws where it takes the head_dim); on other GPUs the variants their arch
# allows. Under TRITON_INTERPRET=1 (no GPU) the first row that is not a Gluon kernel, whatever its arch.
# "decode" only where Sq <= DECODE_MAX_SEQLEN_Q (longer query blocks are prefill tiles). A row runs only the head
# dims its variant takes: the ones only "fa2" takes (not 64 / 128 / 256, or V's unlike Q/K's) fall to its last row.
# (lowest cc, highest cc or None, formats, head_dims or None, longest max(Sq, Sk) or None, variant)
DECODE_MAX_SEQLEN_Q = 16
DEFAULT_VARIANTS: tuple = (
    ((8, 0), None, ("bf16", "fp16", "fp32"), None, None, "decode"),
    ((9, 0), (9, 0), ("bf16", "fp16"), (64,), 1024, "fa2"),
    ((9, 0), (9, 0), ("bf16", "fp16"), None, None, "fa2-ws"),
    ((9, 0), (9, 0), ("fp8",), (64, 128), None, "fp8-ws"),
    ((9, 0), None, ("bf16", "fp16"), None, None, "fa2-tma"),
    ((9, 0), None, ("fp8",), None, None, "fp8"),
    ((9, 0), None, ("mxfp8",), None, None, "mxfp8-dequant"),
    ((9, 0), None, ("nvfp4",), None, None, "nvfp4-dequant"),
    ((8, 0), None, ("bf16", "fp16", "fp32"), None, None, "fa2"),
)
