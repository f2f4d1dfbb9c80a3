"""Every failure the fuzzer found on the GPU, committed as a case (tests/fixtures/fuzz/*.json, the failures.json
that `compare fuzz` wrote, shrunk) and replayed through the same path as `compare fuzz --replay`. A case the code
does not pass yet carries an "open" note and is a strict xfail: fixing it turns the xfail into a failure that
asks for the note to go. Skipped cleanly without a GPU."""
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("hypothesis")

from compare import backends, fuzz  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "fuzz"


def _cases():
    for path in sorted(FIXTURES.glob("*.json")):
        for i, entry in enumerate(fuzz.load_failures(path)):
            marks = [pytest.mark.xfail(strict=True, reason=entry["open"])] if entry.get("open") else []
            yield pytest.param(entry, id=f"{path.stem}-{i}", marks=marks)


def test_the_fixtures_are_replayable_failures_json():
    """On any machine: every fixture loads as `compare fuzz` output and names a registered backend."""
    files = sorted(FIXTURES.glob("*.json"))
    assert files, "no committed fuzz cases"
    for path in files:
        for entry in fuzz.load_failures(path):
            assert entry["backend"] in backends.registry(), entry["backend"]
            fuzz.example_from_json(entry["mode"], entry["example"])
            assert json.dumps(entry)


@pytest.mark.gpu
@pytest.mark.parametrize("entry", list(_cases()))
def test_fuzzed_failure_passes_now(entry):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    backend = backends.get(entry["backend"])
    if backend.unavailable_reason():
        pytest.skip(backend.unavailable_reason())
    lines = []
    assert fuzz.replay([entry], device="cuda", log=lines.append) == 0, lines
