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
    "fp8": {
        "formats": ("fp8",),
        "head_dims": (64, 128, 256),
        "min_cc": (9, 0),
        "max_cc": None,
        "description": "FP8 e4m3 forward, per-head descales, V stored transposed, P cast to e4m3 unscaled",
    },
}

DEFAULT_VARIANT: dict[str, str] = {
    "bf16": "fa2-tma",
    "fp16": "fa2-tma",
    "fp32": "fa2",
    "fp8": "fp8",
}
