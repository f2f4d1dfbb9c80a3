"""The calls the compiled decode entries' CPU tests make (test_native_entry: cuda_impl's, test_triton_native_entry:
triton_impl's): one attention_with_kvcache call's tensors, and calls that each break one check of the Python
path that both backends share (compare.kvcache.check_inputs, check_splits, resolve_scale, oracle.check_window)."""

import ctypes
import subprocess

import pytest
import torch

E4M3 = torch.float8_e4m3fn


def call(batch=2, heads_q=8, heads_kv=2, seqlen_q=1, length=256, dim=128, page=64, dtype=torch.bfloat16,
         kv_dtype=None, mla=False, q_strided=False, device="cpu"):
    """The tensors of one call (zeros): q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale."""
    kv_dtype = kv_dtype or dtype
    dim_k = 576 if mla else dim
    q = torch.zeros(batch, seqlen_q, heads_q, dim_k + (64 if q_strided else 0), dtype=dtype, device=device)
    q = q[..., :dim_k]
    pages = batch * length // page if page else batch
    k = torch.zeros(pages, page or length, 1 if mla else heads_kv, dim_k, dtype=kv_dtype, device=device)
    v = k[..., :512] if mla else torch.zeros_like(k)
    table = (torch.arange(pages, dtype=torch.int32, device=device).flip(0).view(batch, -1).contiguous() if page
             else None)
    lengths = torch.arange(batch, dtype=torch.int32, device=device) + length // 2
    descales = ((torch.ones(batch, heads_kv, device=device), torch.ones(batch, heads_kv, device=device))
                if kv_dtype == E4M3 else (None, None))
    return q, k, v, lengths, table, *descales


def options(opts: dict) -> tuple:
    """The entries' option arguments (causal, scale, num_splits, split_size, window left, right) from a dict."""
    return (opts.get("causal", False), opts.get("scale"), opts.get("num_splits"), opts.get("split_size"),
            *opts.get("window", (-1, -1)))


def bad_calls():
    """(name, tensors, options): each breaks one check that both backends' Python paths make on the base call."""
    def base(**kw):
        return list(call(**kw))

    def edit(index, value, **kw):
        tensors = base(**kw)
        tensors[index] = value
        return tensors

    q, k, v, lengths, table, _, _ = call()
    yield "q 3-D", edit(0, q[0]), {}
    yield "q int8", edit(0, q.to(torch.int8)), {}
    yield "Sq 65", base(seqlen_q=65), {}
    yield "head_dim 96", base(dim=96), {}
    yield "k/v dtypes differ", edit(2, v.half()), {}
    yield "cache dtype not q's", base(kv_dtype=torch.float16), {}
    yield "Hq not a multiple of Hkv", base(heads_q=6, heads_kv=4), {}
    yield "k shape != v shape", edit(2, v[:, :32]), {}
    yield "q last dim strided", edit(0, torch.zeros(2, 1, 8, 256, dtype=torch.bfloat16)[..., ::2]), {}
    yield "q misaligned", edit(0, torch.zeros(2 * 8 * 128 + 1, dtype=torch.bfloat16)[1:].view(2, 1, 8, 128)), {}
    yield "k row stride not 16 bytes", edit(1, torch.zeros(8, 64, 2, 132, dtype=torch.bfloat16)[..., :128]), {}
    yield "e4m3 without descales", edit(5, None, kv_dtype=E4M3), {}
    yield "descale on a 16-bit cache", edit(5, torch.ones(2, 2)), {}
    yield "descale shape", edit(6, torch.ones(2, 3), kv_dtype=E4M3), {}
    yield "descale float64", edit(6, torch.ones(2, 2, dtype=torch.float64), kv_dtype=E4M3), {}
    yield "block_table int64", edit(4, table.long()), {}
    yield "block_table rows != batch", edit(4, table[:1]), {}
    yield "block_table strided", edit(4, torch.zeros(2, 8, dtype=torch.int32)[:, ::2]), {}
    yield "page size 48", base(page=48, length=192), {}
    yield "contiguous cache batch != B", edit(1, k[:1], page=0), {}
    yield "cache_seqlens int64", edit(3, lengths.long()), {}
    yield "cache_seqlens length", edit(3, lengths[:1]), {}
    yield "num_splits 0", base(), dict(num_splits=0)
    yield "split_size 100", base(), dict(split_size=100)
    yield "both split options", base(), dict(num_splits=2, split_size=128)
    yield "scale 0", base(), dict(scale=0.0)
    yield "scale inf", base(), dict(scale=float("inf"))
    yield "window -2", base(), dict(window=(-2, -1))


def python_path_rejects(tensors, opts, dtypes, spec) -> bool:
    """Whether the shared checks of the Python path raise on this call (the verdict each bad call must get)."""
    from compare import kvcache, oracle

    q, k, v, lengths, table, k_descale, v_descale = tensors
    try:
        layout = kvcache.check_inputs(q, k, v, cache_seqlens=lengths, block_table=table, k_new=None, v_new=None,
                                      k_descale=k_descale, v_descale=v_descale, dtypes=dtypes,
                                      head_dims=spec["head_dims"], backend="test",
                                      head_dim_pairs=spec["head_dim_pairs"])
        kvcache.check_splits(opts.get("num_splits"), opts.get("split_size"))
        kvcache.resolve_scale(opts.get("scale"), layout.head_dim)
        oracle.check_window(opts.get("window", (-1, -1)))
    except (ValueError, TypeError, NotImplementedError):
        return True
    return False


def compiled_stub(directory, source: str) -> ctypes.CDLL:
    """A C library compiled here from `source` (the tests' stand-ins for the kernels' library or the driver)."""
    path = directory / "stub.c"
    path.write_text(source)
    library = directory / "libstub.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(path)], check=True)
    return ctypes.CDLL(str(library))


def loaded_entry(native, namespace: str):
    """torch.ops.<namespace> with a backend's compiled entry (its module `native`) built here and loaded; a failed
    build fails the test."""
    from compare import native_build

    try:
        path = native.build()
    except native_build.BuildError as exc:
        pytest.fail(f"the compiled entry does not build here: {exc}")
    ops = getattr(torch.ops, namespace)
    if not hasattr(ops, "kvcache_decode"):
        torch.ops.load_library(str(path))
    return ops
