"""cuda_impl variant "hopper" (sm_90a: TMA + mbarriers + wgmma, warp-specialised).

CPU part: the library builds, the sm_90a cubin holds the instructions the design rests on
(HGMMA for both products, the P @ V one with a transposed shared B; UTMALDG, multicast in the
two-CTA cluster kernels; mbarrier SYNCS; setmaxnreg in both directions), ptxas neither spills nor
ignores setmaxnreg, and bad input is refused before launch.
GPU part (skipped without one): float64 reference over the cases the TMA / barrier protocol can
get wrong: tails, several ring rounds, causal with Sq != Sk both ways, GQA, head dims 64 / 80 / 96 / 128 / 192 / 256
and both dtypes.
"""

from __future__ import annotations

import ctypes
import math
import re

import pytest
import torch

import cuda_impl
from conftest import skip_unless_required
from test_cuda_build import KNOWN_SPILLS
from compare import bench
from cuda_impl import _lib, toolchain, sass, validate

MANGLED_DTYPE = {"bf16": "I13__nv_bfloat16", "fp16": "I6__half"}
HGMMA_SUFFIX = {"bf16": ".BF16", "fp16": ""}
SPEC = cuda_impl.VARIANTS["hopper"]


@pytest.fixture(scope="module")
def hopper_sass_addressed(fa_library) -> dict:
    """{(arch, function): [(address, instruction), ...]} of the hopper kernels: one cuobjdump run per module."""
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    functions = sass.dump_sass(fa_library, with_addresses=True)
    return {(arch, fn): ins for (arch, fn), ins in functions.items() if "fwd_hopper_kernel" in fn}


@pytest.fixture(scope="module")
def hopper_sass(hopper_sass_addressed) -> dict:
    return {key: [text for _, text in ins] for key, ins in hopper_sass_addressed.items()}


# (head_dim, BLOCK_KV, CTAs per cluster, consumer warpgroups) instantiations: non-causal d128 takes 176 keys per
# tile, d192 112 and d256 80 (O is 96 / 128 registers per consumer thread), d80 and d96 96 (d64's choices,
# hopper_tile_dim, in panels of 32- / 64-byte rows), the rest 128. Non-causal d128-d256 also run in clusters of two
# CTAs that share each K/V tile through TMA multicast. Consumers 0: the head_dim's own (three at d64-d96, else two);
# short causal d64-d96 rows run on two (128-row items).
SHAPES = [(64, 128, 1, 0), (64, 128, 1, 2), (80, 96, 1, 0), (80, 96, 1, 2), (96, 96, 1, 0), (96, 96, 1, 2),
          (128, 128, 1, 0), (128, 176, 1, 0), (192, 112, 1, 0), (256, 80, 1, 0), (128, 176, 2, 0),
          (192, 112, 2, 0), (256, 80, 2, 0), (128, 128, 2, 0)]
WIDE = (192, 256)  # hopper_wide: lazy rescale, the retire at the top of the step, the pinned shared base
STAGED = (64, 128)  # O through shared memory (rows of a multiple of 128 bytes)


def panels(head_dim: int) -> int:
    """Panels of a Q/K/V row in shared memory (hopper_swizzle): 64 columns, or 32 at d96, 16 at d80."""
    return head_dim // (64 if head_dim % 64 == 0 else 32 if head_dim % 32 == 0 else 16)


def kernel_name(fmt: str, head_dim: int, block_kv: int, cluster: int, consumers: int) -> str:
    return (f"fwd_hopper_kernel<{fmt},{head_dim},{block_kv}" + (f",cluster{cluster}" if cluster > 1 else "")
            + (f",consumers{consumers}" if consumers else "") + ">")


def mangled_tag(fmt: str, head_dim: int, block_kv: int, cluster: int = 1, consumers: int = 0) -> str:
    # (Lb0ELb0E: the plain kernels; their local-launch twins, Lb1ELb0E, are tests/test_cuda_local.py's, and those
    # twins' varlen ones, Lb1ELb1E, tests/test_cuda_varlen.py's)
    return f"fwd_hopper_kernel{MANGLED_DTYPE[fmt]}Li{head_dim}ELi{block_kv}ELi{cluster}ELi{consumers}ELb0ELb0E"


def kernel(functions: dict, arch: str, fmt: str, head_dim: int, block_kv: int, cluster: int = 1,
           consumers: int = 0) -> list[str]:
    """Instructions of one instantiation; cuobjdump names the sm_90a cubin "sm_90"."""
    tag = mangled_tag(fmt, head_dim, block_kv, cluster, consumers)
    (found,) = [ins for (a, fn), ins in functions.items() if a == arch and tag in fn]
    return found


# --- build and machine code (CPU) ----------------------------------------------------------


