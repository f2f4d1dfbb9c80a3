"""The results CSV schema, shared by the driver (compare.bench) and the figures (compare.figures).
Torch-free, so that figures regenerate on a machine with only pandas and seaborn."""

ENV_COLUMNS = ["timestamp", "sweep", "git_commit", "gpu", "sm_count", "compute_capability", "driver", "cuda",
               "torch", "triton", "host_python", "sm_clock_mhz"]
CASE_COLUMNS = ["backend", "family", "variant", "format", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k",
                "head_dim", "causal"]
RESULT_COLUMNS = ["ms_p20", "ms_p50", "ms_p80", "tflops", "ceiling", "ceiling_tflops", "pct_sol",
                  "pct_datasheet", "max_abs_err", "err_bound", "rel_l2", "rel_l2_unquantized", "oracle_rows",
                  "oracle", "note"]
# note: why a row failed the oracle or raised; for a timed Triton row the autotuner's pick ("config 64x128 w4
# s3": BLOCK_M x BLOCK_N, warps, stages[, maxnreg]); for a ceiling row what was measured.
COLUMNS = ENV_COLUMNS + CASE_COLUMNS + RESULT_COLUMNS
# A row is the same measurement as another when these agree (resume and merge key).
KEY_COLUMNS = ["git_commit", "gpu", "driver", "torch", "triton"] + CASE_COLUMNS


def shape_label(row) -> str:
    """A results row's case as one short label, e.g. 'bf16 b4 h16/16 q4096 k4096 d128 causal'
    (works on a dict or a pandas row)."""
    ints = {c: int(row[c]) for c in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim")}
    causal = " causal" if row["causal"] in (True, "True", "true") else ""
    return (f"{row['format']} b{ints['batch']} h{ints['heads_q']}/{ints['heads_kv']} q{ints['seqlen_q']} "
            f"k{ints['seqlen_k']} d{ints['head_dim']}{causal}")
