"""Host cost of one decode call, measured on a CPU machine: the Python work of each backend's
attention_with_kvcache (and attention() routed to the decode kernel) with the device launch replaced by a no-op,
so that a change to the host path can be measured without a GPU (scripts/bench_api_overhead_gpu.py --decode
measures the same calls on the GPU machine, beside SDPA).

    PYTHONPATH=. python scripts/host_cost_cpu.py [--calls N] [--rounds R] [--profile NAME]

The inputs are CPU tensors of b1 h32/8 q1 k4096 d128 bf16 (paged, pages of 64 keys, and contiguous). What stands
in for the GPU, and nothing else:
- cuda_impl: a stub library (compiled here with cc) registered in place of the CUDA library: its decode entries
  return 0 without reading anything, its tile and occupancy queries answer as on an H100 (64 keys a tile at d128,
  2 CTAs per SM); the current device is 0, its stream 0, 132 SMs; validate.check_device_and_arch sees a CUDA
  device in place of q's (the rest of that check runs). The compiled entry (cuda_impl.native, built here for this
  torch) is configured to take CPU tensors and launch the stub's entries: rows "compiled entry" run it, the others
  cuda_impl's Python path.
- triton_impl: a Triton driver whose current device is 0 and stream 0 (target sm_90); the first launch of each
  specialisation "compiles" to a kernel whose launcher does nothing (Triton's binding, specialisation, cache
  lookup and launch call all run); decode's device-type check takes CPU tensors (the rest of it runs).
Per call: the median over R rounds of N back-to-back calls (after a warm-up), microseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import functools
import io
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPE = dict(batch=1, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_k=4096, head_dim=128)
PAGE = 64
SMS = 132  # H100 SXM


def _stub_library(directory: Path) -> Path:
    """A shared library with cuda_impl's decode entry points as no-ops, and the struct sizes of _lib's mirrors
    (so that _lib.register_library's checks pass)."""
    from cuda_impl import _lib

    sizes = "\n".join(f"int {fn}(void) {{ return {ctypes.sizeof(struct)}; }}" for fn, struct, _ in _lib._STRUCTS)
    source = directory / "stub.c"
    source.write_text(f"""{sizes}
int cuda_fa_decode(const void *p, void *stream, char *err, int n) {{ return 0; }}
int cuda_fa_mla_decode(const void *p, void *stream, char *err, int n) {{ return 0; }}
int no_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
              void *stream, void **params, void **extra) {{ return 0; }}
int cuda_fa_decode_block_n(int head_dim, int kv_dtype) {{
  int keys = head_dim == 64 ? 32 : 16;
  if (kv_dtype == 2 && head_dim != 256) keys *= 2;
  return head_dim == 64 || head_dim == 128 || head_dim == 256 ? 4 * keys : -1;
}}
int cuda_fa_decode_ctas_per_sm(int dtype, int kv_dtype, int head_dim) {{ return head_dim == 256 ? 1 : 2; }}
""")
    path = directory / "libstub.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(path), str(source)], check=True)
    return path


class _NoLaunch:
    """What a compiled Triton kernel offers its callers (run, function, packed_metadata, launch_metadata), with a
    launcher that does nothing."""

    function = 0
    packed_metadata = ()

    def __init__(self, signature: dict, num_warps: int):
        self.run = lambda *args: None
        # what kernels.decode._Kernel.record reads of a compiled kernel (no scratch, one CTA, no shared memory)
        self.src = SimpleNamespace(signature=signature)
        self.metadata = SimpleNamespace(num_ctas=1, launch_pdl=False, launch_cooperative_grid=False,
                                        global_scratch_size=0, profile_scratch_size=0, num_warps=num_warps, shared=0)

    def launch_metadata(self, grid, stream, *args):
        return None


class CpuDriver:
    """The parts of Triton's active driver a launch asks for: device 0, stream 0, an sm_90 target (also the
    stand-in of tests/test_decode_host_cost.py)."""

    def __init__(self):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 0

    def get_current_target(self):
        return self.target


def install_fakes(workdir: Path) -> None:
    import torch

    import triton
    from triton.runtime.jit import JITFunction

    from compare import native_build
    from cuda_impl import _lib, native, validate
    from cuda_impl import decode as cuda_decode
    from triton_impl import decode as triton_decode
    from triton_impl import native as triton_native

    torch.cuda.current_device = lambda: 0
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.device = lambda index: contextlib.nullcontext()
    _lib._raw_stream = lambda index: 0
    stub = _stub_library(workdir)
    _lib.register_library((), stub)
    cuda_decode._sm_counts[0] = SMS
    # The compiled entry, taking CPU tensors, its launches the stub's.
    lib = _lib.load()
    native.load(entries=tuple(native_build.function_address(getattr(lib, name))
                              for name in ("cuda_fa_decode", "cuda_fa_mla_decode")),
                device_type="cpu")
    triton_native.load(launch_entry=native_build.function_address(ctypes.CDLL(str(stub)).no_launch), device_type="cpu")

    cuda_device = torch.device("cuda", 0)
    real_check = validate.check_device_and_arch

    class _OnCuda:
        device = cuda_device

    def check_device_and_arch(tensors, what, variant, spec):
        if tensors[0].device.type == "cpu":  # the stand-in for a CUDA tensor; the check runs on its device
            tensors = [_OnCuda] * len(tensors)
        return real_check(tensors, what, variant, spec)

    validate.check_device_and_arch = check_device_and_arch

    triton.runtime.driver.set_active(CpuDriver())

    def compile_nothing(self, key, signature, device, constexprs, options, attrs, warmup):
        kernel = _NoLaunch(signature, options.num_warps)
        self.device_caches[device][0][key] = kernel
        return kernel

    JITFunction._do_compile = compile_nothing
    real_devices = triton_decode.check_devices

    def check_devices(tensors):
        devices = {t.device for t in tensors}
        if devices == {torch.device("cpu")}:  # the stand-in for one CUDA device
            return None
        return real_devices(tensors)

    triton_decode.check_devices = check_devices


def _python_path(module, call):
    """call() with a backend's compiled entry (its module `native`) set aside."""
    entry, module.kvcache_decode = module.kvcache_decode, None
    try:
        return call()
    finally:
        module.kvcache_decode = entry


def _record_triton_call(q, k_cache, v_cache, lengths, table) -> None:
    """What triton_impl.decode._decode_impl does after a CUDA call: give its compiled entry the call's launches
    (here the no-op kernels' of the fake driver), so that the entry takes the later calls of its key."""
    import torch

    from triton_impl import decode as triton_decode
    from triton_impl import native

    _python_path(native, lambda: triton_decode.forward(q, k_cache, v_cache, lengths, table, causal=False,
                                                       scale=q.shape[-1] ** -0.5))
    prepared = list(triton_decode._prepared.values())[-1]
    f32 = dict(dtype=torch.float32)
    out, lse = torch.empty(prepared.out_shape, dtype=q.dtype), torch.empty(prepared.lse_shape, **f32)
    split = prepared.ws_o_shape is not None
    ws_o = torch.empty(prepared.ws_o_shape, **f32) if split else None
    ws_lse = torch.empty(prepared.ws_lse_shape, **f32) if split else None
    addresses = prepared.launch(q, k_cache, v_cache, out, lse, ws_o, ws_lse, lengths, table, None, None, 1.0)
    native.remember(prepared, addresses, q, k_cache, v_cache, lengths, table, None, None, False, 0, 0, -1, -1)


def calls():
    """{name: a function running one call} on the fixed shape."""
    import torch

    import cuda_impl
    import triton_impl
    from cuda_impl import decode as cuda_decode
    from cuda_impl import native
    from triton_impl import native as triton_native

    b, hq, hk, sq, sk, d = (SHAPE[k] for k in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim"))
    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, d, dtype=torch.bfloat16)
    pages = sk // PAGE
    paged_k = torch.randn(b * pages, PAGE, hk, d, dtype=torch.bfloat16)
    paged_v = torch.randn_like(paged_k)
    table = torch.arange(b * pages, dtype=torch.int32).reshape(b, pages)
    dense_k = torch.randn(b, sk, hk, d, dtype=torch.bfloat16)
    dense_v = torch.randn_like(dense_k)
    lengths = torch.full((b,), sk, dtype=torch.int32)
    q_bhsd, k_bhsd, v_bhsd = (x.transpose(1, 2).contiguous() for x in (q, dense_k, dense_v))
    out = {}
    for name, module in (("cuda_impl", cuda_impl), ("triton_impl", triton_impl)):
        kv = module.attention_with_kvcache
        out[f"{name} kvcache paged{PAGE}"] = (
            lambda kv=kv: kv(q, paged_k, paged_v, cache_seqlens=lengths, block_table=table))
        out[f"{name} kvcache contiguous"] = lambda kv=kv: kv(q, dense_k, dense_v, cache_seqlens=lengths)
    # cuda_impl through its compiled entry (cuda_impl.native; the rows above run its Python path, since the entry
    # is told of CUDA calls' plans only): the plan remembered as a first CUDA call would.
    if native.kvcache_decode is not None:
        plan = cuda_decode._plan(q, hk, d, sk, False, None, None, (-1, -1))
        native.remember_plan(q, hk, d, sk, False, None, None, (-1, -1), plan)
    # triton_impl through its compiled entry: the launches recorded as a first CUDA call would.
    if triton_native.load() is not None:
        _record_triton_call(q, paged_k, paged_v, lengths, table)
        _record_triton_call(q, dense_k, dense_v, lengths, None)
    for name, entry in (("cuda_impl", native), ("triton_impl", triton_native)):
        if entry.kvcache_decode is None:
            continue
        for cache in (f"paged{PAGE}", "contiguous"):
            row = f"{name} kvcache {cache}"
            out[f"{row}, compiled entry"] = out[row]
            out[row] = functools.partial(_python_path, entry, out[row])
    # attention() routed to the decode kernel (dense (B, H, S, D) inputs; cuda_impl's prefill checks need a CUDA
    # tensor, so only Triton's runs here)
    out["triton_impl attention variant=decode"] = lambda: triton_impl.attention(q_bhsd, k_bhsd, v_bhsd,
                                                                                variant="decode")
    return out


def per_call_us(fn, calls: int, rounds: int) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--profile", action="append", default=[], metavar="NAME", help="cProfile a row (its name "
                        "as printed, or a prefix of it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        install_fakes(Path(workdir))
        rows = calls()
        print(f"{'call (b1 h32/8 q1 k4096 d128 bf16)':44} {'host us/call':>12}")
        for name, fn in rows.items():
            print(f"{name:44} {per_call_us(fn, args.calls, args.rounds):12.1f}", flush=True)
        for prefix in args.profile:
            for name in (n for n in rows if n.startswith(prefix)):
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.calls):
                    rows[name]()
                prof.disable()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
                print(f"\n=== cProfile of {args.calls} calls: {name} ===\n{text.getvalue()}")


if __name__ == "__main__":
    main()
