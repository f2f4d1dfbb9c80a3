"""Fixtures shared by the CUDA test files: a library is built once per session (or found in the
build cache); without nvcc and without a cached build the test is skipped with the reason. And the Triton test
files' way into the interpreter: their own tests again in a TRITON_INTERPRET=1 subprocess."""
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_impl import _lib, toolchain

REPO = Path(__file__).resolve().parents[1]

# True in the TRITON_INTERPRET=1 subprocess that run_interpreter_subprocess starts: a Triton test file runs its
# CPU tests there and its GPU tests and compiles outside.
INSIDE_INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INSIDE_INTERPRETER, reason="runs in the TRITON_INTERPRET=1 subprocess")
sm90_compile = pytest.mark.skipif(INSIDE_INTERPRETER, reason="compiles for sm_90a outside the interpreter")
outside_interpreter = pytest.mark.skipif(INSIDE_INTERPRETER, reason="runs outside the interpreter")
_SUITE_SKIP = "this is the subprocess"
# The only reasons a test may skip for in the interpreter's subprocess: it belongs to the outer run.
OUTER_REASONS = {sm90_compile.kwargs["reason"], outside_interpreter.kwargs["reason"], _SUITE_SKIP}


def load_shapes_table(tmp_path: Path, table: str):
    """compare.sweeps.load of a sweep file whose one [[shapes]] table holds `table`'s lines (a loader test's input)."""
    from compare import sweeps
    path = tmp_path / "sweep.toml"
    path.write_text(f"[[shapes]]\n{table}\n")
    return sweeps.load(str(path))


def skip_inside_interpreter() -> None:
    """For the test that starts the interpreter's subprocess: it skips itself there."""
    if INSIDE_INTERPRETER:
        pytest.skip(_SUITE_SKIP)


def _test_items(module_globals: dict, keep) -> int:
    """How many test items the module's test functions whose marks satisfy keep(marks) make, parametrisations
    multiplied out."""
    total = 0
    for name, fn in module_globals.items():
        if name.startswith("test_") and callable(fn):
            marks = getattr(fn, "pytestmark", [])
            if keep(marks):
                total += math.prod(len(m.args[1]) for m in marks if m.name == "parametrize")
    return total


def check_interpreter_run(stdout: str, module_globals: dict) -> None:
    """The interpreter subprocess of a test module (run_interpreter_subprocess with -rs) ran every test but the
    outer ones: its summary says 'N passed, M skipped' (and the GPU tests deselected where -m 'not gpu' was asked)
    with M the items of the tests marked for the outer run (OUTER_REASONS) plus the suite test itself and N every
    other item that is not a GPU test, and it skipped for no other reason, so that a test that skips inside (a
    missing package, a guard that became true) or is not collected there fails the suite instead of hiding."""
    def outer(marks):
        return any(m.name == "skipif" and m.kwargs.get("reason") in OUTER_REASONS for m in marks)

    def gpu(marks):
        return any(m.name == "gpu" for m in marks)
    outer_items = _test_items(module_globals, outer) + 1  # + the suite test, which skips itself inside
    inner_items = _test_items(module_globals, lambda marks: not outer(marks) and not gpu(marks)) - 1
    lines = stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", summary.split(" in ")[0])}
    reasons = set(re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", stdout, flags=re.M))
    assert reasons <= OUTER_REASONS, f"tests skipped in the interpreter: {sorted(reasons - OUTER_REASONS)}\n{summary}"
    assert set(counts) <= {"passed", "skipped", "deselected"}, f"the subprocess reports: {summary}"
    assert counts.get("skipped", 0) == outer_items, f"{outer_items} outer items should skip there: {summary}"
    assert counts.get("passed", 0) == inner_items, f"{inner_items} items should pass there: {summary}"


def triton_gpu_or_skip() -> None:
    """For a Triton GPU test: skip inside the interpreter's subprocess and where there is no CUDA GPU."""
    if INSIDE_INTERPRETER:
        pytest.skip("GPU tests do not run under the interpreter")
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    pytest.importorskip("triton")


def run_interpreter_subprocess(test_file, *pytest_args: str, timeout: int = 900) -> str:
    """`test_file` run again by pytest in a subprocess with TRITON_INTERPRET=1 (it must be set before any
    @triton.jit runs, which no in-process switch can do) and `pytest_args`; returns its stdout, after asserting it
    exited 0 (the failure shows the tail of its output)."""
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args,
                          str(test_file)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-12000:] + run.stderr[-4000:]
    return run.stdout


def _built(spec: toolchain.LibrarySpec):
    problem = toolchain.missing_toolchain()
    if problem and toolchain.cached_library(spec) is None:
        pytest.skip(problem)
    return toolchain.build_library(spec)


@pytest.fixture(scope="session")
def build_or_skip():
    """fn(spec) -> path of the built library, or a skip."""
    return _built


@pytest.fixture(scope="session")
def fa_library():
    """The kernels' library (cuda_impl._lib.library_spec())."""
    return _built(_lib.library_spec())


# Variants that must run on an sm_90 GPU (an H100/H200): there a skip of one of them means a broken availability
# check (or build) that would empty the GPU matrix silently, so it fails instead.
SM90_MUST_RUN = {
    "cuda": {"v1", "v2", "v3", "v4", "v5", "decode", "hopper", "hopper-fp8", "hopper-mxfp8", "hopper-nvfp4"},
    "triton": {"fa2", "fa2-tma", "fa2-ws", "fp8", "fp8-ws", "decode", "mxfp8-dequant", "mxfp8-dot-scaled",
               "nvfp4-dequant"},
}


def must_run_here(backend: str, variant: str) -> bool:
    """Whether `backend`'s `variant` must run on this machine (an sm_90 GPU is present and it is listed)."""
    import torch
    return (variant in SM90_MUST_RUN.get(backend, ()) and torch.cuda.is_available()
            and torch.cuda.get_device_capability() == (9, 0))


def skip_unless_required(backend: str, variant: str, reason: str | None) -> None:
    """Skip with `reason` (unavailable_reason()'s answer) when there is one; on an sm_90 GPU a variant of
    SM90_MUST_RUN that reports itself unavailable fails the test instead."""
    if not reason:
        return
    if must_run_here(backend, variant):
        pytest.fail(f"{backend}:{variant} must run on this sm_90 GPU, but unavailable_reason() says: {reason}")
    pytest.skip(reason)


def hopper_or_skip() -> None:
    """skip_unless_required for cuda:hopper (the GPU tests of its head dims, windows and packed batches)."""
    from compare import backends
    skip_unless_required("cuda", "hopper", backends.get("cuda:hopper").unavailable_reason())
