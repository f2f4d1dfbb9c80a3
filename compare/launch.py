"""Splitting a sweep over processes, as the standard launchers start them, and joining the parts.

`compare run` takes its part of a sweep from, in this order:

1. ``--shard i/N`` (explicit; wins over everything below);
2. a Slurm array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN/STEP where set) and/or
   ``torchrun`` (RANK, WORLD_SIZE): an array task of index t out of T that starts W ranks runs part
   ``t * W + rank`` of ``T * W``;
3. nothing: the whole sweep.

Under torchrun LOCAL_RANK picks the CUDA device where there is one. A part taken from the environment
writes its own CSV, ``<out stem>.part<i>of<N>.csv`` beside ``--out`` (or beside the default output), and
``compare merge`` joins the parts; it refuses a set of ``.part<i>of<N>`` files with a part missing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import sweeps

PART_RE = re.compile(r"^(?P<stem>.*)\.part(?P<i>\d+)of(?P<n>\d+)$")


@dataclass(frozen=True)
class Part:
    index: int
    count: int
    source: str  # where it came from, for the log line: "--shard", "torchrun (RANK=1, WORLD_SIZE=2)", ...

    @property
    def spec(self) -> str:
        return f"{self.index}/{self.count}"


def _int(environ, name: str) -> int:
    value = environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def parse_shard(spec: str) -> Part:
    return Part(*sweeps.parse_shard(spec), "--shard")


def from_environment(environ=None) -> Part | None:
    """The part of the sweep the launcher's environment gives this process (None: the whole sweep)."""
    environ = os.environ if environ is None else environ
    index, count, sources = 0, 1, []
    if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
        task, tasks = _int(environ, "SLURM_ARRAY_TASK_ID"), _int(environ, "SLURM_ARRAY_TASK_COUNT")
        low = _int(environ, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in environ else 0
        step = _int(environ, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in environ else 1
        if step < 1 or (task - low) % step:
            raise ValueError(f"Slurm array task {task} is not MIN {low} + k * STEP {step}")
        t = (task - low) // step
        if tasks < 1 or not 0 <= t < tasks:
            raise ValueError(f"Slurm array task {task} (index {t}) is outside SLURM_ARRAY_TASK_COUNT={tasks}; "
                             "use a contiguous array such as --array=0-N")
        index, count = t, tasks
        sources.append(f"Slurm array task {task} of {tasks}")
    if "WORLD_SIZE" in environ and "RANK" in environ:
        rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"RANK={rank} and WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
        index, count = index * world + rank, count * world
        sources.append(f"torchrun RANK={rank} WORLD_SIZE={world}")
    if count == 1:
        return None
    return Part(index, count, ", ".join(sources))


def resolve(shard: str | None, environ=None) -> Part | None:
    """--shard if given (it wins), else the launcher's environment."""
    return parse_shard(shard) if shard is not None else from_environment(environ)


def part_path(out: Path, part: Part) -> Path:
    """`out` with the part in its name: runs/quick.csv -> runs/quick.part1of4.csv."""
    out = Path(out)
    return out.with_name(f"{out.stem}.part{part.index}of{part.count}{out.suffix or '.csv'}")


def select_device(environ=None) -> str | None:
    """Under torchrun, make LOCAL_RANK's GPU the current device (where there is a GPU). Returns what was
    done, for the log, or None."""
    environ = os.environ if environ is None else environ
    if "LOCAL_RANK" not in environ:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    local = _int(environ, "LOCAL_RANK")
    n = torch.cuda.device_count()
    if not 0 <= local < n:
        raise ValueError(f"LOCAL_RANK={local} but {n} CUDA device(s) are visible")
    torch.cuda.set_device(local)
    return f"cuda:{local} (LOCAL_RANK)"


def check_parts(parts: list[Path]) -> None:
    """Every part exists and is a file; files named <stem>.part<i>of<N> come with all N of their siblings."""
    for part in parts:
        if not Path(part).is_file():
            raise ValueError(f"merge: part {part} does not exist" if not Path(part).exists()
                             else f"merge: part {part} is not a file")
    groups: dict[tuple[Path, str, int], set[int]] = {}
    for part in parts:
        part = Path(part)
        m = PART_RE.match(part.stem)
        if m:
            groups.setdefault((part.parent, m["stem"], int(m["n"])), set()).add(int(m["i"]))
    for (parent, stem, n), seen in groups.items():
        missing = sorted(set(range(n)) - seen)
        if missing:
            names = ", ".join(str(parent / f"{stem}.part{i}of{n}.csv") for i in missing)
            raise ValueError(f"merge: {len(missing)} of {n} parts missing: {names}")
