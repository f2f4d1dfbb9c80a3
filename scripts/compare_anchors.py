"""Join a results CSV with the recorded H200 peer anchors (figures/reference/h200-2026-11-29.csv) and
print our TFLOP/s beside the anchor's, per SDPA peer and shape: the check that the driver measures
what the earlier, independent run measured.  Usage: python scripts/compare_anchors.py RESULTS.csv"""

import sys
from pathlib import Path

import pandas as pd

ANCHORS = Path(__file__).resolve().parent.parent / "figures" / "reference" / "h200-2026-11-29.csv"
DTYPE = {"bfloat16": "bf16", "float16": "fp16"}


def main(path: str) -> None:
    ours = pd.read_csv(path)
    ours = ours[(ours["family"] == "peer") & (ours["oracle"] == "pass")]
    ints = ["batch", "heads_q", "seqlen_q", "seqlen_k", "head_dim"]
    ours = ours.astype({c: int for c in ints})
    ref = pd.read_csv(ANCHORS)
    ref = ref[ref["kind"] == "attn"].assign(
        backend="sdpa", variant=lambda d: d["impl"].str.replace("sdpa-", "", regex=False),
        format=lambda d: d["dtype"].map(DTYPE))
    ref = ref.rename(columns={"B": "batch", "H": "heads_q", "Sq": "seqlen_q", "Sk": "seqlen_k", "D": "head_dim",
                              "tflops": "anchor_tflops"})
    keys = ["backend", "variant", "format", "batch", "heads_q", "seqlen_q", "seqlen_k", "head_dim", "causal"]
    ref["causal"] = ref["causal"].astype(bool)
    ours["causal"] = ours["causal"].astype(bool)
    joined = ours.merge(ref[keys + ["anchor_tflops"]], on=keys)
    joined["ratio"] = joined["tflops"] / joined["anchor_tflops"]
    cols = keys[1:] + ["tflops", "anchor_tflops", "ratio"]
    print(joined[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}" if x < 10 else f"{x:.1f}"))
    print(f"ratio ours/anchor over {len(joined)} shapes: median {joined['ratio'].median():.3f}, "
          f"min {joined['ratio'].min():.3f}, max {joined['ratio'].max():.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
