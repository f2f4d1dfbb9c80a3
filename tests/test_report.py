"""The README and docs/results.md: their numbers are generated from the committed CSVs, never typed by hand,
and the README stays a short front door (no history, no commit hashes, every link resolves)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from compare import figures, report, results, schema
import results_rows

FIXTURE_DIR = results.REPO_ROOT / "tests" / "fixtures"
DATA = results.REPO_ROOT / "figures" / "data"
DOCS = [report.README, report.RESULTS]
HEX_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img[^>]*\ssrc=\"([^\"]+)\"")


def _prose(doc: Path) -> str:
    return report.outside_blocks(doc.read_text(), report.BLOCKS[doc])


# --- the published documents ------------------------------------------------------------------------------

@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_generated_blocks_equal_a_fresh_generation(doc):
    if not any(DATA.glob("*.csv")):
        pytest.skip("no committed results")
    text = doc.read_text()
    fresh = report.generated(DATA)[doc]
    for name, body in fresh.items():
        assert report.block(text, name) == body, (
            f"{doc.name}'s {name} block is stale: run python -m compare report --update-readme")


def test_update_is_idempotent(tmp_path, monkeypatch):
    """Rewriting the blocks twice gives the same text, and a document already current is left unchanged."""
    if not any(DATA.glob("*.csv")):
        pytest.skip("no committed results")
    copies, first_block = {}, {doc: next(iter(report.BLOCKS[doc])) for doc in DOCS}
    for doc in DOCS:
        copies[doc] = tmp_path / doc.name
        copies[doc].write_text(report.replace_block(doc.read_text(), first_block[doc], "stale"))
    monkeypatch.setattr(report, "BLOCKS", {copies[doc]: blocks for doc, blocks in report.BLOCKS.items()})
    monkeypatch.setattr(report, "REPO_ROOT", tmp_path)
    args = type("Args", (), {"data": DATA, "update_readme": True})()
    assert report.run(args) == 0
    once = {doc: path.read_text() for doc, path in copies.items()}
    assert report.run(args) == 0
    assert {doc: path.read_text() for doc, path in copies.items()} == once
    for doc in DOCS:
        assert report.block(once[doc], first_block[doc]) != "stale"


def test_readme_is_at_most_200_lines():
    lines = report.README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the rest to docs/"


def test_readme_headline_table_has_at_most_15_rows():
    block = report.block(report.README.read_text(), "headline")
    rows = [line for line in block.splitlines() if line.startswith("|")][2:]  # header and rule
    assert 0 < len(rows) <= report.MAX_HEADLINE_ROWS <= 15


def test_readme_findings_are_three_to_nine():
    """Prefill (bf16 against cuDNN, FA4 and Triton; fp8 and the block-scaled formats), decode, local attention,
    packed batches, MLA decode, head dims."""
    block = report.block(report.README.read_text(), "findings")
    assert 3 <= len(re.findall(r"^\d+\. ", block, flags=re.M)) <= 9


def test_readme_shows_figure_3_right_under_the_title():
    lines = [line for line in report.README.read_text().splitlines() if line.strip()]
    first_figure = next(i for i, line in enumerate(lines) if line.startswith("!["))
    assert "figures/fig3_cuda_vs_triton.png" in lines[first_figure]
    assert first_figure <= 2 and not any(line.startswith("## ") for line in lines[:first_figure])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_commit_hash_in_the_prose(doc):
    found = HEX_HASH.findall(_prose(doc))
    assert not found, f"{doc.name} names commits outside its generated blocks: {found}"


def test_no_session_history_in_the_readme():
    text = report.README.read_text()
    assert not re.search(r"session \d", text, flags=re.I), "the README carries 'session N' history"


def test_readme_prose_has_no_hand_typed_measurements():
    """Outside the generated blocks, no TFLOP/s, TB/s, speed ratio or percentage of speed is typed by hand."""
    prose = _prose(report.README)
    found = re.findall(r"\d+(?:\.\d+)?\s*(?:TFLOP/s|TB/s|×|%)|(?<![\d.=])\b\d\.\d{2,}\b(?!\.\d)", prose)
    assert not found, f"hand-typed measurements in the README: {found}"


@pytest.mark.parametrize("doc", DOCS + [results.REPO_ROOT / "docs" / "reproducing.md"], ids=lambda p: p.name)
def test_every_relative_link_resolves(doc):
    text = doc.read_text()
    targets = [a or b for a, b in LINK.findall(text)]
    assert targets, f"no links found in {doc.name}"
    missing = []
    for target in targets:
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s), mailto, in-page anchors
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc.name} links to missing files: {missing}"


def test_link_checker_catches_a_broken_link(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("[ok](x.md) ![](figures/nothing.png) [web](https://example.com)")
    targets = [a or b for a, b in LINK.findall(doc.read_text())]
    assert targets == ["x.md", "figures/nothing.png", "https://example.com"]
    assert not (tmp_path / "figures/nothing.png").exists()


def test_hash_pattern_finds_hashes_and_spares_words_and_numbers():
    assert HEX_HASH.findall("at 15232bb and 2058ad48d16376d809dc84f2c11e95a47de775f6") == [
        "15232bb", "2058ad48d16376d809dc84f2c11e95a47de775f6"]
    assert HEX_HASH.findall("defaced 1234567 e4m3 sm_90a fa2-tma") == []


# --- the generator ------------------------------------------------------------------------------------------

def test_report_table_from_fixture_excludes_failed_rows():
    text = report.report(FIXTURE_DIR)
    assert "| shape |" in text and "`cuda:v1`" in text
    assert "99999" not in text  # the fixture's failing row carries a huge TFLOP/s that must not show


def test_missing_markers_is_an_error():
    with pytest.raises(ValueError, match="markers"):
        report.block("no markers here", "results")
    with pytest.raises(ValueError, match="markers"):
        report.replace_block("no markers here", "findings", "x")


def _results_csv(path: Path, gpu: str, tflops: float, **env) -> None:
    frame = pd.read_csv(FIXTURE_DIR / "results-h200.csv", dtype=str, keep_default_na=False)
    frame["gpu"] = gpu
    for column, value in env.items():
        frame[column] = value
    frame.loc[frame["tflops"] != "", "tflops"] = str(tflops)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def test_report_never_mixes_gpus_or_cpu_rows(tmp_path):
    _results_csv(tmp_path / "a.csv", "NVIDIA H200", 4321.0)
    _results_csv(tmp_path / "b.csv", "NVIDIA B200", 8765.0, driver="999.1", torch="9.9.9")
    _results_csv(tmp_path / "c.csv", "cpu", 7531.0, driver="", cuda="", torch="2.13.0+cpu")
    _results_csv(tmp_path / "runs" / "d.csv", "NVIDIA H100", 9642.0)  # not directly in the data folder
    text = report.report(tmp_path)
    sections = text.split("### ")[1:]
    assert sorted(s.splitlines()[0] for s in sections) == ["NVIDIA B200", "NVIDIA H200"]
    for section in sections:
        gpu, header = section.splitlines()[0], section.splitlines()[2]
        other = {"NVIDIA H200": "NVIDIA B200", "NVIDIA B200": "NVIDIA H200"}[gpu]
        assert gpu in header and other not in header and "cpu" not in header
        assert ("999.1" in header) == (gpu == "NVIDIA B200")
        assert ("4321" in section) == (gpu == "NVIDIA H200") and ("8765" in section) == (gpu == "NVIDIA B200")
    assert "7531" not in text and "2.13.0+cpu" not in text  # CPU rows are never published
    assert "9642" not in text and "H100" not in text        # nor CSVs in subfolders


def test_cpu_only_data_publishes_nothing(tmp_path):
    _results_csv(tmp_path / "c.csv", "cpu", 7531.0, driver="", cuda="")
    assert report.report(tmp_path) == "(no GPU results)"
    assert report.readme_findings(tmp_path) == "(no GPU results)"


def test_paired_table_keeps_to_one_gpu(tmp_path):
    import csv
    head = ["timestamp", "git_commit", "gpu", "backend", "variant", "format", "batch", "heads_q", "heads_kv",
            "seqlen_q", "seqlen_k", "head_dim", "causal", "note", "oracle", "ms_p50"]
    for name, gpu, ms in (("h200.csv", "NVIDIA H200", 1.5), ("cpu.csv", "cpu", 3.0)):
        with (tmp_path / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=head)
            writer.writeheader()
            for backend, variant, t in (("cuda", "k", 1.0), ("sdpa", "p", ms)):
                writer.writerow(dict(timestamp="2026-11-01T00:00:00", git_commit="1111111aaa", gpu=gpu,
                                     backend=backend, variant=variant, format="bf16", batch=1, heads_q=16,
                                     heads_kv=16, seqlen_q=4096, seqlen_k=4096, head_dim=128, causal="False",
                                     note="round 0", oracle="pass", ms_p50=t))
    h200 = report.paired_table(tmp_path, "NVIDIA H200").splitlines()[2:]
    assert len(h200) == 1 and "| 1.500 |" in h200[0]
    assert report.paired_table(tmp_path, "NVIDIA B200") == ""


def test_findings_report_losses_with_their_numbers():
    def row(label, fmt, tflops, seqlen, causal=False):
        return dict(label=label, format=fmt, tflops=tflops, oracle="pass", head_dim=128, seqlen_q=seqlen,
                    seqlen_k=seqlen, causal=causal, batch=16384 // seqlen, heads_q=16, heads_kv=16,
                    gpu="NVIDIA H200", git_commit="aaa")

    df = pd.DataFrame([row("cuda:hopper", "bf16", 450.0, 1024), row("sdpa:cudnn", "bf16", 500.0, 1024),
                       row("cuda:hopper", "bf16", 660.0, 16384), row("sdpa:cudnn", "bf16", 600.0, 16384)])
    (first,) = report.findings(df)
    assert "1.10× cuDNN's speed at 4k–16k tokens (ahead in all 1 cases)" in first
    assert "0.90× at 1k–1k tokens" in first or "0.90× at 1024–1k tokens" in first
    assert "cuDNN is ahead in 1, most at d128 1k: 0.90×" in first


def test_decode_finding_leaves_out_cases_timed_eagerly_on_one_side():
    def row(label, ms, batch, seqlen_k, note=""):
        return dict(label=label, ms_p50=ms, note=note, tflops=1.0, oracle="pass", batch=batch, heads_q=32,
                    heads_kv=8, seqlen_q=1, seqlen_k=seqlen_k, head_dim=128, format="bf16", gpu="NVIDIA H200")

    eager = schema.EAGER + " (no CUDA graph: graph replay did not reproduce an eager call's output)"
    df = pd.DataFrame([row("cuda:decode", 0.020, 1, 8192), row("sdpa:cudnn", 0.022, 1, 8192),
                       row("cuda:decode", 0.100, 8, 32768), row("sdpa:cudnn", 0.095, 8, 32768),
                       row("cuda:decode", 0.047, 32, 1024), row("sdpa:cudnn", 0.065, 32, 1024, note=eager),
                       row("cuda:hopper", 0.200, 1, 8192)])
    (text,) = report.decode_findings(df)
    # 22 / 20 = 1.10, 95 / 100 = 0.95; the eager cuDNN row (65 / 47 = 1.38) must not count
    assert "2 cases of one run" in text and "runs at 0.95–1.10× cuDNN's speed" in text
    assert "ahead in 1 of 2; cuDNN is ahead in 1, most at b8 h32/8 k32k: 0.95×" in text
    assert "1.38" not in text and "1 more case is left out" in text
    assert "triton:decode" not in text  # no triton:decode rows: no such clause
    assert "Against the prefill kernel `cuda:hopper` on the same calls it is 10.00× faster" in text


def _decode_row(label, ms, batch, seqlen_k=8192, note=""):
    """One passing decode-sweep row (b `batch`, h32/8, q1, d128 bf16) of `label` at `ms` milliseconds."""
    backend, variant = label.split(":")
    row = results_rows.row(sweep="decode", backend=backend, variant=variant,
                           family="peer" if backend == "sdpa" else backend, format="bf16", batch=batch, heads_q=32,
                           heads_kv=8, seqlen_q=1, seqlen_k=seqlen_k, head_dim=128, causal=False, ms_p20=ms, ms_p50=ms,
                           ms_p80=ms, tflops=1.0, oracle="pass", note=note)
    return row


def _decode_results(tmp_path, rows):
    """The rows written as a results CSV in tmp_path and read back as the figures read them."""
    return results_rows.write_and_load(tmp_path, rows, "decode")


def test_decode_figure_marks_eager_timings(tmp_path):
    df = _decode_results(tmp_path, [
        _decode_row("cuda:decode", 0.02, 1), _decode_row("sdpa:cudnn", 0.03, 1, note=schema.EAGER + " (x)"),
        _decode_row("cuda:decode", 0.1, 8), _decode_row("sdpa:cudnn", 0.1, 8)])
    assert sorted(results.decode_data(df)["eager"].tolist()) == [False, False, False, True]
    fig = figures.fig_decode_bandwidth(df)
    hollow = [line for ax in fig.axes for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    assert sum(len(line.get_xdata()) for line in hollow) == 1
    assert "hollow: eager timing" in " ".join(t.get_text() for t in fig.texts)


def test_decode_cuda_against_triton_figure_and_finding(tmp_path):
    row = _decode_row
    df = _decode_results(tmp_path, [
        row("cuda:decode", 0.020, 1, 8192), row("triton:decode", 0.025, 1, 8192),
        row("cuda:decode", 0.100, 8, 32768), row("triton:decode", 0.090, 8, 32768),
        row("cuda:decode", 0.050, 32, 1024), row("triton:decode", 0.070, 32, 1024, note=schema.EAGER + " (x)"),
        row("sdpa:cudnn", 0.022, 1, 8192), row("sdpa:cudnn", 0.095, 8, 32768), row("sdpa:cudnn", 0.06, 32, 1024)])
    table = results.decode_cuda_triton_ratio(df)  # 25 / 20 = 1.25, 90 / 100 = 0.90; the eager case left out
    assert sorted(round(r, 2) for r in table["ratio"]) == [0.9, 1.25] and set(table["group"]) == {4}
    fig = figures.fig_decode_cuda_vs_triton(df)
    assert [t.get_text() for t in fig.axes[0].texts] == ["1.25", "0.90"]
    (text,) = report.decode_findings(df)
    assert "Against `triton:decode` (figure 9) it runs at 0.90–1.25× its speed (ahead in 1 of 2; Triton is ahead " \
           "in 1, most at b8 h32/8 k32k: 0.90×)" in text


def test_decode_finding_holds_the_peak_read_rate_to_the_read_ceiling(tmp_path):
    row = _decode_row
    read = results_rows.row(sweep="decode", backend="ceiling", family="ceiling", variant="dram.read", format="",
                            batch=0, heads_q=0, heads_kv=0, seqlen_q=0, seqlen_k=0, head_dim=0, causal=False,
                            ceiling="dram.read", ceiling_tflops=5.0, oracle="n/a")
    rows = [row("cuda:decode", 0.250, 8, 32768), row("sdpa:cudnn", 0.240, 8, 32768),
            row("cuda:decode", 0.020, 1, 8192), row("sdpa:cudnn", 0.021, 1, 8192)]
    # b8 h32/8 k32k: K and V 2 x 8 x 8 x 32768 x 128 x 2 bytes = 1.074 GB in 0.25 ms = 4.29 TB/s, 86% of 5.0
    (text,) = report.decode_findings(_decode_results(tmp_path / "with", rows + [read]))
    assert "reads K and V at up to 4.29 TB/s, 86% of the read ceiling measured in the same run (b8 h32/8 k32k)" in text
    (text,) = report.decode_findings(_decode_results(tmp_path / "without", rows))
    assert "reads K and V at up to 4.29 TB/s (b8 h32/8 k32k)." in text and "read ceiling" not in text


def test_headline_ratios_use_the_fastest_passing_row_of_each_side():
    def row(label, fmt, tflops, seqlen=1024, causal=False, oracle="pass", head_dim=128, batch=None, seqlen_k=None):
        return dict(label=label, format=fmt, tflops=tflops, oracle=oracle, head_dim=head_dim, seqlen_q=seqlen,
                    seqlen_k=seqlen_k or seqlen, causal=causal, batch=batch or 16384 // seqlen, heads_q=16)

    df = pd.DataFrame([
        row("cuda:hopper", "bf16", 300.0), row("sdpa:cudnn", "bf16", 400.0),
        row("cuda:hopper", "bf16", 900.0, causal=True, oracle="fail"), row("sdpa:cudnn", "bf16", 100.0, causal=True),
        row("triton:fa2", "bf16", 200.0), row("triton:fa2-tma", "bf16", 360.0),  # best Triton: 360
        row("cuda:hopper", "bf16", 500.0, seqlen=4096, seqlen_k=8192, batch=1),  # founding shape
        row("sdpa:cudnn", "bf16", 400.0, seqlen=4096, seqlen_k=8192, batch=1),
    ])
    lines = {line.split(" | ")[0].lstrip("| "): line for line in report.headline_table(df).splitlines()}
    assert lines["`cuda:hopper` / `sdpa:cudnn`"] == "| `cuda:hopper` / `sdpa:cudnn` | 128 | 0.75 / - | - / - | - / - | 1.25 |"
    assert "| 128 | 0.90 / - |" in lines["best Triton / `sdpa:cudnn`"]
    assert not any("fp8" in key for key in lines)  # no fp8 rows: no fp8 comparison
    other_batch = pd.DataFrame([row("cuda:hopper", "bf16", 1.0, batch=3)])
    with pytest.raises(ValueError, match="two shapes"):
        report.headline_table(pd.concat([df, other_batch]))
    founding = dict(seqlen=4096, seqlen_k=8192, batch=1)
    at_founding = pd.DataFrame([row("cuda:hopper", "bf16", 500.0, **founding), row("cuda:hopper", "bf16", 700.0,
                                                                                    head_dim=64, **founding)])
    tflops = report.headline_tflops_table(pd.concat([df, at_founding.assign(heads_q=8, heads_kv=8)]).assign(
        heads_kv=lambda d: d["heads_q"])).splitlines()
    assert tflops[2] == "| bf16 | `cuda:hopper` | 300 / - | - / - | - / - | 500 |"  # the failed 900 never shows
    assert [line.split(" | ")[1] for line in tflops[2:]] == ["`cuda:hopper`", "`triton:fa2-tma`", "`sdpa:cudnn`"]


def test_headline_ratio_across_two_runs_is_marked_and_explained():
    def row(label, fmt, tflops, commit, causal=False):
        return dict(label=label, format=fmt, tflops=tflops, oracle="pass", head_dim=128, seqlen_q=1024,
                    seqlen_k=1024, causal=causal, batch=16, heads_q=16, git_commit=commit)

    df = pd.DataFrame([
        row("cuda:hopper-fp8", "fp8", 600.0, "bbb"), row("triton:fp8", "fp8", 500.0, "bbb"),
        row("cuda:hopper", "bf16", 400.0, "aaa"), row("sdpa:cudnn", "bf16", 500.0, "aaa"),
        row("cuda:hopper-fp8", "fp8", 300.0, "aaa", causal=True), row("cuda:hopper", "bf16", 300.0, "aaa", causal=True),
    ])
    table = report.headline_table(df)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    assert "| 128 | 1.20 / - |" in lines["`cuda:hopper-fp8` / best Triton fp8"]  # one run: no mark
    assert "| 128 | 0.80 / - |" in lines["`cuda:hopper` / `sdpa:cudnn`"]
    assert "| 128 | 1.50† / 1.00 |" in lines["`cuda:hopper-fp8` / `cuda:hopper` bf16"]  # fp8 from bbb
    assert table.splitlines()[-1].startswith("† The two sides of this ratio come from different runs")
    same_run = df.assign(git_commit="aaa")
    assert "†" not in report.headline_table(same_run)


# --- cell values, recomputed from the fixture CSV -------------------------------------------------------------

def _fixture_rows():
    import csv
    with (FIXTURE_DIR / "results-h200.csv").open() as f:
        return list(csv.DictReader(f))


def _shape(r) -> str:
    causal = " causal" if r["causal"] == "True" else ""
    return (f"{r['format']} b{r['batch']} h{r['heads_q']}/{r['heads_kv']} q{r['seqlen_q']} k{r['seqlen_k']} "
            f"d{r['head_dim']}{causal}")


def _cells(table: str, key_columns: int = 1) -> dict[tuple[str, str], str]:
    """(row key, column header) -> cell text of a markdown table; the row key is its first `key_columns`
    cells joined by ' | '."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = {}
    for line in lines[2:]:
        values = [c.strip() for c in line.strip("|").split("|")]
        for column, value in zip(header[key_columns:], values[key_columns:]):
            cells[(" | ".join(values[:key_columns]), column)] = value
    return cells


