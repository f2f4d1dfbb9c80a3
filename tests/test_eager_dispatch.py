"""Both backends skip torch's custom-op dispatch only in plain eager calls (cuda_impl.ops._eager and
triton_impl.runtime.eager, the same rule kept in two places because the backends do not import each
other); everything that must see the op still gets it. CPU only: the rule reads tensors and torch state."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from cuda_impl import ops
from triton_impl import runtime

RULES = {"cuda_impl": ops._eager, "triton_impl": runtime.eager}


class PassThroughFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class PassThroughDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("backend", RULES)
def test_plain_tensors_run_directly(backend):
    eager = RULES[backend]
    assert eager((torch.zeros(2), torch.ones(3), None))


@pytest.mark.parametrize("backend", RULES)
def test_autograd_fake_tensors_and_modes_go_through_the_op(backend):
    eager = RULES[backend]
    assert not eager((torch.zeros(2), torch.zeros(2, requires_grad=True)))
    with FakeTensorMode():
        assert not eager((torch.zeros(2),))
    with PassThroughFunctionMode():
        assert not eager((torch.zeros(2),))
    with PassThroughDispatchMode():
        assert not eager((torch.zeros(2),))


@pytest.mark.parametrize("backend", RULES)
def test_compile_tracing_goes_through_the_op(backend):
    eager = RULES[backend]
    traced = torch.compile(lambda x: x + int(eager((x,))), backend="eager", fullgraph=True)
    assert traced(torch.zeros(2)).tolist() == [0.0, 0.0]  # under dynamo: not eager
    assert (torch.zeros(2) + int(eager((torch.zeros(2),)))).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("backend", RULES)
def test_jit_tracing_goes_through_the_op(backend):
    eager = RULES[backend]
    seen = []
    torch.jit.trace(lambda x: seen.append(eager((x,))) or x * 2, torch.zeros(2), check_trace=False)
    assert seen == [False]
