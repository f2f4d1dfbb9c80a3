"""Packed variable-length batches in cuda_impl.attention_varlen: the "hopper" variant's varlen kernels (the local
kernel's twin, HopperTiles::VARLEN: each item reads its sequence's offsets on the device), held to
compare.oracle's varlen mode (every sequence judged as a dense case of its own). Refusals and machine-code checks
run on the CPU; the oracle cases need an sm_90 GPU."""
import pytest
import torch

from compare import backends, oracle
from cuda_impl import sass
from conftest import hopper_or_skip

# Lengths cross the 128-row query tiles (two consumers at every head_dim, as the local kernels) and the 128-key
# (80 at d256) tiles, sequences without queries or keys sit between others, and the longest is far from the rest.
CASES = [
    oracle.VarlenCase((5, 300, 1, 129), (9, 300, 700, 128), 4, 2, 128),
    oracle.VarlenCase((128, 0, 257, 64), (128, 40, 0, 1000), 8, 2, 64, fmt="fp16"),         # empty q / k sets
    oracle.VarlenCase((700, 33, 1), (700, 20, 900), 2, 2, 256, causal=True),                 # Sq > Sk in one
    oracle.VarlenCase((1, 2, 3, 4, 5, 6, 7, 2000), (1, 2, 3, 4, 5, 6, 7, 2000), 4, 4, 128, causal=True),
    oracle.VarlenCase((400, 90), (1200, 90), 4, 1, 64, causal=True, window=(100, -1)),
    oracle.VarlenCase((333, 512), (333, 777), 2, 2, 128, window=(64, 32), softcap=20.0, dist="large"),
    oracle.VarlenCase((160, 80, 240), (160, 400, 240), 6, 3, 256, fmt="fp16", softcap=5.0),
    oracle.VarlenCase(tuple([37] * 40), tuple([53] * 40), 2, 1, 64),                         # many short ones
]


def test_varlen_cases_are_in_the_hopper_declaration():
    assert backends.get("cuda:hopper").varlen
    assert not backends.get("cuda:v5").varlen and not backends.get("cuda:decode").varlen


def test_refusals_name_the_constraint():
    import cuda_impl
    case = oracle.VarlenCase((3, 5), (4, 6), 2, 2, 64, fmt="fp16")
    inputs = oracle.make_varlen_inputs(case)
    args = (inputs.q, inputs.k, inputs.v, inputs.cu_seqlens_q, inputs.cu_seqlens_k, 5, 6)
    with pytest.raises(NotImplementedError, match="'v5' takes no packed batches; the variants that do: \\['hopper'\\]"):
        cuda_impl.attention_varlen(*args, variant="v5")
    with pytest.raises(TypeError, match="cu_seqlens_q must be int32"):
        cuda_impl.attention_varlen(*args[:3], inputs.cu_seqlens_q.long(), *args[4:])
    with pytest.raises(TypeError, match="bfloat16 and float16"):
        cuda_impl.attention_varlen(*(x.float() for x in args[:3]), *args[3:])
    for d, dv, got in ((100, 100, "100"), (128, 64, "Q/K 128 with V 64")):
        bad = oracle.make_varlen_inputs(oracle.VarlenCase((3,), (4,), 2, 2, d, fmt="fp16", head_dim_v=dv))
        with pytest.raises(ValueError, match=f"head_dim: variant hopper supports multiples of 8 from 32 to 256, or "
                                             f"Q/K 192 with V 128, got {got}"):
            cuda_impl.attention_varlen(bad.q, bad.k, bad.v, bad.cu_seqlens_q, bad.cu_seqlens_k, 3, 4)
    with pytest.raises(ValueError, match="window"):
        cuda_impl.attention_varlen(*args, window=(3, -2))
    with pytest.raises(ValueError, match="device"):  # checked like any hopper call: CPU tensors are refused
        cuda_impl.attention_varlen(*args)


# --- machine code (CPU) ---------------------------------------------------------------------------

# (head_dim, BLOCK_KV, consumers) of the local kernels, and of the plain ones a varlen launch without a window or cap
# takes (no cluster), whose varlen twins these are.
LOCAL_KERNELS = [(64, 128, 2), (96, 96, 2), (128, 128, 0), (192, 112, 0), (256, 80, 0)]
PLAIN_KERNELS = [(64, 128, 0), (64, 128, 2), (80, 96, 0), (80, 96, 2), (96, 96, 0), (128, 128, 0), (128, 176, 0),
                 (192, 112, 0), (256, 80, 0)]


