"""Named sweeps: TOML files beside this module (``compare/sweeps/*.toml``) that expand into benchmark cases.

A sweep file has top-level ``description``, ``backends`` (shell patterns over registry names) and
``formats``, and one or more ``[[shapes]]`` tables. Every key of a shapes table is a scalar or a list;
the table expands to the product of its lists. Shape keys:

* ``seqlen`` (sets both lengths) or ``seqlen_q`` and ``seqlen_k``;
* ``batch``, or ``tokens`` (batch = tokens // seqlen_q, the design's fixed 16k-token budget);
* ``heads_q``, or ``model_dim`` (heads_q = model_dim // head_dim); ``heads_kv`` (default heads_q);
* ``head_dim``, ``causal``, and ``formats`` (overrides the top-level list for this table);
* ``head_dim_v`` (V's head_dim, default head_dim), ``window_left`` / ``window_right`` (a local window, -1:
  unbounded; default none) and ``softcap`` (default 0), for the backends that declare them;
* ``lengths`` (a length mix of ``compare.varlen.LENGTH_MIXES``) with ``tokens``: a packed batch of that many
  tokens (queries and keys alike), and ``packing``: "packed" (default; the backends with a varlen call) or
  "padded" (a dense backend on the batch padded to the longest sequence);
* ``cache``: "contiguous" or "paged" (with ``page_size``), and ``kv_format``: "same" (default, the cache in q's
  dtype) or "fp8" (e4m3 with per-(batch, KV head) descales): decode through the backends' ``attention_with_kvcache``
  against a cache of ``seqlen_k`` keys in every sequence (compare.cache_sweep; with a ``window_left`` /
  ``window_right`` where given);
* ``latent = true`` with ``page_size``: MLA decode (compare.cache_sweep) -- one latent head of 576 columns per
  sequence in a paged cache, V its first 512, every sequence ``seqlen_k`` keys long, run through the backends'
  ``attention_mla_decode`` (the head dims are MLA's; ``head_dim`` / ``heads_kv`` may be left out).

A top-level ``triton_interpret = true`` marks a sweep sized for Triton's interpreter: on a machine without a
CUDA GPU, ``compare run`` sets TRITON_INTERPRET=1 for it, so that the Triton kernels run on the CPU
(``cpu.toml``, the default sweep there).
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..oracle import Case, VarlenCase

SWEEP_DIR = Path(__file__).resolve().parent
_TOP_KEYS = {"description", "backends", "formats", "shapes", "triton_interpret"}
_SHAPE_KEYS = {"seqlen", "seqlen_q", "seqlen_k", "batch", "tokens", "heads_q", "model_dim", "heads_kv",
               "head_dim", "causal", "formats", "head_dim_v", "window_left", "window_right", "softcap", "lengths",
               "packing", "latent", "page_size", "cache", "kv_format"}
PACKINGS = ("packed", "padded")


@dataclass(frozen=True)
class Sweep:
    name: str
    description: str
    backends: tuple[str, ...]
    cases: tuple[Case, ...]
    triton_interpret: bool = False  # without a GPU, run the Triton kernels under TRITON_INTERPRET=1


def available() -> list[str]:
    return sorted(p.stem for p in SWEEP_DIR.glob("*.toml"))


def load(name_or_path: str) -> Sweep:
    path = Path(name_or_path)
    if not path.suffix:
        path = SWEEP_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise ValueError(f"no sweep {name_or_path!r}; named sweeps: {', '.join(available())} (or give a .toml path)")
    try:
        spec = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"sweep {path} is not valid TOML: {exc}") from None
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise ValueError(f"sweep {path}: unknown top-level keys {sorted(unknown)}; known {sorted(_TOP_KEYS)}")
    if not spec.get("shapes"):
        raise ValueError(f"sweep {path} has no [[shapes]] tables")
    default_formats = spec.get("formats", ["bf16"])
    cases = []
    for i, table in enumerate(spec["shapes"]):
        unknown = set(table) - _SHAPE_KEYS
        if unknown:
            raise ValueError(f"sweep {path}, shapes table {i}: unknown keys {sorted(unknown)}; known {sorted(_SHAPE_KEYS)}")
        table = {"formats": default_formats, **table}
        keys = list(table)
        grids = [v if isinstance(v, list) else [v] for v in table.values()]
        for values in itertools.product(*grids):
            cases.append(_case(dict(zip(keys, values)), f"{path.name} shapes[{i}]"))
    return Sweep(name=path.stem, description=spec.get("description", ""),
                 backends=tuple(spec.get("backends", ["*"])), cases=tuple(dict.fromkeys(cases)),
                 triton_interpret=bool(spec.get("triton_interpret", False)))


def _case(d: dict, where: str) -> Case:
    if "lengths" in d or "packing" in d:
        return _packed_case(d, where)
    if d.get("latent") or "page_size" in d or "cache" in d or "kv_format" in d:
        return _cache_case(d, where)
    try:
        seqlen_q = d.get("seqlen_q", d.get("seqlen"))
        seqlen_k = d.get("seqlen_k", d.get("seqlen"))
        batch = d["batch"] if "batch" in d else d["tokens"] // seqlen_q
        heads_q = d["heads_q"] if "heads_q" in d else d["model_dim"] // d["head_dim"]
        return Case(batch=batch, heads_q=heads_q, heads_kv=d.get("heads_kv", heads_q), seqlen_q=seqlen_q,
                    seqlen_k=seqlen_k, head_dim=d["head_dim"], causal=bool(d.get("causal", False)),
                    fmt=d["formats"], head_dim_v=d.get("head_dim_v"),
                    window=(d.get("window_left", -1), d.get("window_right", -1)), softcap=d.get("softcap", 0.0))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{where}: incomplete shape {d} ({exc!r})") from exc


def _packed_case(d: dict, where: str):
    """A packed batch (compare.varlen.SweepCase) of `tokens` tokens drawn from length mix `lengths`."""
    from .. import varlen
    try:
        packing = d.get("packing", "packed")
        if packing not in PACKINGS:
            raise ValueError(f"packing must be one of {PACKINGS}, got {packing!r}")
        lengths = varlen.length_mix(d["lengths"], d["tokens"])
        heads_q = d["heads_q"] if "heads_q" in d else d["model_dim"] // d["head_dim"]
        case = VarlenCase(seqlens_q=lengths, seqlens_k=lengths, heads_q=heads_q, heads_kv=d.get("heads_kv", heads_q),
                          head_dim=d["head_dim"], causal=bool(d.get("causal", False)), fmt=d["formats"],
                          head_dim_v=d.get("head_dim_v"), window=(d.get("window_left", -1), d.get("window_right", -1)),
                          softcap=d.get("softcap", 0.0))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: packed batch {d} ({exc!r})") from exc
    return varlen.SweepCase(case, mix=d["lengths"], padded=packing == "padded")


def _cache_case(d: dict, where: str):
    """A KV-cache decode case (compare.cache_sweep.SweepCase): MLA's with latent = true, else a GQA cache of `cache`
    layout."""
    from .. import cache_sweep
    from ..kvcache import MLA_HEAD_DIM, MLA_HEAD_DIM_V
    try:
        for key in ("softcap", "seqlen", "tokens", "model_dim"):
            if key in d:
                raise ValueError(f"{key} is not a key of a KV-cache case")
        if d.get("latent"):
            if "page_size" not in d or "cache" in d or "kv_format" in d:
                raise ValueError("an MLA case is latent = true with page_size (a paged latent cache in q's dtype)")
            fixed = dict(head_dim=MLA_HEAD_DIM, head_dim_v=MLA_HEAD_DIM_V, heads_kv=1)
            for key, value in fixed.items():
                if d.get(key, value) != value:
                    raise ValueError(f"{key} is {value} in an MLA case, got {d[key]}")
            for key in ("window_left", "window_right"):
                if key in d:
                    raise ValueError(f"{key} is not a key of an MLA case")
            return cache_sweep.mla_case(batch=d["batch"], heads_q=d["heads_q"], seqlen_q=d["seqlen_q"],
                                        seqlen_k=d["seqlen_k"], page_size=d["page_size"],
                                        causal=bool(d.get("causal", False)), fmt=d["formats"])
        cache = d.get("cache")
        if cache not in cache_sweep.CACHES:
            raise ValueError(f"cache must be one of {cache_sweep.CACHES} (or latent = true), got {cache!r}")
        if (cache == cache_sweep.PAGED) != ("page_size" in d):
            raise ValueError('page_size goes with cache = "paged", and only with it')
        if "head_dim_v" in d and d["head_dim_v"] != d["head_dim"]:
            raise ValueError("a KV-cache case has V's head_dim equal to Q/K's (MLA's pair: latent = true)")
        return cache_sweep.cache_case(batch=d["batch"], heads_q=d["heads_q"], heads_kv=d.get("heads_kv", d["heads_q"]),
                                      seqlen_q=d["seqlen_q"], seqlen_k=d["seqlen_k"], head_dim=d["head_dim"],
                                      page_size=d.get("page_size"), kv_fmt=d.get("kv_format", "same"),
                                      causal=bool(d.get("causal", False)), fmt=d["formats"],
                                      window=(d.get("window_left", -1), d.get("window_right", -1)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: KV-cache case {d} ({exc!r})") from exc


def parse_shard(spec: str) -> tuple[int, int]:
    """(i, N) of a shard spec 'i/N' (0 <= i < N); ValueError naming the form otherwise."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/N with integers (0 <= i < N), got {spec!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {spec}: need 0 <= i < N")
    return i, n


def shard(items: list, spec: str | None) -> list:
    """The i-th of N interleaved parts of `items` for spec 'i/N' (0-based i); all items for None."""
    if spec is None:
        return list(items)
    i, n = parse_shard(spec)
    return list(items)[i::n]
