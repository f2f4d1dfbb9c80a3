"""The kernel families of scripts/dev.py (dev.toml [families.*]): check each build against the oracle, time
the builds that passed beside the peers in interleaved rounds, and small launches for compute-sanitizer.

A family run is two stages, each in a child process with a time limit (core.run_stage): `check` once per build
(this checkout's default library; each ablation build of the family's variants that was built and carried, or
those named with --builds; DEV_BASELINE_LIB as build "baseline"), then `time` of the builds that passed."""

from __future__ import annotations

import zlib

from . import core, kernels
from .core import log


def variant_caps(fam: dict, variant: str) -> dict:
    if fam["kind"] == "triton":
        import triton_impl

        return triton_impl.VARIANTS[variant]
    import cuda_impl

    return cuda_impl.VARIANTS[variant]


def expand(fam: dict, texts: list[str], head_dims: set[int] | None = None, variants: list[str] | None = None):
    """(variant, case) for every variant of the family and every shape of `texts` in each format the shape
    names (else the family's formats) that the variant takes, at the shape's head_dim (else each the variant
    takes), restricted to `head_dims`. Each case's seed comes from its label."""
    out = []
    for variant in variants or fam["variants"]:
        caps = variant_caps(fam, variant)
        for shape in core.shapes(texts):
            for fmt in [shape.fmt] if shape.fmt else fam["formats"]:
                if fmt not in caps["formats"]:
                    continue
                for d in [shape.head_dim] if shape.head_dim else caps["head_dims"]:
                    if d not in caps["head_dims"] or (head_dims and d not in head_dims):
                        continue
                    case = shape.case(fmt, d)
                    out.append((variant, case.replace(seed=zlib.crc32(case.shape_str().encode()))))
    return out


def family_builds(name: str, fam: dict, chosen: str | None, baseline: bool) -> list[str]:
    """The builds a family run uses: default, the ablation builds of its variants (`chosen`: 'all', 'none' or
    names; None: those built and carried), and 'baseline' when a baseline library is given."""
    if fam["kind"] == "triton":
        return ["default"]
    own = [b for b in core.ablations() if core.builds()[b]["variant"] in fam["variants"]]
    if chosen in (None, ""):
        picked = [b for b in own if core.is_built(b)]
    elif chosen == "all":
        picked = own
    elif chosen == "none":
        picked = []
    else:
        picked = [b for b in chosen.split(",") if b]
        for b in picked:
            if b not in own:
                raise core.UsageError(f"--builds: {b!r} is not an ablation build of family {name} "
                                      f"(its builds: {', '.join(own) or 'none'})")
    return ["default", *picked, *([core.BASELINE] if baseline else [])]


def runner(fam: dict, variant: str, build: str):
    if fam["kind"] == "triton":
        import triton_impl

        return lambda q, k, v, **kw: triton_impl.attention(q, k, v, variant=variant, **kw)
    return kernels.runner(variant, core.flags_of(build))


def check_dequant(flags: tuple[str, ...]) -> tuple[bool, str]:
    """The library's dequantization pass (csrc/dequant_blocked.cu) against compare.formats, bit for bit, for
    both block-scaled formats, plain and transposed (values before nvfp4's tensor scale)."""
    import torch

    from compare import formats
    from cuda_impl import _lib

    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(2, 3, 100, 128, device="cuda", generator=g) * torch.logspace(-20, 20, 128, device="cuda")
    seen = []
    for fmt in ("mxfp8", "nvfp4"):
        for transpose in (False, True):
            t = formats.quantize(x, fmt, transpose=transpose)
            tile = _lib.dequantize_blocked(fmt, t.data, t.scale, extra_flags=flags).float()
            if fmt == "mxfp8":
                expected = t.dequantize() if not transpose else t.dequantize().transpose(-1, -2)
            else:
                elements = formats.e2m1_decode(formats.unpack_e2m1(t.data))
                expected = (elements.reshape(*elements.shape[:-1], -1, 16) * t.scale.float()[..., None]).reshape(
                    elements.shape)
            expected = expected.contiguous()
            n = min(tile.shape[-1], expected.shape[-1])
            same = torch.equal(tile[..., :n], expected[..., :n])
            seen.append(f"{fmt}{'^T' if transpose else ''} {'exact' if same else 'DIFFERS'}")
            if not same:
                return False, ", ".join(seen)
    return True, ", ".join(seen)


def stage_check(name: str, build: str, head_dims: set[int] | None) -> int:
    fam = core.family(name)
    if build == core.BASELINE:
        core.register_baseline()
    checks = []
    if fam["kind"] == "mx":
        checks.append((f"{build} dequantization pass", lambda: check_dequant(core.flags_of(build))))
    for variant, case in expand(fam, fam["check"], head_dims):
        label = f"{build:10} {variant:12} {case.shape_str()}" + (f" scale {case.scale}" if case.scale else "")
        checks.append((label, lambda v=variant, c=case: core.oracle_check(runner(fam, v, build), c)))
    failures, total = core.run_checks(checks)
    log(f"check {name} {build}: {total - failures}/{total} pass")
    return 1 if failures else 0


