"""The compiled decode entry (cuda_impl/native.py, csrc/torch/kvcache_entry.cpp), on the CPU: built against this
machine's torch, configured to take CPU tensors with stub C entries that record the parameter block they are
given (nothing launches).

- a call it takes fills the block exactly as the Python path's cuda_impl._lib.launch_decode does (every field
  but the three fresh allocations), over paged / contiguous caches, both dtypes, e4m3 with descales, MLA's latent
  view, strided q, windows, split options and scales;
- it takes nothing the Python path rejects: each bad input of compare.kvcache's checks, and every call whose plan
  the Python path has not remembered, answers None;
- the op's outputs have the Python path's shapes and dtypes;
- the GPU test (marked gpu) runs both paths on the same inputs: the same bits, and the entry took the calls.
"""

from __future__ import annotations

import ctypes
import subprocess

import pytest
import torch

from cuda_impl import _lib, native, toolchain

E4M3 = torch.float8_e4m3fn
SIZE = ctypes.sizeof(_lib.DecodeParams)
# DecodeParams fields the op allocates itself: their values differ between the two paths.
ALLOCATED = ("out", "lse", "workspace")


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    """A library with the decode entries as recorders (and the size queries of _lib's mirrors)."""
    directory = tmp_path_factory.mktemp("native_stub")
    sizes = "\n".join(f"int {fn}(void) {{ return {ctypes.sizeof(struct)}; }}" for fn, struct, _ in _lib._STRUCTS)
    source = directory / "stub.c"
    source.write_text(f"""#include <string.h>
{sizes}
static unsigned char last[{SIZE}];
static int last_entry;
static int record(const void *p, int entry) {{ memcpy(last, p, {SIZE}); last_entry = entry; return 0; }}
int cuda_fa_decode(const void *p, void *stream, char *err, int n) {{ return record(p, 1); }}
int cuda_fa_mla_decode(const void *p, void *stream, char *err, int n) {{ return record(p, 2); }}
const unsigned char *stub_last(void) {{ return last; }}
int stub_last_entry(void) {{ int e = last_entry; last_entry = 0; return e; }}
""")
    path = directory / "libstub.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(path), str(source)], check=True)
    lib = ctypes.CDLL(str(path))
    lib.stub_last.restype = ctypes.POINTER(ctypes.c_ubyte * SIZE)
    return lib


