"""MLA decode in cuda_impl (csrc/fwd_mla_decode.cu): Q/K head_dim 576 against one latent cache whose first 512
columns are V, through cuda_impl.attention_mla_decode and attention_with_kvcache, held to
compare.oracle.check_kvcache (KVCase.latent: v_cache a view of k_cache, the fp64 reference on the gathered pages).

CPU part: both kernels are built for every target without spills; the mma.sync kernel's machine code holds
mma.sync, ldmatrix (plain and .trans: V from K's rows) and cp.async and no local memory, the wgmma kernel's
(fwd_mla_decode_wgmma.cu, sm_90a) both products as HGMMA (S m64n64, P V m64n256), cp.async on mbarriers; the shape table;
bad parameters come back as messages; the refusals (an e4m3 cache, a V that is not K's view, a window) and the
registry's latent-only pairs.
GPU part (skipped without one): the oracle over head counts 8-128 (all three tile shapes: 16 and 32 rows of the
mma.sync kernel, 64 of the wgmma one on sm_90), Sq 1-4 with causal, odd, empty and mixed lengths, pages 16-256
and a contiguous cache, hostile block tables, forced and heuristic splits; poison of a bad sequence only;
split_size batch invariance; determinism; CUDA graphs.
"""

from __future__ import annotations

import ctypes

import hypothesis
import pytest
import torch

from compare import backends, fuzz, kvcache, oracle
from cuda_impl import _lib, sass, toolchain

KV = oracle.KVCase
MLA = dict(head_dim=576, head_dim_v=512, latent=True)
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


# --- build and machine code (CPU) ----------------------------------------------------------


def _mla_rows():
    return [r for r in toolchain.ptxas_report(_lib.library_spec()) if r["kernel"].startswith("fwd_mla_decode")
            or r["kernel"].endswith(",512>")]


def test_the_mla_kernels_build_for_every_target_without_spills(fa_library):
    archs: dict[str, set] = {}
    for r in _mla_rows():
        archs.setdefault(r["kernel"], set()).add(r["arch"])
        assert max(r["stack"], r["spill_stores"], r["spill_loads"]) == 0, r
    expected = {f"sm_{t}" for t in toolchain.ARCH_TARGETS}
    for fmt in ("bf16", "fp16"):
        for name in (f"fwd_mla_decode_kernel<{fmt},rows16>", f"fwd_mla_decode_kernel<{fmt},rows32>",
                     f"fwd_mla_decode_wgmma_kernel<{fmt}>", f"fwd_decode_merge_kernel<{fmt},512>"):
            assert archs.get(name) == expected, name


@pytest.mark.parametrize("fmt, mangled", [("bf16", "I13__nv_bfloat16"), ("fp16", "I6__half")])
def test_the_mla_kernel_uses_intended_instructions(fa_library, fmt, mangled):
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    kernels = {key: ins for key, ins in sass.dump_sass(fa_library).items()
               if f"fwd_mla_decode_kernel{mangled}" in key[1]}
    assert len(kernels) == 2 * len(toolchain.ARCH_TARGETS)  # two tile shapes per target
    mma = "HMMA.16816.F32.BF16" if fmt == "bf16" else "HMMA.16816.F32"
    for (arch, fn), instructions in kernels.items():
        ops = sass.opcode_counts(instructions)
        assert ops[mma] > 0 and not any(op.startswith("HMMA") and op != mma for op in ops), (arch, fn)
        assert any(op.startswith("LDGSTS") for op in ops), f"{arch}: no cp.async"
        # Q and K through ldmatrix.x4, V through ldmatrix.x4.trans of the same ring rows
        assert ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.MT88.4"] > 0, arch
        assert not any(op.startswith(("LDL", "STL")) for op in ops), f"{arch}: local memory"


