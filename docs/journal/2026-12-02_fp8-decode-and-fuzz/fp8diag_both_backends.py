"""The fp8 prefill kernels of both backends on shifted (non-zero-mean) and normal inputs as Sk grows: max error
against float64, the plain implementation's, and the oracle's verdict."""
import torch
from compare import backends, oracle

names = ["cuda:hopper-fp8", "triton:fp8", "triton:fp8-ws"]
print(f"{'backend':16} {'shape':42} {'err':>8} {'plain':>8} {'bound':>8} pass")
for d in (64, 128):
    for sq in (2, 128):
        for sk in (1588, 4096, 16384):
            for dist in ("shifted", "normal"):
                case = oracle.Case(1, 2, 1, sq, sk, d, fmt="fp8", dist=dist, seed=sk + sq)
                inputs = oracle.make_inputs(case, "cuda")
                for name in names:
                    be = backends.get(name)
                    v = oracle.check(be, case, device="cuda", inputs=inputs)
                    print(f"{name:16} {case.shape_str():42} {v.max_abs_err:8.4f} {v.lp_max_abs_err:8.4f} "
                          f"{v.bound:8.4f} {v.passed}", flush=True)