def test_hopper_kernels_build_without_spills_or_ignored_setmaxnreg(fa_library):
    spec = _lib.library_spec()
    rows = [r for r in toolchain.ptxas_report(spec) if r["kernel"].startswith("fwd_hopper_kernel")]
    names = {(r["kernel"], r["arch"]) for r in rows}
    for fmt in SPEC["formats"]:
        for shape in SHAPES:
            assert (kernel_name(fmt, *shape), "sm_90a") in names
    for r in rows:
        if (r["arch"], r["kernel"]) in KNOWN_SPILLS:
            continue  # the varlen kernels' and the d80 local kernel's spills, each bounded there
        assert max(r["stack"], r["spill_stores"], r["spill_loads"]) == 0, r
        if r["arch"] == "sm_90a":
            # 384 threads (512 at d64-d96: three consumers, but for their two-consumer kernels), one CTA per SM:
            # the entry cap must leave the pool setmaxnreg shares.
            head_dim = int(r["kernel"].split(",")[1])  # fwd_hopper_kernel<type,DIM,BLOCK_KV,...>
            three = head_dim in (64, 80, 96) and "consumers2" not in r["kernel"]
            threads = 512 if three else 384
            assert r["registers"] * threads <= 65536, r
    log = (spec.build_dir / "fwd_hopper.o.log").read_text()
    assert "C7508" not in log, "ptxas ignored setmaxnreg"
    assert "wgmma" not in log.lower(), f"ptxas warned about wgmma:\n{log}"
    # C7519 (warpgroup.arrive injected) / C7520 (wgmmas serialised): a branch or a register
    # touched between a wgmma and its wait would silently undo the overlap.
    assert "C751" not in log and "C752" not in log, f"ptxas changed the wgmma pipeline:\n{log}"


# The loops that move three values to uniform registers per tile: the two-consumer d80 / d96 kernels (short causal
# rows; their three-consumer twins have none), beside about 400 instructions a tile and warp.
R2UR_IN_LOOP = {(80, 96, 1, 2): 3, (96, 96, 1, 2): 3}


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim, block_kv, cluster, consumers", SHAPES)
def test_kv_tile_loop_builds_descriptors_in_uniform_registers(hopper_sass_addressed, fmt, head_dim, block_kv,
                                                               cluster, consumers):
    """Each GEMM advances one shared-memory descriptor per operand (sm90::desc_advance) and the warpgroup
    index is warp-uniform to ptxas, so the loop has no descriptor rebuilt from vector registers per wgmma
    (session 12: 597 -> 512 instructions per tile and warp at d128); the loop issues both GEMMs of a tile."""
    tag = mangled_tag(fmt, head_dim, block_kv, cluster, consumers)
    (addressed,) = [ins for (arch, fn), ins in hopper_sass_addressed.items() if arch == "sm_90" and tag in fn]
    loop = sass.steady_loop(addressed)
    ops = sass.opcode_counts(loop)
    wgmma = sum(n for op, n in ops.items() if op.startswith("HGMMA"))
    assert wgmma == head_dim // 16 + block_kv // 16, ops  # S(t) and P(t-1) V(t-1)
    # no vector-to-uniform moves (the d256 cluster loop had 14 per tile, its Q descriptors built in vector registers,
    # until its steps read the shared base anew: PIN_BASE, session 18), but for the short causal d80 / d96 kernels'
    # three a tile
    assert ops["R2UR"] == R2UR_IN_LOOP.get((head_dim, block_kv, cluster, consumers), 0), ops


# Head dims whose KV loop runs the tiles that need no mask in a copy of the step without the mask branch
# (HopperTiles::UNMASKED_LOOP): there the wait for P(t-1) V(t-1) stays inside softmax(t) (docs/design/hopper.md, the UNMASKED_LOOP row).
UNMASKED_LOOP = {128}

