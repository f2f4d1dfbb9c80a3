"""cuda_impl variant "hopper-fp8" (sm_90a, e4m3 QGMMA on the hopper skeleton).

CPU part: the kernels build without spills or serialised wgmmas, the sm_90a cubin holds QGMMA for
both products (P @ V with A from registers), TMA, the P permutation (e4m3 packs, shuffles) and no
HGMMA; the sm_80 pass compiles the body out; the registry entry and the input checks refuse bad
input before launch with errors naming the constraint. GPU part (skipped without one): the
project oracle (compare.oracle.check) on the cases the pipeline can get wrong.
"""

from __future__ import annotations

import ctypes
import dataclasses

import re

import pytest
import torch

import cuda_impl
from conftest import skip_unless_required
from compare import backends, bench, formats, oracle
from cuda_impl import _lib, toolchain, sass, validate

SPEC = cuda_impl.VARIANTS["hopper-fp8"]


@pytest.fixture(scope="module")
def fp8_sass(fa_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    return {key: ins for key, ins in sass.dump_sass(fa_library).items() if "fwd_hopper_fp8_kernel" in key[1]}


def kernel(functions: dict, arch: str, head_dim: int, permuted_k: bool, schedule: int = 0) -> list[str]:
    """schedule: hopper/config.cuh Fp8Schedule (1 persistent, 2 fed by a counter)."""
    tag = f"kernelILi{head_dim}ELb{int(permuted_k)}ELi{schedule}E"
    (found,) = [ins for (a, fn), ins in functions.items() if a == arch and tag in fn]
    return found


# --- build and machine code (CPU) ----------------------------------------------------------


def test_builds_without_spills_or_serialised_wgmma(fa_library):
    spec = _lib.library_spec()
    rows = [r for r in toolchain.ptxas_report(spec) if r["kernel"].startswith("fwd_hopper_fp8_kernel")]
    assert {(r["kernel"], r["arch"]) for r in rows} >= {
        (f"fwd_hopper_fp8_kernel<fp8,{d}{k}{s}>", "sm_90a")
        for d in SPEC["head_dims"] for k in ("", ",flat-k") for s in (",persistent", ",dynamic")
    }
    for r in rows:
        assert r["stack"] == 0 and r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        if r["arch"] == "sm_90a":  # 384 threads (512 at d64: three consumers), one CTA per SM
            threads = 512 if "<fp8,64" in r["kernel"] else 384
            assert r["registers"] * threads <= 65536, r
    log = (spec.build_dir / "fwd_hopper_fp8.o.log").read_text()
    assert "C7508" not in log, "ptxas ignored setmaxnreg"
    # One kernel is allowed ptxas's serialised wgmmas (C7511, too few registers for the wgmma pipeline): d64's
    # counter-fed causal kernel with K in key order (seqlen_k % 16 != 0; P's keys moved by shuffles) at 160
    # registers. Its GEMMs are waited for one by one anyway (hopper/mainloop_fp8.cuh kv_tiles).
    serialised = set(re.findall(r"\(C751[13]\)[^\n]*'(\S+)'", log))
    assert serialised <= {"_ZN2fa21fwd_hopper_fp8_kernelILi64ELb0ELi2EEEv12Fp8FwdParams14CUtensorMap_stS2_S2_"}, \
        f"ptxas serialised the wgmmas:\n{log}"


@pytest.mark.parametrize("schedule", [1, 2], ids=["persistent", "dynamic"])
@pytest.mark.parametrize("permuted_k", [False, True], ids=["k-in-order", "k-permuted"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_sm90a_machine_code(fp8_sass, head_dim, permuted_k, schedule):
    """The default build's two schedules: persistent CTAs walking a static order (non-causal) and
    persistent CTAs fed by a counter (causal)."""
    instructions = kernel(fp8_sass, "sm_90", head_dim, permuted_k, schedule)
    ops = sass.opcode_counts(instructions)
    # mbarriers: q_full, k_full / v_full / kv_empty per stage of the 4-stage ring (3 stages at d256), q_empty (the
    # producer reloads Q for the next item), and in the counter-fed kernels the four of the item
    # hand-over, whose one atomic takes the next item; at d64 the static walk's one atomic counts the parts of
    # a split unit (hopper/scheduler.cuh; d128 and d256 keep a plain last round)
    dynamic = schedule == 2
    split = not dynamic and head_dim == 64
    stages = 3 if head_dim == 256 else 4
    assert ops["SYNCS.EXCH.64"] == 1 + 3 * stages + 1 + 4 * dynamic
    assert ops.get("ATOMG.E.ADD.STRONG.GPU", 0) == dynamic and ops.get("ATOMG.E.ADD.S32.STRONG.GPU", 0) == split
    assert sum(op.startswith("ATOM") for op in ops) == dynamic + split
    qgmma = [i for i in instructions if i.startswith("QGMMA")]
    qk = [i for i in qgmma if "gdesc" in i.split(",")[1]]  # both operands from shared memory
    pv = [i for i in qgmma if i not in qk]
    # Q K^T: head_dim / 32 k-steps of m64n128k32 per issue (d256: 4 in each 128-byte panel); P V: 128 / 32
    # k-steps of m64n{min(head_dim, 128)}k32 per part of O's columns (d256: two halves), A from registers.
    part = min(head_dim, 128)
    assert qk and all("64x128x32.F32.E4M3.E4M3" in i for i in qk)
    assert len(qk) % (head_dim // 32) == 0
    assert pv and all(f"64x{part}x32.F32.E4M3.E4M3" in i and ", R" in i.split("gdesc")[0] for i in pv)
    assert len(pv) % 4 == 0
    # every tile's P V starts a fresh accumulator (its first k-step does not accumulate: RZ, !UPT) and is added
    # to O outside the QGMMA, whose 14-bit accumulation erred with the keys when it held O itself
    fresh = ["RZ, !UPT" in i for i in pv]
    assert fresh == [k % 4 == 0 for k in range(len(pv))], pv
    # a consumer's GEMMs run one after the other (hopper/mainloop_fp8.cuh kv_tiles): every wait is for all
    # of them, no exp runs under a pending wgmma, and the consumers do not take turns on named barriers
    assert ops["WARPGROUP.DEPBAR.LE"] > 0 and not any("gsb0, 0x1" in i for i in instructions)
    assert sass.exps_under_pending_wgmma(instructions) == 0
    turns = [i for i in instructions if i.lstrip("@!P0123456789 ").startswith("BAR.") and ", 0x100" in i]
    assert not turns, turns
    assert ops["UTMALDG.4D"] > 0, "no TMA tile loads"
    if head_dim == 256:  # Q and K in two panels: the panel offset is a TMA coordinate
        loads = [i for i in instructions if i.startswith("UTMALDG")]
        assert len(loads) >= 2 + 2 + 1, loads
    assert any(op.startswith("F2FP.SATFINITE.E4M3") for op in ops), "P is not packed to e4m3"
    # each e4m3 pair goes straight into its half of a word (sm90::pack_e4m3x4): a zero-extended 16-bit pack
    # (LOP3 ... 0xffff) cost 32 instructions per tile and thread, 4-5% of the d64 kernel's cycles (session 16)
    assert not [i for i in instructions if i.startswith("LOP3") and ", 0xffff," in i]
    # O leaves through shared memory (hopper/epilogue.cuh): head_dim / 16 stmatrix.x4 per copy of the store (the
    # static walk at d64 has two: after a split part's merge and plain); at d256 the three stages leave no room for
    # the staging, and O leaves from the registers
    staged = head_dim <= 128
    assert ops.get("STSM.16.M88.4", 0) == staged * (1 + split) * head_dim // 16
    # one SHFL.IDX broadcasts the warpgroup index at the start (warp-uniform to ptxas), one (static walk) the
    # count of a split unit's parts; the rest permute P
    broadcasts = 1 + split
    if permuted_k:  # K rows arrive key-permuted through a 5-D map; P is packed in place
        assert ops["UTMALDG.5D"] > 0 and ops["SHFL.IDX"] == broadcasts
    else:
        assert ops["SHFL.IDX"] >= broadcasts + 16 and ops["UTMALDG.5D"] == 0, "the P permutation's shuffles are missing"
    assert ops["USETMAXREG.DEALLOC.CTAPOOL"] == 1 and ops["USETMAXREG.TRY_ALLOC.CTAPOOL"] == 1
    # consumers: 240 registers each, 160 at d64 (three of them: 128 x 24 + 384 x 160 <= 65536)
    (alloc,) = [i for i in instructions if i.startswith("USETMAXREG.TRY_ALLOC")]
    consumer_regs = 160 if head_dim == 64 else 240
    assert int(alloc.split(",")[-1].strip(" ;"), 16) == consumer_regs, alloc
    assert max(int(r) for i in instructions for r in re.findall(r"\bR(\d+)\b", i)) < consumer_regs
    assert not any(op.startswith(("HGMMA", "HMMA", "LDGSTS", "LDL", "STL")) for op in ops)


def test_causal_launches_take_the_counter_fed_schedule(fp8_sass):
    """Every head_dim asks Python for a zeroed counter on causal launches, and the library holds no
    one-CTA-per-item kernel: each sm_90a kernel is persistent (",persistent>") or counter-fed (",dynamic>")."""
    lib = _lib.load()
    assert [lib.cuda_fa_hopper_fp8_dynamic_causal(d) for d in (64, 128, 256)] == [1, 1, 1]
    assert not [fn for (_, fn) in fp8_sass if "ELi0E" in fn]
    names = {toolchain.readable_kernel_name(fn) for (arch, fn) in fp8_sass if arch == "sm_90"}
    assert names and all(n.endswith((",persistent>", ",dynamic>")) for n in names), names
    assert {f"fwd_hopper_fp8_kernel<fp8,{d}{k},dynamic>" for d in (64, 128, 256) for k in ("", ",flat-k")} <= names


def test_sm80_build_holds_no_hopper_instructions(fp8_sass):
    ops = sass.opcode_counts(kernel(fp8_sass, "sm_80", 128, True, schedule=2))
    assert not any(op.startswith(("QGMMA", "UTMALDG", "SYNCS")) for op in ops)


def test_c_entry_reports_errors_before_touching_a_device(fa_library):
    lib = _lib.load()
    fn = lib.cuda_fa_fwd_hopper_fp8
    fn.restype = ctypes.c_int
    err = ctypes.create_string_buffer(256)
    base = dict(batch=1, heads_q=1, heads_kv=1, seqlen_q=4, seqlen_k=4, scale=1.0)
    cases = [
        (_lib.FwdParams(head_dim=128, dtype=0, **base), b"dtype"),  # bf16 code
        (_lib.FwdParams(head_dim=96, dtype=_lib.E4M3_CODE, **base), b"descale"),
    ]
    for params, word in cases:
        fp = _lib.Fp8FwdParams(base=params)
        assert fn(ctypes.byref(fp), None, err, 256) != 0
        assert word in err.value, err.value
    lib.cuda_fa_fp8_params_size.restype = ctypes.c_int
    assert lib.cuda_fa_fp8_params_size() == ctypes.sizeof(_lib.Fp8FwdParams)


# --- registry and validation (CPU) -----------------------------------------------------------


def test_registry_entry():
    assert SPEC["formats"] == ("fp8",) and SPEC["head_dims"] == (64, 128, 256)
    assert SPEC["min_cc"] == SPEC["max_cc"] == (9, 0)
    assert ((9, 0), (9, 0), ("fp8",), "hopper-fp8") in cuda_impl.DEFAULT_VARIANTS
    backend = backends.get("cuda:hopper-fp8")
    assert backend.ceiling_for("fp8") == "wgmma.e4m3"
    assert backend.unsupported_reason(oracle.Case(1, 2, 2, 64, 64, 128, fmt="fp8")) is None
    assert "format" in backend.unsupported_reason(oracle.Case(1, 2, 2, 64, 64, 128, fmt="bf16"))
    if not torch.cuda.is_available():
        assert "GPU" in cuda_impl.unavailable_reason("hopper-fp8")


def quantized(d=64, sq=40, sk=40, hq=2, hkv=2, fmt="fp8"):
    q = torch.randn(1, hq, sq, d)
    k, v = torch.randn(1, hkv, sk, d), torch.randn(1, hkv, sk, d)
    return formats.quantize_attention_inputs(q, k, v, fmt)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: quantized(d=96), ValueError, "head_dim"),
        (lambda: quantized(d=192), ValueError, "head_dim"),
        (lambda: quantized(hq=3, hkv=2), ValueError, "heads"),
        # V not transposed: P @ V would need an MN-major fp8 operand, which wgmma cannot read
        (lambda: (*quantized()[:2], formats.quantize(torch.randn(1, 2, 40, 64), "fp8")), ValueError, "layout"),
        (lambda: (quantized()[0], torch.randn(1, 2, 40, 64), quantized()[2]), TypeError, "QuantTensor"),
        (lambda: (*quantized()[:2], dataclasses.replace(quantized()[2], scale=torch.ones(1, 2, dtype=torch.float64))),
         ValueError, "descale"),
        (lambda: quantized(), ValueError, "device"),  # CPU tensors
    ],
)
def test_bad_input_is_refused_before_launch(make, error, match):
    q, k, v = make()
    with pytest.raises(error, match=match):
        cuda_impl.attention(q, k, v, variant="hopper-fp8")


def test_format_and_variant_mismatches_name_the_format():
    q, k, v = quantized()
    with pytest.raises(TypeError, match="format: variant v5"):
        cuda_impl.attention(q, k, v, variant="v5")
    with pytest.raises(TypeError, match="format: variant hopper-fp8 supports \\('fp8',\\), got q in mxfp8"):
        cuda_impl.attention(*quantized(fmt="mxfp8"), variant="hopper-fp8")
    plain = tuple(torch.randn(1, 2, 16, 64, dtype=torch.bfloat16) for _ in range(3))
    with pytest.raises(TypeError, match="supports \\('fp8',\\)"):
        cuda_impl.attention(*plain, variant="hopper-fp8")


@pytest.mark.parametrize(
    "capability, refused", [((8, 0), True), ((8, 9), True), ((9, 0), False), ((10, 0), True), ((12, 0), True)]
)
def test_arch_range(capability, refused):
    problem = validate.arch_problem("hopper-fp8", SPEC, capability)
    assert (problem is not None) == refused
    if refused:
        assert problem.startswith("arch:") and "sm_90" in problem


# --- GPU: the project oracle ----------------------------------------------------------------

GPU_CASES = [
    # b, hq, hkv, sq, sk, d, causal, dist: chosen for the pipeline and the V^T re-pad. Contiguous K
    # with sk % 16 == 0 takes the key-permuted K tiles, other lengths the in-order ones.
    (1, 2, 2, 128, 256, 128, False, "normal"),  # the S(t+1) / P(t) V(t) overlap once
    (2, 4, 2, 300, 1040, 128, True, "normal"),  # permuted K, GQA; the last tile runs into the next head
    (1, 4, 4, 1000, 1504, 64, False, "large"),  # permuted K at d64 (three consumers), a partial last tile
    (2, 4, 4, 200, 333, 64, True, "normal"),  # tails; Sk % 16 != 0 re-pads V^T
    (1, 4, 4, 300, 97, 128, True, "shifted"),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 128, True, "large"),  # GQA, many ring rounds (odd and even tile counts)
    (2, 8, 1, 64, 1100, 64, False, "normal"),  # MQA
    (3, 2, 2, 65, 1, 128, False, "normal"),  # one key
    # non-causal: more items than the 132 SMs, so persistent CTAs take two or three each and the ring,
    # the Q buffer and their barrier phases run on across items (tails, GQA, odd and even tile counts)
    (4, 8, 4, 1000, 1200, 128, False, "normal"),
    (2, 16, 8, 2000, 1500, 64, False, "shifted"),  # (352 items on 132 CTAs: the last round split, 88 items)
    (3, 16, 4, 700, 1999, 64, False, "normal"),  # d64's last round split: 60 items of 16 tiles over 132 CTAs
    # d256: Q and K tiles in two 128-byte panels, P V as m64n256k32, a 3-stage ring
    (1, 2, 2, 128, 256, 256, False, "normal"),
    (2, 4, 2, 300, 1040, 256, True, "normal"),  # permuted K, GQA, the last tile into the next head
    (2, 4, 4, 200, 333, 256, True, "shifted"),  # in-order K, tails, V^T re-padded
    (1, 4, 4, 300, 97, 256, True, "normal"),  # Sq > Sk
    (4, 8, 4, 1000, 1200, 256, False, "large"),  # 256 items: persistent CTAs take two
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_CASES, ids=lambda s: "x".join(map(str, s[:6])) + ("c" if s[6] else "") + s[7])
def test_matches_oracle(shape):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper-fp8", cuda_impl.unavailable_reason("hopper-fp8"))
    b, hq, hkv, sq, sk, d, causal, dist = shape
    case = oracle.Case(b, hq, hkv, sq, sk, d, causal=causal, fmt="fp8", dist=dist, seed=sq + sk)
    verdict = oracle.check(backends.get("cuda:hopper-fp8"), case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 256])
