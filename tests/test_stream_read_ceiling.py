"""The dram.read ceiling's streaming-read kernel (compare.ceilings.stream_read) must read every element it is
timed on: its partial sums, run under TRITON_INTERPRET=1 on the CPU (in a subprocess: the variable must be set
before any @triton.jit runs), add up to torch's sum, with and without a ragged tail."""
import pytest
import torch

from conftest import check_interpreter_run, interpreted, run_interpreter_subprocess, skip_inside_interpreter


def test_stream_read_interpreter_suite():
    skip_inside_interpreter()
    pytest.importorskip("triton")
    check_interpreter_run(run_interpreter_subprocess(__file__, "-rs", timeout=300), globals())


@interpreted
@pytest.mark.parametrize("n", [64 * 4 * 3, 64 * 4 * 3 + 37, 5])
def test_partial_sums_add_up_to_the_buffer(n):
    from compare.ceilings.stream_read import partial_sums
    x = torch.rand(n, dtype=torch.float32, generator=torch.Generator().manual_seed(n))
    partial = partial_sums(x, block=64, tiles=4)
    assert partial.numel() == -(-n // 256)
    torch.testing.assert_close(partial.double().sum(), x.double().sum(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(partial[0].double(), x[:256].double().sum(), rtol=1e-6, atol=1e-6)