# Kernels whose steps read the shared base anew (HopperTiles::PIN_BASE): d192 and d256 (the 176-key d128 kernels were
# pinned too until their mask-free loop measured faster without it).
PINNED = {(192, 112), (256, 80)}


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim, block_kv, cluster, consumers", SHAPES)
def test_pinned_loops_rebuild_the_shared_base_and_interleave_s(hopper_sass_addressed, fmt, head_dim, block_kv,
                                                               cluster, consumers):
    """Where a step reads the shared base anew, ptxas rebuilds it in the loop (S2UR of the CTA id) and issues the S
    wgmmas between their descriptor arithmetic, not back to back (docs/design/hopper.md, the PIN_BASE row: the loops compiled
    the other way were the slower ones; the 176-key d128 loops were pinned too until session 19's mask-free loop)."""
    if (head_dim, block_kv) not in PINNED:
        pytest.skip("not pinned: its loop keeps the base it has")
    tag = mangled_tag(fmt, head_dim, block_kv, cluster, consumers)
    (addressed,) = [ins for (arch, fn), ins in hopper_sass_addressed.items() if arch == "sm_90" and tag in fn]
    loop = sass.steady_loop(addressed)
    assert sass.opcode_counts(loop)["S2UR"] >= 1
    assert sass.back_to_back_ss_wgmmas(loop) <= 2


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim, block_kv, cluster, consumers", SHAPES)
def test_sm90a_machine_code(hopper_sass, fmt, head_dim, block_kv, cluster, consumers):
    instructions = kernel(hopper_sass, "sm_90", fmt, head_dim, block_kv, cluster, consumers)
    ops = sass.opcode_counts(instructions)
    suffix = HGMMA_SUFFIX[fmt]
    # S = Q K^T (head_dim / 16 k-steps of m64n{block_kv}k16) is issued for tile 0 and in each copy of the loop's
    # step; O += P V (block_kv / 16 k-steps of m64n{head_dim}k16) in each copy and for the last tile. d128 runs two
    # copies: the tiles that need no mask, then the rest (HopperTiles::UNMASKED_LOOP).
    copies = 2 if head_dim in UNMASKED_LOOP else 1
    s_steps, pv_steps = (1 + copies) * head_dim // 16, (1 + copies) * block_kv // 16
    hgmma = {f"HGMMA.64x{block_kv}x16.F32{suffix}": s_steps}
    pv = f"HGMMA.64x{head_dim}x16.F32{suffix}"
    hgmma[pv] = hgmma.get(pv, 0) + pv_steps
    assert {op: n for op, n in ops.items() if op.startswith("HGMMA")} == hgmma
    transposed_b = [i for i in instructions if i.startswith("HGMMA") and "tnspB" in i]
    assert len(transposed_b) == pv_steps, "P @ V: A from registers, V via the MN-major descriptor"
    assert all(", R" in i.split("gdesc")[0] for i in transposed_b), "P @ V must take A from registers"
    # One wgmma.fence per batch (tile 0, each loop copy, last P V): none injected by ptxas. A loop copy waits
    # for S(t) alone (DEPBAR.LE 1); waits: tile 0's S and its retire, each copy's S and retire, the last P V.
    assert ops["WARPGROUP.ARRIVE"] == 2 + copies
    waits = [i for i in instructions if i.startswith("WARPGROUP.DEPBAR")]
    assert sum("gsb0, 0x1" in i for i in waits) == copies and len(waits) == 3 + 2 * copies, waits
    if head_dim in WIDE:  # retire at the top of the next step: every exp runs under P(t-1) V(t-1)
        assert sass.exps_under_pending_wgmma(instructions) == block_kv // 2 + 2  # every p, both alphas
    elif head_dim in UNMASKED_LOOP:  # in the mask-free copy ptxas leaves part of the softmax under its own P V
        assert sass.exps_under_pending_wgmma(instructions) >= 8
    else:  # after the mask branch ptxas hoists the wait for P V to the start of the softmax (session 6)
        assert sass.exps_under_pending_wgmma(instructions) == 0
    # Ping-pong: named barriers 1 and 2 (256 threads: both consumers), besides __syncthreads.
    named = [i for i in instructions if i.lstrip("@!P0123456789 ").startswith("BAR.") and "0x100" in i]
    assert sum(".ARV" in i for i in named) >= 2 and sum(".SYNC" in i for i in named) >= 2, named
    assert ops["UTMALDG.4D"] > 0, "no TMA tile loads"
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops), "no mbarrier waits"
    assert any(op.startswith("SYNCS.ARRIVE") for op in ops), "no mbarrier arrivals"
    assert ops["USETMAXREG.DEALLOC.CTAPOOL"] == 1 and ops["USETMAXREG.TRY_ALLOC.CTAPOOL"] == 1
    assert not any(op.startswith(("HMMA", "LDGSTS")) for op in ops)
    local = ops.get("STL", 0) + ops.get("LDL", 0)
    assert local == 0, "local memory (spills)"
    # the split last round (d64-d96 and the 176-key d128 kernels): one gpu-scope acq_rel count of a split unit's
    # parts (its fence brings a CGAERRBAR)
    split = int(block_kv == 176 or head_dim in (64, 80, 96))
    # O leaves through shared memory at d64 and d128 (hopper/epilogue.cuh): head_dim / 16 stmatrix.x4 per copy of
    # the store (two where the last round splits: after a split part's merge and plain); d80, d96, d192 and d256
    # store from the registers
    assert ops.get("STSM.16.M88.4", 0) == ((1 + split) * head_dim // 16 if head_dim in STAGED else 0)
    assert ops.get("ATOMG.E.ADD.S32.STRONG.GPU", 0) == split
    if cluster == 1:
        assert not any(op.startswith(("UTMALDG.4D.MULTICAST", "UCGABAR")) for op in ops)
        assert ops.get("CGAERRBAR", 0) == split
        return
    # Q alone, then K and V: this CTA's half of each tile's panels, multicast into both CTAs
    assert ops["UTMALDG.4D"] == panels(head_dim) and ops["UTMALDG.4D.MULTICAST"] == 2 * panels(head_dim)
    # the other CTA's producer hears each K/V release: remote arrivals, one per release site (a K and a V release in
    # each loop copy)
    assert ops["SYNCS.ARRIVE.TRANS64.RED.A1T0"] == (5 if head_dim in WIDE else 4) + 2 * (copies - 1)
    # one cluster barrier after the barrier set-up, and its single CGAERRBAR: a cluster-scope release
    # on the remote arrivals would put one before each of them (7-16% slower, docs/journal/2026-11-29_hopper.md)
    assert ops["UCGABAR_ARV"] == 1 and ops["UCGABAR_WAIT"] == 1 and ops["CGAERRBAR"] == 1 + split


# Q/K 192 with V 128 in dense launches (hopper_narrow_v): kernels of their own, P V at V's 128 columns on 128-key
# tiles, causal and non-causal on one CTA, non-causal in clusters of two.
NARROW_V = [(1, "causal or odd query tiles"), (2, "pairs of query tiles")]


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("cluster, launches", NARROW_V)
def test_narrow_v_kernels_multiply_v_at_its_own_width(hopper_sass, fa_library, fmt, cluster, launches):
    """S at Q/K's 192 columns (12 k-steps of m64n128k16), P V at V's 128 (8 k-steps of m64n128k16, not d192's
    m64n192k16 over 64 zero columns), V in two panels, O 64 registers stored through shared memory."""
    tag = f"fwd_hopper_kernel{MANGLED_DTYPE[fmt]}Li192ELi128ELi{cluster}ELi0ELb0ELb0ELi128E"
    (instructions,) = [ins for (arch, fn), ins in hopper_sass.items() if arch == "sm_90" and tag in fn]
    ops = sass.opcode_counts(instructions)
    suffix = HGMMA_SUFFIX[fmt]
    # tile 0's S, the loop's S and P V, the last P V (one loop copy, as d192)
    assert {op: n for op, n in ops.items() if op.startswith("HGMMA")} == {f"HGMMA.64x128x16.F32{suffix}": 24 + 16}
    transposed_b = [i for i in instructions if i.startswith("HGMMA") and "tnspB" in i]
    assert len(transposed_b) == 16 and all(", R" in i.split("gdesc")[0] for i in transposed_b)
    assert sass.exps_under_pending_wgmma(instructions) == 128 // 2 + 2  # the wide kernels' retire at the top
    assert ops.get("STSM.16.M88.4", 0) == 128 // 16  # O's 128 columns through the staging slots
    assert ops.get("STL", 0) + ops.get("LDL", 0) == 0
    if cluster == 1:  # Q, K: three 64-column panels each, V two
        assert ops["UTMALDG.4D"] == 3 + 3 + 2 and "UTMALDG.4D.MULTICAST" not in ops
    else:  # Q alone; this CTA's half of each K and V panel, multicast into both CTAs
        assert ops["UTMALDG.4D"] == 3 and ops["UTMALDG.4D.MULTICAST"] == 3 + 2
    highest = max(int(r) for i in instructions for r in re.findall(r"\bR(\d+)\b", i))
    assert highest < 240, highest
    name = f"fwd_hopper_kernel<{fmt},192,128" + (",cluster2" if cluster == 2 else "") + ",v128>"
    assert name in {r["kernel"] for r in toolchain.ptxas_report(_lib.library_spec())}


@pytest.mark.parametrize("fmt", SPEC["formats"])
@pytest.mark.parametrize("local, varlen", [(1, 0), (0, 1), (1, 1)])
def test_narrow_v_local_and_varlen_kernels_multiply_v_at_its_own_width(hopper_sass, fmt, local, varlen):
    """Local and varlen launches of Q/K 192 with V 128 take 128-key narrow-V kernels of their own too: every wgmma
    m64n128k16 (S over Q/K's 192 columns, P V over V's 128), none over d192's 192 columns of V."""
    tag = f"fwd_hopper_kernel{MANGLED_DTYPE[fmt]}Li192ELi128ELi1ELi0ELb{local}ELb{varlen}ELi128E"
    (instructions,) = [ins for (arch, fn), ins in hopper_sass.items() if arch == "sm_90" and tag in fn]
    gemms = {op for op in sass.opcode_counts(instructions) if op.startswith("HGMMA")}
    assert gemms == {f"HGMMA.64x128x16.F32{HGMMA_SUFFIX[fmt]}"}, gemms


@pytest.mark.parametrize("head_dim, block_kv, least", [(192, 112, 180), (256, 80, 200)])
def test_wide_tiles_fit_the_consumer_register_budget(hopper_sass, head_dim, block_kv, least):
    """O (96 / 128) + S (56 / 40) + P (28 / 20) per consumer thread at d192 / d256: the highest register the kernel
    touches must stay under setmaxnreg's 240 (ptxas would spill to local memory past it, checked above)."""
    for fmt in SPEC["formats"]:
        instructions = kernel(hopper_sass, "sm_90", fmt, head_dim, block_kv, 1)
        highest = max(int(r) for i in instructions for r in re.findall(r"\bR(\d+)\b", i))
        assert least <= highest < 240, highest  # O, S and P really are all live at once
        # Q, K and V: one 64-column box per panel each
        assert sass.opcode_counts(instructions)["UTMALDG.4D"] == 3 * head_dim // 64


def test_dynamic_causal_scheduler_is_built_where_enabled(hopper_sass, fa_library):
    """The causal kernels of d128 (128-key tiles), the d64-d96 kernels and d192's fetch their causal items from a
    global counter; the non-causal d128 kernels and d256 do not (d256 keeps its static walk: its hand-over state
    would spill).
    Python learns which from the C entry, and zeroes the counter only for those launches."""
    lib = _lib.load()
    assert [lib.cuda_fa_hopper_dynamic_causal(d) for d in (64, 80, 96, 128, 192, 256)] == [1, 1, 1, 1, 1, 0]
    assert [lib.cuda_fa_hopper_dynamic_causal(d) for d in (160, 200)] == [1, 0]  # (their kernels': 192, 256)
    for fmt in SPEC["formats"]:
        for head_dim, block_kv, cluster, consumers in SHAPES:
            ops = sass.opcode_counts(kernel(hopper_sass, "sm_90", fmt, head_dim, block_kv, cluster, consumers))
            atomics = {op for op in ops if op.startswith(("ATOM", "RED"))}
            dynamic = {"ATOMG.E.ADD.STRONG.GPU"} if block_kv == 128 or head_dim in (80, 96, 192) else set()
            # the split last round's count (test_sm90a_machine_code)
            split = block_kv == 176 or head_dim in (64, 80, 96)
            assert atomics == dynamic | ({"ATOMG.E.ADD.S32.STRONG.GPU"} if split else set()), (head_dim, block_kv, atomics)


def test_sm80_build_holds_no_hopper_instructions(hopper_sass):
    """The library is also built for sm_80: there the kernel body is compiled out."""
    ops = sass.opcode_counts(kernel(hopper_sass, "sm_80", "bf16", 128, 176, 2))
    assert not any(op.startswith(("HGMMA", "UTMALDG", "SYNCS")) for op in ops)


def test_c_entry_reports_errors_before_touching_a_device(fa_library):
    fn = _lib.entry_point(_lib.load(), "hopper")
    err = ctypes.create_string_buffer(256)
    for head_dim in (24, 100, 264):
        bad_dim = _lib.FwdParams(batch=1, heads_q=1, heads_kv=1, seqlen_q=4, seqlen_k=4, head_dim=head_dim, scale=1.0)
        assert fn(ctypes.byref(bad_dim), None, err, 256) != 0
        assert err.value == b"head_dim: variant hopper takes multiples of 8 from 32 to 256", head_dim
    # The ladder's entries keep their own list.
    bad_dim.head_dim = 96
    assert _lib.entry_point(_lib.load(), "v5")(ctypes.byref(bad_dim), None, err, 256) != 0
    assert err.value == b"head_dim: supported: 64, 128"


def test_default_build_has_no_trace():
    """The timeline marks (hopper/trace.cuh) exist only in a -DFA_HOPPER_TRACE=1 build: the library everyone
    loads answers -1 and copies nothing."""
    fn = _lib.load().cuda_fa_hopper_trace
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    assert fn(None, None, 0) == -1


def split_parts(units: int, clusters: int, seqlen_k: int, block_kv: int = 176) -> list[tuple[int, ...]] | None:
    """cuda_fa_hopper_split_parts: (cluster, tail unit, t0, t1, first, last cluster of the unit) per part."""
    fn = _lib.load().cuda_fa_hopper_split_parts
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int32),
                   ctypes.c_int]
    rows = (ctypes.c_int32 * (6 * 4096))()
    count = fn(units, clusters, seqlen_k, block_kv, rows, 4096)
    return None if count < 0 else [tuple(rows[6 * i:6 * i + 6]) for i in range(count)]


