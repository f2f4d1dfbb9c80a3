"""The full oracle matrix for every registered backend, on the GPU (skipped cleanly without one)."""

import pytest
import torch

from compare import backends, cli, oracle
from conftest import SM90_MUST_RUN, skip_unless_required

pytestmark = pytest.mark.gpu


# Registered to record a refusal as a result (issue 3: Triton 3.6 cannot lower tl.dot_scaled with NVFP4's
# e4m3 scales on sm_90): every case must raise it, which strict xfail checks.
REFUSED = {"triton:nvfp4-dot-scaled": NotImplementedError}


def _cases():
    for name, backend in sorted(backends.registry().items()):
        marks = ([pytest.mark.xfail(raises=REFUSED[name], strict=True, reason="refused by design")]
                 if name in REFUSED else [])
        for case in cli.matrix_cases(backend, "full", None):
            yield pytest.param(name, case, id=f"{name}-{case.shape_str().replace(' ', '-')}", marks=marks)


@pytest.mark.parametrize("name,case", list(_cases()))
def test_oracle_matrix(name, case):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    backend = backends.get(name)
    family, variant = name.split(":", 1)
    skip_unless_required(family, variant, backend.unavailable_reason())
    verdict = oracle.check(backend, case, device="cuda", returns_lse=backend.returns_lse)
    assert verdict.passed, verdict.summary()


def test_gpu_poisoning_exposes_unwritten_output():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    case = oracle.Case(1, 2, 2, 128, 128, 64)

    def writes_nothing(q, k, v, **kw):
        return torch.empty_like(q)
    verdict = oracle.check(writes_nothing, case, device="cuda", returns_lse=False)
    assert not verdict.passed and "NaN" in verdict.reason


def test_gpu_poisoning_holds_when_a_free_block_holds_the_right_answer():
    """Free blocks of the output's size holding the correct output (a previous call's) must not reach the call:
    the caching allocator would hand one back to an output the kernel never writes, and it would pass."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    case = oracle.Case(1, 2, 2, 128, 128, 64)
    inputs = oracle.make_inputs(case, "cuda")
    answers = [torch.nn.functional.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v) for _ in range(8)]
    torch.cuda.synchronize()
    del answers

    def writes_nothing(q, k, v, **kw):
        return torch.empty_like(q)
    verdict = oracle.check(writes_nothing, case, device="cuda", returns_lse=False, inputs=inputs)
    assert not verdict.passed and "NaN" in verdict.reason


def test_fp8_plain_reference_uses_tensor_cores_and_stays_close_to_fp32():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    case = oracle.Case(2, 4, 2, 70, 45, 64, fmt="fp8")
    inputs = oracle.make_inputs(case, "cuda")
    rows = torch.arange(case.seqlen_q, device="cuda")
    s = oracle._fp8_tensor_core_scores(inputs.q, inputs.k, 1, rows)
    q, k, _ = inputs.dequantized()
    exact = (q[1] @ k[1].repeat_interleave(2, dim=0).transpose(-1, -2)).float()
    assert s.shape == exact.shape
    err = float((s - exact).abs().max() / exact.abs().max())
    assert 0 <= err < 1e-2, err


@pytest.mark.parametrize("backend_name", ["cuda_impl", "triton_impl"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_variant_none_runs_the_selected_variant(backend_name, head_dim):
    """variant=None gives the same bits as the variant select_variant() names, and that result passes the
    oracle: the default is a real kernel of the table, not a fallback."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    module = __import__(backend_name)
    case = oracle.Case(2, 8, 2, 300, 517, head_dim, causal=True)
    inputs = oracle.make_inputs(case, "cuda")
    chosen = module.select_variant(inputs.q, inputs.k, inputs.v, causal=True)
    default = module.attention(inputs.q, inputs.k, inputs.v, causal=True)
    explicit = module.attention(inputs.q, inputs.k, inputs.v, causal=True, variant=chosen)
    assert torch.equal(default, explicit), chosen
    verdict = oracle.check(lambda q, k, v, **kw: module.attention(q, k, v, **kw), case, device="cuda",
                           inputs=inputs)
    assert verdict.passed, f"{chosen}: {verdict.summary()}"


def test_every_variant_that_must_run_on_sm90_is_in_the_matrix():
    """The must-run list names registered backends, each with cases in the matrix (CPU: no GPU needed)."""
    names = {name for name, _ in (p.values for p in _cases())}
    for family, variants in SM90_MUST_RUN.items():
        for variant in variants:
            assert f"{family}:{variant}" in names, f"{family}:{variant} has no case in the GPU oracle matrix"


def _outcome(call) -> tuple[str, str]:
    """What a call ends in: ("fail", message), ("skip", message) or ("none", ""). A skip is caught as an outcome,
    not let through, so that a check that skips where it should fail fails this test instead of skipping it."""
    try:
        call()
    except pytest.fail.Exception as exc:
        return "fail", str(exc)
    except pytest.skip.Exception as exc:
        return "skip", str(exc)
    return "none", ""


def test_a_must_run_variant_that_says_it_is_unavailable_fails_on_sm90(monkeypatch):
    """On an sm_90 GPU the skip becomes a failure (faked here: no GPU is needed); elsewhere it stays a skip."""
    import conftest
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    kind, message = _outcome(lambda: conftest.skip_unless_required("cuda", "hopper", "built without sm_90a"))
    assert kind == "fail" and "must run on this sm_90 GPU" in message, (kind, message)
    assert _outcome(lambda: conftest.skip_unless_required("cuda", "nvfp4-sm120", "needs sm_120"))[0] == "skip"
    assert _outcome(lambda: conftest.skip_unless_required("cuda", "hopper", None)) == ("none", "")  # available
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (12, 0))
    assert _outcome(lambda: conftest.skip_unless_required("cuda", "hopper", "needs sm_90"))[0] == "skip"
