"""cuda_impl without a GPU: the build, the machine code it produces, and input validation.

One build of the whole library is shared by the module (it is cached by content under
cuda_impl/_build, so later runs reuse it). SASS checks need cuobjdump (CUDA toolkit, or the
copy in Triton's wheel) and skip cleanly without it.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cuda_impl
from cuda_impl import _lib, toolchain, sass, sm120, validate

REPO = Path(__file__).resolve().parent.parent
HMMA = {"bf16": "HMMA.16816.F32.BF16", "fp16": "HMMA.16816.F32"}
MANGLED_DTYPE = {"bf16": "I13__nv_bfloat16", "fp16": "I6__half"}


@pytest.fixture(scope="module")
def fa_sass(fa_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    return sass.dump_sass(fa_library)


def kernels_of(functions: dict, variant: str, fmt: str, head_dim: int) -> dict[str, list[str]]:
    """{arch: instructions} of fwd_<variant>_kernel<fmt, head_dim>."""
    tag = f"fwd_{variant}_kernel{MANGLED_DTYPE[fmt]}"
    return {arch: ins for (arch, fn), ins in functions.items() if tag in fn and f"Li{head_dim}E" in fn}


# --- build ---------------------------------------------------------------------------------


def test_every_kernel_compiles_for_every_target(fa_library):
    report = toolchain.ptxas_report(_lib.library_spec())
    archs: dict[str, set] = {}
    for row in report:
        archs.setdefault(row["kernel"], set()).add(row["arch"])
    expected = {f"sm_{t}" for t in toolchain.ARCH_TARGETS}
    for variant, spec in cuda_impl.VARIANTS.items():
        if variant in sm120.VARIANTS:  # own library: tests/test_cuda_sm120.py
            continue
        for fmt in spec["formats"]:
            # (hopper's other head dims run on these kernels: hopper_kernel_dim)
            for head_dim in (d for d in spec["head_dims"] if d in (64, 80, 96, 128, 192, 256)):
                # hopper adds its BLOCK_KV: fwd_hopper_kernel<bf16,128,176>
                base = f"fwd_{variant.replace('-', '_')}_kernel<{fmt},{head_dim}"
                names = [n for n in archs if n == base + ">" or n.startswith(base + ",")]
                assert names and all(archs[n] == expected for n in names), base


# Spills accepted on purpose, per (arch, kernel) as ptxas -v reports them (bytes: stack frame, spill stores,
# spill loads), each an upper bound: v5's d128 48-key tiles spill row state and loop constants on both archs
# (about 10 L1-resident local accesses per tile) and are still faster than the spill-free 32-key tiles
# (docs/journal/2026-11-29_ladder.md, "Longer KV tiles"); its d64 64-key tiles spill on sm_90a and are 13-14%
# faster than the spill-free 32-key ones. hopper's varlen kernels keep the sequence bounds and the item count in
# registers that the dense kernels take from the constant bank: the producer's walk of the sequences spills at 24
# registers (one to ten local accesses per item), the consumers a word or two outside their KV loop, and the local
# d256 twin's consumers (O alone 128 of their 240 registers) in the loop too (tests/test_cuda_varlen.py bounds the
# loops' spills; the cost: docs/design/local-and-varlen.md). Every other kernel: no stack frame and no spill at all.
KNOWN_SPILLS = {
    ("sm_80", "fwd_v5_kernel<bf16,128>"): (32, 80, 64), ("sm_80", "fwd_v5_kernel<fp16,128>"): (32, 80, 64),
    ("sm_90a", "fwd_v5_kernel<bf16,128>"): (24, 60, 64), ("sm_90a", "fwd_v5_kernel<fp16,128>"): (24, 60, 64),
    ("sm_90a", "fwd_v5_kernel<bf16,64>"): (16, 12, 28), ("sm_90a", "fwd_v5_kernel<fp16,64>"): (16, 12, 28),
    **{("sm_90a", f"fwd_hopper_kernel<{t},{shape},varlen>"): spill for t in ("bf16", "fp16")
       for shape, spill in (("64,128", (8, 4, 12)), ("64,128,consumers2", (8, 24, 24)), ("128,176", (8, 4, 16)),
                            ("256,80", (8, 4, 16)), ("64,128,consumers2,local", (16, 20, 28)),
                            ("128,128,local", (8, 4, 12)), ("128,128", (8, 4, 12)), ("192,112", (8, 4, 8)),
                            ("192,112,local", (24, 32, 44)), ("256,80,local", (56, 68, 116)))},
    # the varlen twins of the Q/K 192 with V 128 kernels (the producer's walk, as above)
    **{("sm_90a", f"fwd_hopper_kernel<{t},192,128,{local}varlen,v128>"): (8, 4, 8)
       for t in ("bf16", "fp16") for local in ("", "local,")},
    # the d64 local kernel on three consumers (wide windows, a cap alone): outside its KV loop
    **{("sm_90a", f"fwd_hopper_kernel<{t},64,128,local>"): (8, 8, 56) for t in ("bf16", "fp16")},
    # the d80 local kernel (two consumers on 96-key tiles; three spilled more, 28-80 bytes at d80 / d96)
    **{("sm_90a", f"fwd_hopper_kernel<{t},80,96,consumers2,local>"): (8, 4, 4) for t in ("bf16", "fp16")},
}


def spills_beyond_the_known_ones(report: list[dict]) -> list[dict]:
    return [r for r in report
            if any(got > allowed for got, allowed in zip((r["stack"], r["spill_stores"], r["spill_loads"]),
                                                         KNOWN_SPILLS.get((r["arch"], r["kernel"]), (0, 0, 0))))]


def test_no_register_spills_beyond_the_known_ones(fa_library):
    report = toolchain.ptxas_report(_lib.library_spec())
    assert report
    spilling = spills_beyond_the_known_ones(report)
    assert not spilling, toolchain.format_report(spilling)
    # the allowances are still needed: a kernel that stopped spilling takes its entry out
    reported = {(r["arch"], r["kernel"]) for r in report if r["stack"] or r["spill_stores"] or r["spill_loads"]}
    assert reported == set(KNOWN_SPILLS), sorted(reported ^ set(KNOWN_SPILLS))


def test_spill_check_counts_a_stack_frame_and_each_arch():
    row = dict(arch="sm_90a", kernel="fwd_hopper_kernel<bf16,128,176>", stack=0, spill_stores=0, spill_loads=0)
    assert spills_beyond_the_known_ones([row]) == []
    assert spills_beyond_the_known_ones([{**row, "stack": 8}])  # a local array without spills
    v5 = dict(arch="sm_90a", kernel="fwd_v5_kernel<bf16,64>", stack=16, spill_stores=12, spill_loads=28)
    assert spills_beyond_the_known_ones([v5]) == []
    assert spills_beyond_the_known_ones([{**v5, "spill_loads": 32}])
    assert spills_beyond_the_known_ones([{**v5, "arch": "sm_80"}])  # sm_80's d64 build does not spill


def test_build_is_cached_by_content(fa_library):
    assert toolchain.cached_library(_lib.library_spec()) == fa_library
    other = _lib.library_spec(("-DFA_HOPPER_ABLATION=no_split",))
    assert other.build_dir != _lib.library_spec().build_dir


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)
    never_built = _lib.library_spec(("-DCUDA_IMPL_TEST_NEVER_BUILT",))
    with pytest.raises(toolchain.BuildError, match="nvcc not found"):
        toolchain.build_library(never_built)


def test_target_matching():
    assert toolchain.target_runs_on("80", (8, 6))
    assert toolchain.target_runs_on("90a", (9, 0))
    assert not toolchain.target_runs_on("90a", (10, 0))
    assert not toolchain.target_runs_on("80", (9, 0))
    assert toolchain.gencode_flags(("90a",)) == ["-gencode=arch=compute_90a,code=sm_90a"]


# --- machine code ------------------------------------------------------------------------


# Elsewhere: tests/test_cuda_hopper.py: hopper; tests/test_cuda_hopper_fp8.py: hopper-fp8; tests/test_cuda_sm120.py:
# the sm_120a variants; tests/test_cuda_decode.py: decode (one kernel per K/V type)
LADDER = [name for name in cuda_impl.VARIANTS
          if not name.startswith("hopper") and name not in sm120.VARIANTS and name != "decode"]


@pytest.mark.parametrize("variant", LADDER)
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_kernel_uses_intended_instructions(fa_sass, variant, fmt, head_dim):
    per_arch = kernels_of(fa_sass, variant, fmt, head_dim)
    assert len(per_arch) == len(toolchain.ARCH_TARGETS)
    for arch, instructions in per_arch.items():
        ops = sass.opcode_counts(instructions)
        assert ops[HMMA[fmt]] > 0, f"{arch}: no {HMMA[fmt]}"
        assert any(op.startswith("LDGSTS") for op in ops), f"{arch}: no cp.async (LDGSTS)"
        assert ops["LDSM.16.M88.4"] > 0, f"{arch}: Q fragments should use ldmatrix.x4"
        if variant in ("v1", "v2", "v3"):
            assert ops["LDSM.16.M88.2"] > 0 and ops["LDSM.16.MT88.2"] > 0, f"{arch}: K/V via ldmatrix.x2"
            assert ops["LDSM.16.MT88.4"] == 0
        else:
            assert ops["LDSM.16.MT88.4"] > 0, f"{arch}: V via ldmatrix.x4.trans"
            assert ops["LDSM.16.M88.2"] == 0 and ops["LDSM.16.MT88.2"] == 0
        if ({"sm_90": "sm_90a"}.get(arch, arch), f"fwd_{variant}_kernel<{fmt},{head_dim}>") not in KNOWN_SPILLS:
            assert not any(op.startswith(("LDL", "STL")) for op in ops), f"{arch}: local memory"


def test_v5_needs_fewer_barriers_per_tile_than_v4(fa_sass):
    """The deeper ring lets v5 publish a tile and free an older one with one barrier (v4: two).
    Counted per MMA because v5's loop body holds two tiles."""
    for fmt in ("bf16", "fp16"):
        v4 = kernels_of(fa_sass, "v4", fmt, 128)
        v5 = kernels_of(fa_sass, "v5", fmt, 128)
        for arch in v4:
            rates = []
            for kernel in (v4, v5):
                ops = sass.opcode_counts(kernel[arch])
                bars = sum(n for op, n in ops.items() if op.startswith("BAR.SYNC"))
                rates.append(bars / ops[HMMA[fmt]])
            assert rates[1] < rates[0], (
                f"{arch} {fmt}: barriers per HMMA v4 {rates[0]:.4f}, v5 {rates[1]:.4f}"
            )