@pytest.mark.parametrize("units, clusters, seqlen_k", [
    (1024, 66, 4096),  # b4 h16 4k and b1 h16 16k at d128: 34 tail pairs of 24 tiles on 66 clusters
    (1024, 66, 16384),
    (2048, 132, 8192),  # one CTA per cluster (odd query tiles per head)
    (67, 66, 16384),  # one tail unit of 94 tiles, cut into 66 parts
    (100, 66, 3000),  # 18 tiles per unit, the last of them partial (seqlen_k % 176)
    (23, 7, 4096),  # units spanning four clusters
])
def test_split_tail_covers_every_tile_once_in_contiguous_ranges(fa_library, units, clusters, seqlen_k):
    """The split last round (FA_HOPPER_SPLIT_TAIL): the tail's tiles, unit after unit, go to the clusters in
    contiguous ranges of nearly equal length; each split unit's parts sit on the clusters first..last that the
    kernel merges, the first of them holding the unit's first tiles as the last part of its range and every
    other one at the start of its range (the two partial blocks a cluster owns)."""
    parts = split_parts(units, clusters, seqlen_k)
    n = -(-seqlen_k // 176)
    tail_units = units % clusters
    covered = {}
    per_cluster = {g: [p for p in parts if p[0] == g] for g in range(clusters)}
    for g, mine in per_cluster.items():
        tiles = [(u, t) for _, u, t0, t1, _, _ in mine for t in range(t0, t1)]
        assert tiles == sorted(tiles) and len(set(tiles)) == len(tiles)
        flat = [u * n + t for u, t in tiles]
        assert flat == list(range(flat[0], flat[0] + len(flat))) if flat else True  # one contiguous range
        for tile in tiles:
            covered[tile] = covered.get(tile, 0) + 1
        for k, (_, u, t0, t1, first, last) in enumerate(mine):
            split = t0 > 0 or t1 < n
            if not split:
                continue
            assert first <= g <= last and last > first
            if t0 == 0:
                assert g == first and k == len(mine) - 1  # the unit's first tiles end this range
            else:
                assert g > first and k == 0  # a continued unit starts this range
    assert covered == {(u, t): 1 for u in range(tail_units) for t in range(n)}
    lengths = [sum(p[3] - p[2] for p in per_cluster[g]) for g in range(clusters)]
    assert max(lengths) - min(lengths) <= 1
    for u in range(tail_units):  # the clusters holding unit u are exactly first..last
        holders = sorted({p[0] for p in parts if p[1] == u})
        first, last = next((p[4], p[5]) for p in parts if p[1] == u)
        assert holders == list(range(first, last + 1))


@pytest.mark.parametrize("units, clusters, seqlen_k", [
    (1056, 66, 4096),  # b2 h33 4k: 16 full rounds, no tail
    (66 * 15 + 62, 66, 4096),  # a last round 62 / 66 full: splitting saves 1 tile of 24 (< SPLIT_MIN_SAVED_TILES)
    (1024, 66, 352),  # 2 tiles per item
    (67, 66, 4096),  # 24 tail tiles for 66 clusters: some ranges would be empty
])
def test_split_tail_only_where_it_saves_tiles(fa_library, units, clusters, seqlen_k):
    assert split_parts(units, clusters, seqlen_k) is None


# --- validation (CPU) ------------------------------------------------------------------------


def qkv(hq=2, hkv=2, sq=16, sk=16, d=64, dtype=torch.bfloat16):
    return (
        torch.randn(1, hq, sq, d, dtype=dtype),
        torch.randn(1, hkv, sk, d, dtype=dtype),
        torch.randn(1, hkv, sk, d, dtype=dtype),
    )


def test_surface_entry():
    assert SPEC["min_cc"] == (9, 0) and SPEC["max_cc"] == (9, 0)
    assert SPEC["head_dims"] == tuple(range(32, 257, 8)) and SPEC["head_dim_pairs"] == ((192, 128),)
    assert set(SPEC) == {"formats", "head_dims", "head_dim_pairs", "min_cc", "max_cc", "description", "ceiling", "tma", "local",
                         "softcap", "varlen"}
    assert SPEC["ceiling"] == "wgmma" and SPEC["tma"] is True
    assert SPEC["local"] is SPEC["softcap"] is SPEC["varlen"] is True
    if not torch.cuda.is_available():
        assert "GPU" in cuda_impl.unavailable_reason("hopper")


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qkv(d=100), ValueError, "head_dim"),
        (lambda: qkv(d=264), ValueError, "head_dim"),
        (lambda: (torch.randn(1, 2, 16, 64), *qkv()[1:]), TypeError, "dtype"),
        (lambda: qkv(hq=3, hkv=2), ValueError, "heads"),
        (
            # k/v heads broadcast with stride 0: fine for cp.async, not for a TMA tensor map
            lambda: (qkv()[0], *(t[:, :1].expand(1, 2, 16, 64) for t in qkv()[1:])),
            ValueError,
            "stride",
        ),
        (lambda: qkv(), ValueError, "device"),
    ],
)
def test_bad_input_is_refused_before_launch(make, error, match):
    q, k, v = make()
    with pytest.raises(error, match=match):
        cuda_impl.attention(q, k, v, variant="hopper")


