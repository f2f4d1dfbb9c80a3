"""A reference attention_varlen for the CPU tests (test_varlen, test_fuzz): the float64 oracle reference one
sequence at a time, with an optional fault at a sequence boundary."""
import torch

from compare import oracle


def packed_reference(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                     return_lse, window=(-1, -1), softcap=0.0, shift_keys=0):
    """attention_varlen from the float64 reference, one sequence at a time (shift_keys: a boundary fault)."""
    assert return_lse
    scale = 1.0 / q.shape[-1] ** 0.5 if scale is None else scale
    out = torch.full((*q.shape[:2], v.shape[2]), float("nan"), dtype=q.dtype)
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"))
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        if cq[b + 1] == cq[b]:
            continue
        k0 = min(ck[b] + (shift_keys if b == 1 else 0), ck[b + 1])
        seq = lambda x, a, z: x[a:z].transpose(0, 1)[None].double()
        o, l = oracle.reference(seq(q, cq[b], cq[b + 1]), seq(k, k0, ck[b + 1]), seq(v, k0, ck[b + 1]),
                                causal=causal, scale=scale, window=window, softcap=softcap)
        out[cq[b]:cq[b + 1]] = o[0].transpose(0, 1).nan_to_num(0.0).to(q.dtype)
        lse[:, cq[b]:cq[b + 1]] = l[0].float()
    return out, lse