def test_every_cell_of_the_tflops_table_is_the_fixtures_number():
    rows = _fixture_rows()
    want = {}
    for r in rows:
        if r["oracle"] == "pass" and r["family"] != "ceiling":
            want[(_shape(r), f"`{r['backend']}:{r['variant']}`")] = f"{float(r['tflops']):.0f}"
    got = _cells(report.report(FIXTURE_DIR).split("Every passing row (TFLOP/s):", 1)[1])
    assert {key: value for key, value in got.items() if value != "-"} == want
    # the cell of the row that failed the oracle (cuda:v5, bf16 d64 1k causal: 99999) is empty, not its speed
    assert got[("bf16 b16 h32/32 q1024 k1024 d64 causal", "`cuda:v5`")] == "-"
    assert len(got) == len({k for k, _ in want}) * len({c for _, c in want})  # a full grid, '-' where no row


def test_headline_cells_are_ratios_and_rates_recomputed_from_the_fixture():
    rows = [r for r in _fixture_rows() if r["oracle"] == "pass"]

    def tflops(label, head_dim, seqlen_q, seqlen_k, causal):
        (r,) = [r for r in rows if f"{r['backend']}:{r['variant']}" == label and r["format"] == "bf16"
                and (int(r["head_dim"]), int(r["seqlen_q"]), int(r["seqlen_k"]), r["causal"] == "True")
                == (head_dim, seqlen_q, seqlen_k, causal)]
        return float(r["tflops"])

    df = results.load_results(FIXTURE_DIR)
    ratios = {(key.replace("`cuda:v5` / `sdpa:flash` (FA2) | ", "d"), column): value
              for (key, column), value in _cells(report.headline_table(df), key_columns=2).items()}
    for d in (64, 128):
        for s, column in ((1024, "1k"), (4096, "4k")):
            expect = []
            for causal in (False, True):
                try:
                    expect.append(f"{tflops('cuda:v5', d, s, s, causal) / tflops('sdpa:flash', d, s, s, causal):.2f}†")
                except ValueError:  # no passing cuda:v5 row (the failed d64 1k causal one)
                    expect.append("-")
            assert ratios[(f"d{d}", column)] == " / ".join(expect), (d, s)
    assert ratios[("d128", "founding shape")] == (
        f"{tflops('cuda:v5', 128, 4096, 8192, False) / tflops('sdpa:flash', 128, 4096, 8192, False):.2f}†")
    rates = {(key.replace("bf16 | ", ""), column): value
             for (key, column), value in _cells(report.headline_tflops_table(df), key_columns=2).items()}
    for label in ("cuda:v5", "sdpa:flash"):
        for s, column in ((1024, "1k"), (4096, "4k")):
            assert rates[(f"`{label}`", column)] == " / ".join(
                f"{tflops(label, 128, s, s, causal):.0f}" for causal in (False, True))
        assert rates[(f"`{label}`", "founding shape")] == f"{tflops(label, 128, 4096, 8192, False):.0f}"


