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

import pytest
import torch

import kvcache_calls
from compare import native_build
from cuda_impl import _lib, native
from kvcache_calls import E4M3, call, options

SIZE = ctypes.sizeof(_lib.DecodeParams)
# DecodeParams fields the op allocates itself: their values differ between the two paths.
ALLOCATED = ("out", "lse", "workspace")


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    """A library with the decode entries as recorders (and the size queries of _lib's mirrors)."""
    sizes = "\n".join(f"int {fn}(void) {{ return {ctypes.sizeof(struct)}; }}" for fn, struct, _ in _lib._STRUCTS)
    lib = kvcache_calls.compiled_stub(tmp_path_factory.mktemp("native_stub"), f"""#include <string.h>
{sizes}
static unsigned char last[{SIZE}];
static int last_entry;
static int record(const void *p, int entry) {{ memcpy(last, p, {SIZE}); last_entry = entry; return 0; }}
int cuda_fa_decode(const void *p, void *stream, char *err, int n) {{ return record(p, 1); }}
int cuda_fa_mla_decode(const void *p, void *stream, char *err, int n) {{ return record(p, 2); }}
const unsigned char *stub_last(void) {{ return last; }}
int stub_last_entry(void) {{ int e = last_entry; last_entry = 0; return e; }}
""")
    lib.stub_last.restype = ctypes.POINTER(ctypes.c_ubyte * SIZE)
    return lib


@pytest.fixture
def entry(stub, monkeypatch):
    """The op configured for CPU tensors and the stub's entries, with no plan remembered; _lib's launches go to the
    stub too. Restores the configuration a real load made (if one did)."""
    ops = kvcache_calls.loaded_entry(native, "cuda_fa_native")
    native.configure(*(native_build.function_address(getattr(stub, name))
                       for name in ("cuda_fa_decode", "cuda_fa_mla_decode")), "cpu")
    ops.forget_plans()
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


def _remember(tensors, opts, plan):
    q, k, v, _, table, *_ = tensors
    capacity = table.shape[-1] * k.shape[1] if table is not None else k.shape[1]
    native.remember_plan(q, k.shape[2], v.shape[3], capacity, k.dtype == E4M3, opts.get("num_splits"),
                         opts.get("split_size"), opts.get("window", (-1, -1)), plan)


@pytest.mark.parametrize("name", list(CASES))
def test_entry_fills_the_block_as_the_python_launch_does(entry, stub, name, monkeypatch):
    shape, opts, plan = CASES[name]
    tensors = call(**shape)
    monkeypatch.setattr(native, "kvcache_decode", entry)  # remember_plan without loading the real one
    _remember(tensors, opts, plan)
    causal, scale, num_splits, split_size, left, right = options(opts)
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
    """(name, tensors, options): each breaks one check of the Python path: the shared ones (kvcache_calls), and
    cuda_impl's own (its dtypes, cuda_impl._check_latent)."""
    yield from kvcache_calls.bad_calls()
    q = call()[0]
    tensors = list(call())
    tensors[0] = q.float()
    yield "q float32", tensors, {}
    tensors = list(call(mla=True, heads_q=16))
    tensors[2] = torch.zeros(8, 64, 1, 512, dtype=torch.bfloat16)
    yield "MLA V not K's view", tensors, {}
    yield "MLA with a window", list(call(mla=True, heads_q=16)), dict(window=(100, -1))


@pytest.mark.parametrize("name,tensors,opts", list(_bad_calls()), ids=lambda x: x if isinstance(x, str) else "")
def test_entry_takes_nothing_the_python_path_rejects(entry, stub, name, tensors, opts, monkeypatch):
    """Plans are remembered for the call's key as if the Python path had planned it (the key does not see what is
    broken), so only the entry's own checks stand between the call and a launch."""
    from cuda_impl import KVCACHE_DTYPES, VARIANTS, _check_latent

    monkeypatch.setattr(native, "kvcache_decode", entry)
    q, k, v, lengths, table, k_descale, v_descale = tensors
    rejected = kvcache_calls.python_path_rejects(tensors, opts, KVCACHE_DTYPES, VARIANTS["decode"])
    if not rejected and v.shape[3] != q.shape[3]:
        with pytest.raises((ValueError, NotImplementedError)):
            _check_latent(k, v, opts.get("window", (-1, -1)))
        rejected = True
    assert rejected, f"{name}: the Python path takes this call"
    if q.dim() == 4 and q.dtype in _lib.DTYPE_CODES and k.dim() == 4 and v.dim() == 4:
        _remember(tensors, opts, (1, 64, -1, -1))
    out, lse = entry(q, k, v, lengths, table, k_descale, v_descale, *options(opts))
    assert out is None and lse is None, f"{name}: the entry took a call the Python path rejects"
    assert stub.stub_last_entry() == 0


def test_entry_leaves_tensors_that_need_grad_to_the_python_path(entry, stub, monkeypatch):
    """Where a tensor needs grad the Python path calls torch.library's op (cuda_impl.ops._eager is False); the
    entry declines such calls, whichever tensor it is."""
    from cuda_impl import ops

    monkeypatch.setattr(native, "kvcache_decode", entry)
    for index in (0, 1, 2, 5, 6):  # q, k_cache, v_cache, k_descale, v_descale
        tensors = list(call(kv_dtype=E4M3, dtype=torch.float16))
        tensors[index] = tensors[index].detach().float().requires_grad_().to(tensors[index].dtype)
        assert not ops._eager(tensors)
        _remember(tensors, {}, (1, 256, -1, -1))
        assert entry(*tensors, *options({}))[0] is None, f"tensor {index} needs grad, the entry took the call"
        assert stub.stub_last_entry() == 0


def test_entry_needs_a_remembered_plan(entry, stub, monkeypatch):
    """A valid call is taken only once the Python path has remembered its plan, and only for that key: another
    batch, capacity, split option or window answers None."""
    monkeypatch.setattr(native, "kvcache_decode", entry)
    tensors = call()
    assert entry(*tensors, *options({}))[0] is None
    _remember(tensors, {}, (1, 256, -1, -1))
    assert entry(*tensors, *options({}))[0] is not None
    for other, opts in ((call(batch=3), {}), (call(length=512), {}), (tensors, dict(num_splits=2)),
                        (tensors, dict(window=(8, -1))), (call(dtype=torch.float16), {})):
        assert entry(*other, *options(opts))[0] is None
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
        q, k, v, lengths, table, k_descale, v_descale = call(length=1024, device="cuda", **shape)
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
