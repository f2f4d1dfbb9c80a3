"""Paired timing (compare.paired) on CPU: interleaved rounds, the ratio summary, the CLI."""

import csv
import dataclasses

import pytest

from compare import backends, cli, oracle, paired


@pytest.fixture
def two_cpu_backends():
    math = backends.get("sdpa:math")
    return [math, dataclasses.replace(math, name="sdpa:math2")]  # the same kernel under a second name


def test_rounds_interleave_and_every_row_passed_the_oracle(tmp_path, two_cpu_backends):
    cases = [oracle.Case(1, 2, 1, 40, 72, 64, causal=causal, fmt="fp32") for causal in (False, True)]
    out = paired.run("tiny", two_cpu_backends, cases, 3, out=tmp_path / "p.csv", warmup_ms=1, rep_ms=3,
                     log=lambda *a: None)
    rows = paired.read(out)
    assert len(rows) == len(cases) * 3 * 2
    assert {r["sweep"] for r in rows} == {"paired:tiny"} and {r["oracle"] for r in rows} == {"pass"}
    names = [f"{r['backend']}:{r['variant']}" for r in rows[:6]]
    # round 0 in the given order, round 1 reversed, round 2 in order again
    assert names == ["sdpa:math", "sdpa:math2", "sdpa:math2", "sdpa:math", "sdpa:math", "sdpa:math2"]
    assert [r["note"].split(";")[0] for r in rows[:6]] == ["round 0"] * 2 + ["round 1"] * 2 + ["round 2"] * 2
    summary = paired.ratios(rows, "sdpa:math", "sdpa:math2")
    assert [s["rounds"] for s in summary] == [3, 3]
    assert all(s["ratio_min"] <= s["ratio"] <= s["ratio_max"] for s in summary)


def _row(name, round_, ms, passed=True):
    backend, variant = name.split(":")
    return dict(backend=backend, variant=variant, format="bf16", batch=1, heads_q=16, heads_kv=16, seqlen_q=4096,
                seqlen_k=4096, head_dim=128, causal="False", note=f"round {round_}",
                oracle="pass" if passed else "fail", ms_p50=ms if passed else "")


def test_ratio_is_the_median_of_per_round_ratios():
    rows = [_row("a:x", 0, 1.0), _row("b:y", 0, 1.2),
            _row("b:y", 1, 0.9), _row("a:x", 1, 1.0),   # b's fast mode in one round
            _row("a:x", 2, 1.0), _row("b:y", 2, 1.1),
            _row("a:x", 3, 1.0), _row("b:y", 3, 5.0, passed=False)]  # a round that failed is left out
    (summary,) = paired.ratios(rows, "a:x", "b:y")
    assert summary["rounds"] == 3 and summary["incomplete"] == 1
    assert summary["ratio"] == pytest.approx(1.1) and summary["ratio_min"] == pytest.approx(0.9)
    assert summary["ratio_max"] == pytest.approx(1.2)
    assert summary["ms_first"] == pytest.approx(1.0) and summary["ms_second"] == pytest.approx(1.1)
    assert "1.100 [0.900, 1.200]" in paired.table(rows, "a:x", ["b:y"])


def test_a_case_one_backend_does_not_take_is_no_comparison():
    # a:x alone on d256 (b:y refuses it), as `run` writes it; b:y failing every round on d64 still counts
    only_first = [{**_row("a:x", r, 1.0), "head_dim": 256} for r in range(2)]
    all_failed = [{**row, "head_dim": 64} for r in range(2) for row in (_row("a:x", r, 1.0), _row("b:y", r, 1.0, False))]
    rows = [_row("a:x", 0, 1.0), _row("b:y", 0, 1.2)] + only_first + all_failed
    summaries = paired.ratios(rows, "a:x", "b:y")
    assert [(s["case"].split()[-1], s["rounds"], s["incomplete"]) for s in summaries] == [("d128", 1, 0), ("d64", 0, 2)]
    text = paired.table(rows, "a:x", ["b:y"])
    assert "d256" not in text and "no round with both timed (2 incomplete)" in text