def test_v5_ring_slot_is_not_recomputed_per_tile(fa_library):
    """v5's d128 loop (three stages) takes each tile's ring slot from the step before. Computed as tile % 3 it
    was a multiply-high chain (UIMAD.WIDE.U32 on sm_90a) ahead of the step's shared-memory addresses, and the
    kernel needed 1.1-1.3% more cycles (docs/design/ladder.md)."""
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    functions = sass.dump_sass(fa_library, with_addresses=True)
    for fmt in ("bf16", "fp16"):
        kernels = kernels_of(functions, "v5", fmt, 128)
        assert kernels
        for arch, addressed in kernels.items():
            loop = sass.loop_with(addressed, re.compile(r"\bHMMA\."))
            assert loop, f"{arch} {fmt}: no loop with HMMA"
            high = [i for i in loop if sass.opcode(i).startswith(("UIMAD.WIDE", "IMAD.HI", "IMAD.WIDE.U32.HI"))]
            assert not high, f"{arch} {fmt}: {high[:3]}"


# --- the C surface without a GPU -----------------------------------------------------------


def test_c_surface_reports_errors_as_messages(fa_library):
    lib = _lib.load()
    fn = _lib.entry_point(lib, "v1")
    err = ctypes.create_string_buffer(256)
    bad_heads = _lib.FwdParams(batch=1, heads_q=3, heads_kv=2, seqlen_q=4, seqlen_k=4, head_dim=64, scale=1.0)
    assert fn(ctypes.byref(bad_heads), None, err, 256) != 0
    assert b"heads" in err.value
    bad_dim = _lib.FwdParams(batch=1, heads_q=1, heads_kv=1, seqlen_q=4, seqlen_k=4, head_dim=96, scale=1.0)
    assert fn(ctypes.byref(bad_dim), None, err, 256) != 0
    assert b"head_dim" in err.value