def _peer(name: str, case):
    """(backend, case) of a peer entry 'NAME' or 'NAME@FMT' (NAME on the FMT values of the same shape); None
    when the peer does not take the case here (said in the log)."""
    from compare import backends

    backend_name, _, fmt = name.partition("@")
    peer_case = case.replace(fmt=fmt) if fmt else case
    try:
        backend = backends.get(backend_name)
    except Exception as exc:  # noqa: BLE001 - an unknown peer is a config error, but must not stop the timing
        log(f"peer {name}: {exc}")
        return None
    reason = backend.unavailable_reason() or backend.unsupported_reason(peer_case)
    if reason:
        log(f"peer {name} skipped for {case.shape_str()}: {reason}")
        return None
    return backend, peer_case


def candidates(fam: dict, case, built: list[str]):
    """(name, fn) to time on `case`: each variant that takes it in each build, then the peers."""
    from compare import oracle

    inputs = {case.fmt: oracle.make_inputs(case, "cuda")}
    out = []
    for variant in fam["variants"]:
        caps = variant_caps(fam, variant)
        if case.fmt not in caps["formats"] or case.head_dim not in caps["head_dims"]:
            continue
        x = inputs[case.fmt]
        if fam["kind"] == "triton":
            import triton_impl

            out.append((f"triton:{variant}", lambda v=variant, x=x: triton_impl.attention(
                x.q, x.k, x.v, causal=case.causal, scale=case.scale, variant=v)))
            continue
        for build in built:
            if build != "default" and build != core.BASELINE and core.builds()[build]["variant"] != variant:
                continue
            label = variant if build == "default" else f"{variant}@{build}"
            out.append((label, kernels.timed_call(variant, x, case, core.flags_of(build))))
    for peer in fam.get("peers", []):
        found = _peer(peer, case)
        if found is None:
            continue
        backend, peer_case = found
        if peer_case.fmt not in inputs:
            inputs[peer_case.fmt] = oracle.make_inputs(peer_case, "cuda")  # same seed: same master values
        x = inputs[peer_case.fmt]
        out.append((peer, lambda b=backend, x=x, c=peer_case: b(x.q, x.k, x.v, causal=c.causal, scale=c.scale)))
    return out


def _first_tensor(result):
    return result[0] if isinstance(result, (tuple, list)) else result


def time_case(fam: dict, case, built: list[str], rounds: int, timing: dict, power_log: bool, warm_s: float = 0.0):
    import torch
    from triton.testing import do_bench

    from compare import bench

    flops = bench.flops(case)
    label = case.shape_str()
    runnable = []
    for name, fn in candidates(fam, case, built):
        try:
            fn()  # compiled, autotuned and warm before the rounds
            torch.cuda.synchronize()
            runnable.append((name, fn))
        except Exception as exc:  # noqa: BLE001 - one that cannot run must not hide the rest
            log(f"{label} {name}: {type(exc).__name__}: {str(exc)[:160]}")
    if runnable and warm_s:
        core.warm_up(runnable[0][1], warm_s)
    medians = core.interleaved_medians(
        f"{label:44}", runnable, rounds,
        lambda fn: do_bench(fn, warmup=timing["warmup_ms"], rep=timing["rep_ms"], return_mode="median"),
        lambda name, ms: f" {flops / ms / 1e9:7.1f} TFLOP/s" + (f" {core.gpu_state()}" if power_log else ""))
    state = core.gpu_state()
    diffs = {}  # every candidate against the first on the same values: a cheap check of what was timed
    if runnable and runnable[0][0] in medians:
        first = _first_tensor(runnable[0][1]()).float().clone()
        for name, fn in runnable[1:]:
            if name in medians:
                try:
                    diffs[name] = (_first_tensor(fn()).float() - first).abs().max().item()
                except Exception:  # noqa: BLE001
                    pass
    return label, {n: flops / ms / 1e9 for n, ms in medians.items()}, diffs, state


def stage_time(name: str, built: list[str], head_dims: set[int] | None, rounds: int, power_log: bool) -> int:
    fam = core.family(name)
    if core.BASELINE in built:
        core.register_baseline()
    timing = core.config()["timing"]
    cases = list(dict.fromkeys(case for _, case in expand(fam, fam["time"], head_dims)))  # in order, once each
    rows = [(case.fmt, *time_case(fam, case, built, rounds, timing, power_log,
                                  timing.get("warm_s", 0) if i == 0 else 0)) for i, case in enumerate(cases)]
    print(table(fam, rows, rounds))
    return 0


