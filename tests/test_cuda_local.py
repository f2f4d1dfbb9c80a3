"""Local attention (window=) and softcap in cuda_impl.attention: the "hopper" variant's local kernel
(HopperTiles::LOCAL, scheduled as a causal launch), held to compare.oracle, which defines both as FlashAttention
does. The refusals and the machine-code checks run on the CPU; the oracle cases need an sm_90 GPU."""
import pytest
import torch

from compare import backends, oracle
from cuda_impl import sass
from conftest import hopper_or_skip

# Shapes span several 128-row CTAs and 128-key (80 at d256) tiles, so windows start and end inside tiles, leave
# whole tiles out on both sides, and cut the rows of one CTA differently.
CASES = [
    oracle.Case(2, 4, 2, 700, 700, 128, window=(100, 50)),
    oracle.Case(1, 8, 2, 1000, 1333, 128, causal=True, fmt="fp16", window=(257, -1)),    # causal: right = 0
    oracle.Case(1, 4, 4, 900, 500, 64, window=(-1, 30)),                                 # Sq > Sk: rows see none
    oracle.Case(2, 2, 2, 333, 777, 256, window=(0, 0)),                                  # one key per row
    oracle.Case(1, 16, 16, 2048, 2048, 64, fmt="fp16", window=(128, 128)),
    oracle.Case(1, 4, 1, 600, 600, 64, dist="large", softcap=30.0),                      # softcap alone
    oracle.Case(2, 4, 2, 513, 1025, 128, causal=True, dist="large", softcap=5.0, window=(200, 0)),
    oracle.Case(1, 2, 2, 4096, 4096, 256, causal=True, fmt="fp16", window=(1000, 0), softcap=20.0),
    oracle.Case(3, 6, 3, 257, 4000, 128, window=(3000, -1), softcap=50.0),               # Sq < Sk, GQA 2:1
    oracle.Case(1, 2, 2, 64, 9000, 64, window=(8000, 0), causal=True),                   # most of a long row
    oracle.Case(1, 4, 2, 3000, 3000, 64, causal=True, window=(1025, 0)),                 # d64: past the short window
]


def test_local_cases_are_in_the_hopper_declaration():
    hopper = backends.get("cuda:hopper")
    assert hopper.local and hopper.softcap
    assert all(hopper.unsupported_reason(c) is None for c in CASES)
    assert backends.get("cuda:v5").unsupported_reason(CASES[0]) == "a local window (no window= argument)"


def test_other_variants_inputs_and_bad_arguments_are_refused():
    import cuda_impl
    from compare import formats
    q = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="'v5' has no local window / softcap; the variants with them: hopper"):
        cuda_impl.attention(q, q, q, window=(4, 0), variant="v5")
    with pytest.raises(NotImplementedError, match="bf16/fp16 inputs only"):
        q8, k8, v8 = formats.quantize_attention_inputs(q, q, q, "fp8")
        cuda_impl.attention(q8, k8, v8, softcap=3.0)
    with pytest.raises(ValueError, match="window"):
        cuda_impl.attention(q, q, q, window=(4, -2))
    with pytest.raises(ValueError, match="softcap"):
        cuda_impl.attention(q, q, q, softcap=float("inf"))
    with pytest.raises(ValueError, match="device"):  # checked like any hopper call: CPU tensors are refused
        cuda_impl.attention(q, q, q, window=(4, 0))


# --- machine code (CPU) ---------------------------------------------------------------------------

# (head_dim, BLOCK_KV, consumers) of the local kernels: the causal launches' tiles, two consumers at d80 / d96 and
# for d64's short windows, the head_dim's own count (0) elsewhere.
LOCAL_KERNELS = [(64, 128, 2), (64, 128, 0), (80, 96, 2), (96, 96, 2), (128, 128, 0), (192, 112, 0), (256, 80, 0)]


@pytest.fixture(scope="module")
def local_loops(fa_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    functions = sass.dump_sass(fa_library, with_addresses=True)
    loops = {}
    for fmt, mangled in (("bf16", "13__nv_bfloat16"), ("fp16", "6__half")):
        for head_dim, block_kv, consumers in LOCAL_KERNELS:
            for local in (0, 1):
                tag = f"fwd_hopper_kernelI{mangled}Li{head_dim}ELi{block_kv}ELi1ELi{consumers}ELb{local}ELb0E"
                (found,) = [ins for (arch, fn), ins in functions.items() if arch == "sm_90" and tag in fn]
                loops[fmt, head_dim, consumers, local] = sass.steady_loop(found)
    return loops


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim,block_kv,consumers", LOCAL_KERNELS)
def test_local_loop_keeps_the_overlap_and_caps_every_score(local_loops, fmt, head_dim, block_kv, consumers):
    """The local kernel's KV loop issues S(t) and P(t-1) V(t-1) as the plain kernel's does, and computes the cap
    (one SFU tanh per score, beside the softmax's exp2) where the plain one has none."""
    plain, local = (sass.opcode_counts(local_loops[fmt, head_dim, consumers, flag]) for flag in (0, 1))
    gemms = {loop: sum(n for op, n in ops.items() if op.startswith("HGMMA")) for loop, ops in (("plain", plain),
                                                                                               ("local", local))}
    assert gemms["local"] == gemms["plain"] == head_dim // 16 + block_kv // 16, (plain, local)
    scores_per_thread = block_kv // 2  # 64 rows x BLOCK_KV of S over a warpgroup's 128 threads
    mufu = lambda ops, fn: sum(n for op, n in ops.items() if op.startswith(f"MUFU.{fn}"))  # noqa: E731
    assert mufu(plain, "TANH") == 0 and mufu(local, "TANH") == scores_per_thread, (plain, local)
    assert mufu(local, "EX2") == mufu(plain, "EX2"), (plain, local)  # the softmax's, unchanged
    assert not [op for op in local if op.startswith(("LDL", "STL"))], local  # spills (d64's three) stay outside


# --- the oracle on the GPU (skipped without an sm_90 one) ------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.shape_str() for c in CASES])
def test_gpu_hopper_window_and_softcap_match_the_oracle(case):
    hopper_or_skip()
    verdict = oracle.check(backends.get("cuda:hopper"), case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
def test_gpu_rows_without_keys_repeat_and_strided_views():
    """Rows that see no key give 0 and lse -inf; repeated calls are the same bits; a (B, S, H, D) view (heads
    strided) gives what the contiguous tensors give."""
    hopper_or_skip()
    import cuda_impl
    case = oracle.Case(1, 2, 2, 400, 200, 128, window=(2, 1))
    inputs = oracle.make_inputs(case, device="cuda")
    out, lse = cuda_impl.attention(inputs.q, inputs.k, inputs.v, window=(2, 1), return_lse=True)
    # row i sees keys i - 202 .. i - 199: none for i < 199
    assert (out[:, :, :199] == 0).all() and torch.isneginf(lse[:, :, :199]).all()
    assert torch.isfinite(lse[:, :, 199:]).all()
    again = cuda_impl.attention(inputs.q, inputs.k, inputs.v, window=(2, 1), variant="hopper")
    assert torch.equal(out, again)
    bshd = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (inputs.q, inputs.k, inputs.v)]
    assert torch.equal(cuda_impl.attention(*bshd, window=(2, 1)), out)