def test_counter_fed_causal_schedule_under_repeats_and_graph_replays(d):
    """Causal CTAs take items from a counter that each launch zeroes first: with more items than SMs,
    every launch -- eager, repeated, and replays of one captured CUDA graph (the driver times those) --
    must write every row, and the same bits each time (an item's rows come from one CTA whichever takes
    it). A counter left at the last launch's value would end the CTAs after their first item and leave
    the NaN poison."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper-fp8", cuda_impl.unavailable_reason("hopper-fp8"))
    assert _lib.load().cuda_fa_hopper_fp8_dynamic_causal(d)
    # 4 x 16 heads x 9 query tiles = 576 items on 132 SMs; 1104 keys: whole 16-byte V^T rows for TMA
    # (no re-padding), K tiles key-permuted; a tail Q tile
    case = oracle.Case(4, 16, 16, 1104, 1104, d, causal=True, fmt="fp8", seed=d)
    inputs = oracle.make_inputs(case, "cuda")
    qq, kq, vq = inputs.q, inputs.k, inputs.v
    lse = torch.empty(qq.shape[:-1], dtype=torch.float32, device="cuda")

    def launch(out, flags=()):
        _lib.launch_forward_fp8("hopper-fp8", qq.data, kq.data, vq.data, qq.scale, kq.scale, vq.scale, out, lse,
                                causal=True, scale=case.softmax_scale, extra_flags=flags)
        return out

    eager = launch(torch.full(qq.shape, float("nan"), dtype=torch.bfloat16, device="cuda"))
    verdict = oracle.judge(eager, lse, inputs, case)
    assert verdict.passed, verdict.summary()
    for _ in range(2):
        assert torch.equal(launch(torch.full_like(eager, float("nan"))), eager)
    out = torch.full_like(eager, float("nan"))
    # the driver's capture: warm-up, capture, and one NaN-poisoned replay equal to an eager call
    graph, why = bench.capture_graph(lambda: launch(out))
    assert graph is not None, why
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 16, 4, 700, 1999), (2, 16, 8, 2000, 1500)])
def test_split_last_round_gives_the_same_bits_on_every_call(shape):
    """d64's split last round (hopper/scheduler.cuh; 60 items of 16 tiles and 88 of 12 over 132 CTAs, from
    GPU_CASES): whichever part of a unit finishes last merges the parts in the same order, so repeated calls
    and the driver's graph replays give the same output and LSE bit for bit."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper-fp8", cuda_impl.unavailable_reason("hopper-fp8"))
    case = oracle.Case(*shape, 64, causal=False, fmt="fp8", seed=7)
    inputs = oracle.make_inputs(case, "cuda")

    def launch():  # the public path: it re-pads V^T's rows of 1999 / 1500 keys to 16 bytes for TMA
        return cuda_impl.attention(inputs.q, inputs.k, inputs.v, scale=case.softmax_scale, return_lse=True)

    first, first_lse = launch()
    for _ in range(20):  # completion order varies from call to call; the bits must not
        out, lse = launch()
        assert torch.equal(out, first) and torch.equal(lse, first_lse)
    graph, why = bench.capture_graph(launch)
    assert graph is not None, why


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 256])
def test_strided_k_takes_the_in_order_tiles_and_matches_oracle(d):
    """K stored (B, Sk, H, D) and viewed (B, H, Sk, D): its rows do not form one sequence over the
    heads, so the kernel loads K tiles in key order and moves P's keys with shuffles; both the
    strided and the contiguous run pass the oracle and agree."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper-fp8", cuda_impl.unavailable_reason("hopper-fp8"))
    case = oracle.Case(2, 4, 2, 200, 512, d, causal=True, fmt="fp8", seed=d)
    runs = {}
    for layout in ("contiguous", "strided"):
        def fn(q, k, v, layout=layout, **kw):
            if layout == "strided":
                k = dataclasses.replace(k, data=k.data.transpose(1, 2).contiguous().transpose(1, 2))
                assert k.data.stride(1) == d  # heads d bytes apart, keys heads * d apart
            runs[layout] = cuda_impl.attention(q, k, v, **kw)
            return runs[layout]
        verdict = oracle.check(fn, case, device="cuda")
        assert verdict.passed, f"{layout}: {verdict.summary()}"
    # the same P and products; only the order of the fp32 sums inside the wgmma may differ
    # (fp32 sums in another order round to the same bf16 or a neighbour: at most one bf16 ulp, 2**-7 of |out|,
    # plus fp32 noise)
    out_c, out_s = runs["contiguous"][0].float(), runs["strided"][0].float()
    one_ulp = 2**-7 * torch.maximum(out_c.abs(), out_s.abs()) + 1e-5 * out_c.abs().max()
    excess = ((out_c - out_s).abs() - one_ulp).max().item()
    assert excess <= 0, f"strided and contiguous differ by more than one bf16 ulp (by {excess:.3g} beyond it)"