@pytest.fixture
def entry(stub, monkeypatch):
    """The op configured for CPU tensors and the stub's entries, with no plan remembered; _lib's launches go to the
    stub too. Restores the configuration a real load made (if one did)."""
    try:
        path = native.build()
    except toolchain.BuildError as exc:
        pytest.fail(f"the compiled entry does not build here: {exc}")
    if not hasattr(torch.ops.cuda_fa_native, "kvcache_decode"):
        torch.ops.load_library(str(path))
    addresses = tuple(native._entry_address(stub, name) for name in ("cuda_fa_decode", "cuda_fa_mla_decode"))
    native.configure(*addresses, "cpu")
    torch.ops.cuda_fa_native.forget_plans()
    stub.stub_last_entry()  # (reads and clears what an earlier test left)
    monkeypatch.setitem(_lib._loaded, (), _lib._checked(stub._name))
    monkeypatch.setattr(_lib, "_decode_entries", {})
    monkeypatch.setattr(_lib, "_raw_stream", lambda index: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    yield torch.ops.cuda_fa_native.kvcache_decode.default
    torch.ops.cuda_fa_native.forget_plans()
    if native.kvcache_decode is not None and native._state.get("entries"):
        native.configure(*native._state["entries"], "cuda")


def _fields(raw: bytes) -> dict:
    params = _lib.DecodeParams.from_buffer_copy(raw)
    return {name: (tuple(value) if isinstance(value := getattr(params, name), ctypes.Array) else value)
            for name, _ in _lib.DecodeParams._fields_}


def _last(stub) -> tuple[int, dict]:
    entry = stub.stub_last_entry()
    return entry, _fields(bytes(stub.stub_last().contents))


def _call(batch=2, heads_q=8, heads_kv=2, seqlen_q=1, length=256, dim=128, page=64, dtype=torch.bfloat16,
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


CASES = {  # (tensors, options: causal, scale, num_splits, split_size, window; the plan remembered)
    "paged bf16": (dict(), dict(), (4, 64, -1, -1)),
    "contiguous fp16": (dict(page=0, dtype=torch.float16), dict(causal=True), (1, 256, -1, -1)),
    "e4m3 with descales, d64": (dict(kv_dtype=E4M3, dim=64, page=16), dict(scale=0.3), (2, 128, -1, -1)),
    "d256, 4 queries, causal": (dict(dim=256, seqlen_q=4, page=128), dict(causal=True, split_size=128),
                                (2, 128, -1, -1)),
    "MLA latent view": (dict(mla=True, heads_q=16, page=64), dict(num_splits=2), (2, 128, -1, -1)),
    "strided q, window": (dict(q_strided=True), dict(window=(100, 0)), (1, 256, 100, -1)),
    "GQA 8/1, page 256": (dict(heads_kv=1, page=256, length=512), dict(), (3, 192, -1, -1)),
}


def _options(opts):
    return (opts.get("causal", False), opts.get("scale"), opts.get("num_splits"), opts.get("split_size"),
            *opts.get("window", (-1, -1)))


def _remember(tensors, opts, plan):
    q, k, v, _, table, *_ = tensors
    capacity = table.shape[-1] * k.shape[1] if table is not None else k.shape[1]
    native.remember_plan(q, k.shape[2], v.shape[3], capacity, k.dtype == E4M3, opts.get("num_splits"),
                         opts.get("split_size"), opts.get("window", (-1, -1)), plan)


@pytest.mark.parametrize("name", list(CASES))
def test_entry_fills_the_block_as_the_python_launch_does(entry, stub, name, monkeypatch):
    shape, opts, plan = CASES[name]
    tensors = _call(**shape)
    monkeypatch.setattr(native, "kvcache_decode", entry)  # remember_plan without loading the real one
    _remember(tensors, opts, plan)
    causal, scale, num_splits, split_size, left, right = _options(opts)
    out, lse = entry(*tensors, causal, scale, num_splits, split_size, left, right)
    assert out is not None, "the entry did not take a valid call with a remembered plan"
    which, native_block = _last(stub)
    q, k, v, lengths, table, k_descale, v_descale = tensors
    assert which == (2 if shape.get("mla") else 1)
    assert out.shape == (*q.shape[:3], v.shape[3]) and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    # The Python path's launch of the same call and plan.
    splits, split_keys, kleft, kright = plan
    head_dim = q.shape[3]
    workspace = torch.empty(splits * q.shape[0] * q.shape[2] * q.shape[1] * (v.shape[3] + 1)) if splits > 1 else None
    _lib.launch_decode(q, k, v, torch.empty_like(out), torch.empty_like(lse), lengths, table, k_descale, v_descale,
                       workspace, causal=causal, scale=head_dim ** -0.5 if scale is None else scale,
                       num_splits=splits, split_keys=split_keys, window=(kleft, kright))
    which_py, python_block = _last(stub)
    assert which_py == which
    for field in ALLOCATED:
        assert (native_block[field] != 0) == (python_block[field] != 0), field
    assert native_block["out"] == out.data_ptr() and native_block["lse"] == lse.data_ptr()
    differ = {f: (native_block[f], python_block[f]) for f in native_block
              if f not in ALLOCATED and native_block[f] != python_block[f]}
    assert not differ, f"fields the two paths fill differently: {differ}"


def _bad_calls():
    """(name, tensors, options): each breaks one check of the Python path (compare.kvcache.check_inputs,
    check_splits, resolve_scale, oracle.check_window, cuda_impl._check_latent) on the base call."""
    def base(**kw):
        return list(_call(**kw))

    def edit(index, value, **kw):
        tensors = base(**kw)
        tensors[index] = value
        return tensors

    q, k, v, lengths, table, _, _ = _call()
    yield "q 3-D", edit(0, q[0]), {}
    yield "q float32", edit(0, q.float()), {}
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
    yield "MLA V not K's view", edit(2, torch.zeros(8, 64, 1, 512, dtype=torch.bfloat16), mla=True, heads_q=16), {}
    yield "MLA with a window", base(mla=True, heads_q=16), dict(window=(100, -1))
    yield "num_splits 0", base(), dict(num_splits=0)
    yield "split_size 100", base(), dict(split_size=100)
    yield "both split options", base(), dict(num_splits=2, split_size=128)
    yield "scale 0", base(), dict(scale=0.0)
    yield "scale inf", base(), dict(scale=float("inf"))
    yield "window -2", base(), dict(window=(-2, -1))


@pytest.mark.parametrize("name,tensors,opts", list(_bad_calls()), ids=lambda x: x if isinstance(x, str) else "")
def test_entry_takes_nothing_the_python_path_rejects(entry, stub, name, tensors, opts, monkeypatch):
    """Plans are remembered for the call's key as if the Python path had planned it (the key does not see what is
    broken), so only the entry's own checks stand between the call and a launch."""
    from compare import kvcache, oracle
    from cuda_impl import VARIANTS, _check_latent

    monkeypatch.setattr(native, "kvcache_decode", entry)
    q, k, v, lengths, table, k_descale, v_descale = tensors
    spec = VARIANTS["decode"]
    with pytest.raises((ValueError, TypeError, NotImplementedError)):  # the Python path's verdict
        layout = kvcache.check_inputs(q, k, v, cache_seqlens=lengths, block_table=table, k_new=None, v_new=None,
                                      k_descale=k_descale, v_descale=v_descale, dtypes=(torch.bfloat16, torch.float16),
                                      head_dims=spec["head_dims"], backend="cuda_impl",
                                      head_dim_pairs=spec["head_dim_pairs"])
        if layout.head_dim_v != layout.head_dim:
            _check_latent(k, v, opts.get("window", (-1, -1)))
        kvcache.check_splits(opts.get("num_splits"), opts.get("split_size"))
        kvcache.resolve_scale(opts.get("scale"), layout.head_dim)
        oracle.check_window(opts.get("window", (-1, -1)))
    if q.dim() == 4 and q.dtype in _lib.DTYPE_CODES and k.dim() == 4 and v.dim() == 4:
        _remember(tensors, opts, (1, 64, -1, -1))
    out, lse = entry(q, k, v, lengths, table, k_descale, v_descale, *_options(opts))
    assert out is None and lse is None, f"{name}: the entry took a call the Python path rejects"
    assert stub.stub_last_entry() == 0


def test_entry_leaves_tensors_that_need_grad_to_the_python_path(entry, stub, monkeypatch):
    """Where a tensor needs grad the Python path calls torch.library's op (cuda_impl.ops._eager is False); the
    entry declines such calls, whichever tensor it is."""
    from cuda_impl import ops

    monkeypatch.setattr(native, "kvcache_decode", entry)
    for index in (0, 1, 2, 5, 6):  # q, k_cache, v_cache, k_descale, v_descale
        tensors = list(_call(kv_dtype=E4M3, dtype=torch.float16))
        tensors[index] = tensors[index].detach().float().requires_grad_().to(tensors[index].dtype)
        assert not ops._eager(tensors)
        _remember(tensors, {}, (1, 256, -1, -1))
        assert entry(*tensors, *_options({}))[0] is None, f"tensor {index} needs grad, the entry took the call"
        assert stub.stub_last_entry() == 0


def test_entry_needs_a_remembered_plan(entry, stub, monkeypatch):
    """A valid call is taken only once the Python path has remembered its plan, and only for that key: another
    batch, capacity, split option or window answers None."""
    monkeypatch.setattr(native, "kvcache_decode", entry)
    tensors = _call()
    assert entry(*tensors, *_options({}))[0] is None
    _remember(tensors, {}, (1, 256, -1, -1))
    assert entry(*tensors, *_options({}))[0] is not None
    for other, opts in ((_call(batch=3), {}), (_call(length=512), {}), (tensors, dict(num_splits=2)),
                        (tensors, dict(window=(8, -1))), (_call(dtype=torch.float16), {})):
        assert entry(*other, *_options(opts))[0] is None
    assert torch.ops.cuda_fa_native.plan_count() == 1


@pytest.mark.gpu
def test_entry_matches_the_python_path_on_the_gpu(monkeypatch):
    """Both paths on the same inputs: the same bits (the same kernel and parameter block), and the entry took the
    second call of each shape."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    import cuda_impl
    from cuda_impl import decode

    monkeypatch.setattr(decode, "_plans", {})  # (so that each first call plans, and tells the entry, again)

    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [dict(), dict(page=0, dtype=torch.float16), dict(kv_dtype=E4M3, dim=64), dict(dim=256, seqlen_q=3),
             dict(mla=True, heads_q=16), dict(q_strided=True)]
    for shape in cases:
        q, k, v, lengths, table, k_descale, v_descale = _call(length=1024, device="cuda", **shape)
        q.copy_(torch.randn(q.shape, generator=gen, device="cuda"))
        for x in (k, v) if not shape.get("mla") else (k,):
            x.copy_(torch.randn(x.shape, generator=gen, device="cuda").to(x.dtype))
        kwargs = dict(cache_seqlens=lengths, block_table=table, k_descale=k_descale, v_descale=v_descale,
                      causal=shape.get("seqlen_q", 1) > 1, return_lse=True)
        cuda_impl.attention_with_kvcache(q, k, v, **kwargs)  # plans the shape
        taken = torch.ops.cuda_fa_native.taken_count()
        out, lse = cuda_impl.attention_with_kvcache(q, k, v, **kwargs)
        assert torch.ops.cuda_fa_native.taken_count() == taken + 1, f"{shape}: the entry did not take the call"
        with monkeypatch.context() as m:
            m.setattr(native, "kvcache_decode", None)
            ref_out, ref_lse = cuda_impl.attention_with_kvcache(q, k, v, **kwargs)
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse), shape
    assert native.unavailable_reason() is None
