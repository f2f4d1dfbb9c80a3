"""same-bits: every CUDA variant through this checkout's library and through DEV_BASELINE_LIB (another commit's
prebuilt libcuda_fa.so), on a fixed, seeded list of inputs, outputs and LSE compared bit for bit.

The cases (dev.toml [same-bits]): each variant in each of its formats at each of its head_dims, causal and not,
on every shape of `shapes`, then the variant's `paths` (shapes that take the different launch paths of its
scheduler). Each case's inputs are drawn once (compare.oracle.make_inputs, seeded by `seed` and the case) and
given to both libraries; before each launch the outputs are filled with NaN, so an element one library leaves
unwritten cannot match. Equality is torch.equal on the raw bits (the tensors viewed as integers), so -0.0 and
+0.0 differ and a NaN equals only the same NaN. A case that raises is a difference (its error is in the CSV);
after a device fault the remaining cases are marked as not run.

The comparison logic (compare_outputs, run_case, run) takes the launcher as a function, so that the CPU tests
drive it with fake outputs."""

from __future__ import annotations

import csv
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import core

FIELDS = ["case", "variant", "format", "identical_out", "identical_lse", "max_abs_diff", "max_abs_diff_lse",
          "nan_out_new", "nan_out_baseline", "error"]
LIBRARIES = ("new", "baseline")


@dataclass(frozen=True)
class Item:
    """One comparison: `variant` on `case` (compare.oracle.Case, its seed set)."""

    variant: str
    case: object
    label: str = field(default="")


def items(cfg: dict | None = None, variants: list[str] | None = None) -> list[Item]:
    """The fixed list of comparisons of dev.toml [same-bits] (restricted to `variants` when given)."""
    cfg = cfg or core.config()["same-bits"]
    table = cfg["variants"]
    chosen = variants or list(table)
    for v in chosen:
        if v not in table:
            raise core.UsageError(f"--variants: {v!r} is not in dev.toml [same-bits.variants] ({', '.join(table)})")
    out, seen = [], set()

    def add(variant, case):
        case = case.replace(seed=zlib.crc32(f"{cfg['seed']}|{variant}|{case.shape_str()}|{case.scale}".encode()))
        key = (variant, case)
        if key not in seen:
            seen.add(key)
            out.append(Item(variant, case, f"{case.shape_str()}" + (f" scale={case.scale}" if case.scale else "")))

    for variant in chosen:
        spec = table[variant]
        for shape in core.shapes(cfg["shapes"]):
            for fmt in [shape.fmt] if shape.fmt else spec["formats"]:
                for d in [shape.head_dim] if shape.head_dim else spec["head_dims"]:
                    for causal in (False, True):
                        add(variant, shape.case(fmt, d).replace(causal=causal))
        for shape in core.shapes(cfg.get("paths", {}).get(variant, [])):
            add(variant, shape.case(spec["formats"][0], spec["head_dims"][0]))
    return out


def _bits(t):
    import torch

    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(as_int)


def _max_diff(a, b) -> float:
    """max |a - b| over the elements whose bits differ (0 when none; inf where one side is NaN or inf)."""
    import torch

    differ = _bits(a) != _bits(b)
    if not bool(differ.any()):
        return 0.0
    x, y = a[differ].double(), b[differ].double()
    d = (x - y).abs()
    d = torch.where(torch.isnan(x) & torch.isnan(y), torch.zeros_like(d), d)  # two NaNs of other payloads
    return float(d.nan_to_num(math.inf).max())


def compare_outputs(new: tuple, baseline: tuple) -> dict:
    """(out, lse) of the two libraries -> the CSV's comparison fields."""
    import torch

    (out_n, lse_n), (out_b, lse_b) = new, baseline
    same_shape = out_n.shape == out_b.shape and lse_n.shape == lse_b.shape and out_n.dtype == out_b.dtype
    if not same_shape:
        return dict(identical_out=False, identical_lse=False, max_abs_diff=math.inf, max_abs_diff_lse=math.inf,
                    nan_out_new=int(torch.isnan(out_n).sum()), nan_out_baseline=int(torch.isnan(out_b).sum()),
                    error=f"shapes differ: {tuple(out_n.shape)} / {tuple(out_b.shape)}")
    return dict(identical_out=torch.equal(_bits(out_n), _bits(out_b)),
                identical_lse=torch.equal(_bits(lse_n), _bits(lse_b)),
                max_abs_diff=_max_diff(out_n, out_b), max_abs_diff_lse=_max_diff(lse_n, lse_b),
                nan_out_new=int(torch.isnan(out_n).sum()), nan_out_baseline=int(torch.isnan(out_b).sum()),
                error="")


