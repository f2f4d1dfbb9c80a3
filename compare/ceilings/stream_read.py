"""A device-memory read probe for the dram.read ceiling: a Triton kernel that streams a float32 buffer in tiles of
BLOCK elements (16-byte vector loads), TILES of them per program, and writes one partial sum per program, so that
no load can be dropped (the partial sums are checked against torch's). Timed at a few tile shapes; the fastest
counts. torch.sum, the other probe, is one reduction library's rate, not the memory's."""

from __future__ import annotations

import triton
import triton.language as tl

from . import timing

# (BLOCK elements per tile, warps, pipeline stages) tried on the GPU; TILES tiles per program
CONFIGS = ((4096, 8, 3), (8192, 8, 3), (2048, 4, 4), (8192, 16, 2))
TILES = 16


@triton.jit
def _stream_read(X, PARTIAL, n, BLOCK: tl.constexpr, TILES: tl.constexpr, EVEN: tl.constexpr):
    """Program p sums elements [p * BLOCK * TILES, (p + 1) * BLOCK * TILES) of X into PARTIAL[p]."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK * TILES + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for _ in range(TILES):
        if EVEN:
            acc += tl.load(X + offs)
        else:
            acc += tl.load(X + offs, mask=offs < n, other=0.0)
        offs += BLOCK
    tl.store(PARTIAL + tl.program_id(0), tl.sum(acc, 0))


def partial_sums(x, block: int, warps: int = 4, stages: int = 1, tiles: int = TILES):
    """One partial sum per program of the read kernel over the 1-D float32 tensor x."""
    import torch

    per_program = block * tiles
    programs = triton.cdiv(x.numel(), per_program)
    partial = torch.empty(programs, dtype=torch.float32, device=x.device)
    _stream_read[(programs,)](x, partial, x.numel(), BLOCK=block, TILES=tiles, EVEN=x.numel() % per_program == 0,
                              num_warps=warps, num_stages=stages)
    return partial


def stream_read_tbps(x, repeats: int = 5) -> float:
    """Read rate of the kernel over the 1-D float32 CUDA tensor x (values not all zero, so that a lost load shows
    in the sum), TB/s: the best config, each checked to sum the buffer."""
    want = x.double().sum().item()
    best = float("inf")
    for block, warps, stages in CONFIGS:
        got = partial_sums(x, block, warps, stages).double().sum().item()
        if abs(got - want) > 1e-4 * abs(want):
            raise RuntimeError(f"stream read {block}x{warps}w{stages}s summed {got}, torch {want}: loads were lost")
        best = min(best, timing.best_ms(lambda b=block, w=warps, s=stages: partial_sums(x, b, w, s), repeats))
    return x.numel() * 4 / (best * 1e-3) / 1e12
