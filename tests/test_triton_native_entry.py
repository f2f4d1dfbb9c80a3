"""The compiled decode entry of triton_impl (triton_impl/native.py, triton_impl/csrc/kvcache_launch.cpp), on the
CPU: built against this machine's torch, configured to take CPU tensors with a stub cuLaunchKernel that records
each launch (nothing runs).

- kernels.decode._Kernel.record maps a compiled kernel's signature to the op's parameter list as Triton's launcher
  passes them (pointers by tensor, the scale, ints; constexprs and ints specialised as 1 left out), and declines
  launches the op does not do;
- a recorded call is replayed exactly: functions, grids, blocks, shared memory, every parameter (each pointer the
  right tensor's address, absent ones lse's, the scale as float32(scale * log2 e)), Triton's two scratch pointers
  null, the allocations in the recorded shapes;
- it takes nothing the Python path rejects, no tensor that needs grad, and only calls of a recorded key (the
  window as the Python path normalises it);
- the GPU test (marked gpu) runs both paths on the same inputs: the same bits, and the entry took the calls.
"""

from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

import pytest
import torch

import kvcache_calls
from compare import native_build
from kvcache_calls import E4M3, call, options
from triton_impl import native

MAX_PARAMS = 96


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    """A library with cuLaunchKernel's signature that records up to two launches (the parameter count of each is
    told first: the op keeps every parameter in an 8-byte slot, so 8 bytes are read from each)."""
    lib = kvcache_calls.compiled_stub(tmp_path_factory.mktemp("triton_native_stub"), f"""#include <stdint.h>
#include <string.h>
typedef struct {{ uint64_t function, grid[3], block[3], shared, stream, params[{MAX_PARAMS + 2}]; }} Launch;
static Launch launches[2];
static int expected[2], count;
void stub_expect(int split, int merge) {{ expected[0] = split; expected[1] = merge; count = 0; }}
int stub_count(void) {{ return count; }}
const Launch *stub_launch_record(int i) {{ return &launches[i]; }}
int stub_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, void *stream, void **params, void **extra) {{
  if (count >= 2 || extra) return 999;
  Launch *l = &launches[count];
  l->function = (uint64_t)f; l->grid[0] = gx; l->grid[1] = gy; l->grid[2] = gz;
  l->block[0] = bx; l->block[1] = by; l->block[2] = bz; l->shared = shared; l->stream = (uint64_t)stream;
  for (int i = 0; i < expected[count] + 2; i++) memcpy(&l->params[i], params[i], 8);
  count++;
  return 0;
}}
""")

    class Launch(ctypes.Structure):
        _fields_ = [("function", ctypes.c_uint64), ("grid", ctypes.c_uint64 * 3), ("block", ctypes.c_uint64 * 3),
                    ("shared", ctypes.c_uint64), ("stream", ctypes.c_uint64),
                    ("params", ctypes.c_uint64 * (MAX_PARAMS + 2))]

    lib.stub_launch_record.restype = ctypes.POINTER(Launch)
    return lib


@pytest.fixture
def entry(stub, monkeypatch):
    """The op configured for CPU tensors and the stub launch, nothing recorded. Restores a real load's
    configuration (if one was made)."""
    ops = kvcache_calls.loaded_entry(native, "triton_fa_native")
    native.configure(native_build.function_address(stub.stub_launch), "cpu")
    ops.forget_launches()
    stub.stub_expect(0, 0)
    yield torch.ops.triton_fa_native.kvcache_decode.default
    torch.ops.triton_fa_native.forget_launches()
    if native.kvcache_decode is not None and native._state.get("launch_entry"):
        native.configure(native._state["launch_entry"], "cuda")


# ---------------------------------------------------------------- the record of a compiled kernel

def _compiled(signature: dict, **meta):
    """A stand-in for Triton's CompiledKernel: what record() reads of it."""
    metadata = dict(num_ctas=1, launch_pdl=False, launch_cooperative_grid=False, global_scratch_size=0,
                    profile_scratch_size=0, num_warps=4, shared=12288)
    return SimpleNamespace(function=0xF00D, src=SimpleNamespace(signature=signature),
                           metadata=SimpleNamespace(**{**metadata, **meta}))


def _kernel(compiled, addresses):
    from triton_impl.kernels import decode as kernels

    kernel = kernels._Kernel(None, (3, 2), (5, 1, 7, 2 ** 33), dict(A=64, B=True), {}, 0)
    kernel.interpreted = False
    kernel.constexpr_values = (64, True)
    kernel.compiled[kernel._key(addresses)] = compiled
    return kernel


SIGNATURE = {"q": "*bf16", "k": "*bf16", "out": "*fp32", "scale": "fp32", "n": "i32", "one": "constexpr",
             "m": "i32", "big": "i64", "A": "constexpr", "B": "constexpr"}


