"""The compiled decode entry: csrc/kvcache_launch.cpp, the torch op "triton_fa_native::kvcache_decode" that takes
an attention_with_kvcache call from the checks to the launches of the compiled Triton kernels in C++ (a decode
step's host time was most of the call: Python checks, the prepared call's lookup, four allocations and two calls
of Triton's launcher with about 60 arguments each).

The op replays launches the Python path made: after the Python path runs a call on a CUDA device
(triton_impl.decode._decode_impl), `remember` gives the op that call's kernels as Triton compiled them (each
kernel's CUfunction, grid, block, shared memory and parameters: kernels.decode.Launch.record) under a key of
everything Triton specialised on. A later call of the same key, on plain tensors and with Triton launching as it
does by default (`plain_launches`: no launch hooks, e.g. a profiler's, no debug or instrumented builds), runs in
C++: the checks of compare/kvcache.py, the allocations, cuLaunchKernel. Anything else answers None and runs the
Python path, which stays the one definition of what is accepted and where errors are raised.

Built with compare.native_build against the running torch at the first recorded call (about 10 s; a line on
stderr says so), or here for another machine's torch: `python -m triton_impl.native --torch-root DIR` (an unpacked
wheel's torch/ folder), then carry triton_impl/_build. Where it cannot be built or loaded, `unavailable_reason()`
says why, a RuntimeWarning says so once, and every call stays on the Python path (same results, more host time).
"""

from __future__ import annotations

import argparse
import ctypes
import threading
from pathlib import Path

import torch

from compare import native_build
from compare.native_build import TorchBuild

OP = native_build.NativeOp("triton_fa_native", Path(__file__).resolve().parent / "csrc" / "kvcache_launch.cpp", (),
                           Path(__file__).resolve().parent / "_build")
# q's (and a 16-bit cache's) dtypes in triton_impl.attention_with_kvcache
KVCACHE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# The op once loaded and configured (triton_impl.attention_with_kvcache reads it on every call: None until then,
# and when it is unavailable).
kvcache_decode = None
_state = {"tried": False, "reason": None}
_lock = threading.Lock()
_knobs = None  # triton.knobs, once loaded (this module imports without Triton)


def build(build: TorchBuild | None = None) -> Path:
    """The op's library for `build` (default: the running torch), compiled when not cached."""
    return OP.build(build, label="triton_impl: the compiled decode entry")


def configure(launch_entry: int, device_type: str = "cuda") -> None:
    """Tell the op what the Python path takes (triton_impl.VARIANTS["decode"], compare.kvcache) and what launches
    (the driver's cuLaunchKernel; a recorder in the tests, with "cpu")."""
    from triton_impl.kernels.decode import LOG2E
    from triton_impl.variants import VARIANTS

    torch.ops.triton_fa_native.configure(*native_build.rules(KVCACHE_DTYPES, VARIANTS["decode"]), launch_entry,
                                         LOG2E, device_type)


def load(path: Path | None = None, *, launch_entry: int | None = None, device_type: str = "cuda"):
    """Build (if needed), load and configure the op once; returns it, or None with unavailable_reason() set (and
    one RuntimeWarning). `path` / `launch_entry` / `device_type`: the tests' stand-ins."""
    global kvcache_decode
    if _state["tried"]:  # (what a first call left; the tests set it aside at times)
        return kvcache_decode

    def attempt():
        import triton

        torch.ops.load_library(str(path or build()))
        entry = launch_entry or native_build.function_address(ctypes.CDLL("libcuda.so.1").cuLaunchKernel)
        configure(entry, device_type)
        _state["launch_entry"] = entry
        global _knobs
        _knobs = triton.knobs
        return torch.ops.triton_fa_native.kvcache_decode.default

    kvcache_decode = native_build.load_once(_state, _lock, "triton_impl", attempt)
    return kvcache_decode


def unavailable_reason() -> str | None:
    """Why the compiled entry is not in use (None: loaded, or not tried yet: no decode call recorded)."""
    return _state["reason"]


def _quiet(hook) -> bool:
    """A launch hook that calls nothing: None, or an empty chain (Triton's default; a profiler adds to it)."""
    return hook is None or (type(hook) is _knobs.HookChain and not hook.calls)


def plain_launches() -> bool:
    """Whether Triton launches as by default: no launch hooks (a profiler's, or a function set in their place), no
    debug or instrumented kernels. The op records and replays only such launches; otherwise the Python path,
    through Triton, takes every call."""
    runtime = _knobs.runtime
    return not (runtime.debug or _knobs.compilation.instrumentation_mode) and _quiet(runtime.launch_enter_hook) \
        and _quiet(runtime.launch_exit_hook)


def remember(prepared, addresses: list, q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale,
             causal, num_splits, split_size, window_left, window_right) -> None:
    """Let the op take the later calls of this call's key: `prepared` the call's prepared launch and allocations
    (triton_impl.decode._Prepared), `addresses` what its Launch returned, the other arguments as
    triton_impl.decode._decode_impl launched them (num_splits / split_size 0 for None, the window normalised).
    Loads the op on first use; nothing where it is unavailable or the launches have no record (Launch.record)."""
    if (kvcache_decode is None and load() is None) or not plain_launches():
        return
    record = prepared.launch.record(addresses)
    if record is None:
        return
    shapes = []
    for shape in (prepared.out_shape, prepared.lse_shape, prepared.ws_o_shape or (), prepared.ws_lse_shape or ()):
        shapes += (len(shape), *shape)
    torch.ops.triton_fa_native.remember_launch(q, k_cache, v_cache, cache_seqlens, block_table, k_descale,
                                               v_descale, bool(causal), num_splits or None, split_size or None,
                                               window_left, window_right, shapes, record)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="build the compiled decode entry for the running torch or, with "
                                     "--torch-root, for another machine's (then carry triton_impl/_build)")
    parser.add_argument("--torch-root", type=Path, help="an unpacked torch wheel's torch/ folder (include/, lib/, "
                        "version.py)")
    args = parser.parse_args()
    print(build(TorchBuild.unpacked(args.torch_root) if args.torch_root else None))