def test_filters_and_refusals(tmp_path, capsys, two_cpu_backends):
    cases = [oracle.Case(1, 2, 2, s, s, d, causal=c) for s in (64, 128) for d in (64, 128) for c in (False, True)]
    kept = paired.select_cases(cases, head_dims=[128], seqlens=[64], causal=True)
    assert [(c.head_dim, c.seqlen_q, c.causal) for c in kept] == [(128, 64, True)]
    with pytest.raises(ValueError, match="no case"):
        paired.select_cases(cases, formats=["fp8"])
    with pytest.raises(ValueError, match="at least two"):
        paired.run("tiny", two_cpu_backends[:1], kept, 2, out=tmp_path / "x.csv")
    with pytest.raises(ValueError, match="rounds"):
        paired.run("tiny", two_cpu_backends, kept, 0, out=tmp_path / "x.csv")
    assert cli.main(["paired", "--backends", "sdpa:math"]) == 2
    assert "at least two" in capsys.readouterr().err


def test_cli_summarises_an_earlier_csv(tmp_path, capsys, two_cpu_backends):
    out = paired.run("tiny", two_cpu_backends, [oracle.Case(1, 2, 2, 32, 48, 64, fmt="fp32")], 2,
                     out=tmp_path / "p.csv", warmup_ms=1, rep_ms=3, log=lambda *a: None)
    assert cli.main(["paired", "--backends", "sdpa:math", "sdpa:math2", "--from-csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fp32 b1 h2/2 q32 k48 d64" in printed and printed.rstrip().endswith("2")
    # without --backends: the comparisons the CSV holds (the first by name, as the README's table)
    assert cli.main(["paired", "--from-csv", str(out)]) == 0
    assert capsys.readouterr().out == printed
    assert cli.main(["paired"]) == 2
    assert "--backends is needed" in capsys.readouterr().err


def test_pairs_put_the_cuda_kernel_first():
    rows = [_row("sdpa:cudnn", 0, 1.0), _row("cuda:hopper", 0, 1.0), _row("triton:fa2-tma", 0, 1.0)]
    assert paired.pairs(rows) == [("cuda:hopper", "sdpa:cudnn"), ("cuda:hopper", "triton:fa2-tma")]
    assert paired.pairs([_row("sdpa:math", 0, 1.0), _row("sdpa:cudnn", 0, 1.0)]) == [("sdpa:cudnn", "sdpa:math")]


def test_report_lists_every_paired_csv(tmp_path, two_cpu_backends):
    from compare import report
    assert report.paired_table(tmp_path) == ""
    paired.run("tiny", two_cpu_backends, [oracle.Case(1, 2, 2, 32, 48, 64, fmt="fp32")], 2,
               out=tmp_path / "p.csv", warmup_ms=1, rep_ms=3, log=lambda *a: None)
    table = report.paired_table(tmp_path).splitlines()
    assert table[0].startswith("| comparison | case | ratio") and len(table) == 3
    assert table[2].startswith("| `sdpa:math` / `sdpa:math2` | fp32 b1 h2/2 q32 k48 d64 |") and "| 2 |" in table[2]


def test_report_shows_the_newest_measurement_of_a_case(tmp_path):
    from compare import report
    head = ["timestamp", "git_commit"] + list(_row("a:x", 0, 1.0))
    for name, when, commit, ms_b in (("old.csv", "2026-11-01T00:00:00", "1111111aaa", 1.2),
                                     ("new.csv", "2026-11-02T00:00:00", "2222222bbb", 1.5)):
        rows = [_row("cuda:k", 0, 1.0), _row("sdpa:p", 0, ms_b)]
        if name == "old.csv":  # a case only the old call measured stays
            rows += [{**_row("cuda:k", 0, 1.0), "head_dim": 64}, {**_row("sdpa:p", 0, 2.0), "head_dim": 64}]
        with (tmp_path / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=head)
            writer.writeheader()
            writer.writerows({**r, "timestamp": when, "git_commit": commit} for r in rows)
    table = report.paired_table(tmp_path).splitlines()[2:]
    assert len(table) == 2
    assert any("d128 | 1.500 |" in line and "| 2222222 |" in line for line in table)
    assert any("d64 | 2.000 |" in line and "| 1111111 |" in line for line in table)
