"""Building a backend's compiled decode entry: a small C++ torch op library (cuda_impl/csrc/torch,
triton_impl/csrc) against torch's own headers and libraries, with the system's C++ compiler.

torch's C++ ABI changes between versions, so such a library is built for one torch: its version and ABI flag go
into the cache digest beside the sources' contents (not their paths: a build made here for another machine's
torch, from an unpacked wheel of that version, is found there when carried in the backend's build folder). Only
libc10 and libtorch_cpu are linked; the current CUDA stream comes through c10's device-guard registry, which
torch's CUDA library fills. The entries' shared C++ (compare/csrc: the checks of compare/kvcache.py) is on the
include path as "kvcache_checks.h".
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

SHARED_DIR = Path(__file__).resolve().parent / "csrc"
SHARED_HEADERS = tuple(sorted(SHARED_DIR.glob("*.h")))
FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-Wall")


class BuildError(RuntimeError):
    """A compiled entry could not be built here (no compiler, or the compiler failed)."""


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


@dataclass(frozen=True)
class NativeOp:
    """One op library: its name (lib<name>.so), its source, the headers it includes (beside the shared ones) and
    the folder its builds are cached in (<build_root>/<name>-<digest>/)."""

    name: str
    source: Path
    headers: tuple[Path, ...]
    build_root: Path

    def flags(self, build: TorchBuild) -> list[str]:
        return [*FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(build.cxx11_abi)}"]

    def library_path(self, build: TorchBuild) -> Path:
        """<build_root>/<name>-<digest>/lib<name>.so; the digest covers the sources, the flags and the torch
        version."""
        h = hashlib.sha256()
        h.update("\0".join([*self.flags(build), build.version]).encode())
        for path in (self.source, *self.headers, *SHARED_HEADERS):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return self.build_root / f"{self.name}-{h.hexdigest()[:16]}" / f"lib{self.name}.so"

    def build(self, build: TorchBuild | None = None, *, label: str = "") -> Path:
        """The library for `build` (default: the running torch), compiled when not cached (a line on stderr says
        so: `label` names what is being built)."""
        build = build or TorchBuild.running()
        path = self.library_path(build)
        if path.is_file():
            return path
        compiler = shutil.which("c++") or shutil.which("g++")
        if compiler is None:
            raise BuildError(f"cannot build {self.name}: no C++ compiler (c++ / g++) on PATH; no cached build at "
                             f"{path.parent}")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.build_root / f"{self.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                return path
            print(f"{label or self.name}: building for torch {build.version} (once; about 10 s) in {path.parent}",
                  file=sys.stderr, flush=True)
            include = build.root / "include"
            command = [compiler, *self.flags(build), f"-I{SHARED_DIR}", f"-I{include}",
                       f"-I{include / 'torch/csrc/api/include'}", str(self.source), "-o", str(path) + ".part",
                       f"-L{build.root / 'lib'}", "-lc10", "-ltorch_cpu"]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise BuildError(f"building {self.name} failed:\n{(result.stdout + result.stderr)[-8000:]}")
            Path(str(path) + ".part").rename(path)
        return path


def rules(dtypes, spec: dict) -> list:
    """The arguments of kvcache_checks::Rules, in configure()'s order (dtypes, head_dims, head_dim_pairs flattened,
    page_sizes, max_seqlen_q, split_multiple), from what the backend's attention_with_kvcache passes
    compare.kvcache.check_inputs: its dtypes and its VARIANTS["decode"] entry."""
    from compare import kvcache

    pairs = [d for pair in spec["head_dim_pairs"] for d in pair]
    return [[str(d).removeprefix("torch.") for d in dtypes], list(spec["head_dims"]), pairs,
            list(kvcache.PAGE_SIZES), spec["max_seqlen_q"], kvcache.SPLIT_MULTIPLE]


def plain_call(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, k_descale, v_descale, causal, scale,
               num_splits, split_size, window) -> bool:
    """Whether an attention_with_kvcache call may be offered to a compiled entry: no append, plain tensors (no
    subclass) outside torch's dispatch and function modes, tracers and torch.compile, and arguments the op's schema
    takes as given (bools, a float scale, ints, a tuple window of two ints). The entry then checks the rest and
    answers None where the Python path has to run."""
    tensor = torch.Tensor
    return (k_new is None and v_new is None and type(q) is tensor and type(k_cache) is tensor
            and type(v_cache) is tensor and type(cache_seqlens) is tensor
            and (block_table is None or type(block_table) is tensor)
            and (k_descale is None or type(k_descale) is tensor) and (v_descale is None or type(v_descale) is tensor)
            and (causal is False or causal is True) and (scale is None or type(scale) is float)
            and (num_splits is None or type(num_splits) is int) and (split_size is None or type(split_size) is int)
            and type(window) is tuple and len(window) == 2 and type(window[0]) is int and type(window[1]) is int
            and not (torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()
                     or torch._C._is_tracing() or torch.compiler.is_compiling()))


def function_address(function) -> int:
    """The address of a ctypes function (a library's entry point) as the int an op's configure() takes."""
    return ctypes.cast(function, ctypes.c_void_p).value


def load_once(state: dict, lock: threading.Lock, backend: str, attempt):
    """attempt() (build, load and configure an entry; returns its op) once per process: later calls return what
    the first did. Where it fails (OSError / RuntimeError: no compiler, a failed build or load), None, the reason in
    state["reason"] and one RuntimeWarning naming `backend`; its attention_with_kvcache then takes the Python
    path."""
    with lock:
        if state["tried"]:
            return state.get("op")
        state["tried"] = True
        try:
            state["op"] = attempt()
        except (OSError, RuntimeError) as exc:  # (BuildError among them)
            state["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            warnings.warn(f"{backend}: the compiled decode entry is unavailable ({state['reason']}); "
                          "attention_with_kvcache runs its Python path (same results, more host time per call)",
                          RuntimeWarning, stacklevel=4)
            return None
        return state["op"]
