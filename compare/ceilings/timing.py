"""The one timing rule of the ceiling benchmarks: a warm-up launch, then the best of `repeats`
launches timed with CUDA events (a ceiling is the fastest the hardware was seen to go)."""

from __future__ import annotations


def best_ms(launch, repeats: int) -> float:
    import torch

    launch()  # warm-up: module load, clocks
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best
