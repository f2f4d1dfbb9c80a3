"""Oracle on fp8 shifted / normal long-K cases for one backend list (argv)."""
import sys
from compare import backends, oracle
names = sys.argv[1:]
fails = 0
for d in (64, 128, 256):
    for sq in (2, 128):
        for sk in (1588, 4096, 16384):
            for dist in ("shifted", "normal"):
                case = oracle.Case(1, 2, 1, sq, sk, d, fmt="fp8", dist=dist, seed=sk + sq)
                inputs = oracle.make_inputs(case, "cuda")
                for name in names:
                    if name == "triton:fp8-ws" and d == 256:
                        continue
                    v = oracle.check(backends.get(name), case, device="cuda", inputs=inputs)
                    fails += not v.passed
                    print(f"{name:16} {case.shape_str():44} {v.max_abs_err:8.4f} {v.lp_max_abs_err:8.4f} {v.bound:8.4f} {v.passed}", flush=True)
print("accuracy failures:", fails)
