"""wgmma ceilings on sm_90a: m64n256k16 bf16 and m64n256k32 e4m3, fp32 accumulate, operands in smem.

The kernel (wgmma.cu) is built for sm_90a only into its own small library. Before it is timed,
its SASS must show, per kernel, exactly WGMMAS_PER_ITER GMMA instructions of the expected shape
(the loop is `#pragma unroll 1` and holds the kernel's only GMMAs) and exactly two warpgroup
waits (the loop's and the final one): a dropped or merged wgmma would print a rate for work never
done, and wgmmas that ptxas serialized (a wait after each) would print a rate below the hardware's.
Either raises MergedWorkError instead of returning a number.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from compare.ceilings import MergedWorkError, timing
from cuda_impl import toolchain, sass

SOURCE = Path(__file__).with_name("wgmma.cu")
TARGET = "90a"  # wgmma exists only on the arch-specific Hopper target
N = 256  # the kernel's wgmma width; check_sass holds the SASS to this shape
GMMA_OPCODE = {"bf16": f"HGMMA.64x{N}x16.F32.BF16", "e4m3": f"QGMMA.64x{N}x32.F32.E4M3.E4M3"}
K_PER_WGMMA = {"bf16": 16, "e4m3": 32}
_DTYPE_CODE = {"bf16": 0, "e4m3": 1}
_KERNEL_MARKER = {"bf16": "wgmma_kernelINS_4Bf16E", "e4m3": "wgmma_kernelINS_4E4m3E"}
WAIT_OPCODE = "WARPGROUP.DEPBAR.LE"
WAITS_PER_KERNEL = 2  # wait_group 1 in the loop, wait_group 0 after it


def library_spec() -> toolchain.LibrarySpec:
    return toolchain.LibrarySpec(name="wgmma_ceilings", sources=(SOURCE,), targets=(TARGET,))


def build_library() -> Path:
    return toolchain.build_library(library_spec())


def check_sass(functions: dict[tuple[str, str], list[str]], per_iter: int) -> dict[str, int]:
    """{dtype: GMMA count} after checking each kernel's GMMAs and waits; raises MergedWorkError."""
    counts: dict[str, int] = {}
    for dtype, marker in _KERNEL_MARKER.items():
        # cuobjdump labels an sm_90a cubin "code for sm_90"; this library holds no other sm_90 code.
        kernels = [ins for (arch, fn), ins in functions.items() if arch.rstrip("a") == "sm_90" and marker in fn]
        if len(kernels) != 1:
            raise MergedWorkError(f"sm_{TARGET}: expected one {dtype} wgmma_kernel in the SASS, found {len(kernels)}")
        opcodes = sass.opcode_counts(kernels[0])
        gmmas = {op: n for op, n in opcodes.items() if "GMMA" in op}
        if gmmas != {GMMA_OPCODE[dtype]: per_iter}:
            raise MergedWorkError(
                f"sm_{TARGET} {dtype}: GMMAs in the kernel {gmmas}, expected {{{GMMA_OPCODE[dtype]!r}: {per_iter}}} "
                "(the compiler merged, dropped or reshaped wgmmas; the measured rate would be invalid)"
            )
        if opcodes[WAIT_OPCODE] != WAITS_PER_KERNEL:
            raise MergedWorkError(
                f"sm_{TARGET} {dtype}: {opcodes[WAIT_OPCODE]} x {WAIT_OPCODE}, expected {WAITS_PER_KERNEL} "
                "(ptxas serialized the wgmmas; the measured rate would be below the hardware's)"
            )
        counts[dtype] = per_iter
    return counts


_checked_lib: ctypes.CDLL | None = None


def load_checked() -> ctypes.CDLL:
    """The wgmma ceilings library, built if needed, after its SASS passed check_sass."""
    global _checked_lib
    if _checked_lib is None:
        path = build_library()
        lib = ctypes.CDLL(str(path))
        for getter in ("wgmmas_per_iter", "warpgroups", "operand_bytes"):
            getattr(lib, f"wgmma_ceiling_{getter}").restype = ctypes.c_int
        lib.wgmma_ceiling_launch.restype = ctypes.c_int
        lib.wgmma_ceiling_launch.argtypes = (
            [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_char_p, ctypes.c_int]
        )
        check_sass(sass.dump_sass(path), lib.wgmma_ceiling_wgmmas_per_iter())
        _checked_lib = lib
    return _checked_lib


def random_operands(dtype: str, nbytes: int):
    """Random finite values (no NaN/Inf bytes), so the tensor cores switch like on real data."""
    import torch

    values = torch.randn(nbytes, device="cuda")
    if dtype == "bf16":
        return values[: nbytes // 2].to(torch.bfloat16).view(torch.uint8)
    return values.to(torch.float8_e4m3fn).view(torch.uint8)


def wgmma_tflops(dtype: str = "bf16", *, iters: int = 20_000, repeats: int = 5) -> float:
    """Best-of-`repeats` wgmma rate (fp32 accumulate) on the current GPU, TFLOP/s; needs sm_90."""
    import torch

    if dtype not in _DTYPE_CODE:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_CODE)}, got {dtype!r}")
    capability = torch.cuda.get_device_capability()
    if not toolchain.target_runs_on(TARGET, capability):
        raise ValueError(f"wgmma ceilings need compute capability 9.0 (sm_90a), this GPU is {capability}")
    lib = load_checked()
    operands = random_operands(dtype, lib.wgmma_ceiling_operand_bytes())
    warpgroups = lib.wgmma_ceiling_warpgroups()
    blocks = torch.cuda.get_device_properties(0).multi_processor_count  # one CTA per SM (smem, registers)
    out = torch.empty(blocks * warpgroups * 128, dtype=torch.float32, device="cuda")
    err = ctypes.create_string_buffer(256)

    def launch() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        rc = lib.wgmma_ceiling_launch(
            _DTYPE_CODE[dtype], blocks, iters, operands.data_ptr(), out.data_ptr(), stream, err, 256
        )
        if rc:
            raise RuntimeError(f"wgmma ceiling: {err.value.decode()}")

    best_ms = timing.best_ms(launch, repeats)
    flops_per_wgmma = 2 * 64 * N * K_PER_WGMMA[dtype]
    flops = blocks * warpgroups * iters * lib.wgmma_ceiling_wgmmas_per_iter() * flops_per_wgmma
    return flops / (best_ms * 1e-3) / 1e12
