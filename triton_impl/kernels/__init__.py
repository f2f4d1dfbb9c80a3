"""Triton kernels, one variant per module; imported only when a kernel runs (Triton may be absent)."""