def test_record_follows_the_compiled_signature():
    """Pointers by slot, the float as the scale, ints with their widths; constexprs (the declared ones and an int
    Triton specialised as 1) left out, as Triton's launcher leaves them."""
    from triton_impl.kernels import decode as kernels

    addresses = [0x1000, 0x2000, 0x3000]
    record = _kernel(_compiled(SIGNATURE), addresses).record((0, 1, 3), addresses)
    assert record == [0xF00D, 3, 2, 1, 128, 12288, 7,
                      kernels.RECORD_POINTER, 0, kernels.RECORD_POINTER, 1, kernels.RECORD_POINTER, 3,
                      kernels.RECORD_SCALE, 0, kernels.RECORD_I32, 5, kernels.RECORD_I32, 7,
                      kernels.RECORD_I64, 2 ** 33]


@pytest.mark.parametrize("change", [dict(global_scratch_size=64), dict(profile_scratch_size=8), dict(num_ctas=2),
                                    dict(launch_pdl=True), dict(launch_cooperative_grid=True), "fp16 argument",
                                    "other alignment"])
def test_record_declines_what_the_op_does_not_launch(change):
    addresses = [0x1000, 0x2000, 0x3000]
    if change == "fp16 argument":
        kernel = _kernel(_compiled({**SIGNATURE, "scale": "fp16"}), addresses)
    else:
        kernel = _kernel(_compiled(SIGNATURE, **(change if isinstance(change, dict) else {})), addresses)
    if change == "other alignment":
        addresses = [0x1008, 0x2000, 0x3000]  # a kernel compiled for another pointer alignment
    assert kernel.record((0, 1, 3), addresses) is None


# ---------------------------------------------------------------- the op replaying a record

SPLIT_FUNCTION, MERGE_FUNCTION = 0xA11, 0xB22