@pytest.mark.parametrize("fmt, mangled", [("bf16", "I13__nv_bfloat16"), ("fp16", "I6__half")])
def test_the_wgmma_kernel_uses_intended_instructions(fa_library, fmt, mangled):
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    code = {arch: ins for (arch, fn), ins in sass.dump_sass(fa_library).items()
            if f"fwd_mla_decode_wgmma_kernel{mangled}" in fn}
    kernels = {arch: sass.opcode_counts(ins) for arch, ins in code.items()}
    assert set(kernels) == {"sm_80", "sm_90"}  # (cuobjdump names the 90a cubin sm_90)
    suffix = ".BF16" if fmt == "bf16" else ""
    ops = kernels["sm_90"]
    # Each group's code is its own: S over 576 columns at N = 64 (36 k-steps), and two P V products of 64 keys (four
    # k-steps of N = 256, its half of O), its own block's P and the other's.
    assert ops[f"HGMMA.64x64x16.F32{suffix}"] == 2 * 36 and ops[f"HGMMA.64x256x16.F32{suffix}"] == 2 * 2 * 4, ops
    # besides them only the empty, predicated-off wgmma (!UPT) that closes the commit group group 0 cuts after S's
    # own and rope panels, to wait for the last pair's P_B V_B there (FlashMLA's order)
    others = [i for i in code["sm_90"] if i.startswith("HGMMA") and "x64x16" not in i and "x256x16" not in i]
    assert len(others) == 1 and "RZ, gdesc[URZ], RZ, !UPT" in others[0], others
    # whole blocks by TMA, the tail block (and other page sizes) by cp.async arriving on the same panels'
    # mbarriers, waited for per panel; no local memory
    assert any(op.startswith("UTMALDG.4D") for op in ops), ops
    assert any(op.startswith("LDGSTS") for op in ops) and any(op.startswith("ARRIVES.LDGSTSBAR") for op in ops)
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops), ops
    # hand-overs by bar.sync on both sides (racecheck reports bar.arrive hand-overs as races)
    assert ops["BAR.SYNC.DEFER_BLOCKING"] > 0 and not any(op.startswith("BAR.ARV") for op in ops), ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops)
    assert not any(op.startswith("HGMMA") for op in kernels["sm_80"])  # (an empty body there: never launched)


def _wgmma_device() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def test_the_shape_table(fa_library):
    assert _lib.mla_decode_tiles(16) == (32, 16) and _lib.mla_decode_tiles(1) == (32, 16)
    assert _lib.mla_decode_tiles(17) == (32, 32) and _lib.mla_decode_tiles(32) == (32, 32)
    wide = 64 if _wgmma_device() else 32  # the wgmma kernel's tile on sm_90, the mma.sync kernel's elsewhere
    assert _lib.mla_decode_tiles(33) == (wide, wide) and _lib.mla_decode_tiles(256) == (wide, wide)
    for rows in (16, 33):  # every split_size is whole key tiles
        assert kvcache.SPLIT_MULTIPLE % _lib.mla_decode_tiles(rows)[0] == 0


def test_bad_parameters_come_back_as_messages(fa_library):
    fn = _lib._typed_entry(_lib.load(), "cuda_fa_mla_decode", _lib.DecodeParams)
    err = ctypes.create_string_buffer(256)
    good = dict(q=16, k=64, v=64, batch=1, seqlen_q=1, heads_q=16, heads_kv=1, head_dim=576, head_dim_v=512,
                page_size=64, num_pages=4, max_pages=4, num_splits=1, split_keys=256, scale=0.1, dtype=0,
                kv_dtype=0, window_left=-1, window_right=-1)
    for change, word in ((dict(head_dim=128), b"head_dim"), (dict(head_dim_v=256), b"head_dim"),
                         (dict(v=128), b"v_cache"), (dict(kv_dtype=2), b"dtype"), (dict(dtype=5, kv_dtype=5), b"dtype"),
                         (dict(window_left=8), b"window"), (dict(split_keys=48), b"splits"),
                         (dict(scale=0.0), b"scale"), (dict(heads_q=15, heads_kv=2), b"heads")):
        params = _lib.DecodeParams(**{**good, **change})
        assert fn(ctypes.byref(params), None, err, 256) != 0, change
        assert word in err.value, (change, err.value)


# --- refusals and the registry (CPU) ---------------------------------------------------------


def _latent_inputs(**over):
    case = KV(**{**dict(batch=2, heads_q=16, heads_kv=1, seqlen_q=1, cache_seqlens=(40, 7), page_size=16,
                        fmt="bf16", **MLA), **over})
    return case, oracle.make_kvcache_inputs(case)


def test_an_e4m3_cache_a_separate_v_and_a_window_are_refused_by_name():
    import cuda_impl
    case, inputs = _latent_inputs(kv_fmt="fp8")
    with pytest.raises(NotImplementedError, match="e4m3"):
        cuda_impl.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case))
    case, inputs = _latent_inputs(latent=False)
    with pytest.raises(ValueError, match="v_cache must be k_cache"):
        cuda_impl.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case))
    case, inputs = _latent_inputs()
    with pytest.raises(NotImplementedError, match="window"):
        cuda_impl.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache, window=(8, 0),
                                         **inputs.kwargs(case))


def test_the_registry_takes_the_pair_only_as_a_latent_cache():
    decode = backends.get("cuda:decode")
    assert decode.head_dim_pairs == ((576, 512),) and decode.latent_pairs_only
    assert "latent" in decode.unsupported_reason(oracle.Case(1, 16, 1, 1, 64, 576, head_dim_v=512))  # dense: no view
    assert decode.unsupported_reason(oracle.Case(1, 16, 1, 1, 64, 128)) is None
    assert not backends.get("triton:decode").latent_pairs_only  # Triton's takes a separate V and an e4m3 cache too


