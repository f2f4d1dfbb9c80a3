"""Registry: capabilities, clear errors, no silent substitutes."""

import sys
import types

import pytest
import torch

from compare import backends, oracle


def test_peers_are_registered_with_capabilities():
    reg = backends.registry()
    for name in ("sdpa:flash", "sdpa:cudnn", "sdpa:efficient", "sdpa:math"):
        assert reg[name].family == "peer"
    assert reg["sdpa:math"].min_cc is None and reg["sdpa:flash"].min_cc == (8, 0)
    assert not reg["sdpa:flash"].causal_unequal and reg["sdpa:math"].causal_unequal


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match="sdpa:math"):
        backends.get("sdpa:nonexistent")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_gpu_backend_without_gpu_says_why():
    with pytest.raises(backends.BackendUnavailable, match="no CUDA GPU"):
        backends.require("sdpa:flash")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_wildcard_reports_unavailable_instead_of_substituting():
    chosen, skipped = backends.select(["sdpa:*"])
    assert [b.name for b in chosen] == ["sdpa:math"]
    assert set(skipped) == {"sdpa:cudnn", "sdpa:efficient", "sdpa:flash"}
    assert all("no CUDA GPU" in r for r in skipped.values())


def test_pattern_that_matches_nothing_is_an_error():
    with pytest.raises(ValueError, match="no backend matches"):
        backends.select(["nothing:*"])


def test_declared_capabilities_filter_cases():
    flash = backends.get("sdpa:flash")
    assert flash.unsupported_reason(oracle.Case(1, 2, 2, 64, 128, 64, causal=True)) is not None
    assert flash.unsupported_reason(oracle.Case(1, 2, 2, 64, 128, 64, causal=False)) is None
    assert "format" in flash.unsupported_reason(oracle.Case(1, 2, 2, 64, 64, 64, fmt="fp8"))


def test_sdpa_refuses_bottom_right_causal_it_cannot_do():
    q = torch.randn(1, 2, 8, 64)
    k = torch.randn(1, 2, 16, 64)
    run = backends.get("sdpa:flash").run
    with pytest.raises(ValueError, match="top-left"):
        run(q, k, k, causal=True)


def test_sdpa_math_matches_the_oracle_for_bottom_right_causal_and_gqa():
    math_backend = backends.get("sdpa:math")
    for case in (oracle.Case(1, 4, 2, 50, 120, 64, causal=True, fmt="fp32"),
                 oracle.Case(1, 2, 1, 120, 50, 64, causal=True, fmt="bf16")):
        verdict = oracle.check(math_backend, case, returns_lse=False)
        assert verdict.passed, verdict.summary()


def test_ceiling_names():
    assert backends.get("sdpa:flash").ceiling_for("bf16") == "mma.sync.bf16"
    assert backends.get("sdpa:flash").ceiling_for("fp16") == "mma.sync.fp16"
    assert backends.get("sdpa:cudnn").ceiling_for("bf16") == "wgmma.bf16"
    assert backends.get("triton:fp8").ceiling_for("fp8") == "wgmma.e4m3"


def test_declared_limits_of_peers():
    assert backends.get("sdpa:efficient").unsupported_reason(oracle.Case(1, 4, 2, 64, 64, 64)) == "no GQA/MQA"
    assert "seqlen_k" in backends.get("sdpa:cudnn").unsupported_reason(oracle.Case(1, 2, 2, 64, 1, 64))

def test_project_packages_register_their_variants():
    names = backends.registry()
    assert any(n.startswith("triton:") and n != "triton:*" for n in names), names
    assert any(n.startswith("cuda:") and n != "cuda:*" for n in names), names


def test_interpreter_only_fp32_is_not_a_compared_format():
    for name, b in backends.registry().items():
        if b.family != "peer":
            assert "fp32" not in b.formats, name


def test_fa4_is_a_wgmma_peer_that_records_its_versions():
    fa4 = backends.get("fa4:cute")
    assert fa4.family == "peer" and fa4.min_cc == (8, 0) and fa4.causal_unequal and fa4.returns_lse
    assert fa4.ceiling_for("bf16") == "wgmma.bf16" and "fp8" not in fa4.formats
    assert fa4.last_config().startswith("flash-attn-4 ")


def test_fa4_without_its_wheel_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, backends.FA4_MODULE, None)  # an import of it now raises ImportError
    backends._fa4_import_error.cache_clear()
    try:
        assert "flash-attn-4" in backends._fa4_import_error()
    finally:
        backends._fa4_import_error.cache_clear()


def _fake_flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
                          return_lse=False):
    """FA4's signature and conventions: (B, S, H, D) inputs with a unit last stride, (B, S, H, D) output,
    LSE (B, H, S) in float32, bottom-right causal."""
    assert all(x.stride(-1) == 1 for x in (q, k, v))
    assert q.shape[0] == k.shape[0] and q.shape[2] % k.shape[2] == 0 and q.shape[3] == k.shape[3]
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out, lse = oracle.reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, scale=scale)
    return out.transpose(1, 2).to(q.dtype).contiguous(), lse.float()


def test_fa4_wrapper_passes_layout_mask_and_lse_through(monkeypatch):
    fake = types.ModuleType(backends.FA4_MODULE)
    fake.flash_attn_func = _fake_flash_attn_func
    monkeypatch.setitem(sys.modules, backends.FA4_MODULE, fake)
    for case in (oracle.Case(1, 4, 2, 50, 120, 64, causal=True, fmt="bf16"),
                 oracle.Case(2, 2, 1, 120, 50, 64, causal=True, fmt="bf16", scale=0.3),
                 oracle.Case(1, 2, 2, 33, 33, 128, causal=False, fmt="bf16")):
        verdict = oracle.check(backends._fa4_run, case, returns_lse=True)
        assert verdict.passed, verdict.summary()
    q = torch.randn(1, 2, 8, 64)
    with pytest.raises(TypeError, match="plain tensors"):
        backends._fa4_run(q, object(), q)
