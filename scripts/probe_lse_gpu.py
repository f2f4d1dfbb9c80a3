"""Where does cuda:v5's fp16 LSE error at b1 h32 16k x 16k d64 come from? (docs/perf-notes-cuda.md)

Three probes on the GPU, every 16-bit backend given the same inputs:
  scores   seqlen_k = 1: LSE = scale * s exactly, so the LSE error is the error of the kernel's S
           (its MMA accumulation); reported as max and mean signed error, beside an fp32 matmul of the
           same fp16 values;
  length   LSE error (max |err|, mean signed err, oracle bound) against the float64 reference on the
           oracle's sampled rows, seqlen 1k..16k: an error that grows with the key count points at
           the row sum, one that does not at S or the final log;
  repeat   the failing shape run twice on identical inputs: a difference is a race, not rounding.
Prints one table per probe; run it on the GPU from the repository root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compare import backends, bench, oracle  # noqa: E402

# backends that return the LSE (torch SDPA does not)
DEVICE = "cuda"
DEFAULT_BACKENDS = ["cuda:v1", "cuda:v2", "cuda:v3", "cuda:v4", "cuda:v5", "cuda:hopper", "triton:fa2"]


def run_lse(backend, inputs, case) -> torch.Tensor:
    _, lse = backend(inputs.q, inputs.k, inputs.v, causal=case.causal, scale=case.scale, return_lse=True)
    return lse.double()


def err_stats(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    d = got - ref
    return float(d.abs().max()), float(d.mean())


def probe_scores(names: list[str], seed: int) -> None:
    case = oracle.Case(1, 32, 32, 4096, 1, 64, fmt="fp16", seed=seed)
    inputs = oracle.make_inputs(case, device=DEVICE)
    q, k, _ = inputs.dequantized()
    exact = (q @ k.transpose(-1, -2)).squeeze(-1) * case.softmax_scale  # float64 of the fp16 values
    fp32 = (q.float() @ k.float().transpose(-1, -2)).squeeze(-1).double() * case.softmax_scale
    print(f"\n== scores: {case.shape_str()}; LSE = scale * s; |s * scale| max {float(exact.abs().max()):.2f}")
    print(f"{'backend':<14}{'max |err|':>12}{'mean err':>12}")
    print(f"{'fp32 matmul':<14}" + "".join(f"{v:>12.3e}" for v in err_stats(fp32, exact)))
    for name in names:
        backend = backends.get(name)
        if not backend.returns_lse:
            print(f"{name:<14}  skipped: returns no LSE")
            continue
        if backend.unsupported_reason(case):
            print(f"{name:<14}  skipped: {backend.unsupported_reason(case)}")
            continue
        print(f"{name:<14}" + "".join(f"{v:>12.3e}" for v in err_stats(run_lse(backend, inputs, case), exact)))


def probe_length(names: list[str], seqlens: list[int], seed: int, include_paper: bool = True) -> None:
    print("\n== length: fp16 b1 h32 d64 non-causal, LSE error on the oracle's sampled rows"
          " (seed 'paper': the inputs of the failing paper-sweep row)")
    print(f"{'seqlen':>7} {'seed':>10} {'backend':<14}{'max |err|':>12}{'mean err':>12}{'bound':>12}")
    paper_case = oracle.Case(1, 32, 32, 16384, 16384, 64, fmt="fp16")
    runs = [(s, seed, str(seed)) for s in seqlens]
    if include_paper:
        runs.append((16384, bench._case_seed("cuda:v5", paper_case), "paper"))
    names = [name for name in names if backends.get(name).returns_lse]
    for s, seed, tag in runs:
        case = oracle.Case(1, 32, 32, s, s, 64, fmt="fp16", seed=seed)
        inputs = oracle.make_inputs(case, device=DEVICE)
        rows = oracle._pick_rows(case, DEVICE, None)
        rows = torch.arange(s, device=DEVICE) if rows is None else rows
        q, k, v = inputs.dequantized()
        _, ref = oracle.reference(q, k, v, causal=False, scale=case.softmax_scale, rows=rows)
        _, plain = oracle.plain_attention(inputs, case, rows=rows)
        plain_max, plain_mean = err_stats(plain, ref)
        bound = oracle.lse_error_bound(plain_max, ref)  # every row of these cases sees keys: all finite
        print(f"{s:>7} {tag:>10} {'plain fp16':<14}{plain_max:>12.3e}{plain_mean:>12.3e}{bound:>12.3e}")
        for name in names:
            got = run_lse(backends.get(name), inputs, case)[:, :, rows]
            worst, mean = err_stats(got, ref)
            where = divmod(int((got - ref).abs().flatten().argmax()), rows.numel())
            print(f"{s:>7} {tag:>10} {name:<14}{worst:>12.3e}{mean:>12.3e}{'  FAIL' if worst > bound else '':>6}"
                  f"  worst at head {where[0]}, row {int(rows[where[1]])}")


def probe_repeat(name: str, seed: int) -> None:
    case = oracle.Case(1, 32, 32, 16384, 16384, 64, fmt="fp16", seed=seed)
    inputs = oracle.make_inputs(case, device=DEVICE)
    backend = backends.get(name)
    runs = [backend(inputs.q, inputs.k, inputs.v, causal=False, return_lse=True) for _ in range(3)]
    same = all(torch.equal(o, runs[0][0]) and torch.equal(l, runs[0][1]) for o, l in runs[1:])
    print(f"\n== repeat: {name} {case.shape_str()} x3 on identical inputs: "
          f"{'bit-identical' if same else 'DIFFERENT (a race)'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=DEFAULT_BACKENDS)
    parser.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("probe_lse_gpu.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    probe_scores(args.backends, args.seed)
    probe_length(args.backends, args.seqlens, args.seed)
    probe_repeat("cuda:v5", args.seed)


if __name__ == "__main__":
    main()
