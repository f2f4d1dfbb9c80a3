"""Read the machine code (SASS) of a built library with cuobjdump.

Used to check that a kernel really contains the instructions it was written for (HMMA for
mma.sync, LDSM for ldmatrix, LDGSTS for cp.async), what a Hopper kernel's KV-tile loop issues
(steady_loop), and by the mma.sync ceiling benchmark to prove that the compiler did not merge its
independent chains.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

_ARCH = re.compile(r"code for (sm_\w+)")
_FUNCTION = re.compile(r"Function : (\S+)")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")
_SS_WGMMA = re.compile(r"[HQ]GMMA\S*\s+R\d+,\s+gdesc")  # D, A and B from shared memory
_RS_WGMMA = re.compile(r"[HQ]GMMA\S*\s+R\d+,\s+R\d+,\s+gdesc")  # D, A from registers, B from shared memory


def find_cuobjdump() -> str | None:
    """cuobjdump from PATH, the CUDA toolkit, or the copy Triton's wheel ships."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    for root in roots:
        if root and (Path(root) / "bin" / "cuobjdump").is_file():
            return str(Path(root) / "bin" / "cuobjdump")
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        return str(bundled) if bundled.is_file() else None
    except ImportError:
        return None


def dump_sass(library: Path, with_addresses: bool = False) -> dict[tuple[str, str], list]:
    """{(arch, mangled function name): [instruction text, ...]} for every cubin in `library`;
    with_addresses: [(address, instruction text), ...] (what steady_loop reads)."""
    tool = find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found (CUDA toolkit bin/ or the triton wheel provide it)")
    text = subprocess.run(
        [tool, "--dump-sass", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return parse_sass(text, with_addresses)


def parse_sass(text: str, with_addresses: bool = False) -> dict[tuple[str, str], list]:
    functions: dict[tuple[str, str], list] = {}
    arch, current = "", None
    for line in text.splitlines():
        if m := _ARCH.search(line):
            arch = m.group(1)
        elif m := _FUNCTION.search(line):
            current = functions.setdefault((arch, m.group(1)), [])
        elif current is not None and (m := _INSTRUCTION.search(line)):
            current.append((int(m.group(1), 16), m.group(2)) if with_addresses else m.group(2))
    return functions


def loop_with(addressed: list[tuple[int, str]], *patterns: re.Pattern) -> list[str]:
    """The shortest span from a backward branch's target to the branch that holds an instruction matching
    each of `patterns`; [] if there is none. `addressed` as from dump_sass(..., with_addresses=True)."""
    index = {address: i for i, (address, _) in enumerate(addressed)}
    loops = []
    for i, (address, ins) in enumerate(addressed):
        target = _BRANCH_TARGET.search(ins) if opcode(ins).startswith("BRA") else None
        start = int(target.group(1), 16) if target else None
        if start is None or start >= address or start not in index:
            continue
        body = [text for _, text in addressed[index[start]: i + 1]]
        if all(any(pattern.search(t) for t in body) for pattern in patterns):
            loops.append(body)
    return min(loops, key=len, default=[])


def steady_loop(addressed: list[tuple[int, str]]) -> list[str]:
    """The instructions of a Hopper kernel's KV-tile loop: the shortest loop (loop_with) that issues both
    GEMMs of a tile, a wgmma with both operands in shared memory (S = Q K^T) and one with A in registers
    (P V)."""
    return loop_with(addressed, _SS_WGMMA, _RS_WGMMA)


def back_to_back_ss_wgmmas(loop: list[str]) -> int:
    """Pairs of S = Q K^T wgmmas (both operands in shared memory) in `loop` with nothing but NOPs between them.
    The Hopper loops that ptxas compiled that way measured 0.3-1.9% slower than the same loops with the wgmmas
    interleaved with their descriptor arithmetic (docs/design/hopper.md, the PIN_BASE row)."""
    ss = [i for i, ins in enumerate(loop) if _SS_WGMMA.search(ins)]
    return sum(all(opcode(ins) == "NOP" for ins in loop[a + 1: b]) for a, b in zip(ss, ss[1:]))


def opcode(ins: str) -> str:
    """The full opcode with modifiers ('HMMA.16816.F32.BF16'), its predicate stripped; '' if none."""
    words = ins.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def opcode_counts(instructions: list[str]) -> Counter:
    """Count full opcodes with modifiers ('HMMA.16816.F32.BF16'), predicates stripped."""
    return Counter(op for op in map(opcode, instructions) if op)


def exps_under_pending_wgmma(instructions: list[str]) -> int:
    """MUFU.EX2 issued between a `WARPGROUP.DEPBAR.LE gsb0, 0x1` (one wgmma group may still run)
    and the next wgmma wait, summed over such spans: the softmax work a Hopper kernel overlaps with
    its own warpgroup's P @ V. ptxas moves a wait written after the softmax ahead of it, which
    makes this 0 (docs/design/hopper.md, the RETIRE_AT_TOP row)."""
    exps, open_span = 0, False
    for ins in instructions:
        op = opcode(ins)
        if op.startswith("WARPGROUP.DEPBAR"):
            open_span = "0x1" in ins
        elif open_span and op == "MUFU.EX2":
            exps += 1
    return exps


def compare_libraries(a: Path, b: Path) -> dict[str, list[tuple[str, str]]]:
    """Kernels of two built libraries by machine code: {"same": [...], "differ": [...], "only_a": [...],
    "only_b": [...]}, each a sorted list of (arch, mangled name). How a change that should not touch the
    generated code (a restructuring, a comment) is checked without a GPU."""
    sa, sb = dump_sass(Path(a)), dump_sass(Path(b))
    result: dict[str, list[tuple[str, str]]] = {"same": [], "differ": [], "only_a": [], "only_b": []}
    for key in sorted(set(sa) | set(sb)):
        if key not in sb:
            result["only_a"].append(key)
        elif key not in sa:
            result["only_b"].append(key)
        else:
            result["same" if sa[key] == sb[key] else "differ"].append(key)
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m cuda_impl.sass",
        description="Compare the machine code (SASS) of two built libraries kernel by kernel; exit 1 if any differ.")
    parser.add_argument("library_a", type=Path)
    parser.add_argument("library_b", type=Path)
    args = parser.parse_args(argv)
    for path in (args.library_a, args.library_b):
        if not path.is_file():
            parser.error(f"{path}: no such library")
    if find_cuobjdump() is None:
        parser.error("cuobjdump not found (CUDA toolkit, or the copy in Triton's wheel)")
    result = compare_libraries(args.library_a, args.library_b)
    for kind in ("differ", "only_a", "only_b"):
        for arch, name in result[kind]:
            print(f"{kind:7} {arch:7} {name}")
    total = sum(len(v) for v in result.values())
    print(f"{len(result['same'])} of {total} kernels have identical machine code")
    return 0 if len(result["same"]) == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
