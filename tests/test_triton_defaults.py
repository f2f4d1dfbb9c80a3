"""triton_impl.select_variant: what variant=None runs, per GPU architecture, format, head_dim and length."""
import pytest
import torch

import triton_impl
from triton_impl import frontend


def _inputs(fmt, head_dim, seqlen):
    x = torch.randn(1, 2, seqlen, head_dim)
    if fmt in ("bf16", "fp16", "fp32"):
        t = x.to({"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[fmt])
        return t, t
    from compare import formats
    return formats.quantize(x, fmt), formats.quantize(x, fmt)


@pytest.mark.parametrize("cc, fmt, head_dim, seqlen, expected", [
    ((9, 0), "bf16", 64, 512, "fa2"), ((9, 0), "bf16", 64, 2048, "fa2-ws"), ((9, 0), "fp16", 128, 512, "fa2-ws"),
    ((9, 0), "bf16", 256, 4096, "fa2-ws"), ((9, 0), "fp8", 128, 1024, "fp8-ws"), ((9, 0), "fp8", 256, 1024, "fp8"),
    ((9, 0), "mxfp8", 128, 256, "mxfp8-dequant"), ((9, 0), "nvfp4", 64, 256, "nvfp4-dequant"),
    ((10, 0), "bf16", 128, 1024, "fa2-tma"), ((10, 0), "fp8", 64, 1024, "fp8"),
    ((8, 0), "bf16", 128, 1024, "fa2"), ((8, 9), "fp16", 256, 1024, "fa2"), ((8, 0), "fp8", 128, 1024, None),
])
def test_default_variant_follows_the_table(monkeypatch, cc, fmt, head_dim, seqlen, expected):
    monkeypatch.setattr(frontend, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    q, k = _inputs(fmt, head_dim, seqlen)
    monkeypatch.setattr(frontend, "_device_type", lambda t: "cuda")
    if expected is None:
        with pytest.raises(ValueError, match=f"no triton variant runs {fmt} head_dim {head_dim} on sm_"):
            triton_impl.select_variant(q, k)
    else:
        assert triton_impl.select_variant(q, k) == expected


def test_default_variant_under_the_interpreter_skips_gluon(monkeypatch):
    monkeypatch.setattr(frontend, "interpreting", lambda: True)
    q, k = _inputs("fp16", 128, 256)
    assert triton_impl.select_variant(q, k) == "fa2-tma"
    q, k = _inputs("fp8", 128, 256)
    assert triton_impl.select_variant(q, k) == "fp8"
    q, k = _inputs("fp32", 64, 100)
    assert triton_impl.select_variant(q, k) == "fa2"
    with pytest.raises(TypeError, match="dtype torch.int8 not supported"):
        triton_impl.select_variant(torch.zeros(1, 1, 4, 64, dtype=torch.int8))


@pytest.mark.parametrize("interpreting, cc, seqlen_q, head_dim, expected", [
    (False, (9, 0), 1, 128, "decode"), (False, (9, 0), 16, 64, "decode"), (False, (9, 0), 17, 128, "fa2-ws"),
    (False, (8, 0), 8, 64, "decode"), (False, (9, 0), 1, 256, "decode"), (True, None, 1, 64, "decode"),
])
def test_default_variant_sends_short_query_blocks_to_decode(monkeypatch, interpreting, cc, seqlen_q, head_dim,
                                                            expected):
    monkeypatch.setattr(frontend, "interpreting", lambda: interpreting)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    monkeypatch.setattr(frontend, "_device_type", lambda t: "cuda")
    q = torch.randn(2, 8, seqlen_q, head_dim, dtype=torch.float16)
    k = torch.randn(2, 2, 4096, head_dim, dtype=torch.float16)
    assert triton_impl.select_variant(q, k) == expected
