"""Where a cuda_impl.attention_with_kvcache call's host time goes on the GPU machine: the whole call through the
compiled entry (cuda_impl.native) and through the Python path, and each stage of the Python path timed alone
(back-to-back calls, one synchronisation per round; the kernels take a few microseconds, so the host sets the
pace), b1 h32/8 q1 k4096 d128 bf16, paged 64. Prints microseconds per call, median of 3 rounds."""

import statistics
import time

import torch

import cuda_impl
from compare import kvcache
from cuda_impl import _lib, decode, native, ops

N = 2000
SPEC = cuda_impl.VARIANTS["decode"]  # what attention_with_kvcache passes check_inputs


def per_call(fn, n=N):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


B, HQ, HKV, SQ, SK, D, PAGE = 1, 32, 8, 1, 4096, 128, 64
q = torch.randn(B, SQ, HQ, D, device="cuda", dtype=torch.bfloat16)
pages = B * SK // PAGE
k = torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
table = torch.arange(pages, device="cuda", dtype=torch.int32).view(B, -1)
lengths = torch.full((B,), SK, device="cuda", dtype=torch.int32)
scale = D ** -0.5
splits, split_keys, _, _ = decode._plan(q, HKV, D, table.shape[1] * PAGE, False, None, None, (-1, -1))
out = torch.empty(B, SQ, HQ, D, device="cuda", dtype=torch.bfloat16)
lse = torch.empty(B, HQ, SQ, device="cuda", dtype=torch.float32)
work = torch.empty(splits * B * HQ * SQ * (D + 1), device="cuda", dtype=torch.float32) if splits > 1 else None
qt, kt = q.transpose(1, 2), torch.randn(B, HKV, SK, D, device="cuda", dtype=torch.bfloat16)
vt = torch.randn_like(kt)


def full_call():
    return cuda_impl.attention_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table)


def python_path():
    entry, native.kvcache_decode = native.kvcache_decode, None
    try:
        return full_call()
    finally:
        native.kvcache_decode = entry


full_call()
print("compiled entry:", "loaded" if native.kvcache_decode is not None else native.unavailable_reason())
op = native.kvcache_decode
stages = {
    "full call, compiled entry": full_call,
    "full call, Python path": python_path,
    "the compiled op alone (torch.ops)": (lambda: op(q, k, v, lengths, table, None, None, False, None, None, None,
                                                     -1, -1)) if op is not None else None,
    "kvcache.check_inputs": lambda: kvcache.check_inputs(
        q, k, v, cache_seqlens=lengths, block_table=table, k_new=None, v_new=None, k_descale=None, v_descale=None,
        dtypes=(torch.bfloat16, torch.float16), head_dims=SPEC["head_dims"], backend="cuda_impl",
        head_dim_pairs=SPEC["head_dim_pairs"]),
    "decode.forward (plan cache + alloc + launch)": lambda: decode.forward(q, k, v, lengths, table, causal=False,
                                                                          scale=scale),
    "ops._decode_impl (alloc + launch)": lambda: ops._decode_impl(q, k, v, lengths, table, None, None, False, scale,
                                                                  splits, split_keys, -1, -1),
    "_lib.launch_decode (pack + ctypes + 2 launches)": lambda: _lib.launch_decode(
        q, k, v, out, lse, lengths, table, None, None, work, causal=False, scale=scale, num_splits=splits,
        split_keys=split_keys),
    "torch.empty x1 (cuda, 4 KB)": lambda: torch.empty((B, SQ, HQ, D), dtype=torch.bfloat16, device=q.device),
    "torch.cuda.current_device + raw stream": lambda: _lib._raw_stream(torch.cuda.current_device()),
    "ops._eager check": lambda: ops._eager((q, k, v, lengths, table, None, None)),
    "sdpa direct (GQA)": lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True),
    "torch.ops.aten.empty (dispatcher from Python)": lambda: torch.ops.aten.empty.memory_format(
        [B, SQ, HQ, D], dtype=torch.bfloat16, device=q.device),
}
print(f"splits {splits} x {split_keys} keys")
for name, fn in stages.items():
    if fn is not None:
        print(f"{name:50} {per_call(fn):7.1f} us", flush=True)
