"""The decode path's host-side caches, on the CPU (no kernel runs): what each cache is keyed by, so that a call of
another shape, dtype, split option or window never reuses a stale entry, and that a cached Triton launch passes
the compiled kernel exactly the arguments Triton's JIT would, and goes back through the JIT for a pointer
alignment it has not compiled for.

- cuda_impl.decode.forward: its launch plan (split count and chunk, the window's kernel form) per call shape,
  against the uncached computation, with the library's tile and occupancy queries stood in for.
- cuda_impl._lib.launch_decode: the reused per-thread parameter block holds each call's values.
- triton_impl: Triton's JIT runs with a driver that names device 0 and stream 0 and a compile that returns a
  kernel whose launcher records its arguments (nothing compiles or launches); triton_impl.decode's prepared calls
  per call shape, and kernels.decode's cached launches.
- scripts/host_cost_cpu.py (the CPU measurement of these paths) runs.
"""

from __future__ import annotations

import collections

import pytest
import torch

from cuda_impl import _lib
from cuda_impl import decode as cuda_decode


# --- cuda_impl ----------------------------------------------------------------------------------


@pytest.fixture
def cuda_plans(monkeypatch):
    """cuda_impl.decode.forward on CPU tensors: the library's queries answered here (bf16 takes 2 CTAs per SM,
    fp16 1, so that the dtype changes the plan), ops.decode recording what forward launches, and every
    uncached planning counted; returns (launched, planned, the uncached planning)."""
    monkeypatch.setattr(cuda_decode, "_plans", {})
    monkeypatch.setattr(_lib, "decode_block_n", lambda head_dim, fp8: 128 if fp8 else 64)
    monkeypatch.setattr(_lib, "decode_ctas_per_sm", lambda dtype, fp8, head_dim, device: 2 if dtype == torch.bfloat16
                        else 1)
    monkeypatch.setattr(cuda_decode, "_sm_count", lambda device: 132)
    launched, planned = [], []
    monkeypatch.setattr(cuda_decode.ops, "decode", lambda *args: launched.append(args[-4:]))
    real_plan = cuda_decode._plan

    def counted(*args):
        planned.append(args[1:])
        return real_plan(*args)

    monkeypatch.setattr(cuda_decode, "_plan", counted)
    return launched, planned, real_plan


def _cache(batch=1, heads_q=32, heads_kv=8, seqlen_q=1, length=4096, dim=128, page=64, dtype=torch.bfloat16,
           kv_dtype=None):
    """q, k_cache, v_cache, cache_seqlens, block_table (None: contiguous) of the sizes given; the caches broadcast
    one element (nothing here reads them)."""
    q = torch.zeros(batch, seqlen_q, heads_q, dim, dtype=dtype)
    pages = batch * length // page if page else batch
    k, v = (torch.zeros((), dtype=kv_dtype or dtype).expand(pages, page or length, heads_kv, dim) for _ in range(2))
    table = torch.arange(pages, dtype=torch.int32).view(batch, -1) if page else None
    return q, k, v, torch.full((batch,), length, dtype=torch.int32), table


CUDA_CALLS = {  # each differs from the first in one thing the plan depends on
    "base": (dict(), dict()),
    "capacity": (dict(length=8192), dict()),
    "batch": (dict(batch=4), dict()),
    "kv heads": (dict(heads_kv=4), dict()),
    "query length": (dict(seqlen_q=4), dict()),
    "long": (dict(length=1 << 17), dict()),
    "long, fp16 (occupancy)": (dict(length=1 << 17, dtype=torch.float16), dict()),
    "e4m3 cache (tile)": (dict(kv_dtype=torch.float8_e4m3fn), dict()),
    "contiguous, same capacity": (dict(page=0), dict()),
    "num_splits": (dict(), dict(num_splits=3)),
    "split_size": (dict(), dict(split_size=512)),
    "window": (dict(), dict(window=(1000, -1))),
    "window, right": (dict(seqlen_q=4), dict(window=(1000, 0))),
}


