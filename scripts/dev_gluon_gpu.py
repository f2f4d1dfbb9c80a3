"""One dev call on the GPU machine for `triton:fa2-ws` and `triton:fp8-ws` (Gluon, warp-specialized): check,
then time.

    OUT=/tmp PYTHONPATH=. python scripts/dev_gluon_gpu.py

1. the public API with variants "fa2-ws" and "fp8-ws" against compare.oracle on awkward shapes (tails on
   both axes, causal with Sq < Sk and Sq > Sk, GQA, MQA, one query, one key, custom scale, fp16, 'large'
   and 'shifted' inputs; fp8 also with Sk % 16 != 0, where V^T is padded), then every extra config of
   DEV_WS_CONFIGS on a row-sampled case;
2. interleaved timing rounds (DEV_ROUNDS, default 3) at batch * seqlen = 16k tokens, 2048 / head_dim
   heads: fa2-ws (each config), fa2-tma through the autotuned API and torch SDPA on cuDNN; fp8-ws against
   fp8 (autotuned API) on the same values quantized by compare.formats; each DEV_WS_CONFIGS config beside
   its format.
Timing: triton.testing.do_bench median, L2 flushed. Writes $OUT/gluon_dev.csv; prints a table last.
"""
import argparse
import csv
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import devkit  # noqa: E402  (scripts/devkit.py: python puts the script's folder on sys.path)
import triton_impl  # noqa: E402
from compare import formats, oracle  # noqa: E402
from triton_impl.kernels import fa2_ws, fp8_ws  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
ROUNDS = int(os.environ.get("DEV_ROUNDS", "3"))
TOKENS = 16384
# extra configs to check and time beside the defaults, "FORMAT:HEAD_DIM:BLOCK_N:STAGES:OVERLAP[:OPTION...]" each
# (FORMAT bf16 or fp8; OPTION "cN": N consumer warpgroups, "0" / "1": fp8's PERMUTED_K, 0 keeps K tiles in key
# order), e.g. "bf16:128:128:2:1,fp8:128:128:4:0:0,bf16:64:128:3:0:c3"


def extra_config(n, st, o, *options):
    config = dict(BLOCK_N=int(n), STAGES=int(st), OVERLAP=bool(int(o)))
    for option in options:
        config.update({"CONSUMERS": int(option[1:])} if option.startswith("c") else {"PERMUTED_K": bool(int(option))})
    return config


EXTRA = [(fmt, int(d), extra_config(*rest))
         for fmt, d, *rest in (item.split(":") for item in os.environ.get("DEV_WS_CONFIGS", "").split(",") if item)]
# the formats timed (DEV_FORMATS, default both) and the head_dims (DEV_HEAD_DIMS, default 128,64; fp8 has no 256)
TIMED = os.environ.get("DEV_FORMATS", "bf16,fp8").split(",")
HEAD_DIMS = [int(d) for d in os.environ.get("DEV_HEAD_DIMS", "128,64").split(",")]

CASES = devkit.AWKWARD_CASES + [
    dict(batch=1, heads_q=2, heads_kv=2, seqlen_q=333, seqlen_k=448, head_dim=64, causal=False, dist="shifted"),
    dict(batch=1, heads_q=2, heads_kv=1, seqlen_q=1, seqlen_k=1, head_dim=128, causal=True),
    dict(batch=1, heads_q=3, heads_kv=1, seqlen_q=1, seqlen_k=700, head_dim=128, causal=True),
    dict(batch=1, heads_q=2, heads_kv=2, seqlen_q=700, seqlen_k=1, head_dim=64, causal=False),
    dict(batch=3, heads_q=4, heads_kv=2, seqlen_q=2048, seqlen_k=2048, head_dim=128, causal=True, scale=0.3),
    dict(batch=1, heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_k=4096, head_dim=128, causal=False),
    dict(batch=1, heads_q=4, heads_kv=4, seqlen_q=129, seqlen_k=4000, head_dim=64, causal=True),
    dict(batch=1, heads_q=2, heads_kv=2, seqlen_q=333, seqlen_k=448, head_dim=256, causal=False, dist="shifted"),
    dict(batch=1, heads_q=2, heads_kv=1, seqlen_q=257, seqlen_k=1024, head_dim=256, causal=True),
]


def api(variant):
    def run(q, k, v, **kw):
        return triton_impl.attention(q, k, v, variant=variant, **kw)
    return run


def explicit(config):
    """fn(q, k, v, causal=, scale=, return_lse=) launching `config` directly (16-bit tensors, or fp8 QuantTensors)."""
    def run(q, k, v, *, causal=False, scale=None, return_lse=False):
        quantized = hasattr(q, "fmt")
        shape = q.data.shape if quantized else q.shape
        out = torch.empty(shape, device="cuda", dtype=torch.bfloat16 if quantized else q.dtype)
        lse = torch.empty(shape[:3], device="cuda", dtype=torch.float32)
        scale = shape[-1] ** -0.5 if scale is None else scale
        if quantized:
            fp8_ws.launch(q.data, k.data, v.data, q.scale.contiguous(), k.scale.contiguous(), v.scale.contiguous(),
                          out, lse, causal, scale, config)
        else:
            fa2_ws.launch(q, k, v, out, lse, causal, scale, config)
        return (out, lse) if return_lse else out
    return run


