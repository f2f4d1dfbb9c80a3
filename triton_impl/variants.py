"""What each Triton variant runs: formats, head dims, architectures (the contract's VARIANTS table)."""

VARIANTS: dict[str, dict] = {
    "fa2": {
        "formats": ("bf16", "fp16", "fp32"),
        "head_dims": (64, 128, 256),
        "min_cc": (8, 0),
        "max_cc": None,
        "description": "FlashAttention-2 forward, pointer loads with strides (portable; runs under TRITON_INTERPRET=1)",
    },
    "fa2-tma": {
        "formats": ("bf16", "fp16"),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "FlashAttention-2 forward, tensor-descriptor (TMA) loads, tuned for sm_90",
    },
    "fa2-ws": {
        "formats": ("bf16", "fp16"),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": (9, 0),
        "description": "FlashAttention-2 forward in Gluon (Triton's explicit dialect): a TMA producer warp and two "
                       "consumer warpgroups with their own instruction streams (warp specialization); wgmma, sm_90 only",
    },
    "fp8": {
        "formats": ("fp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "FP8 e4m3 forward, per-head descales, V stored transposed, P cast to e4m3 unscaled",
    },
    "fp8-ws": {
        "formats": ("fp8",),
        "head_dims": (64, 128),
        "min_cc": (9, 0),
        "max_cc": (9, 0),
        "description": "FP8 e4m3 forward of 'fp8' (per-head descales, V stored transposed, P cast to e4m3 unscaled) "
                       "on the warp-specialized Gluon kernel of 'fa2-ws'; QGMMA, sm_90 only",
    },
    "mxfp8-dot-scaled": {
        "formats": ("mxfp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "MXFP8 forward, both products tl.dot_scaled (e4m3, E8M0 per 32; P's scales in-kernel); "
                       "on sm_90 Triton upcasts to bf16 wgmma",
    },
    "mxfp8-dequant": {
        "formats": ("mxfp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "MXFP8 forward, tiles dequantized exactly to bf16 in registers, bf16 wgmma, "
                       "P quantized to MXFP8 blocks of 32 keys",
    },
    "nvfp4-dot-scaled": {
        "formats": ("nvfp4",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "NVFP4 through tl.dot_scaled: refused (NotImplementedError), Triton 3.6 cannot lower "
                       "e4m3 block scales on sm_90",
    },
    "nvfp4-dequant": {
        "formats": ("nvfp4",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "NVFP4 forward, e2m1 x e4m3-scale tiles dequantized exactly to bf16, bf16 wgmma, "
                       "tensor scales in fp32, P quantized to NVFP4 blocks of 16 keys",
    },
}

DEFAULT_VARIANT: dict[str, str] = {
    "bf16": "fa2-tma",
    "fp16": "fa2-tma",
    "fp32": "fa2",
    "fp8": "fp8",
    "mxfp8": "mxfp8-dequant",
    "nvfp4": "nvfp4-dequant",
}
