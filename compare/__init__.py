"""Benchmark and correctness harness comparing the FlashAttention-2 backends."""
