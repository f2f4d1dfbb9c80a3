"""trace: where a persistent cuda:hopper CTA's cycles go, item by item: a timeline from the kernel itself.

The counters (dev.py profile) give totals: at d128 4k, for instance, about 5.7 k cycles per work item beyond the
KV tiles. This says which part of the item boundary they sit in. The library of build "trace" (dev.toml) has the
producer thread and lane 0 of each consumer warpgroup's first warp write the SM clock at fixed points of every
item (cuda_impl/csrc/hopper/trace.cuh); one launch per case fills the buffer and `cuda_fa_hopper_trace` copies
it out.

    dev.py trace --build-only                           (dev machine: build, then carry cuda_impl/_build)
    dev.py trace --out DIR [CASE ...]                   (GPU machine)
    CASE = B,Hq,Hkv,Sq,Sk,D[,causal]   (bf16; default: d128 b4 h16 4k, b1 h16 16k, b4 h16 4k causal)

Per consumer and item (cycles): the wait for Q, the wait for the turn to issue S(0), S(0) itself, softmax(0)
and P(0), the loop (per tile), the last P V, the stores, and the gap to the next item's start. "outside" is
all of an item's cycles but its loop; "boundary" is outside less one loop tile (the item's first tile, whose
S and softmax run outside the loop): what an item costs beyond its tiles. The producer's columns say when it
could issue the item's Q (after q_empty) and K(0), measured from the consumer's item start.

Written to DIR: `trace-items.csv.gz` (one row per consumer and item) and `trace-summary.csv` (medians per case
over the items with the case's full tile count), also printed. The marks are a few clock reads and stores
outside the KV-tile loop; the traced build's loop is the default's, but its times are a diagnosis, not a
benchmark.
"""

from __future__ import annotations

import csv
import ctypes
import gzip
import statistics
from pathlib import Path

from . import core

BUILD = "trace"  # the build of dev.toml with the timeline
DEFAULT_CASES = ("4,16,16,4096,4096,128", "1,16,16,16384,16384,128", "4,16,16,4096,4096,128,causal")
# cuda_impl/csrc/hopper/trace.cuh (tests/test_dev_scripts.py checks these against it)
CTAS, ROLES, ITEMS, EVENTS = 132, 4, 64, 8
BEGIN, Q_LANDED, S0_TURN, S0_RETIRED, LOOP_IN, LOOP_OUT, LAST_PV_RETIRED, STORED = range(8)
Q_ISSUED, K0_ISSUED, LAST_V_ISSUED, TILES = 1, 2, 3, 7
PHASES = ("q_wait", "turn_wait", "s0", "softmax0", "tile", "last_pv", "store", "gap", "outside", "boundary",
          "prod_q_issue", "prod_k0_issue")


def parse_case(text: str) -> tuple[tuple[int, ...], bool]:
    fields = text.split(",")
    if len(fields) not in (6, 7) or (len(fields) == 7 and fields[6] != "causal"):
        raise SystemExit(f"bad case {text!r}: B,Hq,Hkv,Sq,Sk,D[,causal]")
    try:
        return tuple(int(f) for f in fields[:6]), len(fields) == 7
    except ValueError:
        raise SystemExit(f"bad case {text!r}: the six sizes are integers") from None


def read_trace(lib) -> list:
    """The buffer as nested lists [cta][role][item][event] (and zeroed on the device)."""
    import numpy as np

    fn = lib.cuda_fa_hopper_trace
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    host = np.zeros((CTAS, ROLES, ITEMS, EVENTS), dtype=np.int64)
    err = ctypes.create_string_buffer(256)
    size = fn(host.ctypes.data, err, 256)
    if size < 0:
        raise SystemExit(f"this library was built without the define of build {BUILD} (dev.toml)")
    if size != host.nbytes:
        raise SystemExit(f"trace copy failed ({size} bytes): {err.value.decode(errors='replace')}")
    return host.tolist()


