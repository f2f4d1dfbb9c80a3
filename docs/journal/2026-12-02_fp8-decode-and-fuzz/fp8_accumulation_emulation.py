"""Emulate cuda:hopper-fp8's P V on the CPU: online softmax over 128-key tiles, P = e4m3(p) against the running
max, O accumulated across k32 steps with every addend aligned to the largest exponent among the products and O and
truncated to `bits` mantissa bits (None: exact). Run from the repository root: python <this file>."""
import math

import torch
from compare import oracle, formats

def emulate(case, bits, block=128):
    inputs = oracle.make_inputs(case, "cpu")
    q, k, v = (x.double() for x in inputs.dequantized())
    s = (q[0, 0] @ k[0, 0].T) * case.softmax_scale  # (Sq, Sk)
    sq, sk = s.shape
    O = torch.zeros(sq, v.shape[-1], dtype=torch.float64)
    m = torch.full((sq, 1), -math.inf, dtype=torch.float64); l = torch.zeros(sq, 1, dtype=torch.float64)
    vv = v[0, 0]
    for t0 in range(0, sk, block):
        st = s[:, t0:t0 + block]
        m_new = torch.maximum(m, st.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new); p = torch.exp(st - m_new)
        l = l * alpha + p.sum(-1, keepdim=True)
        O = O * alpha
        p8 = formats.round_to_e4m3(p.float()).double()
        for k0 in range(0, p8.shape[1], 32):
            if bits is None:
                O = O + p8[:, k0:k0 + 32] @ vv[t0 + k0:t0 + k0 + 32]
                continue
            prods = p8[:, k0:k0 + 32, None] * vv[None, t0 + k0:t0 + k0 + 32]  # (sq, 32, D)
            big = torch.maximum(O.abs(), prods.abs().amax(1))
            _, e = torch.frexp(big)
            grid = torch.ldexp(torch.ones_like(big), e - bits)  # addends aligned to the largest exponent
            terms = torch.trunc(prods / grid[:, None]) * grid[:, None]
            O = torch.trunc((O + terms.sum(1)) / grid) * grid
        m = m_new
    out = O / l
    ref, _ = oracle.reference(*(x.double() for x in inputs.dequantized()), causal=False, scale=case.softmax_scale)
    return float((out - ref[0, 0]).abs().max())

for sk in (1588, 4096, 16384):
    for dist in ("normal", "shifted"):
        case = oracle.Case(1, 2, 1, 2, sk, 64, fmt="fp8", dist=dist, seed=sk + 2)
        print(sk, dist, " ".join(f"bits={b}: {emulate(case, b):.4f}" for b in (None, 22, 14, 13)), flush=True)