def test_cuda_plan_is_cached_per_call_shape_and_never_stale(cuda_plans):
    launched, planned, plan = cuda_plans
    for name, (shape, options) in CUDA_CALLS.items():
        q, k, v, lengths, table = _cache(**shape)
        for repeat in range(2):
            cuda_decode.forward(q, k, v, lengths, table, causal=False, scale=0.1, **options)
        assert len(planned) == len(cuda_decode._plans), f"{name}: planned again, or reused another shape's plan"
        heads_kv, head_dim_v = k.shape[2], v.shape[3]
        capacity = table.shape[1] * k.shape[1] if table is not None else k.shape[1]
        expected = plan(q, heads_kv, head_dim_v, capacity, k.dtype == torch.float8_e4m3fn,
                                     options.get("num_splits"), options.get("split_size"),
                                     options.get("window", (-1, -1)))
        assert launched[-2] == launched[-1] == expected, name
    # the contiguous cache of the same capacity plans as the paged one (the plan does not depend on the pages):
    # one fewer entry than calls
    assert len(cuda_decode._plans) == len(CUDA_CALLS) - 1
    splits = {name: launched[2 * i][0] for i, name in enumerate(CUDA_CALLS)}
    assert splits["long, fp16 (occupancy)"] != splits["long"] and splits["num_splits"] == 3  # the stand-ins bite


def test_cuda_plan_errors_are_not_cached(cuda_plans):
    q, k, v, lengths, table = _cache(heads_kv=8, length=1 << 22, page=256)
    for _ in range(2):
        with pytest.raises(ValueError, match="exceed the grid"):
            cuda_decode.forward(q, k, v, lengths, table, causal=False, scale=0.1, split_size=64)
    assert not cuda_decode._plans


def test_cuda_plan_cache_is_bounded(cuda_plans, monkeypatch):
    monkeypatch.setattr(cuda_decode, "PLAN_CACHE_SIZE", 3)
    for length in (1024, 2048, 4096, 8192):
        q, k, v, lengths, table = _cache(length=length)
        cuda_decode.forward(q, k, v, lengths, table, causal=False, scale=0.1)
    assert len(cuda_decode._plans) == 1


