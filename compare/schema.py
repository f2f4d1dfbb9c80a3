"""The results CSV schema, shared by the driver (compare.bench) and the readers of the results (compare.results).
Torch-free, so that figures regenerate on a machine with only pandas and seaborn."""

ENV_COLUMNS = ["timestamp", "sweep", "git_commit", "gpu", "sm_count", "compute_capability", "driver", "cuda",
               "torch", "triton", "host_python", "sm_clock_mhz"]
CASE_COLUMNS = ["backend", "family", "variant", "format", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k",
                "head_dim", "causal", "head_dim_v", "window_left", "window_right", "softcap", "lengths", "packing",
                "page_size", "kv_format"]
# Case columns added after the first published CSVs, and what a CSV without them means (head_dim_v None: the
# row's head_dim): compare.results.load_results fills them in, so older data reads as the dense cases it holds.
# lengths / packing: a packed batch's length mix (compare.varlen.LENGTH_MIXES) and "packed" or "padded" (batch,
# seqlen_q / seqlen_k are then its sequence count and longest lengths); empty for a dense case. packing "latent",
# "paged" or "contiguous", page_size and kv_format: decode through a KV-cache call (compare.cache_sweep; seqlen_k every
# sequence's keys): MLA's latent cache in pages, or a GQA cache in pages or contiguous, kv_format "fp8" for an e4m3
# cache ("" for one in the row's format).
LATER_CASE_COLUMNS = {"head_dim_v": None, "window_left": "-1", "window_right": "-1", "softcap": "0", "lengths": "",
                      "packing": "", "page_size": "", "kv_format": ""}
RESULT_COLUMNS = ["ms_p20", "ms_p50", "ms_p80", "tflops", "ceiling", "ceiling_tflops", "pct_sol",
                  "pct_datasheet", "max_abs_err", "err_bound", "rel_l2", "rel_l2_unquantized", "oracle_rows",
                  "oracle", "note"]
# note: why a row failed the oracle or raised; for a timed Triton row the autotuner's pick ("config 64x128 w4
# s3": BLOCK_M x BLOCK_N, warps, stages[, maxnreg]); for a ceiling row what was measured; for a GPU call that
# could not be timed as a CUDA-graph replay EAGER and why (its time then carries the host's launch time).
EAGER = "eager timing"
COLUMNS = ENV_COLUMNS + CASE_COLUMNS + RESULT_COLUMNS
# A row is the same measurement as another when these agree (resume and merge key).
KEY_COLUMNS = ["git_commit", "gpu", "driver", "torch", "triton"] + CASE_COLUMNS


def _later(row, column: str):
    """A later case column's value in `row`, its default where the row has none (or an empty cell)."""
    value = row.get(column, "") if hasattr(row, "get") else ""
    if value is None or (isinstance(value, str) and value == "") or value != value:  # (value != value: NaN)
        value = LATER_CASE_COLUMNS[column]
    return row["head_dim"] if value is None else value


def shape_label(row) -> str:
    """A results row's case as one short label, e.g. 'bf16 b4 h16/16 q4096 k4096 d128 causal', with
    'd192v128', ' win4096,0' and ' cap30' where V's head_dim, a window or a softcap set it apart, ' longtail
    packed' for a packed batch (b: its sequences, q / k: its longest lengths), ' latent page64' for MLA decode,
    ' paged64' / ' cache' for decode through attention_with_kvcache and ' kv-fp8' for an e4m3 cache (works on a
    dict or a pandas row)."""
    ints = {c: int(row[c]) for c in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim")}
    causal = " causal" if row["causal"] in (True, "True", "true") else ""
    dv = int(float(_later(row, "head_dim_v")))
    window = (int(float(_later(row, "window_left"))), int(float(_later(row, "window_right"))))
    softcap = float(_later(row, "softcap"))
    extra = (f" win{window[0]},{window[1]}" if window != (-1, -1) else "") + (f" cap{softcap:g}" if softcap else "")
    lengths, packing = _later(row, "lengths"), _later(row, "packing")
    if isinstance(lengths, str) and lengths:  # a packed batch: its mix and packing, its longest lengths
        extra += f" {lengths} {packing}"
    elif packing == "latent":  # MLA decode: one latent cache in pages
        extra += f" latent page{int(float(_later(row, 'page_size')))}"
    elif packing == "paged":  # decode through attention_with_kvcache
        extra += f" paged{int(float(_later(row, 'page_size')))}"
    elif packing == "contiguous":
        extra += " cache"
    kv_format = _later(row, "kv_format")
    if isinstance(kv_format, str) and kv_format:
        extra += f" kv-{kv_format}"
    return (f"{row['format']} b{ints['batch']} h{ints['heads_q']}/{ints['heads_kv']} q{ints['seqlen_q']} "
            f"k{ints['seqlen_k']} d{ints['head_dim']}{f'v{dv}' if dv != ints['head_dim'] else ''}{causal}{extra}")
