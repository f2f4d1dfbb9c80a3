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

import ctypes
import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from cuda_impl import toolchain

NAME = "cuda_fa_native"
SOURCE = toolchain.CSRC_DIR / "torch" / "kvcache_entry.cpp"
HEADERS = (toolchain.CSRC_DIR / "decode" / "params_abi.h",)
FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-Wall")

# The op once loaded and configured (cuda_impl.attention_with_kvcache reads it on every call: None until then, and
# when it is unavailable).
kvcache_decode = None
_state = {"tried": False, "reason": None}
_lock = threading.Lock()


@dataclass(frozen=True)
class TorchBuild:
    """The torch an op is built against: its installation directory (include/, lib/), version and C++ ABI flag."""

    root: Path
    version: str
    cxx11_abi: bool

    @classmethod
    def running(cls) -> "TorchBuild":
        return cls(Path(torch.__file__).parent, torch.__version__, bool(torch._C._GLIBCXX_USE_CXX11_ABI))

    @classmethod
    def unpacked(cls, root: Path) -> "TorchBuild":
        """An unpacked torch wheel's torch/ folder (version from its version.py; wheels since torch 2.7 are built
        with the C++11 ABI)."""
        text = (root / "version.py").read_text()
        version = re.search(r"^__version__ = '([^']+)'", text, re.M)
        if version is None:
            raise ValueError(f"{root / 'version.py'}: no __version__")
        return cls(root, version.group(1), True)


def _flags(build: TorchBuild) -> list[str]:
    return [*FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(build.cxx11_abi)}"]


def library_path(build: TorchBuild) -> Path:
    """_build/cuda_fa_native-<digest>/libcuda_fa_native.so; the digest covers the sources, the flags and the torch
    version (not paths: a build made here is found on the GPU machine)."""
    h = hashlib.sha256()
    h.update("\0".join([*_flags(build), build.version]).encode())
    for path in (SOURCE, *HEADERS):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return toolchain.BUILD_ROOT / f"{NAME}-{h.hexdigest()[:16]}" / f"lib{NAME}.so"


def build(build: TorchBuild | None = None) -> Path:
    """The op's library for `build` (default: the running torch), compiled when not cached."""
    build = build or TorchBuild.running()
    path = library_path(build)
    if path.is_file():
        return path
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise toolchain.BuildError(f"cannot build {NAME}: no C++ compiler (c++ / g++) on PATH; no cached build at "
                                   f"{path.parent}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(toolchain.BUILD_ROOT / f"{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        print(f"cuda_impl: building the compiled decode entry for torch {build.version} (once; about 10 s) in "
              f"{path.parent}", file=sys.stderr, flush=True)
        include = build.root / "include"
        command = [compiler, *_flags(build), f"-I{include}", f"-I{include / 'torch/csrc/api/include'}", str(SOURCE),
                   "-o", str(path) + ".part", f"-L{build.root / 'lib'}", "-lc10", "-ltorch_cpu"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise toolchain.BuildError(f"building {NAME} failed:\n{(result.stdout + result.stderr)[-8000:]}")
        Path(str(path) + ".part").rename(path)
    return path


def _entry_address(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def configure(decode_entry: int, mla_entry: int, device_type: str = "cuda") -> None:
    """Tell the op what the Python path takes (one definition: cuda_impl.VARIANTS["decode"], compare.kvcache) and
    which C entries launch (addresses in the kernels' library; the tests give stubs and "cpu")."""
    from compare import kvcache
    from cuda_impl import VARIANTS

    spec = VARIANTS["decode"]
    pairs = [d for pair in spec["head_dim_pairs"] for d in pair]
    torch.ops.cuda_fa_native.configure(list(spec["head_dims"]), pairs, list(kvcache.PAGE_SIZES),
                                       spec["max_seqlen_q"], kvcache.SPLIT_MULTIPLE, decode_entry, mla_entry,
                                       device_type)


def load(path: Path | None = None, *, entries: tuple[int, int] | None = None, device_type: str = "cuda"):
    """Build (if needed), load and configure the op once; returns it, or None with unavailable_reason() set (and
    one RuntimeWarning). `path` / `entries` / `device_type`: the tests' stand-ins for the build and the kernels'
    library."""
    global kvcache_decode
    with _lock:
        if _state["tried"]:
            return kvcache_decode
        _state["tried"] = True
        try:
            torch.ops.load_library(str(path or build()))
            if entries is None:
                from cuda_impl import _lib

                lib = _lib.load()
                entries = (_entry_address(lib, "cuda_fa_decode"), _entry_address(lib, "cuda_fa_mla_decode"))
            configure(*entries, device_type)
            _state["entries"] = entries
        except (OSError, RuntimeError, toolchain.BuildError) as exc:
            _state["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            warnings.warn(f"cuda_impl: the compiled decode entry is unavailable ({_state['reason']}); "
                          "attention_with_kvcache runs its Python path (same results, more host time per call)",
                          RuntimeWarning, stacklevel=3)
            return None
        kvcache_decode = torch.ops.cuda_fa_native.kvcache_decode.default
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
