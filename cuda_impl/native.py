"""The compiled decode entry: csrc/torch/kvcache_entry.cpp, the torch op "cuda_fa_native::kvcache_decode" that
takes an attention_with_kvcache call from the checks to the launch in C++ (a decode step's host time was most of
the call: Python checks, plan lookup, three allocations and the ctypes launch).

Unlike the kernels' library (torch-free, ctypes), this op is C++ against torch's own headers and libraries, whose
ABI changes between torch versions: it is built for the torch that runs (its version and ABI flag in the cache
digest) with the system's C++ compiler, in a few seconds, at the first decode call; `python -m cuda_impl.toolchain
--native --torch-root DIR` builds it here for another machine's torch (an unpacked wheel of that version), so that
the build can be carried in cuda_impl/_build.

The op takes a subset of the Python path's calls and the Python path remains their definition: it answers None
(not taken) unless every check passes and the call's split plan is one the Python path computed before, after
its own checks (`remember_plan`, called by cuda_impl.decode.forward). So a decode loop's first call of each shape
runs in Python and the rest in C++. Where the op cannot be built or loaded, `unavailable_reason()` says why, a
RuntimeWarning says so once, and every call stays on the Python path (same results, more host time).
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from compare import native_build
from compare.native_build import TorchBuild
from cuda_impl import toolchain

OP = native_build.NativeOp("cuda_fa_native", toolchain.CSRC_DIR / "torch" / "kvcache_entry.cpp",
                           (toolchain.CSRC_DIR / "decode" / "params_abi.h",), toolchain.BUILD_ROOT)

# The op once loaded and configured (cuda_impl.attention_with_kvcache reads it on every call: None until then, and
# when it is unavailable).
kvcache_decode = None
_state = {"tried": False, "reason": None}
_lock = threading.Lock()


def build(build: TorchBuild | None = None):
    """The op's library for `build` (default: the running torch), compiled when not cached."""
    return OP.build(build, label="cuda_impl: the compiled decode entry")


def configure(decode_entry: int, mla_entry: int, device_type: str = "cuda") -> None:
    """Tell the op what the Python path takes (one definition: cuda_impl.VARIANTS["decode"], compare.kvcache) and
    which C entries launch (addresses in the kernels' library; the tests give stubs and "cpu")."""
    from cuda_impl import KVCACHE_DTYPES, VARIANTS

    torch.ops.cuda_fa_native.configure(*native_build.rules(KVCACHE_DTYPES, VARIANTS["decode"]), decode_entry,
                                       mla_entry, device_type)


def load(path: Path | None = None, *, entries: tuple[int, int] | None = None, device_type: str = "cuda"):
    """Build (if needed), load and configure the op once; returns it, or None with unavailable_reason() set (and
    one RuntimeWarning). `path` / `entries` / `device_type`: the tests' stand-ins for the build and the kernels'
    library."""
    global kvcache_decode
    if _state["tried"]:  # (what a first call left; the tests set it aside at times)
        return kvcache_decode

    def attempt():
        nonlocal entries
        torch.ops.load_library(str(path or build()))
        if entries is None:
            from cuda_impl import _lib

            lib = _lib.load()
            entries = tuple(native_build.function_address(getattr(lib, name))
                            for name in ("cuda_fa_decode", "cuda_fa_mla_decode"))
        configure(*entries, device_type)
        _state["entries"] = entries
        return torch.ops.cuda_fa_native.kvcache_decode.default

    kvcache_decode = native_build.load_once(_state, _lock, "cuda_impl", attempt)
    return kvcache_decode


def unavailable_reason() -> str | None:
    """Why the compiled entry is not in use (None: loaded, or not tried yet: no decode call made)."""
    return _state["reason"]


def remember_plan(q, heads_kv: int, head_dim_v: int, capacity: int, fp8: bool, num_splits, split_size, window,
                  plan: tuple[int, int, int, int]) -> None:
    """Let the op take the calls that cuda_impl.decode.forward planned as `plan` (chunks, keys per chunk, window
    left, right as the kernel takes them) from these fields (q's shape, dtype and device, the cache's, the split
    options, the window as given). Loads the op on first use."""
    if kvcache_decode is None and load() is None:
        return
    from cuda_impl import _lib

    index = q.device.index
    # kvcache_entry.cpp's PlanKey, in its order; None (no split option) is -1, a CPU tensor's device -1.
    key = [*q.shape, _lib.DTYPE_CODES[q.dtype], -1 if index is None else index, heads_kv, head_dim_v, capacity,
           int(fp8), -1 if num_splits is None else num_splits, -1 if split_size is None else split_size, *window]
    torch.ops.cuda_fa_native.remember_plan(key, *plan)
