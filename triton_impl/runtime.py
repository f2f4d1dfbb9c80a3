"""What every triton_impl entry point shares (the dense ops in frontend, the decode path in decode): whether a variant
can run here now, the device checks and scope of a launch, and when a call may run its implementation directly
instead of through its torch.library op.
"""
import contextlib
import functools
import importlib
import os

import torch

from triton_impl.variants import VARIANTS


def interpreting() -> bool:
    """TRITON_INTERPRET is set: the kernels run on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def unavailable_reason(variant):
    """None when `variant` can run here now, else why not."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown triton variant {variant!r}; known: {sorted(VARIANTS)}")
    on_cpu = interpreting()
    device = None if on_cpu or not torch.cuda.is_available() else torch.cuda.current_device()
    return _reason(variant, on_cpu, device)


@functools.lru_cache(maxsize=None)
def _reason(variant, on_cpu, device):
    """Cached: the answer is fixed per process, and attention() asks on every call."""
    try:
        importlib.import_module("triton")
    except ImportError as err:
        return f"triton is not importable: {err}"
    if on_cpu:
        return f"variant {variant!r} is a Gluon kernel, which TRITON_INTERPRET=1 cannot run" \
            if VARIANTS[variant].get("gluon") else None
    if device is None:
        return "no CUDA GPU (set TRITON_INTERPRET=1 to run the kernels on the CPU)"
    cc = torch.cuda.get_device_capability(device)
    low, high = VARIANTS[variant]["min_cc"], VARIANTS[variant]["max_cc"]
    if cc < low or (high is not None and cc > high):
        wanted = f"sm_{low[0]}{low[1]}" + ("+" if high is None else f" to sm_{high[0]}{high[1]}")
        return f"variant {variant!r} needs {wanted}, this GPU is sm_{cc[0]}{cc[1]}"
    return None


def check_devices(tensors):
    """One device for all inputs, a CUDA one unless the kernels are interpreted."""
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"inputs are on different devices: {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type != "cuda" and not interpreting():
        raise ValueError(f"triton kernels need CUDA tensors, got {device} "
                         f"(or set TRITON_INTERPRET=1 to run on the CPU)")


def device_scope(t):
    """Triton launches on the current device: make it the inputs' device when it is not already."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def eager(tensors) -> bool:
    """True when a call may skip torch's custom-op dispatch (a large share of a call's host time,
    scripts/bench_api_overhead_gpu.py): plain tensors that need no autograd, outside torch.compile,
    export and jit tracing, fake tensors and torch dispatch or function modes, which must see the op.
    (cuda_impl.ops applies the same rule; the two backends do not import each other.)"""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
        return False
    return all(t is None or (type(t) is torch.Tensor and not t.requires_grad) for t in tensors)


def run_op(op, impl, tensors, *args):
    """op(*tensors, *args), or the implementation directly where `eager` allows."""
    return (impl if eager(tensors) else op)(*tensors, *args)