def test_d256_passes_validation_and_stops_only_at_the_device():
    q, k, v = qkv(d=256)
    with pytest.raises(ValueError, match="device"):  # CPU tensors: every shape check passed
        cuda_impl.attention(q, k, v, variant="hopper")
    with pytest.raises(ValueError, match="head_dim"):  # the ladder still refuses d256
        cuda_impl.attention(q, k, v, variant="v5")


def test_broadcast_heads_are_only_refused_for_hopper():
    q, k, v = qkv()
    k, v = (t[:, :1].expand(1, 2, 16, 64) for t in (k, v))
    with pytest.raises(ValueError, match="device"):  # the ladder passes the stride checks
        cuda_impl.attention(q, k, v, variant="v5")


@pytest.mark.parametrize(
    "capability, refused", [((8, 0), True), ((8, 9), True), ((9, 0), False), ((10, 0), True), ((12, 0), True)]
)
def test_arch_range(capability, refused):
    problem = validate.arch_problem("hopper", SPEC, capability)
    assert (problem is not None) == refused
    if refused:
        assert problem.startswith("arch:") and "sm_90" in problem


def test_ladder_arch_range_unchanged():
    for capability in ((8, 0), (8, 6), (8, 9), (9, 0)):
        assert validate.arch_problem("v5", cuda_impl.VARIANTS["v5"], capability) is None


