"""Measured ceilings for %SOL: mma.sync m16n8k16 (bf16/fp16) and device memory copy bandwidth.

The mma.sync kernel (mma_sync.cu) is built by cuda_impl's build machinery into its own small
library. Before it is timed, its SASS must show exactly CHAINS ``HMMA.16816.F32[.BF16]`` per
loop iteration in every cubin: a benchmark whose independent chains the compiler merged (or
whose work it dropped) would print a rate for work that was never done, so it raises instead.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from cuda_impl import toolchain, sass

from . import timing

SOURCE = Path(__file__).with_name("mma_sync.cu")
HMMA_OPCODE = {"bf16": "HMMA.16816.F32.BF16", "fp16": "HMMA.16816.F32"}
_DTYPE_CODE = {"bf16": 0, "fp16": 1}
_MANGLED_DTYPE = {"bf16": "I13__nv_bfloat16E", "fp16": "I6__halfE"}
FLOPS_PER_MMA = 2 * 16 * 8 * 16


class MergedWorkError(RuntimeError):
    """The compiled benchmark does not issue the MMAs it counts."""


def library_spec() -> toolchain.LibrarySpec:
    return toolchain.LibrarySpec(name="ceilings", sources=(SOURCE,), include_dirs=(toolchain.CSRC_DIR,))


def build_library() -> Path:
    return toolchain.build_library(library_spec())


def check_sass(functions: dict[tuple[str, str], list[str]], chains: int) -> dict[tuple[str, str], int]:
    """{(arch, dtype): HMMA count} after checking each is `chains`; raises MergedWorkError.

    The timed loop is `#pragma unroll 1`, so the kernel's only HMMAs are the loop body's."""
    counts: dict[tuple[str, str], int] = {}
    archs = {arch for arch, _ in functions}
    for arch in sorted(archs):
        for dtype, marker in _MANGLED_DTYPE.items():
            kernels = [
                ins
                for (a, fn), ins in functions.items()
                if a == arch and "mma_chains_kernel" in fn and marker in fn
            ]
            if len(kernels) != 1:
                raise MergedWorkError(
                    f"{arch}: expected one {dtype} mma_chains_kernel in the SASS, found {len(kernels)}"
                )
            n = sass.opcode_counts(kernels[0])[HMMA_OPCODE[dtype]]
            if n != chains:
                raise MergedWorkError(
                    f"{arch} {dtype}: {n} x {HMMA_OPCODE[dtype]} in the loop, expected {chains} "
                    "(the compiler merged or dropped chains; the measured rate would be invalid)"
                )
            counts[(arch, dtype)] = n
    if not counts:
        raise MergedWorkError("no cubins found in the ceilings library")
    return counts


_checked_lib: ctypes.CDLL | None = None


def load_checked() -> ctypes.CDLL:
    """The ceilings library, built if needed, after its SASS passed check_sass."""
    global _checked_lib
    if _checked_lib is None:
        path = build_library()
        lib = ctypes.CDLL(str(path))
        lib.mma_ceiling_chains.restype = ctypes.c_int
        lib.mma_ceiling_launch.restype = ctypes.c_int
        lib.mma_ceiling_launch.argtypes = (
            [ctypes.c_int] * 4 + [ctypes.c_void_p] * 3 + [ctypes.c_char_p, ctypes.c_int]
        )
        check_sass(sass.dump_sass(path), lib.mma_ceiling_chains())
        _checked_lib = lib
    return _checked_lib


def mma_sync_tflops(dtype: str = "bf16", *, iters: int = 50_000, repeats: int = 5) -> float:
    """Best-of-`repeats` mma.sync m16n8k16 rate (fp32 accumulate) on the current GPU, TFLOP/s."""
    import torch

    lib = load_checked()
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    operands = torch.full((12,), 0.0625, dtype=torch_dtype, device="cuda").view(torch.int32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, threads = 8 * sms, 128  # 4 warps per block, 32 warps per SM
    out = torch.empty(blocks * threads, dtype=torch.float32, device="cuda")
    err = ctypes.create_string_buffer(256)

    def launch() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        rc = lib.mma_ceiling_launch(
            _DTYPE_CODE[dtype], blocks, threads, iters, operands.data_ptr(), out.data_ptr(), stream, err, 256
        )
        if rc:
            raise RuntimeError(f"mma ceiling: {err.value.decode()}")

    best_ms = timing.best_ms(launch, repeats)
    flops = blocks * (threads // 32) * iters * lib.mma_ceiling_chains() * FLOPS_PER_MMA
    return flops / (best_ms * 1e-3) / 1e12


def copy_bandwidth_tbps(nbytes: int = 2 << 30, repeats: int = 5) -> float:
    """Device-to-device copy rate, bytes read + written per second, best of `repeats`, TB/s."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    best_ms = timing.best_ms(lambda: dst.copy_(src), repeats)
    return 2 * nbytes / (best_ms * 1e-3) / 1e12