def table(fam: dict, rows: list[tuple], rounds: int) -> str:
    """TFLOP/s per case and candidate, one table per format; ratio = the family's headline candidate (dev.toml
    `headline`, else the first) over the first peer timed on the case."""
    lines = []
    for fmt in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == fmt]
        names = []
        for _, _, rates, _, _ in mine:
            names += [n for n in rates if n not in names]
        peers = [p for p in fam.get("peers", []) if p in names]
        head = next((n for n in names if n == fam.get("headline")), names[0] if names else "")
        lines += ["", f"{fmt}: TFLOP/s, median of {rounds} interleaved round{'s' if rounds > 1 else ''}; "
                  f"ratio = {head} / {peers[0] if peers else 'the first peer'}; diff = max|x - {names[0] if names else ''}|",
                  f"{'case':44} " + " ".join(f"{n[:16]:>16}" for n in names) + "   ratio  clock, power"]
        for _, label, rates, diffs, state in mine:
            cells = " ".join(f"{rates.get(n, float('nan')):16.1f}" for n in names)
            ref = next((rates[p] for p in peers if p in rates), None)
            ratio = rates.get(head, float("nan")) / ref if ref else float("nan")
            lines.append(f"{label:44} {cells}  {ratio:6.3f}  {state.split(' W')[0] + ' W' if ' W' in state else state}")
            if diffs:
                lines.append(f"{'':44} diff: " + ", ".join(f"{n} {d:.2e}" for n, d in diffs.items()))
    return "\n".join(lines)


def stage_sanitize(name: str, split: bool, build: str, head_dims: set[int] | None) -> int:
    """Small launches checked against the oracle, in this process: run it under compute-sanitizer."""
    fam = core.family(name)
    key = "sanitize_split" if split else "sanitize"
    if key not in fam:
        raise core.UsageError(f"family {name} has no {key} shapes in dev.toml")
    if build == core.BASELINE:
        core.register_baseline()
    elif build != "default" and fam["kind"] == "triton":
        raise core.UsageError("--build: Triton variants have no builds")
    core.flags_of(build)  # an unknown name fails here
    checks = [(f"sanitize {build} {variant} {case.shape_str()}",
               lambda v=variant, c=case: core.oracle_check(runner(fam, v, build), c))
              for variant, case in expand(fam, fam[key], head_dims)]
    failures, total = core.run_checks(checks)
    log(f"sanitize {name}{' split' if split else ''}: {total - failures}/{total} pass")
    return 1 if failures else 0


def unavailable(fam: dict) -> str | None:
    if fam["kind"] == "triton":
        import triton_impl

        reasons = [triton_impl.unavailable_reason(v) for v in fam["variants"]]
    else:
        import cuda_impl

        reasons = [cuda_impl.unavailable_reason(v) for v in fam["variants"]]
    return next((r for r in reasons if r), None)


def run(name: str, args, forwarded: list[str]) -> int:
    """The parent of a family run: check every build in a child, then time those that passed."""
    import time

    fam = core.family(name)
    timeouts = {**core.config()["timeouts"], **fam.get("timeouts", {})}
    baseline = core.baseline_path(args.baseline) is not None and fam["kind"] != "triton"
    builds = family_builds(name, fam, args.builds, baseline)
    if args.build_only:
        if fam["kind"] == "triton":
            log("Triton kernels compile on the GPU machine: nothing to build")
            return 0
        for build in builds:
            if build != core.BASELINE:
                log(f"built {build}: {core.build_library(build)}")
        return 0
    if reason := unavailable(fam):
        log(f"{name} unavailable: {reason}")
        return 1
    start = time.time()
    passed, failed = [], []
    if args.only != "time":
        for build in builds:
            if build not in ("default", core.BASELINE) and not core.is_built(build):
                log(f"{build}: not built here (dev.py build {build}, then carry cuda_impl/_build): skipped")
                continue
            rc = core.run_stage([name, *forwarded, "--stage", "check", "--stage-builds", build], timeouts["check"],
                                f"check {name} {build}")
            log(f"check {name} {build} rc={rc} ({time.time() - start:.1f} s)")
            (passed if rc == 0 else failed).append(build)
        if args.only == "check":
            return 1 if failed else 0
        if "default" not in passed:
            log("timing skipped: the default build failed its checks")
            return 1
    else:
        passed = [b for b in builds if b in ("default", core.BASELINE) or core.is_built(b)]
    rounds = args.rounds or core.config()["timing"]["rounds"]
    limit = timeouts["time"] + timeouts["time_per_round"] * rounds
    rc = core.run_stage([name, *forwarded, "--stage", "time", "--stage-builds", ",".join(passed)], limit,
                        f"time {name}")
    log(f"time {name} rc={rc}; total {time.time() - start:.1f} s")
    return 1 if failed else rc
