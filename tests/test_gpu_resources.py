"""Resource failures leave state intact (issue 33.3), on the GPU (skipped cleanly without one).

A call that cannot get the memory it needs raises torch's own ``torch.OutOfMemoryError`` (never a CUDA error
that poisons the context, never a wrong result), gives back what it had allocated before the failure, and the
next call -- once memory is free again -- passes the oracle. Memory is exhausted by holding the caching
allocator's blocks, after a first call has compiled and loaded the kernels, so that what fails is the call's
own output or workspace allocation.
"""
import pytest
import torch

from compare import backends, fuzz, oracle
from conftest import skip_unless_required

pytestmark = pytest.mark.gpu

DENSE = ("cuda:hopper", "cuda:v5", "triton:fa2-ws", "triton:fa2")
KVCACHE = ("cuda:decode", "triton:decode")
DENSE_CASE = oracle.Case(2, 8, 2, 1000, 1500, 128, causal=True)
# Long enough for several KV splits, so that the split workspace is among the allocations.
KV_CASE = oracle.KVCase(3, 16, 2, 1, (4000, 77, 9000), 128, page_size=64)


def _backend(name: str) -> backends.Backend:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    backend = backends.get(name)
    family, variant = name.split(":", 1)
    skip_unless_required(family, variant, backend.unavailable_reason())
    return backend


def _exhaust_memory() -> list[torch.Tensor]:
    """Hold every block the caching allocator can still get, down to 512-byte pieces (its small pool too, where
    outputs under 1 MiB come from), after giving its cached free blocks back."""
    torch.cuda.empty_cache()
    held, size = [], 1 << 34
    while size >= 512:
        try:
            held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            size //= 2
    return held


def _fails_with_oom_then_recovers(call, check) -> None:
    call()  # compile, autotune and load the modules while memory is free
    torch.cuda.synchronize()
    held = _exhaust_memory()
    before = torch.cuda.memory_allocated()
    try:
        with pytest.raises(torch.OutOfMemoryError):
            call()
            torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == before, "the failed call kept memory it had allocated"
    finally:
        del held
        torch.cuda.empty_cache()
    verdict = check()
    assert verdict.passed, verdict.summary()
    torch.cuda.synchronize()  # the context is still usable


@pytest.mark.parametrize("name", DENSE)
def test_dense_call_out_of_memory_raises_torch_oom_and_the_next_call_works(name):
    backend = _backend(name)
    inputs = oracle.make_inputs(DENSE_CASE, "cuda")
    case = DENSE_CASE

    def call():
        return backend.run(inputs.q, inputs.k, inputs.v, causal=case.causal, scale=None, return_lse=True)

    _fails_with_oom_then_recovers(call, lambda: oracle.check(backend, case, device="cuda", inputs=inputs))


@pytest.mark.parametrize("name", KVCACHE)
def test_kvcache_call_out_of_memory_raises_torch_oom_and_the_next_call_works(name):
    backend = _backend(name)
    fn = fuzz.kvcache_function(backend)
    assert fn is not None, f"{name} has no attention_with_kvcache"
    inputs = oracle.make_kvcache_inputs(KV_CASE, "cuda")

    def call():
        return fn(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(KV_CASE), return_lse=True)

    _fails_with_oom_then_recovers(call, lambda: oracle.check_kvcache(fn, KV_CASE, device="cuda", inputs=inputs))
