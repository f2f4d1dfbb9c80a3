"""build, ptxas and list: the libraries the driver uses, their ptxas report, and what dev.toml holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from . import core
from .core import log

CARRY_LIMIT_MB = 64  # what one device call carries (cuda_impl/_build with everything else carried)
BASELINE_COPY = Path("cuda_impl") / "_build" / "baseline" / "libcuda_fa.so"  # relative to the repository


def _in_checkout(src: Path, code: str) -> str:
    """Run python `code` in another checkout (its own cuda_impl), returning its stdout's last line."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = subprocess.run([sys.executable, "-c", code], cwd=src, env=env, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"in {src}: {result.stderr.strip()[-2000:]}")
    return result.stdout.strip().splitlines()[-1]


def build_baseline(src: Path) -> Path:
    """Build the attention library of the checkout at `src` with that checkout's own build code (its flags,
    its sources) and copy it to cuda_impl/_build/baseline/, which a device call carries with the rest."""
    if not (src / "cuda_impl").is_dir():
        raise core.UsageError(f"--baseline-src: {src} is not a checkout of this project (no cuda_impl/)")
    log(f"building the library of {src} (its own build code) ...")
    built = Path(_in_checkout(src, "from cuda_impl import _lib\ntry:\n from cuda_impl import toolchain as build\nexcept ImportError:\n from cuda_impl import build\n"
                                   "print(build.build_library(_lib.library_spec()))"))
    target = core.REPO / BASELINE_COPY
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, target)
    return target


def prune_objects() -> None:
    """Object files are only needed to relink; the libraries and the ptxas logs stay (carry size)."""
    from cuda_impl import toolchain

    for obj in toolchain.BUILD_ROOT.glob("*/*.o"):
        obj.unlink()


def carried_mb() -> float:
    from cuda_impl import toolchain

    return sum(p.stat().st_size for p in toolchain.BUILD_ROOT.rglob("*") if p.is_file()) / 2**20


def build_main(args) -> int:
    names = list(core.builds()) if args.names == ["all"] else args.names
    for name in names:
        core.flags_of(name)  # unknown names fail before anything is built
        if name == core.BASELINE:
            raise core.UsageError("build: the baseline is built from another checkout: --baseline-src DIR")
    for name in ["default", *names]:
        path = core.build_library(name)
        log(f"built {name} ({' '.join(core.flags_of(name)) or 'no define'}): {path}")
    if args.baseline_src:
        path = build_baseline(Path(args.baseline_src).resolve())
        log(f"baseline library: {path}")
        print(f"DEV_BASELINE_LIB={BASELINE_COPY}   (relative to the repository root; carry cuda_impl/_build)")
    if not args.keep_objects:
        prune_objects()
    size = carried_mb()
    log(f"cuda_impl/_build holds {size:.0f} MiB" + (f": more than the {CARRY_LIMIT_MB} MiB one device call carries; "
                                                   "remove the builds this call does not need" if size > CARRY_LIMIT_MB
                                                   else ""))
    return 0


def _report(build_dir: Path) -> list[dict]:
    from cuda_impl import toolchain

    return toolchain.ptxas_report(SimpleNamespace(build_dir=build_dir))


def ptxas_main(args) -> int:
    """This checkout's ptxas -v report (registers, stack, spills per kernel), against another checkout's."""
    from cuda_impl import _lib, toolchain

    spec = _lib.library_spec(core.flags_of(args.build))
    toolchain.build_library(spec)
    rows = [r for r in _report(spec.build_dir) if args.filter in r["kernel"]]
    if not args.against:
        print(toolchain.format_report(rows))
        return 0
    src = Path(args.against).resolve()
    # the other checkout's build folder, its logs read with this checkout's parser (one naming on both sides)
    base_dir = Path(_in_checkout(src, "from cuda_impl import _lib; print(_lib.library_spec().build_dir)"))
    base_rows = _report(base_dir)
    base = {(r["kernel"], r["arch"]): r for r in base_rows if args.filter in r["kernel"]}
    print(f"{'kernel':40} {'arch':7} {'regs':>9} {'stack':>9} {'spill st/ld':>15}   (this checkout / {src})")
    grown, spills, unmatched = 0, 0, []
    for r in rows:
        b = base.pop((r["kernel"], r["arch"]), None)
        if b is None:
            unmatched.append(f"only here: {r['kernel']} {r['arch']}")
            continue
        new_spill = r.get("spill_stores", 0) + r.get("spill_loads", 0)
        old_spill = b.get("spill_stores", 0) + b.get("spill_loads", 0)
        flag = ""
        if r.get("registers", 0) > b.get("registers", 0):
            grown += 1
            flag += "  registers grew"
        if new_spill > old_spill:
            spills += 1
            flag += "  new spills"
        print(f"{r['kernel']:40} {r['arch']:7} {r.get('registers', 0):>4}/{b.get('registers', 0):<4} "
              f"{r.get('stack', 0):>4}/{b.get('stack', 0):<4} "
              f"{r.get('spill_stores', 0)}/{r.get('spill_loads', 0)} vs {b.get('spill_stores', 0)}/"
              f"{b.get('spill_loads', 0)}{flag}")
    unmatched += [f"only there: {k} {a}" for k, a in base]
    for line in unmatched:
        print(line)
    print(f"ptxas: {grown} kernel(s) with more registers, {spills} with new spills, {len(unmatched)} unmatched")
    return 1 if grown or spills else 0


def list_main(args) -> int:
    cfg = core.config()
    print("families (dev.py FAMILY; shapes: check / time / sanitize / sanitize_split)")
    for name, fam in cfg["families"].items():
        counts = " / ".join(str(len(fam.get(k, []))) for k in ("check", "time", "sanitize", "sanitize_split"))
        print(f"  {name:11} {fam['kind']:6} {', '.join(fam['variants']):34} {', '.join(fam['formats']):12} {counts}")
    print("builds (dev.py build NAME; one define each)")
    for name, b in cfg["builds"].items():
        try:
            built = "built" if core.is_built(name) else "not built"
        except Exception as exc:  # noqa: BLE001 - e.g. sources moving under a refactor
            built = f"? ({type(exc).__name__})"
        print(f"  {name:14} {b['define']:36} cuda:{b['variant']:8} {built:10} {b['what']}")
    from . import paired, same_bits

    print(f"same-bits: {len(same_bits.items())} cases; paired: {len(paired.cases())} cases")
    path = core.baseline_path()
    print(f"baseline (DEV_BASELINE_LIB): {path or 'not set'}" + ("" if not path or path.is_file() else " (missing)"))
    return 0
