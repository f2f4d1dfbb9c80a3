"""compare/native_build.py, what both compiled decode entries share: which calls the backends offer them
(plain_call), what they are told the Python path takes (rules), and where a build is cached (NativeOp's digest)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from compare import kvcache, native_build
from kvcache_calls import call


def _plain(**change):
    q, k, v, lengths, table, k_descale, v_descale = call()
    args = dict(q=q, k_cache=k, v_cache=v, cache_seqlens=lengths, block_table=table, k_new=None, v_new=None,
                k_descale=k_descale, v_descale=v_descale, causal=False, scale=None, num_splits=None, split_size=None,
                window=(-1, -1))
    return native_build.plain_call(**{**args, **change})


class _Subclass(torch.Tensor):
    pass


def test_a_plain_call_is_offered():
    assert _plain()
    assert _plain(causal=True, scale=0.1, num_splits=3, window=(8, 0))


@pytest.mark.parametrize("change", [
    dict(k_new=torch.zeros(1)), dict(v_new=torch.zeros(1)),          # an append: the Python path writes the cache
    dict(causal=1), dict(scale=1), dict(num_splits=True), dict(split_size=128.0),  # not what the schema takes as given
    dict(window=[8, 0]), dict(window=(8,)), dict(window=(8.0, 0)),
    dict(block_table=[[0]]), dict(k_descale=1.0),
], ids=lambda c: ", ".join(f"{k}={type(v).__name__}" for k, v in c.items()))
def test_calls_the_op_cannot_take_as_given_are_not_offered(change):
    assert not _plain(**change)


def test_tensor_subclasses_are_not_offered():
    q = call()[0]
    assert not _plain(q=q.as_subclass(_Subclass))


def test_calls_under_torch_modes_are_not_offered():
    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert not _plain()

    class FunctionMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with FunctionMode():
        assert not _plain()
    assert _plain()


def test_rules_are_the_python_paths():
    spec = {"head_dims": (64, 128), "head_dim_pairs": ((576, 512),), "max_seqlen_q": 64}
    rules = native_build.rules((torch.bfloat16, torch.float32), spec)
    assert rules == [["bfloat16", "float32"], [64, 128], [576, 512], list(kvcache.PAGE_SIZES), 64,
                     kvcache.SPLIT_MULTIPLE]


def test_the_cache_digest_follows_content_and_torch_not_paths(tmp_path):
    source = tmp_path / "a" / "op.cpp"
    source.parent.mkdir()
    source.write_text("int x;")
    build = native_build.TorchBuild(tmp_path, "2.11.0+cu130", True)
    op = native_build.NativeOp("op", source, (), tmp_path / "build")
    path = op.library_path(build)
    assert path.name == "libop.so" and path.parent.parent == tmp_path / "build"
    moved = tmp_path / "b" / "op.cpp"
    moved.parent.mkdir()
    moved.write_text("int x;")
    assert native_build.NativeOp("op", moved, (), tmp_path / "build").library_path(build) == path
    assert op.library_path(native_build.TorchBuild(tmp_path, "2.12.0", True)) != path
    assert op.library_path(native_build.TorchBuild(tmp_path, "2.11.0+cu130", False)) != path
    source.write_text("int y;")
    assert op.library_path(build) != path


def test_an_unpacked_wheel_gives_its_version(tmp_path):
    (tmp_path / "version.py").write_text("__version__ = '2.11.0+cu130'\ngit_version = 'abc'\n")
    assert native_build.TorchBuild.unpacked(Path(tmp_path)).version == "2.11.0+cu130"
    (tmp_path / "version.py").write_text("nothing = 1\n")
    with pytest.raises(ValueError, match="__version__"):
        native_build.TorchBuild.unpacked(Path(tmp_path))