def item_rows(trace: list, label: str) -> list[dict]:
    """One row per (CTA, consumer, item) that ran, with its phases in cycles."""
    rows = []
    for cta in range(CTAS):
        producer = trace[cta][0]
        for role in range(1, ROLES):
            marks = trace[cta][role]
            for item in range(ITEMS):
                m = marks[item]
                if m[BEGIN] == 0 or m[STORED] == 0:
                    continue
                n = producer[item][TILES]
                nxt = marks[item + 1][BEGIN] if item + 1 < ITEMS else 0
                loop = m[LOOP_OUT] - m[LOOP_IN]
                tile = loop / (n - 1) if n > 1 else float("nan")
                end = nxt if nxt else m[STORED]
                outside = end - m[BEGIN] - loop
                rows.append(dict(
                    case=label, cta=cta, consumer=role - 1, item=item, tiles=n,
                    q_wait=m[Q_LANDED] - m[BEGIN], turn_wait=m[S0_TURN] - m[Q_LANDED], s0=m[S0_RETIRED] - m[S0_TURN],
                    softmax0=m[LOOP_IN] - m[S0_RETIRED], tile=tile, last_pv=m[LAST_PV_RETIRED] - m[LOOP_OUT],
                    store=m[STORED] - m[LAST_PV_RETIRED], gap=(nxt - m[STORED]) if nxt else float("nan"),
                    outside=outside if nxt else float("nan"), boundary=(outside - tile) if nxt else float("nan"),
                    prod_q_issue=producer[item][Q_ISSUED] - m[BEGIN], prod_k0_issue=producer[item][K0_ISSUED] - m[BEGIN],
                ))
    return rows


def summary(rows: list[dict], label: str) -> dict:
    """Medians over the items of the case's most common tile count (whole items, not split parts)."""
    counts = statistics.multimode(r["tiles"] for r in rows)
    full = [r for r in rows if r["tiles"] == max(counts)]
    out = dict(case=label, items=len(full), tiles=max(counts))
    for phase in PHASES:
        values = [r[phase] for r in full if r[phase] == r[phase]]  # (NaN: the CTA's last item)
        out[phase] = round(statistics.median(values)) if values else ""
    return out


def run(cases: list[str], out_dir: Path) -> None:
    import torch

    from cuda_impl import _lib, toolchain

    flags = core.flags_of(BUILD)
    if toolchain.cached_library(_lib.library_spec(flags)) is None:
        raise SystemExit(f"the traced library is not built: dev.py build {BUILD} (or dev.py trace --build-only)")
    lib = _lib.load(flags)
    all_rows, summaries = [], []
    for text in cases:
        (b, hq, hkv, sq, sk, d), causal = parse_case(text)
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, hq, sq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)

        def launch():
            _lib.launch_forward("hopper", q, k, v, out, lse, causal=causal, scale=d**-0.5, extra_flags=flags)

        for _ in range(3):  # warm: clocks up, caches as in a benchmark
            launch()
        torch.cuda.synchronize()
        read_trace(lib)  # zero the buffer
        launch()
        torch.cuda.synchronize()
        rows = item_rows(read_trace(lib), text)
        if not rows:
            raise SystemExit(f"{text}: no item traced (not a persistent launch?)")
        all_rows += rows
        summaries.append(summary(rows, text))
    out_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(out_dir / "trace-items.csv.gz", "wt", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        writer.writeheader()
        writer.writerows(all_rows)
    with open(out_dir / "trace-summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summaries[0]))
        writer.writeheader()
        writer.writerows(summaries)
    print("medians in cycles (items with the case's full tile count, both consumers)")
    header = ["case", "items", "tiles", *PHASES]
    print("  ".join(f"{h:>13}" if i else f"{h:<32}" for i, h in enumerate(header)))
    for s in summaries:
        print("  ".join(f"{s[h]!s:>13}" if i else f"{s[h]:<32}" for i, h in enumerate(header)))


def main(args) -> int:
    cases = args.cases or list(DEFAULT_CASES)
    for text in cases:
        parse_case(text)
    if args.build_only:
        print(f"built {BUILD}: {core.build_library(BUILD)}", flush=True)
        return 0
    run(cases, core.out_dir(args.out))
    return 0