@pytest.fixture(scope="module")
def twin_loops(fa_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    functions = sass.dump_sass(fa_library, with_addresses=True)
    loops = {}
    for fmt, mangled in (("bf16", "13__nv_bfloat16"), ("fp16", "6__half")):
        for local, kernels in ((1, LOCAL_KERNELS), (0, PLAIN_KERNELS)):
            for head_dim, block_kv, consumers in kernels:
                for varlen in (0, 1):
                    tag = (f"fwd_hopper_kernelI{mangled}Li{head_dim}ELi{block_kv}ELi1ELi{consumers}ELb{local}"
                           f"ELb{varlen}E")
                    (found,) = [ins for (arch, fn), ins in functions.items() if arch == "sm_90" and tag in fn]
                    loops[fmt, local, (head_dim, block_kv, consumers), varlen] = sass.opcode_counts(
                        sass.steady_loop(found))
    return loops


# Spill instructions a varlen kernel's steady KV loop may hold (their spill bytes: tests/test_cuda_build.py
# KNOWN_SPILLS): the local d256 twin's consumers, with O alone 128 of their 240 registers, spill in the loop (the
# sequence bounds the dense kernels read from the constant bank are registers here); no other loop does.
LOOP_SPILLS = {(1, (256, 80, 0)): 10}


def test_varlen_steady_loops_spill_only_where_known(twin_loops):
    for (fmt, local, kernel, varlen), ops in twin_loops.items():
        spills = sum(n for op, n in ops.items() if op.startswith(("STL", "LDL")))
        assert spills <= (LOOP_SPILLS.get((local, kernel), 0) if varlen else 0), (fmt, local, kernel, varlen)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("local, kernel", [(1, k) for k in LOCAL_KERNELS] + [(0, k) for k in PLAIN_KERNELS])
def test_varlen_loop_is_its_twins_loop(twin_loops, fmt, local, kernel):
    """A varlen kernel's KV loop issues its twin's GEMMs, exponentials and caps: the sequence bounds change where a
    walk starts and stops, not what a step computes."""
    dense, varlen = twin_loops[fmt, local, kernel, 0], twin_loops[fmt, local, kernel, 1]
    for family in ("HGMMA", "MUFU.EX2", "MUFU.TANH"):
        count = lambda ops: sum(n for op, n in ops.items() if op.startswith(family))  # noqa: E731
        assert count(varlen) == count(dense), (family, dense, varlen)
    assert sum(n for op, n in varlen.items() if op.startswith("HGMMA")) > 0


# --- the oracle on the GPU (skipped without an sm_90 one) ------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.shape_str() for c in CASES])
def test_gpu_hopper_varlen_matches_the_oracle(case):
    hopper_or_skip()
    import cuda_impl
    verdict = oracle.check_varlen(cuda_impl.attention_varlen, case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
def test_gpu_varlen_repeats_and_each_sequence_is_its_own():
    """A batch gives the same bits twice, and each of its sequences the bits it gives packed alone (an item reads
    only its own sequence's rows, whatever lies around them)."""
    hopper_or_skip()
    import cuda_impl
    case = oracle.VarlenCase((300, 1000, 77), (300, 1500, 900), 4, 2, 128, causal=True)
    inputs = oracle.make_varlen_inputs(case, device="cuda")
    kw = inputs.kwargs(case)
    out = cuda_impl.attention_varlen(inputs.q, inputs.k, inputs.v, **kw)
    assert torch.equal(out, cuda_impl.attention_varlen(inputs.q, inputs.k, inputs.v, **kw))
    starts_q, starts_k = inputs.cu_seqlens_q.tolist(), inputs.cu_seqlens_k.tolist()
    for b, (sq, sk) in enumerate(zip(case.seqlens_q, case.seqlens_k)):
        q = inputs.q[starts_q[b]:starts_q[b] + sq]
        k, v = (x[starts_k[b]:starts_k[b] + sk] for x in (inputs.k, inputs.v))
        offsets = [torch.tensor([0, n], dtype=torch.int32, device="cuda") for n in (sq, sk)]
        alone = cuda_impl.attention_varlen(q, k, v, *offsets, sq, sk, causal=True)
        assert torch.equal(alone, out[starts_q[b]:starts_q[b] + sq]), b