@hypothesis.settings(max_examples=80, deadline=None, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(example=fuzz.kv_examples(backends.get("cuda:decode"), fuzz.PROFILES["gpu"]))
def test_the_fuzzer_draws_the_pair_for_cuda_only_as_a_latent_cache(example):
    case = example.case
    if case.v_dim != case.head_dim:
        assert case.latent and case.kv_fmt == "same", case


# --- on a GPU (skipped without one) ------------------------------------------------------------


def _mla(**split):
    """cuda_impl.attention_mla_decode with check_kvcache's calling convention (v_cache is k_cache's view)."""
    import cuda_impl

    def run(q, k_cache, v_cache, *, return_lse, **kw):
        assert v_cache.data_ptr() == k_cache.data_ptr() and v_cache.shape[-1] == 512
        return cuda_impl.attention_mla_decode(q, k_cache, return_lse=return_lse, **kw, **split)
    return run


GPU_CASES = [
    # 16 heads (one 16-row tile), Sq 1: the memory-bound shape, long and odd lengths, heuristic splits
    (KV(2, 16, 1, 1, (8193, 300), page_size=64, scale=0.072, **MLA), {}),
    (KV(3, 16, 1, 1, (0, 1, 5000), page_size=16, hostile=True, scale=0.072, **MLA), {}),
    # more than 32 rows (the wgmma kernel's 64-row tiles on sm_90, else 32): 64 / 128 heads, Sq 2-4 (speculative
    # tokens) with causal, mixed lengths; 16 heads x Sq 3 a partial tile; 64 heads on pages smaller than a key tile
    (KV(4, 128, 1, 1, (4096, 1000, 0, 777), page_size=64, scale=0.072, **MLA), {}),
    (KV(2, 64, 1, 2, (8193, 31), page_size=64, causal=True, hostile=True, scale=0.072, **MLA), {}),
    (KV(2, 32, 1, 4, (3, 2000), page_size=256, causal=True, fmt="fp16", scale=0.072, **MLA), dict(num_splits=5)),
    (KV(1, 16, 1, 3, (1025,), causal=True, scale=0.072, **MLA), dict(num_splits=1)),             # contiguous
    (KV(2, 128, 1, 2, (700, 2500), capacity=2560, scale=0.072, dist="large", **MLA), dict(split_size=256)),
    (KV(2, 64, 1, 1, (5000, 33), page_size=16, hostile=True, scale=0.072, **MLA), {}),
    # 24 heads: a partial 32-row tile; 8 heads: a partial 16-row one
    (KV(2, 24, 1, 1, (3000, 64), page_size=32, scale=0.072, **MLA), dict(num_splits=40)),
    (KV(2, 8, 1, 1, (3000, 65), page_size=64, fmt="fp16", dist="shifted", scale=0.072, **MLA), {}),
]


@gpu
@needs_gpu
@pytest.mark.parametrize("entry", GPU_CASES, ids=lambda e: e[0].shape_str().replace(" ", "-") + str(e[1]))
def test_gpu_mla_matches_the_oracle(entry):
    case, split = entry
    verdict = oracle.check_kvcache(_mla(**split), case, device="cuda")
    assert verdict.passed, f"{case.shape_str()} {split}: {verdict.summary()}"


def _call(inputs, case, **split):
    return _mla(**split)(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case), return_lse=True)


@gpu
@needs_gpu
@pytest.mark.parametrize("split", [dict(num_splits=1), dict(num_splits=6), {}])
def test_gpu_bad_sequence_is_poisoned_alone(split):
    case = KV(3, 64, 1, 1, (3000, 2000, 1000), page_size=64, hostile=True, scale=0.072, **MLA)
    inputs = oracle.make_kvcache_inputs(case, "cuda")
    clean = _call(inputs, case, **split)
    inputs.block_table[1, 20] = 1 << 30
    out, lse = _call(inputs, case, **split)
    assert out[1].isnan().all() and lse[1].isnan().all()
    keep = torch.tensor([0, 2], device="cuda")
    assert torch.equal(out[keep], clean[0][keep]) and torch.equal(lse[keep], clean[1][keep])


@gpu
@needs_gpu
def test_gpu_deterministic_batch_invariant_and_capturable():
    case = KV(4, 128, 1, 1, (8000, 100, 4097, 3000), page_size=64, scale=0.072, **MLA)
    inputs = oracle.make_kvcache_inputs(case, "cuda")
    first, second = _call(inputs, case), _call(inputs, case)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    batch = _call(inputs, case, split_size=1024)
    import cuda_impl
    alone = cuda_impl.attention_mla_decode(inputs.q[2:3], inputs.k_cache, cache_seqlens=inputs.cache_seqlens[2:3],
                                           block_table=inputs.block_table[2:3], scale=0.072, return_lse=True,
                                           split_size=1024)
    assert torch.equal(alone[0], batch[0][2:3]) and torch.equal(alone[1], batch[1][2:3])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _call(inputs, case)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], first[0]) and torch.equal(captured[1], first[1])