def test_cuda_launch_packs_each_call_into_the_reused_block(monkeypatch):
    """The per-thread DecodeParams is filled anew by each launch: the C entry sees this call's fields."""
    seen = []

    def entry(params, stream, err, err_len):
        seen.append(_lib.DecodeParams.from_buffer_copy(params))
        return 0

    monkeypatch.setattr(_lib, "_decode_entry", lambda extra_flags, mla: entry)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_lib, "_raw_stream", lambda index: 0)
    for length, splits, window in ((4096, 4, (-1, -1)), (1024, 1, (100, 0))):
        q, k, v, lengths, table = _cache(length=length)
        out, lse = torch.empty(1, 1, 32, 128, dtype=torch.bfloat16), torch.empty(1, 32, 1)
        workspace = torch.empty(splits * 32 * 129) if splits > 1 else None
        _lib.launch_decode(q, k, v, out, lse, lengths, table, None, None, workspace, causal=True, scale=0.5,
                           num_splits=splits, split_keys=1024, window=window)
        p = seen[-1]
        assert (p.q, p.k, p.v, p.out, p.lse, p.block_table, p.seqlens) == tuple(
            t.data_ptr() for t in (q, k, v, out, lse, table, lengths))
        assert (p.workspace or 0) == (workspace.data_ptr() if workspace is not None else 0) and not p.k_descale
        assert (p.max_pages, p.num_pages, p.page_size, p.num_splits, p.split_keys) == (
            length // 64, length // 64, 64, splits, 1024)
        assert (p.window_left, p.window_right, p.causal, p.scale) == (*window, 1, 0.5)
        assert tuple(p.q_stride) == q.stride()[:3] and p.block_table_stride == table.stride(0)
        assert (p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v) == (1, 1, 32, 8, 128, 128)
    misaligned = torch.zeros(32 * 128 + 1, dtype=torch.bfloat16)[1:].view(1, 1, 32, 128)
    with pytest.raises(ValueError, match="alignment: q must start on a 16-byte boundary"):
        _lib.launch_decode(misaligned, k, v, out, lse, lengths, table, None, None, None, causal=False, scale=0.5,
                           num_splits=1, split_keys=1024)


# --- triton_impl --------------------------------------------------------------------------------


def _cpu_driver():
    """scripts/host_cost_cpu.py's stand-in for Triton's active driver: device 0, stream 0, an sm_90 target."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "host_cost_cpu.py"
    spec = importlib.util.spec_from_file_location("host_cost_cpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CpuDriver()


@pytest.fixture
def triton_jit(monkeypatch):
    """Triton's JIT on the CPU: binding, specialisation and its kernel cache run; a compile (counted per kernel
    and specialisation key) returns a kernel whose launcher records (kernel, grid, arguments) with the pointers
    as addresses. triton_impl.decode's caches and the device and availability checks (which need a GPU) are
    emptied / stood in for."""
    triton = pytest.importorskip("triton")
    from triton.runtime.jit import JITFunction

    from triton_impl import decode
    from triton_impl.kernels import decode as kernels

    if kernels.tuning.interpreting():
        pytest.skip("checks the compiled launch path")
    compiles, launches = collections.Counter(), []

    class Compiled:
        function, packed_metadata = 7, ("metadata",)

        def __init__(self, name):
            def run(grid0, grid1, grid2, stream, function, metadata, launch_metadata, enter, exit_, *args):
                assert (stream, function, metadata) == (0, 7, ("metadata",))
                launches.append((name, (grid0, grid1, grid2),
                                 tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)))
            self.run = run

        def launch_metadata(self, grid, stream, *args):
            return None

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        compiles[self.fn.__name__] += 1
        kernel = self.device_caches[device][0][key] = Compiled(self.fn.__name__)
        return kernel

    monkeypatch.setattr(JITFunction, "_do_compile", do_compile)
    for kernel in (kernels._decode_split, kernels._decode_merge):
        monkeypatch.setattr(kernel, "device_caches", collections.defaultdict(kernel.create_binder))
    monkeypatch.setattr(triton.runtime.driver, "_active", _cpu_driver())
    monkeypatch.setattr(decode, "_prepared", {})
    monkeypatch.setattr(decode, "unavailable_reason", lambda variant: None)
    monkeypatch.setattr(decode, "check_devices", lambda tensors: None)
    return compiles, launches


def _triton_call(q, k, v, lengths, table, *, causal=False, num_splits=0, split_size=0, window=(-1, -1),
                 config=None):
    from triton_impl import decode
    return decode._decode_impl(q, k, v, lengths, table, None, None, causal, 0.1, num_splits, split_size, *window,
                               config=config)


def test_cached_triton_launch_passes_what_the_jit_passes(triton_jit):
    """The same tensors launched twice: the first launch goes through the JIT, the second through the compiled
    kernel's launcher with the same arguments (tensors as their addresses), for both kernels."""
    from triton_impl.kernels import decode as kernels
    compiles, launches = triton_jit
    q, k, v, lengths, table = _cache()
    out, lse = torch.empty(1, 1, 32, 128, dtype=torch.bfloat16), torch.empty(1, 32, 1)
    ws_o, ws_lse = torch.empty(1, 8, 3, 4, 128), torch.empty(1, 8, 3, 4)
    tile = kernels.tiles(128, 4)
    launch = kernels.prepare(q, k, v, lengths, table, None, None, out, lse, ws_o, ws_lse, False, 1408, 3, tile)
    for _ in range(2):
        launch(q, k, v, out, lse, ws_o, ws_lse, lengths, table, None, None, 0.1)
    assert compiles == {"_decode_split": 1, "_decode_merge": 1}
    assert [name for name, _, _ in launches] == ["_decode_split", "_decode_merge"] * 2
    assert launches[:2] == launches[2:]
    assert all(len(args) == len(kernels._decode_split.arg_names) for name, _, args in launches
               if name == "_decode_split")


