"""CLI conventions: a user error is one line on stderr and exit status 2 (never a traceback); every
subcommand and option has help; the top-level --help is plain text; `paired --backends` takes patterns."""

import argparse
import csv
import dataclasses
import os
import re
import subprocess
import sys

import pytest
import torch

from compare import backends, cli, oracle, paired
from compare.schema import COLUMNS

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
                 "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP")


def _run(*args, env=None):
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    return subprocess.run([sys.executable, "-m", "compare", *args], capture_output=True, text=True, timeout=600,
                          env={**base, **(env or {})})


def _one_line_error(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in r.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _one_line_main(capsys, argv, *fragments):
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ------------------------------------------------------------------ errors, as a user sees them (subprocess)

def test_paired_from_a_missing_csv(tmp_path):
    _one_line_error(_run("paired", "--from-csv", str(tmp_path / "nope.csv")), "no such file", "nope.csv")


def test_paired_from_a_sweep_csv_is_refused_clearly(tmp_path, capsys):
    path = tmp_path / "sweep.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerow({c: "" for c in COLUMNS} | {"backend": "sdpa", "variant": "math", "oracle": "pass", "note": ""})
    _one_line_main(capsys, ["paired", "--from-csv", str(path)], "not a paired CSV")


def test_paired_from_a_csv_that_is_no_results_csv(tmp_path, capsys):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    _one_line_main(capsys, ["paired", "--from-csv", str(path)], "not a results CSV")


def test_merge_with_a_missing_file(tmp_path):
    _one_line_error(_run("merge", str(tmp_path / "a.csv"), "--out", str(tmp_path / "m.csv")), "does not exist")


@pytest.fixture
def in_process(monkeypatch):
    """`run` in this process may switch TRITON_INTERPRET on and rebuild the registry: undone afterwards."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    monkeypatch.setattr(backends, "_REGISTRY", backends._REGISTRY)
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_unknown_backend_and_empty_pattern_and_bad_shard(capsys, in_process, tmp_path):
    sweep = tmp_path / "s.toml"  # no triton_interpret: nothing in this process is switched
    sweep.write_text('formats = ["fp32"]\n[[shapes]]\nbatch = 1\nheads_q = 2\nseqlen = 32\nhead_dim = 64\n')
    _one_line_main(capsys, ["run", "--sweep", str(sweep), "--backends", "nope:x"], "unknown backend 'nope:x'")
    _one_line_main(capsys, ["run", "--sweep", str(sweep), "--backends", "zz*"], "no backend matches 'zz*'")
    _one_line_main(capsys, ["check", "--backends", "nope:x"], "unknown backend")
    _one_line_main(capsys, ["run", "--shard", "3/2"], "--shard 3/2")
    _one_line_main(capsys, ["run", "--shard", "one/two"], "--shard takes i/N")


def test_a_bad_launcher_environment_is_one_line(capsys, in_process):
    in_process.setenv("RANK", "2")
    in_process.setenv("WORLD_SIZE", "2")
    _one_line_main(capsys, ["run"], "RANK=2")
    in_process.delenv("RANK")
    in_process.delenv("WORLD_SIZE")
    in_process.setenv("SLURM_ARRAY_TASK_ID", "x")
    in_process.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    _one_line_main(capsys, ["run"], "SLURM_ARRAY_TASK_ID")


def test_argparse_errors_are_one_line_too(capsys):
    _one_line_error(_run("run", "--bogus"), "unrecognized arguments")  # as a user sees it
    for argv, fragment in ((["nope"], "invalid choice"), (["paired", "--rounds", "x"], "invalid int value"),
                           ([], "required")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU machine's refusal")
def test_a_sweep_naming_a_gpu_backend_on_cpu_says_what_to_do():
    _one_line_error(_run("run", "--sweep", "quick"), "sdpa:flash", "'cpu' sweep")


# ------------------------------------------------------------------ help

def _parsers(parser, path=("python -m compare",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_subcommand_and_option_has_help_and_a_description():
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helped = {a.dest: a.help for a in subs._choices_actions}
    missing = [name for name in subs.choices if not helped.get(name)]
    assert not missing, f"subcommands without help: {missing}"
    problems = []
    for path, p in _parsers(parser):
        if len(path) > 1 and not p.description:
            problems.append(f"{' '.join(path)}: no description")
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                problems.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}: no help")
    assert not problems, "\n".join(problems)


def test_top_level_help_is_plain_text():
    r = _run("--help")
    assert r.returncode == 0
    text = r.stdout
    for markup in ("``", ":func:", ":class:", ":mod:", ".. ", "**"):
        assert markup not in text, f"RST markup {markup!r} in --help"
    for command in ("run", "check", "paired", "merge", "figures", "report"):
        assert re.search(rf"^\s+{command}\s+\S", text, re.M), f"{command} has no help line"
    assert "python -m compare run" in text


def test_subcommand_help_describes_it():
    r = _run("run", "--help")
    assert r.returncode == 0 and "Measure every (backend, case)" in r.stdout and "--warmup-ms MS" in r.stdout
    assert "torchrun" in r.stdout and "Slurm" in r.stdout


# ------------------------------------------------------------------ paired: patterns

@pytest.fixture
def paired_csv(tmp_path):
    math = backends.get("sdpa:math")
    chosen = [math, dataclasses.replace(math, name="sdpa:math2")]
    return paired.run("tiny", chosen, [oracle.Case(1, 2, 2, 32, 48, 64, fmt="fp32")], 2, out=tmp_path / "p.csv",
                      warmup_ms=1, rep_ms=3, log=lambda *a: None)


def test_paired_from_csv_expands_patterns(paired_csv, capsys):
    assert cli.main(["paired", "--from-csv", str(paired_csv), "--backends", "sdpa:*"]) == 0
    out = capsys.readouterr().out
    assert "time(other) / time(sdpa:math)" in out and "sdpa:math2" in out and "fp32 b1 h2/2 q32 k48 d64" in out


def test_paired_from_csv_refuses_an_absent_backend(paired_csv, capsys):
    _one_line_main(capsys, ["paired", "--from-csv", str(paired_csv), "--backends", "sdpa:math", "cuda:hopper"],
                   "no backend in", "'cuda:hopper'", "it holds: sdpa:math, sdpa:math2")


def test_paired_from_csv_needs_two_after_expansion(paired_csv, capsys):
    _one_line_main(capsys, ["paired", "--from-csv", str(paired_csv), "--backends", "sdpa:math2"],
                   "matches only sdpa:math2", "two or more")


def test_paired_timing_expands_patterns(monkeypatch, capsys, tmp_path):
    math = backends.get("sdpa:math")
    fake = {"sdpa:math": math, "sdpa:math2": dataclasses.replace(math, name="sdpa:math2")}
    monkeypatch.setattr(backends, "registry", lambda: fake)
    sweep = tmp_path / "s.toml"
    sweep.write_text('formats = ["fp32"]\n[[shapes]]\nbatch = 1\nheads_q = 2\nseqlen = 32\nhead_dim = 64\n')
    out = tmp_path / "p.csv"
    assert cli.main(["paired", "--backends", "sdpa:m*", "--sweep", str(sweep), "--rounds", "2", "--out", str(out),
                     "--warmup-ms", "1", "--rep-ms", "3"]) == 0
    assert {f"{r['backend']}:{r['variant']}" for r in paired.read(out)} == {"sdpa:math", "sdpa:math2"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU 'sdpa:*' gives four runnable backends")
def test_paired_pattern_that_gives_one_runnable_backend_says_so(capsys):
    _one_line_main(capsys, ["paired", "--backends", "sdpa:*"], "at least two runnable", "gives 1 here (sdpa:math)",
                   "sdpa:flash: no CUDA GPU")