# --- GPU correctness ---------------------------------------------------------------------------

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
GPU_SHAPES = [
    # b, hq, hkv, sq, sk: chosen for the Hopper pipeline
    (1, 2, 2, 128, 128),  # one Q tile, one KV tile
    (2, 4, 4, 200, 333),  # tails on both axes (TMA zero fill, masked stores), Sq < Sk
    (1, 4, 4, 300, 97),  # Sq > Sk: under causal whole CTAs see no key (n_kv_tiles = 0)
    (1, 4, 2, 1000, 1500),  # GQA, 12 KV tiles: several rounds of the 2/3-stage ring
    (2, 8, 1, 64, 1100),  # MQA, short Q against a long KV sweep
    (1, 2, 2, 1536, 640),  # causal with Sq > Sk over many Q tiles
    (1, 1, 1, 1, 1),
    (8, 16, 4, 500, 1100),  # 4 query tiles per head: non-causal d128/d192/d256 in two-CTA clusters, 256 pairs
    (8, 16, 4, 500, 700),  # non-causal d128 up to 1k keys: the 128-key kernel, persistent, 256 items
    # non-causal d128's split last round: 96 pairs on 66 clusters (30 split over all 66, 12 tiles each); 192
    # single CTAs on 132 (3 query tiles per head: no clusters), 60 split, 18 tiles each; d64 (192-row items):
    # the first, 144 items on 132 CTAs, 12 split
    (3, 16, 4, 500, 1999),
    (4, 16, 16, 384, 3000),
    (2, 8, 2, 700, 4200),  # causal d256 with 4k-8k keys: persistent CTAs, 96 items of up to 53 tiles
    (2, 8, 2, 1500, 2000),  # non-causal d128: 11 tiles of 176 and a last one of exactly 64 keys
    # the upper consumer of a causal item sees none of its last tile (Sq = Sk + 64); non-causal up to 1k keys (d128's
    # 128-key kernel) with a 4-key last tile
    (1, 2, 2, 576, 512),
    (2, 4, 2, 333, 900),
    # non-causal d128 takes 128-key tiles (in clusters where query tiles pair up) up to 4096 keys, the shapes above,
    # and 176-key tiles above: the split last round over 66 clusters (96 pairs) and over 132 single CTAs (192 items),
    # and a last tile of exactly 64 keys (24 x 176 + 64)
    (3, 16, 4, 500, 4999),
    (4, 16, 16, 384, 5000),
    (2, 8, 2, 1500, 4288),
]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 192, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_float64_reference(fmt, head_dim, causal, shape):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper", cuda_impl.unavailable_reason("hopper"))
    from test_cuda_gpu import check_against_reference, make_inputs

    b, hq, hkv, sq, sk = shape
    q, k, v = make_inputs(b, hq, hkv, sq, sk, head_dim, DTYPES[fmt], seed=sq * 7 + sk)
    check_against_reference("hopper", q, k, v, causal, 1.0 / math.sqrt(head_dim))