def case_check(i, fmt):
    """(name, check) of CASES[i] in `fmt` through the public API of the Gluon variant for that format."""
    variant = "fp8-ws" if fmt == "fp8" else "fa2-ws"
    case = oracle.Case(fmt=fmt, seed=i, **CASES[i])
    return f"{variant} {case.shape_str()}", lambda: devkit.oracle_check(api(variant), case)


def checks():
    for i, spec in enumerate(CASES):
        for fmt in ("bf16", "fp16", "fp8") if i < 3 else ("bf16", "fp8") if spec["head_dim"] < 256 else ("bf16",):
            yield case_check(i, fmt)
    for fmt, head_dim, config in EXTRA:
        for causal in (False, True):
            case = oracle.Case(batch=2, heads_q=8, heads_kv=2, seqlen_q=1000, seqlen_k=1080, head_dim=head_dim,
                               causal=causal, fmt=fmt, seed=7)
            yield (f"{fa2_ws.config_name(config)} d{head_dim} {case.shape_str()}",
                   lambda case=case, config=config: devkit.oracle_check(explicit(config), case))


def time_ms(fn):
    return triton.testing.do_bench(fn, quantiles=[0.5])


def main():
    failures, total = devkit.run_checks(checks())
    devkit.log(f"correctness: {total - failures}/{total} passed")
    rows = []
    seqlens = {128: (16384, 4096, 1024), 64: (16384, 4096), 256: (16384, 4096)}
    shapes = [(d, s, c) for d in HEAD_DIMS for s in seqlens[d] for c in (False, True)]
    for head_dim, seqlen, causal in shapes:
        batch, heads = TOKENS // seqlen, 2048 // head_dim
        q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * batch * heads * head_dim * (seqlen * (seqlen + 1) // 2 if causal else seqlen * seqlen)
        candidates = []
        if "bf16" in TIMED:
            candidates += [("fa2-ws", lambda: api("fa2-ws")(q, k, v, causal=causal)),
                           ("fa2-tma", lambda: triton_impl.attention(q, k, v, causal=causal, variant="fa2-tma")),
                           ("cudnn", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))]
        fp8 = "fp8" in TIMED and head_dim != 256  # fp8-ws takes head_dim 64 and 128
        q8, k8, vt8 = formats.quantize_attention_inputs(q, k, v, "fp8") if fp8 else (None, None, None)
        if fp8:
            candidates += [(f"{variant} (fp8)", lambda variant=variant: api(variant)(q8, k8, vt8, causal=causal))
                           for variant in ("fp8-ws", "fp8")]
        for fmt, d, config in EXTRA:  # only configs whose oracle checks passed (all of them, or none is timed)
            if d == head_dim and fmt in TIMED and (fmt != "fp8" or fp8) and failures == 0:
                inputs = (q8, k8, vt8) if fmt == "fp8" else (q, k, v)
                candidates.append((f"{fa2_ws.config_name(config)} ({fmt})",
                                   lambda c=config, x=inputs: explicit(c)(*x, causal=causal)))
        label = f"d{head_dim} {batch}x{heads}x{seqlen} {'causal' if causal else 'full'}"
        medians = devkit.interleaved_medians(label, candidates, ROUNDS, time_ms)
        for name, ms in medians.items():
            variant = name.split()[0]
            if variant in ("fa2-ws", "fp8-ws"):  # the table's config: the extra configs' launches share last_config
                note = fa2_ws.config_name(fa2_ws.config_for(head_dim, 1 if variant == "fp8-ws" else 2, causal, seqlen))
            else:
                note = triton_impl.last_config(variant) or ""
            rows.append(dict(head_dim=head_dim, seqlen=seqlen, causal=causal, impl=name, ms=ms,
                             tflops=flops / ms * 1e-9, note=note))
    with open(os.path.join(OUT, "gluon_dev.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    devkit.log(f"correctness: {total - failures}/{total} passed")
    for row in rows:
        devkit.log(f"d{row['head_dim']:<4} {row['seqlen']:>6} {'causal' if row['causal'] else 'full  '} "
                   f"{row['impl']:18} {row['tflops']:7.1f} TFLOP/s {row['note']}")
    return 1 if failures else 0


def sanitize_cases():
    """A few oracle cases per Gluon variant (tails, causal Sq < Sk and Sq > Sk, GQA, the permuted and in-order
    fp8 K paths, more key tiles than stages), small enough for compute-sanitizer."""
    for i in (0, 2, 3, 4):
        for fmt in ("bf16", "fp8"):
            yield case_check(i, fmt)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sanitize-cases", action="store_true",
                        help="only the small oracle cases meant to run under compute-sanitizer, no timing")
    if parser.parse_args().sanitize_cases:
        failed, total = devkit.run_checks(sanitize_cases())
        devkit.log(f"sanitize cases: {total - failed}/{total} passed")
        raise SystemExit(1 if failed else 0)
    raise SystemExit(main())