# --- Python-side validation (runs before any launch, no GPU needed) ------------------------


def qkv(b=1, hq=2, hkv=2, sq=16, sk=16, d=64, dtype=torch.bfloat16):
    return (
        torch.randn(b, hq, sq, d, dtype=dtype),
        torch.randn(b, hkv, sk, d, dtype=dtype),
        torch.randn(b, hkv, sk, d, dtype=dtype),
    )


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: (torch.randn(1, 2, 16, 64), *qkv()[1:]), TypeError, "dtype"),
        (lambda: (qkv()[0], *qkv(dtype=torch.float16)[1:]), TypeError, "dtype"),
        (lambda: (object(), *qkv()[1:]), TypeError, "format"),
        (lambda: (qkv()[0][0], *qkv()[1:]), ValueError, "shape"),
        (lambda: qkv(d=96), ValueError, "head_dim"),
        (lambda: qkv(d=256), ValueError, "head_dim"),
        (lambda: qkv(hq=3, hkv=2), ValueError, "heads"),
        (lambda: qkv(sq=0), ValueError, "shape"),
        (
            lambda: (qkv()[0].transpose(-1, -2).contiguous().transpose(-1, -2), *qkv()[1:]),
            ValueError,
            "stride",
        ),
        (
            lambda: (torch.randn(1, 2, 16, 68, dtype=torch.bfloat16)[..., :64], *qkv()[1:]),
            ValueError,
            "stride",
        ),
        (lambda: qkv(), ValueError, "device"),  # valid in every other way, but on the CPU
    ],
)
def test_bad_input_is_refused_before_launch(make, error, match):
    q, k, v = make()
    with pytest.raises(error, match=match):
        cuda_impl.attention(q, k, v)