@pytest.mark.gpu
@pytest.mark.parametrize("d", [128, 192, 256])
def test_public_api_custom_scale_and_strided_inputs(d):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper", cuda_impl.unavailable_reason("hopper"))
    from test_cuda_gpu import attention_reference, check_against_reference

    # (B, S, H, D) storage viewed as (B, H, S, D): the 4-D tensor map takes any 16-byte strides.
    # 512 rows: 4 query tiles per head, so non-causal runs in two-CTA clusters
    q = torch.randn(2, 512, 4, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    kv = torch.randn(2, 700, 2, 2, d + 8, device="cuda", dtype=torch.bfloat16)
    k, v = kv[:, :, 0, :, :d].transpose(1, 2), kv[:, :, 1, :, :d].transpose(1, 2)
    check_against_reference("hopper", q, k, v, True, 0.3)
    check_against_reference("hopper", q, k, v, False, 0.3)
    out, lse = cuda_impl.attention(q, k, v, causal=True, variant="hopper", return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, True, 1.0 / math.sqrt(d))
    assert (out.double() - ref).abs().max().item() < 2e-2
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim, seqlen_q", [(128, 1200), (64, 1200), (64, 1000)])
def test_dynamic_causal_scheduler_under_repeats_and_graph_replays(head_dim, seqlen_q):
    """d128 and d64 causal CTAs take items from a counter that each launch zeroes first: with more items than
    SMs, every launch -- eager, repeated, and replays of one captured CUDA graph (the driver times
    those) -- must write every row. A counter left at the last launch's value would end the CTAs after
    their first item and leave the NaN poison in place. (d64 with 1000 query rows: the two-consumer kernel.)"""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper", cuda_impl.unavailable_reason("hopper"))
    from test_cuda_gpu import check_against_reference, make_inputs

    # 4 x 8 heads x 7-10 query tiles = 224-320 items, more than the 132 SMs: CTAs take 1-3 items each
    q, k, v = make_inputs(4, 8, 2, seqlen_q, 1500, head_dim, torch.bfloat16, seed=11)
    scale = 1.0 / math.sqrt(head_dim)
    for _ in range(3):
        check_against_reference("hopper", q, k, v, True, scale)
    eager = cuda_impl.attention(q, k, v, causal=True, variant="hopper")
    out = torch.full_like(q, math.nan)
    # the driver's capture: warm-up, capture, and one NaN-poisoned replay equal to an eager call
    graph, why = bench.capture_graph(lambda: out.copy_(cuda_impl.attention(q, k, v, causal=True, variant="hopper")))
    assert graph is not None, why
    for _ in range(3):
        out.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        # an item's rows come from one CTA whichever takes it: replays repeat the eager output bit for bit
        assert torch.equal(out, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim, shape", [(128, (3, 16, 4, 500, 4999)), (128, (4, 16, 16, 384, 5000)),
                                             (64, (3, 16, 4, 500, 1999))])
