"""Packed variable-length prefill on one H200, CUDA-graph replays: cuda:hopper's varlen kernels, triton:fa2's
varlen path, torch's varlen_attn (FlashAttention-2), nested-jagged SDPA (flash, cuDNN), and cuda:hopper's dense
kernel on the batch padded to the longest sequence (timing only: its padded keys are not masked). TFLOP/s count
the FLOPs of the packed batch alone (every row; the padded rows' work is not counted). Writes $OUT/varlen_speed.csv."""
import csv
import inspect
import os
import sys

import torch

import cuda_impl
import triton_impl
from compare import bench, varlen
from compare.bench import time_call

OUT = os.environ.get("OUT", "/tmp")
TOKENS = 65536
torch.manual_seed(0)


def torch_varlen():
    from torch.nn.attention.varlen import varlen_attn
    causal_kw = "is_causal" in inspect.signature(varlen_attn).parameters

    def run(q, k, v, cu, longest, causal):
        kw = {"is_causal": causal} if causal_kw else {"window_size": (-1, 0) if causal else (-1, -1)}
        return varlen_attn(q, k, v, cu, cu, longest, longest, **kw)
    return run


def nested_sdpa(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(q, k, v, cu, longest, causal):
        nt = [torch.nested.nested_tensor_from_jagged(x, cu.long()).transpose(1, 2) for x in (q, k, v)]
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(*nt, is_causal=causal).transpose(1, 2).values()
    return run


def padded(lengths, q, k, v, cu, causal):
    batch, longest = len(lengths), max(lengths)
    heads, dim = q.shape[1], q.shape[2]
    pads = [torch.zeros(batch, heads, longest, dim, dtype=q.dtype, device="cuda") for _ in range(3)]
    starts = cu.tolist()
    for b, n in enumerate(lengths):
        for dst, src in zip(pads, (q, k, v)):
            dst[b, :, :n] = src[starts[b]:starts[b] + n].transpose(0, 1)
    return lambda: cuda_impl.attention(*pads, causal=causal)


rows = []
for mix in ("longtail", "uniform", "equal"):
    lengths = varlen.length_mix(mix, TOKENS)
    for head_dim, heads in ((128, 16), (64, 32)):
        for causal in (True, False):
            q, k, v = (torch.randn(TOKENS, heads, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
            cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
            longest = max(lengths)
            flop = sum(2 * heads * 2 * head_dim * bench.attention_pairs(n, n, causal) for n in lengths)
            ref = torch_varlen()(q, k, v, cu, longest, causal)
            ref = ref[0] if isinstance(ref, tuple) else ref
            calls = {
                "cuda:hopper varlen": lambda: cuda_impl.attention_varlen(q, k, v, cu, cu, longest, longest, causal=causal),
                "triton:fa2 varlen": lambda: triton_impl.attention_varlen(q, k, v, cu, cu, longest, longest,
                                                                          causal=causal),
                "torch varlen_attn": lambda: torch_varlen()(q, k, v, cu, longest, causal),
                "sdpa:flash nested": lambda: nested_sdpa("FLASH_ATTENTION")(q, k, v, cu, longest, causal),
                "sdpa:cudnn nested": lambda: nested_sdpa("CUDNN_ATTENTION")(q, k, v, cu, longest, causal),
                "cuda:hopper padded": padded(lengths, q, k, v, cu, causal),
            }
            for name, fn in calls.items():
                row = dict(mix=mix, sequences=len(lengths), longest=longest, tokens=TOKENS, heads=heads,
                           head_dim=head_dim, causal=causal, backend=name)
                try:
                    out = fn()
                    out = out[0] if isinstance(out, tuple) else out
                    if "padded" not in name:
                        row["max_abs_vs_varlen_attn"] = float((out.float() - ref.float()).abs().max())
                    _, p50, _, how = time_call(fn, "cuda", graph=True)
                    row.update(ms=p50, tflops=flop / (p50 * 1e-3) / 1e12, note=how)
                except Exception as exc:  # noqa: BLE001 - a refusal is a result
                    row.update(note=f"{type(exc).__name__}: {exc}"[:200])
                rows.append(row)
                print(row, file=sys.stderr, flush=True)

fields = ["mix", "sequences", "longest", "tokens", "heads", "head_dim", "causal", "backend", "ms", "tflops",
          "max_abs_vs_varlen_attn", "note"]
with open(os.path.join(OUT, "varlen_speed.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
print(f"{'mix':9} {'d':>4} {'causal':6} " + " ".join(f"{n[:18]:>18}" for n in dict.fromkeys(r["backend"] for r in rows)))
for key in dict.fromkeys((r["mix"], r["head_dim"], r["causal"]) for r in rows):
    cells = [r for r in rows if (r["mix"], r["head_dim"], r["causal"]) == key]
    print(f"{key[0]:9} {key[1]:>4} {str(key[2]):6} " + " ".join(
        f"{r['tflops']:18.1f}" if "tflops" in r else f"{'ERR':>18}" for r in cells))
