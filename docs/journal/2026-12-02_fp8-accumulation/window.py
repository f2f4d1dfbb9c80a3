"""triton:fa2 local window 4k on 32k keys vs dense (fa2, fa2-ws) at d128 bf16: FLOP rate on the FLOPs done."""
import csv, os
import torch
import triton_impl
from compare.bench import attention_pairs, time_call

OUT = os.environ.get("OUT", "/tmp")
rows = []
torch.manual_seed(0)
B, H, S, D = 1, 16, 32768, 128
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
cases = [("fa2 window(4096,0) causal", dict(variant="fa2", causal=True, window=(4096, 0)), (4096, 0), True),
         ("fa2 window(2048,2048)", dict(variant="fa2", causal=False, window=(2048, 2048)), (2048, 2048), False),
         ("fa2 dense causal", dict(variant="fa2", causal=True), (-1, -1), True),
         ("fa2 dense", dict(variant="fa2", causal=False), (-1, -1), False),
         ("fa2-ws dense causal", dict(variant="fa2-ws", causal=True), (-1, -1), True),
         ("fa2 softcap 30 causal", dict(variant="fa2", causal=True, softcap=30.0), (-1, -1), True)]
for rnd in range(2):
    for name, kw, window, causal in (cases if rnd == 0 else cases[::-1]):
        fn = lambda: triton_impl.attention(q, k, v, **kw)
        fn(); torch.cuda.synchronize()
        p20, p50, p80, _ = time_call(fn, "cuda")
        fl = 4 * B * H * attention_pairs(S, S, causal, window) * D
        rows.append(dict(case=name, round=rnd, batch=B, heads=H, seqlen=S, head_dim=D, ms=p50, flops=fl, tflops=fl / p50 / 1e9))
        print(f"r{rnd} {name:28} {p50:8.3f} ms {fl / p50 / 1e9:7.1f} TFLOP/s", flush=True)
with open(os.path.join(OUT, "window_speed.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
best = {}
for r in rows:
    best[r["case"]] = max(best.get(r["case"], 0), r["tflops"])
for c, t in best.items():
    print(f"{c:28} {t:7.1f} TFLOP/s")