def test_split_last_round_gives_the_same_bits_on_every_call(head_dim, shape):
    """Non-causal d64 and 176-key d128 launches split their last round (hopper/scheduler.cuh): whichever part of a
    unit finishes last merges the parts, always in the same order, so repeated calls and the driver's graph
    replays (bench.capture_graph checks one against an eager call) give the same output and LSE bit for bit.
    Shapes from GPU_SHAPES whose tails split over 66 clusters, 132 single CTAs and (d64) 132 CTAs."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper", cuda_impl.unavailable_reason("hopper"))
    from test_cuda_gpu import make_inputs

    b, hq, hkv, sq, sk = shape
    q, k, v = make_inputs(b, hq, hkv, sq, sk, head_dim, torch.bfloat16, seed=5)
    first, first_lse = cuda_impl.attention(q, k, v, variant="hopper", return_lse=True)
    for _ in range(20):  # completion order varies from call to call; the bits must not
        out, lse = cuda_impl.attention(q, k, v, variant="hopper", return_lse=True)
        assert torch.equal(out, first) and torch.equal(lse, first_lse)
    graph, why = bench.capture_graph(lambda: cuda_impl.attention(q, k, v, variant="hopper"))
    assert graph is not None, why


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim, block_kv, consumers, consumer_regs, producer_regs",
                         [(64, 128, 0, 160, 32), (64, 128, 2, 232, 32), (96, 96, 0, 160, 32), (80, 96, 2, 232, 32),
                          (128, 176, 0, 240, 24),
                          (192, 112, 0, 240, 24),
                          (256, 80, 0, 240, 24)])
def test_consumers_raise_to_their_register_budget_and_stay_under_it(hopper_sass, fmt, head_dim, block_kv, consumers,
                                                                    consumer_regs, producer_regs):
    """Two consumer warpgroups take 240 registers each with a 24-register producer; d64-d96's three take 160 with
    a 32-register producer (128 x 32 + 384 x 160 = 65536, the whole pool of a 512-thread CTA), and their two 232 (the
    producer's walk of the split tail in shared memory needs 32): setmaxnreg asks for exactly that, and no instruction touches a
    register past it."""
    instructions = kernel(hopper_sass, "sm_90", fmt, head_dim, block_kv, consumers=consumers)
    (alloc,) = [i for i in instructions if i.startswith("USETMAXREG.TRY_ALLOC")]
    (dealloc,) = [i for i in instructions if i.startswith("USETMAXREG.DEALLOC")]
    assert int(alloc.split(",")[-1].strip(" ;"), 16) == consumer_regs, alloc
    assert int(dealloc.split()[-1].strip(" ;"), 16) == producer_regs, dealloc
    highest = max(int(r) for i in instructions for r in re.findall(r"\bR(\d+)\b", i))
    assert highest < consumer_regs, highest


@pytest.mark.gpu
def test_staged_epilogue_refuses_unaligned_output_rows_and_register_stores_take_them():
    """The d64 and d128 kernels write O through shared memory in 16-byte chunks (hopper/epilogue.cuh); an output whose
    rows do not start on 16 bytes is refused with a message, not written out of place: causal d128 (the 128-key
    kernel) and non-causal d128 above 4k keys (the 176-key kernels). The public API always allocates aligned rows; the
    raw launch takes any output, and d256, which stores 4 bytes per thread, takes such a one and matches the reference."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    skip_unless_required("cuda", "hopper", cuda_impl.unavailable_reason("hopper"))
    from test_cuda_gpu import attention_reference, make_inputs

    q, k, v = make_inputs(1, 4, 4, 300, 4200, 128, torch.bfloat16, seed=5)
    out = torch.full((1, 4, 300, 132), math.nan, device="cuda", dtype=torch.bfloat16)[..., :128]  # rows 264 B apart
    lse = torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
    for causal in (True, False):
        with pytest.raises(RuntimeError, match="rows must start on 16 bytes"):
            _lib.launch_forward("hopper", q, k, v, out, lse, causal=causal, scale=128**-0.5)
    q, k, v = make_inputs(1, 4, 4, 300, 1100, 256, torch.bfloat16, seed=5)
    out = torch.full((1, 4, 300, 260), math.nan, device="cuda", dtype=torch.bfloat16)[..., :256]  # rows 520 B apart
    lse = torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
    _lib.launch_forward("hopper", q, k, v, out, lse, causal=False, scale=256**-0.5)
    ref, _ = attention_reference(q, k, v, False, 256**-0.5)
    assert (out.double() - ref).abs().max().item() < 2e-2