def _record(split: bool):
    """A hand-made record of a split kernel over all eleven slots (and a merge over six), with every kind."""
    from triton_impl.kernels import decode as kernels

    pointer, scale, i32, i64 = (kernels.RECORD_POINTER, kernels.RECORD_SCALE, kernels.RECORD_I32,
                                kernels.RECORD_I64)
    slots = kernels.Launch(None, None, True, True, True).slots if not split else tuple(range(11))
    params = [p for s in slots for p in (pointer, s)] + [scale, 0, i32, -3, i64, 2 ** 40, i32, 2 ** 31 - 1]
    record = [SPLIT_FUNCTION, 4, 3, 2, 256, 50000, len(params) // 2, *params]
    if split:
        merge = [p for s in (5, 6, 3, 4, 7, 10) for p in (pointer, s)] + [i32, 9]
        record += [MERGE_FUNCTION, 7, 1, 2, 128, 0, len(merge) // 2, *merge]
    return record


def _remember(tensors, opts, record, split=False, window=None):
    q, k, v, lengths, table, k_descale, v_descale = tensors
    batch, seqlen_q, heads_q = q.shape[:3]
    heads_kv, dim_v = k.shape[2], v.shape[3]
    shapes = [4, batch, seqlen_q, heads_q, dim_v, 3, batch, heads_q, seqlen_q]
    shapes += [5, batch, heads_kv, 3, seqlen_q * heads_q // heads_kv, dim_v, 4, batch, heads_kv, 3,
               seqlen_q * heads_q // heads_kv] if split else [0, 0]
    causal, _, num_splits, split_size, left, right = options(opts)
    left, right = window or (left, right)
    torch.ops.triton_fa_native.remember_launch(q, k, v, lengths, table, k_descale, v_descale, causal, num_splits,
                                               split_size, left, right, shapes, record)


def _launch(stub, i):
    record = stub.stub_launch_record(i).contents
    return record.function, tuple(record.grid), tuple(record.block), record.shared, list(record.params)


def _as_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


@pytest.mark.parametrize("split", [False, True], ids=["one chunk", "split and merge"])
@pytest.mark.parametrize("shape", [dict(), dict(page=0, dtype=torch.float16), dict(kv_dtype=E4M3, dim=64),
                                   dict(dtype=torch.float32, q_strided=True), dict(mla=True, heads_q=16)],
                         ids=["paged bf16", "contiguous fp16", "e4m3", "fp32 strided q", "MLA view"])
def test_entry_replays_the_recorded_launches(entry, stub, split, shape):
    from triton_impl.kernels.decode import LOG2E

    tensors = call(**shape)
    q, k, v, lengths, table, k_descale, v_descale = tensors
    record = _record(split)
    _remember(tensors, {}, record, split)
    n_split = record[6]
    stub.stub_expect(n_split, 7 if split else 0)
    out, lse = entry(*tensors, *options(dict(scale=0.3)))
    assert out is not None, "the entry did not take a recorded call"
    assert stub.stub_count() == (2 if split else 1)
    assert out.shape == (*q.shape[:3], v.shape[3]) and out.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    function, grid, block, shared, params = _launch(stub, 0)
    assert (function, grid, block, shared) == (SPLIT_FUNCTION, (4, 3, 2), (256, 1, 1), 50000)
    absent = lse.data_ptr()
    pointers = params[:11]
    assert pointers[:5] == [t.data_ptr() for t in (q, k, v, out, lse)]
    if split:
        ws_o, ws_lse = pointers[5], pointers[6]
        assert len({ws_o, ws_lse, absent}) == 3 and ws_o and ws_lse, "the split partials were not allocated"
    else:
        assert pointers[5:7] == [absent, absent]
    assert pointers[7:] == [t.data_ptr() if t is not None else absent for t in (lengths, table, k_descale, v_descale)]
    scale_bits, *ints = params[11:15]
    assert _as_float(scale_bits) == struct.unpack("<f", struct.pack("<f", 0.3 * LOG2E))[0]
    assert [ctypes.c_int32(ints[0]).value, ints[1], ctypes.c_int32(ints[2]).value] == [-3, 2 ** 40, 2 ** 31 - 1]
    assert params[n_split:n_split + 2] == [0, 0], "Triton's scratch pointers must be null"
    if split:
        function, grid, block, shared, merge = _launch(stub, 1)
        assert (function, grid, block, shared) == (MERGE_FUNCTION, (7, 1, 2), (128, 1, 1), 0)
        assert merge[:6] == [pointers[5], pointers[6], out.data_ptr(), absent, lengths.data_ptr(),
                             v_descale.data_ptr() if v_descale is not None else absent]
        assert ctypes.c_int32(merge[6]).value == 9 and merge[7:9] == [0, 0]


def test_absent_tensors_point_at_lse(entry, stub):
    """A call without a block table or descales, one chunk: those slots, and the partials', are lse's address."""
    tensors = call(page=0)
    record = _record(split=True)[:7 + 2 * 11 + 8]  # the split kernel over all slots, no merge
    record[6] = 15
    _remember(tensors, {}, record)
    stub.stub_expect(15, 0)
    out, lse = entry(*tensors, *options({}))
    pointers = _launch(stub, 0)[4][:11]
    absent = lse.data_ptr()
    assert pointers[5:7] == [absent, absent] and pointers[8:] == [absent, absent, absent]
    assert pointers[7] == tensors[3].data_ptr()


@pytest.mark.parametrize("name,tensors,opts", list(kvcache_calls.bad_calls()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_entry_takes_nothing_the_python_path_rejects(entry, stub, name, tensors, opts):
    """A launch is recorded for the call's own key (the key does not see what is broken), so only the entry's
    checks stand between the call and a launch."""
    from triton_impl.variants import VARIANTS

    assert kvcache_calls.python_path_rejects(tensors, opts, native.KVCACHE_DTYPES, VARIANTS["decode"]), name
    q, k, v = tensors[:3]
    if all(isinstance(t, torch.Tensor) for t in tensors[:4]):
        _remember(tensors, opts, _record(False))
    stub.stub_expect(15, 0)
    out, lse = entry(*tensors, *options(opts))
    assert out is None and lse is None, f"{name}: the entry took a call the Python path rejects"
    assert stub.stub_count() == 0


def test_entry_leaves_tensors_that_need_grad_to_the_python_path(entry, stub):
    for index in (0, 1, 2, 5, 6):  # q, k_cache, v_cache, k_descale, v_descale
        tensors = list(call(kv_dtype=E4M3, dtype=torch.float16))
        tensors[index] = tensors[index].detach().float().requires_grad_().to(tensors[index].dtype)
        _remember(tensors, {}, _record(False))
        assert entry(*tensors, *options({}))[0] is None, f"tensor {index} needs grad, the entry took the call"
        assert stub.stub_count() == 0


def test_entry_needs_a_recorded_key(entry, stub):
    """Taken only once recorded, and only for that key: another shape, stride, alignment, dtype, option or
    device-visible difference answers None."""
    tensors = call()
    stub.stub_expect(15, 0)
    assert entry(*tensors, *options({}))[0] is None
    _remember(tensors, {}, _record(False))
    assert entry(*tensors, *options({}))[0] is not None
    q = tensors[0]
    shifted = torch.zeros(q.numel() + 8, dtype=q.dtype)[8:].view(q.shape)  # another q, 16-byte aligned as well
    lengths_misaligned = torch.zeros(3, dtype=torch.int32)[1:]  # 4-byte aligned: Triton specialises on it
    others = [(call(batch=3), {}), (call(length=512), {}), (tensors, dict(num_splits=2)), (tensors, dict(causal=True)),
              (tensors, dict(window=(8, -1))), (call(dtype=torch.float16), {}), (call(q_strided=True), {}),
              ([*tensors[:3], lengths_misaligned, *tensors[4:]], {})]
    for other, opts in others:
        assert entry(*other, *options(opts))[0] is None, opts
    assert entry(shifted, *tensors[1:], *options({}))[0] is not None  # same key: aligned alike
    assert torch.ops.triton_fa_native.launch_count() == 1


@pytest.mark.parametrize("given,launched,seqlen_q,causal", [
    ((100, 5), (100, -1), 1, True),      # causal: right 0, which reaches Sq - 1 = 0: unbounded
    ((100, 5), (100, 0), 4, True),       # causal: right 0
    ((100, 2), (100, 2), 4, False),
    ((100, 3), (100, -1), 4, False),     # right >= Sq - 1
    ((100000, -1), (-1, -1), 1, False),  # left past the capacity
])
def test_window_keys_as_the_python_path_launches_them(entry, stub, given, launched, seqlen_q, causal):
    """The Python path records the window it launched (normalised); the caller's window finds that record."""
    tensors = call(seqlen_q=seqlen_q)
    _remember(tensors, dict(causal=causal), _record(False), window=launched)
    stub.stub_expect(15, 0)
    assert entry(*tensors, *options(dict(causal=causal, window=given)))[0] is not None


@pytest.mark.gpu
def test_entry_matches_the_python_path_on_the_gpu(monkeypatch):
    """Both paths on the same inputs: the same bits (the same compiled kernels and arguments), and the entry took
    the second call of each shape."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    import triton_impl

    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [(dict(), {}), (dict(page=0, dtype=torch.float16), {}), (dict(kv_dtype=E4M3, dim=64), {}),
             (dict(dim=256, seqlen_q=3), dict(causal=True)), (dict(mla=True, heads_q=16), {}),
             (dict(q_strided=True, dtype=torch.float32), {}), (dict(dim=256, dtype=torch.float32), {}),
             (dict(mla=True, heads_q=16, dtype=torch.float32), {}), (dict(), dict(window=(200, 0))),
             (dict(page=0), dict(split_size=256)), (dict(seqlen_q=4), dict(num_splits=3, causal=True))]
    for shape, opts in cases:
        q, k, v, lengths, table, k_descale, v_descale = call(length=1024, device="cuda", **shape)
        q.copy_(torch.randn(q.shape, generator=gen, device="cuda"))
        for x in (k, v) if not shape.get("mla") else (k,):
            x.copy_(torch.randn(x.shape, generator=gen, device="cuda").to(x.dtype))
        kwargs = dict(cache_seqlens=lengths, block_table=table, k_descale=k_descale, v_descale=v_descale,
                      return_lse=True, **opts)
        triton_impl.attention_with_kvcache(q, k, v, **kwargs)  # compiles and records
        assert native.unavailable_reason() is None, native.unavailable_reason()
        taken = torch.ops.triton_fa_native.taken_count()
        out, lse = triton_impl.attention_with_kvcache(q, k, v, **kwargs)
        assert torch.ops.triton_fa_native.taken_count() == taken + 1, f"{shape} {opts}: the entry did not take it"
        with monkeypatch.context() as m:
            m.setattr(native, "kvcache_decode", None)
            ref_out, ref_lse = triton_impl.attention_with_kvcache(q, k, v, **kwargs)
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse), (shape, opts)


def test_only_default_launches_take_the_entry(monkeypatch):
    """plain_launches: the entry is offered calls only while Triton launches as by default; a profiler's hook in the
    chain, a function or None set in the chain's place, debug or instrumented kernels are Triton's to see."""
    triton = pytest.importorskip("triton")
    monkeypatch.setattr(native, "_knobs", triton.knobs)
    runtime = triton.knobs.runtime
    assert native.plain_launches()

    def hook(metadata):
        return None

    runtime.launch_enter_hook.add(hook)
    try:
        assert not native.plain_launches()
    finally:
        runtime.launch_enter_hook.remove(hook)
    assert native.plain_launches()
    with monkeypatch.context() as m:
        m.setattr(runtime, "launch_exit_hook", hook)
        assert not native.plain_launches()
        m.setattr(runtime, "launch_exit_hook", None)
        assert native.plain_launches()
    for knob, name, value in ((runtime, "debug", True), (triton.knobs.compilation, "instrumentation_mode", "fpsan")):
        with monkeypatch.context() as m:
            m.setattr(knob, name, value)
            assert not native.plain_launches(), name
