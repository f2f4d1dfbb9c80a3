"""Compile CUDA sources into a torch-free shared library with nvcc + ninja, cached by content.

Why this shape: CI and the dev machines have nvcc but no GPU, device minutes are scarce, and
torch's C++ ABI differs between machines. So kernels are plain CUDA C++ behind a small
``extern "C"`` surface, linked against a *static* cudart, and loaded with ctypes. A library
built here runs on the GPU machine when ``cuda_impl/_build`` is carried along.

Cache: ``cuda_impl/_build/<name>-<digest>/lib<name>.so``, where the digest covers the flags and
the content of every source and header. A cached library is used without nvcc being present.
A file lock per library name serialises concurrent builds (pytest workers, several processes).

``python -m cuda_impl.toolchain`` builds the attention library and prints each kernel's
registers / stack / spills as reported by ``ptxas -v``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # cuda_impl/
CSRC_DIR = PACKAGE_DIR / "csrc"
BUILD_ROOT = PACKAGE_DIR / "_build"

# Real (SASS) targets only. sm_80 cubins run on every cc 8.x GPU (the mma.sync ladder);
# "90a" is needed for wgmma/setmaxnreg. Add "100a" / "120a" here for the block-scaled MMA paths
# (nvcc 13.0 assembles them; this list is all that changes).
ARCH_TARGETS: tuple[str, ...] = ("80", "90a")

BASE_FLAGS: tuple[str, ...] = (
    "-std=c++20",
    "-O3",
    "-lineinfo",  # source lines for compute-sanitizer / ncu; no effect on the code
    "-Xcompiler",
    "-fPIC",
    "-Xptxas",
    "-v",  # registers, stack and spills land in <object>.log
)


class BuildError(RuntimeError):
    """nvcc/ninja missing, or the compilation failed (the message carries nvcc's output)."""


def gencode_flags(targets: tuple[str, ...] = ARCH_TARGETS) -> list[str]:
    return [f"-gencode=arch=compute_{t},code=sm_{t}" for t in targets]


def target_runs_on(target: str, capability: tuple[int, int]) -> bool:
    """Whether a cubin built for sm_<target> loads on a GPU of that compute capability.

    Arch-specific targets ("90a") run on exactly their capability; plain ones on the same major
    version with an equal or higher minor one. No PTX is embedded, so nothing else runs."""
    digits = target.rstrip("a")
    major, minor = int(digits[:-1]), int(digits[-1])
    if target.endswith("a"):
        return capability == (major, minor)
    return capability[0] == major and capability[1] >= minor


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def find_ninja() -> str | None:
    found = shutil.which("ninja")
    if found:
        return found
    try:  # the `ninja` wheel puts its binary next to the interpreter's scripts
        import ninja

        candidate = Path(ninja.BIN_DIR) / "ninja"
        return str(candidate) if candidate.is_file() else None
    except ImportError:
        return None


@dataclass(frozen=True)
class LibrarySpec:
    """What goes into one shared library; equal specs share one cache entry."""

    name: str
    sources: tuple[Path, ...]
    include_dirs: tuple[Path, ...] = ()
    extra_flags: tuple[str, ...] = ()
    targets: tuple[str, ...] = ARCH_TARGETS

    def compile_flags(self) -> list[str]:
        includes = [f"-I{d}" for d in self.include_dirs]
        return [*BASE_FLAGS, *includes, *gencode_flags(self.targets), *self.extra_flags]

    def digest(self) -> str:
        # Paths stay out of the digest so that a library built here is found again on a machine
        # where the repository lives elsewhere; the content of every input goes in.
        h = hashlib.sha256()
        portable_flags = [*BASE_FLAGS, *gencode_flags(self.targets), *self.extra_flags]
        h.update("\0".join(portable_flags).encode())
        # Headers by their path under each include directory (hopper/sm90.cuh), subfolders included.
        headers = sorted({(p.relative_to(d).as_posix(), p) for d in self.include_dirs for p in d.rglob("*")
                          if p.suffix in (".cuh", ".h")})
        for path in sorted(self.sources):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        for name, path in headers:
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()[:16]

    @property
    def build_dir(self) -> Path:
        return BUILD_ROOT / f"{self.name}-{self.digest()}"

    @property
    def library_path(self) -> Path:
        return self.build_dir / f"lib{self.name}.so"


def cached_library(spec: LibrarySpec) -> Path | None:
    """The built library if it is already in the cache (no compiler needed), else None."""
    path = spec.library_path
    return path if path.is_file() else None


def missing_toolchain() -> str | None:
    """Why a build cannot run here, or None."""
    if find_nvcc() is None:
        return "nvcc not found (put the CUDA toolkit's bin/ on PATH or set CUDA_HOME)"
    if find_ninja() is None:
        return "ninja not found (pip install ninja)"
    return None


def _ninja_file(spec: LibrarySpec, nvcc: str) -> str:
    flags = " ".join(spec.compile_flags())
    # The gencode list at link time too: otherwise nvcc adds a device-link cubin for its default arch.
    link_flags = " ".join(gencode_flags(spec.targets))
    lines = [
        f"nvcc = {nvcc}",
        f"flags = {flags}",
        f"link_flags = {link_flags}",
        "rule cu",
        # ptxas -v output goes to <object>.log; on failure the log is shown, then the error. An object a killed
        # build left half written is compiled again by the next (ninja's log holds no entry for it); the library
        # is written under a temporary name and renamed when complete, since cached_library() takes it without
        # asking ninja.
        "  command = $nvcc $flags -c $in -o $out > $out.log 2>&1 || (cat $out.log; exit 1)",
        "  description = nvcc $in",
        "rule link",
        "  command = $nvcc -shared -cudart static -Xcompiler -fPIC $link_flags $in -o $out.part && mv -f $out.part $out",
        "  description = link $out",
    ]
    objects = []
    for src in sorted(spec.sources):
        obj = f"{src.stem}.o"
        objects.append(obj)
        lines.append(f"build {obj}: cu {src}")
    lines.append(f"build {spec.library_path.name}: link {' '.join(objects)}")
    lines.append(f"default {spec.library_path.name}")
    return "\n".join(lines) + "\n"


def build_library(spec: LibrarySpec, *, verbose: bool = False) -> Path:
    """Return the path of the built library, compiling it first when it is not cached."""
    found = cached_library(spec)
    if found is not None:
        return found
    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    with open(BUILD_ROOT / f"{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may have built it while we waited
        found = cached_library(spec)
        if found is not None:
            return found
        problem = missing_toolchain()
        if problem is not None:
            raise BuildError(f"cannot build {spec.name}: {problem}; no cached build at {spec.build_dir}")
        spec.build_dir.mkdir(parents=True, exist_ok=True)
        (spec.build_dir / "build.ninja").write_text(_ninja_file(spec, find_nvcc()))
        result = subprocess.run(
            [find_ninja(), "-C", str(spec.build_dir)],
            capture_output=not verbose,
            text=True,
        )
        if result.returncode != 0:
            output = (result.stdout or "") + (result.stderr or "")
            raise BuildError(f"building {spec.name} failed:\n{output[-8000:]}")
    return spec.library_path


# --- ptxas -v report ------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_LADDER_NAME = re.compile(
    r"(fwd_(?:v\d+|hopper)_kernel)I(?:6__half|13__nv_bfloat16)Li(\d+)E(?:Li(\d+)E)?(?:Li(\d+)E)?(?:Li(\d+)E)?"
    r"(?:Lb(\d)E)?(?:Lb(\d)E)?(?:Li(\d+)E)?"
)
_FP8_NAME = re.compile(r"(fwd_hopper_fp8_kernel)ILi(\d+)ELb(\d)ELi(\d)E")  # <DIM, FLAT_K, SCHEDULE>
_FP8_SCHEDULES = ("", ",persistent", ",dynamic")  # hopper/config.cuh Fp8Schedule (1, 2)
_MX_NAME = re.compile(r"fwd_hopper_mx_kernelILi(\d)ELi(\d+)E")  # <FA_MX_FORMAT_*, DIM>
_MX_FORMATS = ("mxfp8", "nvfp4")
# fwd_decode.cu: <q type, K/V type (S1_: the same), DIM>, and the split merge <q type, DIM>
_DECODE_NAME = re.compile(
    r"(fwd_decode_kernel|fwd_decode_merge_kernel)I(6__half|13__nv_bfloat16)(S1_|13__nv_fp8_e4m3)?Li(\d+)E")
# fwd_mla_decode.cu: <q type, query rows per CTA>
_MLA_NAME = re.compile(r"fwd_mla_decode_kernelI(6__half|13__nv_bfloat16)Li(\d+)E")
_MLA_WGMMA_NAME = re.compile(r"fwd_mla_decode_wgmma_kernelI(6__half|13__nv_bfloat16)E")


def readable_kernel_name(mangled: str) -> str:
    """'_ZN2fa13fwd_v5_kernelI13__nv_bfloat16Li128EEEv9FwdParams' -> 'fwd_v5_kernel<bf16,128>';
    a second int argument (hopper's BLOCK_KV) is kept: 'fwd_hopper_kernel<bf16,128,176>', and a third
    (hopper's CTAs per cluster) when above 1: 'fwd_hopper_kernel<bf16,128,176,cluster2>', and a fourth (its consumer
    warpgroups where not the head_dim's own) when set: 'fwd_hopper_kernel<bf16,64,128,consumers2>', and a fifth
    (its local-launch kernel, a window or softcap) when true: 'fwd_hopper_kernel<bf16,128,128,local>', and a sixth
    (the local kernel of packed sequences) when true: 'fwd_hopper_kernel<bf16,128,128,local,varlen>', and a seventh
    (V's head_dim) where it differs from Q/K's: 'fwd_hopper_kernel<bf16,192,128,cluster2,v128>';
    the e4m3 kernel -> 'fwd_hopper_fp8_kernel<fp8,128,persistent>' (persistent CTAs) or '...,dynamic>' (fed by a
    counter), '<fp8,128,flat-k,...>' where K loads through the key-permuted 5-D map; the block-scaled
    one, named per variant, -> 'fwd_hopper_mxfp8_kernel<mxfp8,128>' / 'fwd_hopper_nvfp4_kernel<nvfp4,128>'; the
    decode kernel -> 'fwd_decode_kernel<bf16,128>' (K/V in q's type) / 'fwd_decode_kernel<bf16,128,kv-fp8>' (e4m3
    K/V), its split merge -> 'fwd_decode_merge_kernel<bf16,128>'; the MLA decode kernel ->
    'fwd_mla_decode_kernel<bf16,rows16>', its wgmma kernel -> 'fwd_mla_decode_wgmma_kernel<bf16>'."""
    if m := _MLA_WGMMA_NAME.search(mangled):
        return f"fwd_mla_decode_wgmma_kernel<{'bf16' if 'bfloat16' in m.group(1) else 'fp16'}>"
    if m := _MLA_NAME.search(mangled):
        return f"fwd_mla_decode_kernel<{'bf16' if 'bfloat16' in m.group(1) else 'fp16'},rows{m.group(2)}>"
    if m := _FP8_NAME.search(mangled):
        flat = ",flat-k" if m.group(3) == "1" else ""
        return f"{m.group(1)}<fp8,{m.group(2)}{flat}{_FP8_SCHEDULES[int(m.group(4))]}>"
    if m := _DECODE_NAME.search(mangled):
        kv = ",kv-fp8" if m.group(3) == "13__nv_fp8_e4m3" else ""
        return f"{m.group(1)}<{'bf16' if 'bfloat16' in m.group(2) else 'fp16'},{m.group(4)}{kv}>"
    if m := _MX_NAME.search(mangled):
        fmt = _MX_FORMATS[int(m.group(1))]
        return f"fwd_hopper_{fmt}_kernel<{fmt},{m.group(2)}>"
    m = _LADDER_NAME.search(mangled)
    if not m:
        return mangled
    dtype = "bf16" if "bfloat16" in mangled else "fp16"
    extra = f",{m.group(3)}" if m.group(3) else ""
    if m.group(4) and m.group(4) != "1":
        extra += f",cluster{m.group(4)}"
    if m.group(5) and m.group(5) != "0":
        extra += f",consumers{m.group(5)}"
    if m.group(6) == "1":
        extra += ",local"
    if m.group(7) == "1":
        extra += ",varlen"
    if m.group(8) and m.group(8) != m.group(2):
        extra += f",v{m.group(8)}"
    return f"{m.group(1)}<{dtype},{m.group(2)}{extra}>"


def ptxas_report(spec: LibrarySpec) -> list[dict]:
    """Per kernel and arch: registers, stack frame and spill bytes, from the build logs."""
    rows: list[dict] = []
    for log in sorted(spec.build_dir.glob("*.o.log")):
        current: dict | None = None
        for line in log.read_text().splitlines():
            if m := _ENTRY.search(line):
                current = {"kernel": readable_kernel_name(m.group(1)), "arch": m.group(2)}
                rows.append(current)
            elif current is not None and (m := _FRAME.search(line)):
                current.update(
                    stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3))
                )
            elif current is not None and (m := _REGS.search(line)):
                current["registers"] = int(m.group(1))
    return rows


def format_report(rows: list[dict]) -> str:
    lines = [f"{'kernel':34} {'arch':7} {'regs':>4} {'stack':>5} {'spill st/ld':>11}"]
    for r in rows:
        spills = f"{r.get('spill_stores', 0)}/{r.get('spill_loads', 0)}"
        lines.append(
            f"{r['kernel']:34} {r['arch']:7} {r.get('registers', 0):>4} {r.get('stack', 0):>5} {spills:>11}"
        )
    return "\n".join(lines)