def test_bad_scale_and_variant_are_refused():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="scale"):
        cuda_impl.attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="variant"):
        cuda_impl.attention(q, k, v, variant="v9")
    with pytest.raises(ValueError, match="variant"):
        cuda_impl.unavailable_reason("v9")


def test_validation_works_on_meta_tensors():
    """torch.compile traces with fake tensors: every check must work without storage."""
    q, k, v = (t.to("meta") for t in qkv(d=256))
    with pytest.raises(ValueError, match="head_dim"):
        validate.check_inputs(q, k, v, variant="v5", spec=cuda_impl.VARIANTS["v5"], scale=0.1)


def test_surface_matches_contract():
    assert set(cuda_impl.VARIANTS) == {"v1", "v2", "v3", "v4", "v5", "decode", "hopper", "hopper-fp8", "hopper-mxfp8",
                                       "hopper-nvfp4", *sm120.VARIANTS}
    for low, high, formats, variant in cuda_impl.DEFAULT_VARIANTS:
        spec = cuda_impl.VARIANTS[variant]
        assert set(formats) <= set(spec["formats"]) and spec["min_cc"] <= low <= high, variant
        assert spec["max_cc"] is None or high <= spec["max_cc"], variant
    for spec in cuda_impl.VARIANTS.values():
        required = {"formats", "head_dims", "min_cc", "max_cc", "description"}
        assert required <= set(spec) <= required | {"ceiling", "tma", "max_seqlen_q", "local", "softcap", "varlen",
                                                    "head_dim_pairs", "latent_pairs_only"}
    if not torch.cuda.is_available():
        assert "GPU" in cuda_impl.unavailable_reason("v1")