# --- tables end with a blank line -----------------------------------------------------------------------------

def _rows_run_on(text: str) -> list[str]:
    """Lines right after a table row that are neither a row nor blank: markdown would render them as a row."""
    lines = text.splitlines()
    return [nxt for line, nxt in zip(lines, lines[1:]) if line.startswith("|") and nxt.strip()
            and not nxt.startswith("|")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_table_in_the_docs_ends_with_a_blank_line(doc):
    assert _rows_run_on(doc.read_text()) == [], f"{doc.name}: a table runs on into the next line"


def test_a_block_that_ends_with_a_table_gets_its_blank_line():
    text = "a\n" + "\n".join(report.markers("results")) + "\nafter\n"
    table = "| x | y |\n|---|---|\n| 1 | 2 |"
    for body in (table, table + "\n", "words\n\n" + table):
        updated = report.replace_block(text, "results", body)
        assert _rows_run_on(updated) == [] and report.block(updated, "results") == body.strip("\n")
        assert report.replace_block(updated, "results", body) == updated
    assert report.replace_block(text, "results", "words") == text.replace("-->\n<!--", "-->\nwords\n<!--")


def test_the_side_by_side_table_is_closed_by_a_blank_line(tmp_path):
    """docs/results.md's GPU section with a paired CSV: the side-by-side table and every other one end with
    a blank line (or the end of the text)."""
    shutil.copytree(FIXTURE_DIR, tmp_path / "data")
    (tmp_path / "data" / "paired").mkdir()
    for csv_path in sorted((DATA / "paired").glob("*.csv"))[:1]:
        rows = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
        rows["gpu"] = "NVIDIA H200"
        rows.to_csv(tmp_path / "data" / "paired" / csv_path.name, index=False)
    text = report.report(tmp_path / "data")
    assert "Side by side" in text
    side = text.split("Side by side", 1)[1]
    assert side.split("\n\n")[1].startswith("| comparison |") and _rows_run_on(text) == []


# --- the CLI --------------------------------------------------------------------------------------------------

def test_update_readme_through_the_cli_rewrites_only_the_generated_blocks(tmp_path):
    """`python -m compare report --update-readme` on a copy of the repository: stale blocks are regenerated,
    every line outside them (a hand edit included) is left as it was, and a second run changes nothing."""
    if not any(DATA.glob("*.csv")):
        pytest.skip("no committed results")
    root = tmp_path / "repo"
    shutil.copytree(results.REPO_ROOT / "compare", root / "compare", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(DATA, root / "figures" / "data")
    (root / "docs").mkdir()
    before = {}
    for doc in DOCS:
        text = doc.read_text()
        for name in report.BLOCKS[doc]:
            text = report.replace_block(text, name, "stale")
        text = text.replace("\n## ", "\nA hand-written line the generator must keep.\n\n## ", 1)
        before[doc] = text
        (root / doc.relative_to(results.REPO_ROOT)).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(root))
    run = subprocess.run([sys.executable, "-m", "compare", "report", "--update-readme"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == ["updated", "README.md", "updated", "docs/results.md"], run.stdout
    for doc in DOCS:
        after = (root / doc.relative_to(results.REPO_ROOT)).read_text()
        assert "A hand-written line the generator must keep." in after
        assert report.outside_blocks(after, report.BLOCKS[doc]) == report.outside_blocks(before[doc], report.BLOCKS[doc])
        # the blocks are the committed ones, which test_generated_blocks_equal_a_fresh_generation holds to a fresh
        # generation: so the whole file is the committed one plus the hand edit
        assert after == doc.read_text().replace("\n## ", "\nA hand-written line the generator must keep.\n\n## ", 1)


def test_report_subcommand_prints_the_results_block(capsys):
    from compare import cli
    assert cli.main(["report", "--data", str(FIXTURE_DIR)]) == 0
    assert capsys.readouterr().out.strip("\n") == report.report(FIXTURE_DIR)


def test_a_cell_measured_twice_shows_its_best_speed():
    """Two passing rows of one headline cell (a case measured in two sweeps): the cell shows the faster, whichever
    comes first; a slower copy changes nothing."""
    import pandas as pd
    df = results.load_results(FIXTURE_DIR)
    grid = report.grid_rows(report.passed(df))
    cell = (grid["label"] == "cuda:v5") & (grid["format"] == "bf16") & (grid["head_dim"] == 128) & \
           (grid["seqlen_q"] == 4096) & ~grid["causal"].astype(bool)
    (row,) = grid[cell].index
    base = df.loc[row, "tflops"]
    key = ("bf16 | `cuda:v5`", "4k")
    before = _cells(report.headline_tflops_table(df), key_columns=2)[key]
    for factor, want in ((0.5, f"{base:.0f}"), (2.0, f"{2 * base:.0f}")):
        copy = df.loc[[row]].assign(tflops=base * factor)
        for frame in (pd.concat([df, copy], ignore_index=True), pd.concat([copy, df], ignore_index=True)):
            got = _cells(report.headline_tflops_table(frame), key_columns=2)[key]
            assert got.split(" / ")[0] == want and got.split(" / ")[1] == before.split(" / ")[1], (factor, got)