# launch(item, inputs, library, out, lse): one forward of item.variant on `inputs` by library "new" or
# "baseline", into out / lse (NaN-filled by the caller).
Launch = Callable[[Item, object, str, object, object], None]


def run_case(item: Item, inputs, launch: Launch, outputs: Callable[[object], tuple]) -> dict:
    """Both libraries on the same inputs, each into fresh NaN-filled outputs (outputs(inputs) makes them),
    synchronised before the comparison; a library that raises makes the row an error."""
    results = {}
    for library in LIBRARIES:
        out, lse = outputs(inputs)
        try:
            launch(item, inputs, library, out, lse)
            _synchronize(out)
        except Exception as exc:  # noqa: BLE001 - a refused or crashing launch is a result too
            return dict(identical_out=False, identical_lse=False, max_abs_diff="", max_abs_diff_lse="",
                        nan_out_new="", nan_out_baseline="",
                        error=f"{library}: {type(exc).__name__}: {exc}".splitlines()[0][:300])
        results[library] = (out, lse)
    return compare_outputs(results["new"], results["baseline"])


def _synchronize(t) -> None:
    import torch

    if t.is_cuda:
        torch.cuda.synchronize(t.device)


def run(todo: list[Item], make_inputs: Callable[[Item], object], launch: Launch, outputs: Callable[[object], tuple],
        out_csv: Path, log=core.log, context_lost: Callable[[], bool] = lambda: False, append: bool = False,
        summary: bool = True) -> tuple[int, int]:
    """Every item into out_csv (one row each, written as it completes, so a cut-off run keeps its rows);
    returns (identical, total). After an error, context_lost() says whether the device is gone, and then the
    remaining items are written as not run. append: add to an existing CSV (a run resumed after a hang)."""
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    identical = 0
    rows = []
    lost = False
    with out_csv.open("a" if append else "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if not append:
            writer.writeheader()
        for n, item in enumerate(todo):
            base = dict(case=item.label, variant=item.variant, format=item.case.fmt)
            if lost:
                row = {**base, "identical_out": False, "identical_lse": False, "error": "not run: CUDA context lost"}
            else:
                try:
                    row = {**base, **run_case(item, make_inputs(item), launch, outputs)}
                except Exception as exc:  # noqa: BLE001 - e.g. the inputs could not be made
                    row = {**base, "identical_out": False, "identical_lse": False,
                           "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
                if row["error"]:
                    lost = context_lost()
            same = identical_row(row)
            identical += same
            writer.writerow({k: _cell(row.get(k, "")) for k in FIELDS})
            f.flush()
            rows.append(row)
            if not same:
                log(f"DIFFERS {item.variant} {item.label}: out {row['identical_out']}, lse {row['identical_lse']}, "
                    f"max|diff| {_cell(row.get('max_abs_diff', ''))}{' ' + row['error'] if row['error'] else ''}")
            elif (n + 1) % 50 == 0:
                log(f"{n + 1}/{len(todo)} compared, {identical} identical")
    if summary:
        print_summary(rows)
    return identical, len(todo)


def identical_row(row: dict) -> bool:
    return row["identical_out"] is True and row["identical_lse"] is True and not row["error"]


def print_summary(rows: list[dict]) -> None:
    identical = sum(map(identical_row, rows))
    print(table(rows))
    print(f"same bits: {identical} / {len(rows)} identical (out and LSE)"
          + ("" if identical == len(rows) else " -- DIFFERENCES"))


def read_rows(path: Path) -> list[dict]:
    """The CSV of `run` back as rows of the types `run` wrote."""
    def value(key, text):
        if key.startswith("identical_"):
            return text == "True"
        if key.startswith(("max_abs", )) and text:
            return float(text)
        if key.startswith("nan_") and text:
            return int(text)
        return text

    with path.open(newline="") as f:
        return [{k: value(k, v) for k, v in r.items()} for r in csv.DictReader(f)]


def _cell(value) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


def table(rows: list[dict]) -> str:
    """Per variant and format: identical / total, the worst max|diff| and the unwritten (NaN) elements."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["format"]), []).append(r)
    lines = [f"{'variant':14} {'format':6} {'identical':>11} {'out':>5} {'lse':>5} {'errors':>6} {'max|diff|':>10}"]
    for (variant, fmt), rs in groups.items():
        same = sum(map(identical_row, rs))
        diffs = [r["max_abs_diff"] for r in rs if isinstance(r.get("max_abs_diff"), float)]
        worst = max(diffs) if diffs else 0.0
        lines.append(f"{variant:14} {fmt:6} {same:>5} / {len(rs):<3} {sum(r['identical_out'] is True for r in rs):>5} "
                     f"{sum(r['identical_lse'] is True for r in rs):>5} {sum(bool(r['error']) for r in rs):>6} "
                     f"{_cell(worst):>10}")
    unwritten = [r for r in rows if isinstance(r.get("nan_out_new"), int) and r["nan_out_new"]]
    if unwritten:
        lines.append(f"warning: {len(unwritten)} case(s) leave NaN in this checkout's output (unwritten elements)")
    return "\n".join(lines)


# --- on the GPU ------------------------------------------------------------------------------------------

def gpu_launch(item: Item, inputs, library: str, out, lse) -> None:
    from . import kernels

    flags = () if library == "new" else (core.BASELINE,)
    kernels.launch(item.variant, inputs.q, inputs.k, inputs.v, out, lse, causal=item.case.causal,
                   scale=item.case.softmax_scale, flags=flags)


def gpu_inputs(item: Item):
    from compare import oracle

    return oracle.make_inputs(item.case, "cuda")


def gpu_outputs(inputs):
    from . import kernels

    return kernels.poisoned_outputs(inputs.q)


def main(args) -> int:
    """The parent: the cases in a child process under a time limit; a case that hangs is written as such and
    the run goes on after it in a fresh child (at most three times)."""
    if core.baseline_path(args.baseline) is None:
        raise core.UsageError("same-bits needs the baseline library: set DEV_BASELINE_LIB=path/libcuda_fa.so "
                              "(or --baseline PATH); `dev.py build --baseline-src DIR` builds one")
    todo = items(variants=_variants(args))
    out = Path(args.out) if args.out else core.out_dir() / "same-bits.csv"
    if args.stage:
        return child(args, todo, out)
    core.log(f"same-bits: {len(todo)} cases, this checkout against {core.baseline_path(args.baseline)}; CSV {out}")
    limit = core.config()["timeouts"]["same_bits"]
    forwarded = [*(["--baseline", args.baseline] if args.baseline else []),
                 *(["--variants", args.variants] if args.variants else []), "--out", str(out)]
    start, hangs = 0, 0
    while True:
        rc = core.run_stage(["same-bits", *forwarded, "--stage", "run", "--start", str(start)], limit, "same-bits")
        done = len(read_rows(out)) if out.exists() else 0
        if rc in (0, 1) or done >= len(todo):
            break
        if rc != 124 or hangs == 3:
            core.log(f"same-bits child exited with {rc} after {done} of {len(todo)} cases")
            break
        hangs += 1
        with out.open("a", newline="") as f:
            item = todo[done]
            csv.DictWriter(f, fieldnames=FIELDS).writerow(dict(
                case=item.label, variant=item.variant, format=item.case.fmt, identical_out=False,
                identical_lse=False, error=f"timeout: no result within the {limit} s of the stage"))
        core.log(f"HUNG {todo[done].variant} {todo[done].label}; going on after it")
        start = done + 1
    rows = read_rows(out) if out.exists() else []
    if len(rows) < len(todo):
        print(f"incomplete: {len(rows)} of {len(todo)} cases have a row (the rest count as different)")
    print_summary(rows + [dict(identical_out=False, identical_lse=False, error="no row", variant=i.variant,
                               format=i.case.fmt) for i in todo[len(rows):]])
    return 0 if len(rows) == len(todo) and all(map(identical_row, rows)) else 1


def _variants(args) -> list[str] | None:
    return [v for v in args.variants.split(",") if v] if args.variants else None


def child(args, todo: list[Item], out: Path) -> int:
    import cuda_impl

    core.register_baseline(args.baseline)
    for variant in dict.fromkeys(i.variant for i in todo):
        if reason := cuda_impl.unavailable_reason(variant):
            core.log(f"{variant} unavailable here: {reason}")
            return 2
    identical, total = run(todo[args.start:], gpu_inputs, gpu_launch, gpu_outputs, out,
                           context_lost=core.context_lost, append=args.start > 0, summary=False)
    return 0 if identical == total else 1