def test_cached_triton_launch_goes_back_to_the_jit_for_a_new_specialisation(triton_jit, monkeypatch):
    """A q that is not 16-byte aligned is another specialisation: the JIT compiles for it, and its launches are
    cached beside the aligned ones; Triton's debug setting is another."""
    import triton

    from triton_impl.kernels import decode as kernels
    compiles, launches = triton_jit
    q, k, v, lengths, table = _cache()
    misaligned = torch.zeros(32 * 128 + 1, dtype=torch.bfloat16)[1:].view(1, 1, 32, 128)
    out, lse = torch.empty(1, 1, 32, 128, dtype=torch.bfloat16), torch.empty(1, 32, 1)
    launch = kernels.prepare(q, k, v, lengths, table, None, None, out, lse, None, None, False, 4096, 1,
                             kernels.tiles(128, 4))
    for query in (q, misaligned, q, misaligned):
        launch(query, k, v, lengths, table, None, None, out, lse, None, None, 0.1)
    assert compiles == {"_decode_split": 2} and len(launch.split.compiled) == 2
    assert [args[0] for _, _, args in launches] == [t.data_ptr() for t in (q, misaligned, q, misaligned)]
    monkeypatch.setattr(triton.knobs.runtime, "debug", True)
    launch(q, k, v, lengths, table, None, None, out, lse, None, None, 0.1)
    assert compiles == {"_decode_split": 3} and len(launch.split.compiled) == 3


TRITON_CALLS = {  # each differs from the first in one thing the prepared launch depends on
    "base": (dict(), dict()),
    "capacity": (dict(length=8192), dict()),
    "batch": (dict(batch=4), dict()),
    "kv heads": (dict(heads_kv=4), dict()),
    "query length": (dict(seqlen_q=4), dict()),
    "fp16": (dict(dtype=torch.float16), dict()),
    "contiguous": (dict(page=0), dict()),
    "page size": (dict(page=128), dict()),
    "causal": (dict(), dict(causal=True)),
    "num_splits": (dict(), dict(num_splits=5)),
    "split_size": (dict(), dict(split_size=512)),
    "window": (dict(), dict(window=(1000, -1))),
}


def test_triton_prepared_call_is_cached_per_call_shape_and_never_stale(triton_jit, monkeypatch):
    """Each call shape is prepared once; the second call reuses it (launching through the cached kernels) and
    launches what an uncached preparation of the same call launches (config={}: no cache), but for the
    addresses of the fresh out, lse and workspace."""
    from triton_impl import decode
    from triton_impl.kernels import decode as kernels
    compiles, launches = triton_jit
    prepared = []
    real_prepare = kernels.prepare
    monkeypatch.setattr(kernels, "prepare", lambda *args: prepared.append(args) or real_prepare(*args))
    for name, (shape, options) in TRITON_CALLS.items():
        inputs = _cache(**shape)
        count = len(prepared)
        _triton_call(*inputs, **options)
        start = len(launches)
        _triton_call(*inputs, **options)
        cached = launches[start:]
        assert len(prepared) == count + 1, f"{name}: prepared again, or reused another call shape's launch"
        _triton_call(*inputs, **options, config={})
        uncached = launches[start + len(cached):]
        assert len(prepared) == count + 2 and _by_input(cached, inputs) == _by_input(uncached, inputs), name
    assert len(decode._prepared) == len(TRITON_CALLS)
    splits = {name: p.n_splits for name, p in zip(TRITON_CALLS, decode._prepared.values())}
    assert splits["num_splits"] == 5 and splits["base"] == 3  # (3: the CPU's fixed count)


def _by_input(launches, inputs):
    """Launches with each address named by the input it is (q, k, v, lengths, table), or 'allocated' (out, lse,
    workspace: fresh each call)."""
    names = {t.data_ptr(): name for name, t in zip(("q", "k", "v", "lengths", "table"), inputs) if t is not None}
    return [(kernel, grid, tuple(names.get(a, "allocated") if isinstance(a, int) and a > 1 << 32 else a
                                 for a in args)) for kernel, grid, args in launches]


def test_the_cpu_host_cost_script_runs():
    """scripts/host_cost_cpu.py (its stand-ins patch torch and Triton for the whole process: a subprocess)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the stub library")
    repo = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "scripts/host_cost_cpu.py", "--calls", "3", "--rounds", "1"], cwd=repo,
                         env={**os.environ, "PYTHONPATH": str(repo), "TRITON_INTERPRET": "0"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "cuda_impl kvcache paged64" in run.stdout and "triton_impl attention variant=decode" in run.stdout
