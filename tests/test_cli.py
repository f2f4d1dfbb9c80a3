"""CLI smoke tests, run as a user would (python -m compare ...)."""

import json
import os
import subprocess
import sys

from compare import cli


# a launcher's environment would shard a run (compare.launch): the tests' own job must not
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT")


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    return subprocess.run([sys.executable, "-m", "compare", *args], capture_output=True, text=True, timeout=600,
                          env=env)


def test_list_shows_backends_and_whether_they_run():
    r = _run("list")
    assert r.returncode == 0, r.stderr
    assert "sdpa:math" in r.stdout and "runs here" in r.stdout


def test_env_is_json():
    r = _run("env")
    assert r.returncode == 0, r.stderr
    assert {"git_commit", "torch", "gpu"} <= set(json.loads(r.stdout))


def test_check_passes_for_sdpa_math_and_reports_counts():
    assert cli.main(["check", "--backends", "sdpa:math", "--matrix", "small", "--formats", "fp32", "bf16"]) == 0


def test_check_of_an_unknown_backend_is_a_clear_error(capsys):
    assert cli.main(["check", "--backends", "sdpa:nope"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def test_check_with_no_matching_cases_fails(capsys):
    assert cli.main(["check", "--backends", "sdpa:math", "--formats", "nvfp4"]) == 1


def test_run_and_merge(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('backends = ["sdpa:math"]\nformats = ["fp32"]\n[[shapes]]\nbatch = 1\nheads_q = 2\n'
                     "seqlen = 32\nhead_dim = 64\ncausal = [false, true]\n")
    out = tmp_path / "r.csv"
    r = _run("run", "--sweep", str(sweep), "--out", str(out), "--rep-ms", "5", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "TFLOP/s" in r.stdout
    merged = tmp_path / "m.csv"
    r = _run("merge", str(out), "--out", str(merged))
    assert r.returncode == 0 and "2 rows" in r.stdout


def test_run_unknown_sweep_is_a_clear_error():
    r = _run("run", "--sweep", "nope")
    assert r.returncode == 2 and "named sweeps" in r.stderr


def test_check_prints_a_repeated_error_once_and_counts_the_rest(monkeypatch, capsys):
    from compare import backends

    def refuse(q, k, v, **kw):
        raise NotImplementedError("variant 'x' is not available here")

    fake = backends.Backend(name="fake:refused", family="triton", formats=("fp32",), head_dims=(64,), run=refuse,
                            availability=lambda: None)
    monkeypatch.setattr(cli.backends, "select", lambda patterns: ([fake], {}))
    assert cli.main(["check", "--backends", "fake:refused", "--matrix", "small"]) == 1
    out = capsys.readouterr().out
    assert out.count("NotImplementedError") == 1
    assert "and 3 more cases with the same error" in out and "0/4 passed" in out
