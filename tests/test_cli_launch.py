"""Sweeps over many processes through the standard launchers (compare.launch): torchrun's RANK/WORLD_SIZE,
a Slurm array's task id, an explicit --shard that wins; each part its own CSV; `compare merge` joins them.
On CPU, two ranks of the CPU-sized sweep (its SDPA-math rows, to stay fast)."""

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compare import cli, launch, sweeps

REPO = Path(__file__).resolve().parents[1]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_ARRAY_TASK_ID",
                 "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP")
# the CPU sweep's SDPA-math rows: the launcher logic is what is tested, not the interpreter
RUN = ["run", "--sweep", "cpu", "--backends", "sdpa:math", "--rep-ms", "5", "--warmup-ms", "1", "--no-progress"]


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**env, **extra}


def _case_keys(path):
    with open(path, newline="") as f:
        return sorted((r["backend"], r["variant"], r["format"], r["heads_kv"], r["seqlen_q"], r["seqlen_k"],
                       r["head_dim"], r["causal"]) for r in csv.DictReader(f))


def _expected_cases():
    sweep = sweeps.load("cpu")
    return sorted(("sdpa", "math", c.fmt, str(c.heads_kv), str(c.seqlen_q), str(c.seqlen_k), str(c.head_dim),
                   str(c.causal)) for c in sweep.cases)


# ------------------------------------------------------------------ the environment, unit by unit

def test_torchrun_environment_gives_the_rank_its_part():
    assert launch.from_environment({}) is None
    assert launch.from_environment({"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process: the whole sweep
    part = launch.from_environment({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (part.index, part.count, part.spec) == (1, 4, "1/4") and "torchrun" in part.source


def test_slurm_array_gives_the_task_its_part():
    part = launch.from_environment({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3"})
    assert part.spec == "2/3" and "Slurm" in part.source
    # --array=1-3 and --array=0-6:2 number their tasks from MIN in steps of STEP
    assert launch.from_environment({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "3",
                                    "SLURM_ARRAY_TASK_MIN": "1"}).spec == "2/3"
    assert launch.from_environment({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4",
                                    "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "2"}).spec == "2/4"
    # an array of torchrun jobs: task t of T with W ranks each runs part t * W + rank of T * W
    both = launch.from_environment({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2",
                                    "RANK": "3", "WORLD_SIZE": "4"})
    assert both.spec == "7/8"


@pytest.mark.parametrize("environ,fragment", [
    ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4"),
    ({"RANK": "a", "WORLD_SIZE": "4"}, "RANK='a'"),
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "3"}, "outside SLURM_ARRAY_TASK_COUNT=3"),
])
def test_a_bad_environment_is_refused(environ, fragment):
    with pytest.raises(ValueError, match=fragment):
        launch.from_environment(environ)


def test_explicit_shard_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launch.resolve("0/3").spec == "0/3" and launch.resolve("0/3").source == "--shard"
    assert launch.resolve(None).spec == "1/2"
    with pytest.raises(ValueError, match="need 0 <= i < N"):
        launch.resolve("2/2")


def test_part_path_and_missing_parts(tmp_path):
    part = launch.Part(1, 4, "x")
    assert launch.part_path(tmp_path / "quick-h200-abc.csv", part).name == "quick-h200-abc.part1of4.csv"
    for i in (0, 2):
        (tmp_path / f"s.part{i}of3.csv").write_text("x\n")
    with pytest.raises(ValueError, match=r"1 of 3 parts missing: .*s\.part1of3\.csv"):
        launch.check_parts([tmp_path / "s.part0of3.csv", tmp_path / "s.part2of3.csv"])
    with pytest.raises(ValueError, match="does not exist"):
        launch.check_parts([tmp_path / "nope.csv"])


def test_merge_of_a_set_with_a_part_missing_is_one_line(tmp_path, capsys):
    (tmp_path / "s.part0of2.csv").write_text("x\n")
    assert cli.main(["merge", str(tmp_path / "s.part0of2.csv"), "--out", str(tmp_path / "m.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 of 2 parts missing" in err[0] and "s.part1of2.csv" in err[0]
    assert not (tmp_path / "m.csv").exists()


# ------------------------------------------------------------------ two ranks on CPU, end to end

def _merge_and_check(tmp_path, parts):
    merged = tmp_path / "merged.csv"
    r = subprocess.run([sys.executable, "-m", "compare", "merge", *map(str, parts), "--out", str(merged)],
                       capture_output=True, text=True, env=_clean_env(), cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    each = [_case_keys(p) for p in parts]
    assert all(each) and not set(each[0]) & set(each[1])  # two real, disjoint halves
    assert _case_keys(merged) == _expected_cases()  # together exactly the sweep
    with merged.open(newline="") as f:
        assert {r["oracle"] for r in csv.DictReader(f)} == {"pass"}


def test_torchrun_two_ranks_on_cpu(tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH (the env-var test below covers the same logic)")
    out = tmp_path / "cpu.csv"
    r = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", "0", "-m", "compare", *RUN,
                        "--out", str(out)],
                       capture_output=True, text=True, env=_clean_env(), cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    parts = [tmp_path / f"cpu.part{i}of2.csv" for i in range(2)]
    assert all(p.is_file() for p in parts), sorted(os.listdir(tmp_path))
    assert "part 0/2 of sweep cpu (from torchrun RANK=0 WORLD_SIZE=2)" in r.stdout
    assert f"python -m compare merge {tmp_path / 'cpu.part*of2.csv'} --out {out}" in r.stdout
    _merge_and_check(tmp_path, parts)


@pytest.mark.parametrize("launcher", ["torchrun-env", "slurm-array"])
def test_two_ranks_from_environment_variables(tmp_path, launcher):
    out = tmp_path / "cpu.csv"
    procs = []
    for i in range(2):
        env = ({"RANK": str(i), "WORLD_SIZE": "2", "LOCAL_RANK": str(i)} if launcher == "torchrun-env"
               else {"SLURM_ARRAY_TASK_ID": str(i + 1), "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "2"})
        procs.append(subprocess.Popen([sys.executable, "-m", "compare", *RUN, "--out", str(out)], cwd=REPO,
                                      env=_clean_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stdout[-3000:] + stderr[-3000:]
    _merge_and_check(tmp_path, [tmp_path / f"cpu.part{i}of2.csv" for i in range(2)])


def test_explicit_shard_and_out_write_the_named_file(tmp_path):
    out = tmp_path / "mine.csv"
    r = subprocess.run([sys.executable, "-m", "compare", *RUN, "--shard", "1/3", "--out", str(out)], cwd=REPO,
                       env=_clean_env(RANK="0", WORLD_SIZE="2"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "part 1/3" in r.stdout and "(from --shard)" in r.stdout
    assert out.is_file() and not list(tmp_path.glob("*.part*"))
    third = sweeps.shard(list(sweeps.load("cpu").cases), "1/3")
    assert _case_keys(out) == sorted(("sdpa", "math", c.fmt, str(c.heads_kv), str(c.seqlen_q), str(c.seqlen_k),
                                      str(c.head_dim), str(c.causal)) for c in third)
