"""Fixtures shared by the CUDA test files: a library is built once per session (or found in the
build cache); without nvcc and without a cached build the test is skipped with the reason."""
import pytest

from cuda_impl import _lib, toolchain


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