def read_bandwidth_tbps(nbytes: int = 2 << 30, repeats: int = 5) -> float:
    """Device memory read rate, TB/s: the faster of torch.sum over `nbytes` of float32 (a reduction reads every
    byte once and writes one number) and the streaming-read kernel of stream_read, best of `repeats` each. The
    ceiling of a decode kernel, which reads the KV cache and writes little; the copy ceiling counts a write for
    every byte read."""
    import torch

    from .stream_read import stream_read_tbps

    src = torch.rand(nbytes // 4, dtype=torch.float32, device="cuda")  # one buffer for both probes
    best_ms = timing.best_ms(lambda: torch.sum(src), repeats)
    return max(nbytes / (best_ms * 1e-3) / 1e12, stream_read_tbps(src, repeats))


# name -> (what it measures, unit); the names are what compare.backends.Backend.ceiling_for returns.
CEILINGS = {
    "mma.sync.bf16": ("mma.sync m16n8k16 bf16, fp32 accumulate, 8 chains (SASS-checked)", "TFLOP/s"),
    "mma.sync.fp16": ("mma.sync m16n8k16 fp16, fp32 accumulate, 8 chains (SASS-checked)", "TFLOP/s"),
    "wgmma.bf16": ("wgmma m64n256k16 bf16, fp32 accumulate, smem operands, sm_90a (SASS-checked)", "TFLOP/s"),
    "wgmma.e4m3": ("wgmma m64n256k32 e4m3, fp32 accumulate, smem operands, sm_90a (SASS-checked)", "TFLOP/s"),
    "gemm.bf16": ("cuBLAS bf16 GEMM 8192^3 (wgmma on sm_90)", "TFLOP/s"),
    "gemm.fp8": ("cuBLAS e4m3 GEMM 8192^3 via torch._scaled_mm (wgmma on sm_90)", "TFLOP/s"),
    "dram": ("device-to-device copy, bytes read + written", "TB/s"),
    "dram.read": ("device memory read: the faster of torch.sum and a streaming-read kernel over 2 GiB of float32",
                  "TB/s"),
}


def measure_all(log=print) -> dict[str, float]:
    """Every ceiling in CEILINGS on the current GPU. One that fails is logged and left out (its
    rows then carry no %SOL); a benchmark whose SASS lost work raises MergedWorkError, never a number."""
    from . import gemm, wgmma

    measures = {
        "mma.sync.bf16": lambda: mma_sync_tflops("bf16"),
        "mma.sync.fp16": lambda: mma_sync_tflops("fp16"),
        "wgmma.bf16": lambda: wgmma.wgmma_tflops("bf16"),
        "wgmma.e4m3": lambda: wgmma.wgmma_tflops("e4m3"),
        "gemm.bf16": gemm.gemm_bf16_tflops,
        "gemm.fp8": gemm.gemm_fp8_tflops,
        "dram": copy_bandwidth_tbps,
        "dram.read": read_bandwidth_tbps,
    }
    values = {}
    for name, measure in measures.items():
        try:
            values[name] = measure()
        except MergedWorkError:
            raise
        except Exception as exc:  # noqa: BLE001 - said, and the sweep goes on without this ceiling
            log(f"ceiling {name} not measured: {type(exc).__name__}: {exc}")
    return values