def test_import_needs_no_compiler():
    """Importing runs no subprocess (no nvcc, no ninja) and works with an empty PATH."""
    code = (
        "import subprocess\n"
        "def refuse(*a, **k): raise AssertionError('subprocess at import')\n"
        "subprocess.run = subprocess.Popen = refuse\n"
        "import cuda_impl\n"
        "assert [r[3] for r in cuda_impl.DEFAULT_VARIANTS[:2]] == ['decode', 'hopper']\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env.update(PATH="", PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=REPO)


def test_parameter_block_mirrors_the_tensors():
    """_lib._base_params fills the C parameter block every kernel reads (shapes, strides, flags)."""
    q = torch.empty(2, 4, 100, 64, dtype=torch.bfloat16)
    k = torch.empty(2, 2, 80, 64, dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)  # BSHD
    out, lse = torch.empty_like(q), torch.empty(2, 4, 100)
    p = _lib._base_params(q, k, k, out, lse, causal=True, scale=0.1, dtype=_lib.DTYPE_CODES[q.dtype])
    assert (p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim) == (2, 4, 2, 100, 80, 64)
    assert (p.causal, p.dtype, p.lse) == (1, _lib.DTYPE_CODES[torch.bfloat16], lse.data_ptr())
    assert list(p.q_stride) == list(q.stride()[:3]) and list(p.k_stride) == list(k.stride()[:3])
    assert _lib._base_params(q, k, k, out, None, causal=False, scale=0.1, dtype=0, seqlen_k=77).seqlen_k == 77
    with pytest.raises(ValueError, match="alignment: q must start on a 16-byte boundary"):
        _lib._check_aligned({"q": q[..., 1:]}, "TMA")


# The build defines the sources still read: the one that picks a standing ablation of cuda:hopper
# (hopper/config.cuh), the timeline instrumentation (hopper/trace.cuh) and sm120's software MMA (the
# test harness of cuda_impl.sm120). Every other choice is a constant in the code, with its measurement
# in docs/design/.
ALLOWED_BUILD_DEFINES = {"FA_HOPPER_ABLATION", "FA_HOPPER_TRACE", "FA_SM120_EMULATE"}


def _csrc_files():
    return sorted(p for p in toolchain.CSRC_DIR.rglob("*") if p.suffix in (".cu", ".cuh", ".h"))


def test_no_experiment_flags_left_in_csrc():
    defines = {}
    for path in _csrc_files():
        for name in re.findall(r"^\s*#\s*if(?:n?def)?\s+(?:defined\()?(FA_[A-Z0-9_]+)", path.read_text(), re.M):
            if name != "FA_SM90A":
                defines.setdefault(name, []).append(path.relative_to(toolchain.CSRC_DIR).as_posix())
    assert set(defines) <= ALLOWED_BUILD_DEFINES, {k: v for k, v in defines.items() if k not in ALLOWED_BUILD_DEFINES}


def test_csrc_comments_carry_no_session_history():
    stale = [(p.relative_to(toolchain.CSRC_DIR).as_posix(), n) for p in _csrc_files()
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\bsession \d+|perf-notes", line)]
    assert not stale, stale


def test_every_standing_ablation_is_a_config_option():
    """The names -DFA_HOPPER_ABLATION takes are the enum's, each switching one HopperOptions field."""
    config = (toolchain.CSRC_DIR / "hopper" / "config.cuh").read_text()
    names = re.search(r"enum class HopperAblation \{([^}]*)\}", config).group(1).replace(" ", "").split(",")
    assert names[0] == "none" and len(names) - 1 <= 5
    for name in names[1:]:
        assert f"a != HopperAblation::{name}" in config, name


def test_sass_compare_finds_what_differs(fa_library, tmp_path, fa_sass, monkeypatch):
    """python -m cuda_impl.sass A B: a library against itself is identical kernel by kernel; against a copy
    with one kernel's code changed, that kernel is reported and the exit status is 1."""
    result = sass.compare_libraries(fa_library, fa_library)
    assert len(result["same"]) == len(fa_sass) and not (result["differ"] or result["only_a"] or result["only_b"])
    assert sass.main([str(fa_library), str(fa_library)]) == 0
    original = sass.dump_sass
    key = sorted(fa_sass)[0]

    def altered(path, with_addresses=False):
        code = original(path, with_addresses)
        if Path(path) == tmp_path / "b.so":
            code[key] = code[key][:-1]
        return code

    (tmp_path / "b.so").write_bytes(Path(fa_library).read_bytes())
    monkeypatch.setattr(sass, "dump_sass", altered)
    result = sass.compare_libraries(fa_library, tmp_path / "b.so")
    assert result["differ"] == [key]
    assert sass.main([str(fa_library), str(tmp_path / "b.so")]) == 1


@pytest.mark.parametrize("cc, fmt, head_dim, expected", [
    ((9, 0), "bf16", 64, "hopper"), ((9, 0), "fp16", 256, "hopper"), ((9, 0), "fp8", 256, "hopper-fp8"),
    ((9, 0), "mxfp8", 128, "hopper-mxfp8"), ((9, 0), "nvfp4", 64, "hopper-nvfp4"),
    ((8, 0), "bf16", 128, "v5"), ((8, 9), "fp16", 64, "v5"),
    ((8, 0), "bf16", 256, None), ((8, 9), "fp8", 128, None), ((9, 0), "mxfp8", 256, None), ((12, 0), "bf16", 128, None),
])
def test_default_variant_follows_the_table(monkeypatch, cc, fmt, head_dim, expected):
    """variant=None: per GPU architecture, format and head_dim the table's variant, or a ValueError naming what
    runs where (no silent fallback to a variant the GPU or the head_dim does not take)."""
    from compare import formats

    monkeypatch.setattr(cuda_impl, "_device_of", lambda x: torch.device("cuda", 0))
    monkeypatch.setattr(validate, "capability", lambda device: cc)
    x = torch.randn(1, 2, 64, head_dim)
    q = x.to(torch.bfloat16 if fmt == "bf16" else torch.float16) if fmt in ("bf16", "fp16") else formats.quantize(x, fmt)
    if expected is None:
        with pytest.raises(ValueError, match=f"no cuda_impl variant runs {fmt} head_dim {head_dim} on sm_{cc[0]}{cc[1]}"):
            cuda_impl.select_variant(q)
    else:
        assert cuda_impl.select_variant(q) == expected


def test_default_variant_off_the_gpu_lets_validation_name_the_device():
    q, k, v = qkv(d=128)
    assert cuda_impl.select_variant(q) == "v5"
    with pytest.raises(ValueError, match="device"):
        cuda_impl.attention(q, k, v)


@pytest.mark.parametrize("cc, seqlen_q, head_dim, expected", [
    ((9, 0), 1, 128, "decode"), ((9, 0), 16, 64, "decode"), ((9, 0), 17, 128, "hopper"), ((8, 0), 4, 128, "decode"),
    ((9, 0), 1, 256, "decode"), ((8, 9), 1, 256, "decode"), ((8, 9), 1, 96, None),
    ((9, 0), 1, 96, "hopper"), ((9, 0), 17, 80, "hopper"), ((9, 0), 4, 192, "hopper"),  # dims decode does not take
])
def test_default_variant_sends_short_query_blocks_to_decode(monkeypatch, cc, seqlen_q, head_dim, expected):
    """Up to DECODE_MAX_SEQLEN_Q query tokens and at the head_dims the decode kernel takes, variant=None is the
    split-KV decode kernel; past either, the prefill row of the table."""
    monkeypatch.setattr(cuda_impl, "_device_of", lambda x: torch.device("cuda", 0))
    monkeypatch.setattr(validate, "capability", lambda device: cc)
    assert cuda_impl.DECODE_MAX_SEQLEN_Q == 16
    q = torch.randn(2, 8, seqlen_q, head_dim, dtype=torch.bfloat16)
    if expected is None:
        with pytest.raises(ValueError, match="no cuda_impl variant runs bf16 head_dim 96"):
            cuda_impl.select_variant(q)
    else:
        assert cuda_impl.select_variant(q) == expected


# --- the build cache: content digest and lock (CPU, no compiler) --------------------------------------------

def _spec_over(csrc: Path) -> toolchain.LibrarySpec:
    return toolchain.LibrarySpec(name="cuda_fa", sources=tuple(sorted(csrc.glob("*.cu"))), include_dirs=(csrc,))


def test_digest_follows_every_source_and_header_and_not_the_path(tmp_path):
    """The cache key (toolchain.LibrarySpec.digest) of a copy of csrc/: the same as the real one's wherever
    the copy lives; one byte more in a nested header, a top-level header, a .cu file or a flag changes it,
    and so the build directory (a rebuild); a file that is no source or header does not."""
    import shutil
    csrc = tmp_path / "a" / "csrc"
    shutil.copytree(toolchain.CSRC_DIR, csrc)
    spec = _spec_over(csrc)
    assert spec.digest() == _lib.library_spec().digest()
    seen, first_dir = {spec.digest()}, spec.build_dir
    for edited in (csrc / "hopper" / "softmax.cuh", next(iter(sorted(csrc.glob("*.cuh")))),
                   next(iter(sorted(csrc.glob("*.cu"))))):
        edited.write_text(edited.read_text() + "\n// edited\n")
        digest = _spec_over(csrc).digest()
        assert digest not in seen, f"editing {edited.relative_to(csrc)} left the digest at {digest}"
        seen.add(digest)
    assert _spec_over(csrc).build_dir != first_dir
    (csrc / "NOTES.md").write_text("not an input")
    assert _spec_over(csrc).digest() in seen
    flagged = toolchain.LibrarySpec(name="cuda_fa", sources=spec.sources, include_dirs=spec.include_dirs,
                                    extra_flags=("-DFA_X=1",))
    assert flagged.digest() not in seen
    renamed = csrc / "hopper" / "softmax.cuh"
    renamed.rename(csrc / "hopper" / "softmax2.cuh")  # a header's name is part of the key (#include "...")
    assert _spec_over(csrc).digest() not in seen


def test_concurrent_builds_of_one_library_serialise_and_build_once(tmp_path, monkeypatch):
    """Two threads asking for the same uncached library at once: the lock (one file lock per library name)
    makes the second wait, find the first one's library in the cache and not build again."""
    import threading
    import time
    monkeypatch.setattr(toolchain, "BUILD_ROOT", tmp_path / "_build")
    monkeypatch.setattr(toolchain, "missing_toolchain", lambda: None)
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: "nvcc")
    monkeypatch.setattr(toolchain, "find_ninja", lambda: "ninja")
    (tmp_path / "k.cu").write_text("// a kernel\n")
    spec = toolchain.LibrarySpec(name="locktest", sources=(tmp_path / "k.cu",))
    inside, builds, overlapped = [], [], []

    def fake_ninja(command, **kwargs):  # stands in for `ninja -C build_dir`: slow, writes the library
        if inside:
            overlapped.append(True)
        inside.append(1)
        builds.append(command)
        time.sleep(0.3)
        spec.library_path.write_bytes(b"\x7fELF")
        inside.pop()
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(toolchain.subprocess, "run", fake_ninja)
    results, start = [], threading.Barrier(2)

    def ask():
        start.wait()
        results.append(toolchain.build_library(spec))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [spec.library_path] * 2
    assert not overlapped, "two builds of one library ran at the same time"
    assert len(builds) == 1, f"built {len(builds)} times"
    assert (tmp_path / "_build" / "locktest.lock").exists()


_FAKE_NVCC = """#!{python}
import os, sys, time
out = sys.argv[sys.argv.index("-o") + 1]
link = "-shared" in sys.argv
# compile: the object names its source; link: the library is its objects' bytes, so a half-written object shows
body = b"".join(open(a, "rb").read() for a in sys.argv if a.endswith(".o")) if link else b"object of k.cu."
with open(out, "wb") as f:
    f.write(body[:len(body) // 2])
    f.flush()
    if os.environ.get("FAKE_NVCC_STALL") and link == (os.environ["FAKE_NVCC_STAGE"] == "link"):
        open(os.environ["FAKE_NVCC_STALL"], "w").close()
        time.sleep(120)  # killed here, the output half written
    f.write(body[len(body) // 2:])
"""

_BUILD_IN_A_PROCESS = """
import sys
from pathlib import Path
from cuda_impl import toolchain
toolchain.BUILD_ROOT = Path(sys.argv[1])
toolchain.find_nvcc = lambda: sys.argv[2]
spec = toolchain.LibrarySpec(name="killtest", sources=(Path(sys.argv[3]),))
print(toolchain.build_library(spec))
"""


@pytest.mark.parametrize("stage", ["compile", "link"])
def test_a_killed_build_leaves_no_output_that_passes_for_built(tmp_path, stage):
    """A build killed while an object or the library is half written (SIGKILL to the whole process group, so no
    cleanup runs) leaves nothing that cached_library() or the next build takes for finished: the next build gets
    the lock and the library it writes holds whole objects."""
    import os
    import signal
    import sys
    import time
    if toolchain.find_ninja() is None:
        pytest.skip("ninja not found")
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(_FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(0o755)
    (tmp_path / "k.cu").write_text("// a kernel\n")
    root, stalled = tmp_path / "_build", tmp_path / "stalled"
    argv = [sys.executable, "-c", _BUILD_IN_A_PROCESS, str(root), str(nvcc), str(tmp_path / "k.cu")]
    env = {**os.environ, "PYTHONPATH": str(Path(toolchain.__file__).parents[2]), "FAKE_NVCC_STALL": str(stalled),
           "FAKE_NVCC_STAGE": stage}
    build = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not stalled.exists():
        assert build.poll() is None, build.communicate()
        assert time.monotonic() < deadline, f"the fake {stage} step never started"
        time.sleep(0.05)
    os.killpg(build.pid, signal.SIGKILL)
    build.wait(timeout=30)
    spec = toolchain.LibrarySpec(name="killtest", sources=(tmp_path / "k.cu",))
    original_root = toolchain.BUILD_ROOT
    try:
        toolchain.BUILD_ROOT = root
        assert spec.build_dir.is_dir(), "the killed build never reached its build directory"
        assert toolchain.cached_library(spec) is None, "a half-written library passes for a finished one"
    finally:
        toolchain.BUILD_ROOT = original_root
    del env["FAKE_NVCC_STALL"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    library = Path(done.stdout.strip())
    assert library.read_bytes() == b"object of k.cu.", "the library holds a half-written object"
