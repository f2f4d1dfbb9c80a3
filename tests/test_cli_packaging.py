"""Packaging is true to the code: requires-python covers what the code imports from the standard library,
every third-party package the installed packages import is a declared dependency, and there is a LICENSE."""

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("compare", "cuda_impl", "triton_impl")
# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn"}
# modules the code finds at run time with importlib and does without (declared nowhere on purpose)
OPTIONAL = {"flash_attn"}
# import name -> (the optional extra that declares it, the only files that may import it: each says how to install
# it when it is missing)
EXTRAS = {"hypothesis": ("test", {"compare/fuzz.py"})}
# standard-library modules newer than Python 3.10, by the version that added them
NEWER_STDLIB = {"tomllib": (3, 11)}


def _project():
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _imports():
    """Top-level module name -> files importing it, over every module of the installed packages (imports
    inside functions too: a lazy import is still a dependency)."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


def _requirement_names(requirements):
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_every_imported_third_party_package_is_declared():
    declared = _requirement_names(_project()["dependencies"])
    third_party = {name: files for name, files in _imports().items()
                   if name not in sys.stdlib_module_names and name not in PACKAGES and name not in OPTIONAL}
    assert {"torch", "triton", "matplotlib"} <= set(third_party)  # the scan sees what it must
    extras = _project().get("optional-dependencies", {})

    def in_extra(name, files):
        extra, allowed = EXTRAS.get(name, (None, set()))
        return extra is not None and files <= allowed and name in _requirement_names(extras.get(extra, []))

    missing = {name: sorted(files) for name, files in third_party.items()
               if DISTRIBUTION.get(name, name).lower().replace("_", "-") not in declared and not in_extra(name, files)}
    assert not missing, f"imported but not in [project] dependencies: {missing}"


def test_requires_python_covers_the_standard_library_the_code_uses():
    spec = _project()["requires-python"]
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec)
    assert m, f"requires-python {spec!r}: expected '>=X.Y'"
    floor = (int(m[1]), int(m[2]))
    imports = _imports()
    for module, since in NEWER_STDLIB.items():
        if module in imports:
            assert floor >= since, f"{sorted(imports[module])} import {module} ({since[0]}.{since[1]}+), " \
                                   f"requires-python is {spec}"
    assert sys.version_info[:2] >= floor  # the interpreter running the tests is one the package allows


def test_versions_are_those_the_results_ran_on():
    deps = {r.split(">")[0].split("<")[0].split("=")[0].strip(): r for r in _project()["dependencies"]}
    assert deps["torch"] == "torch>=2.11"  # the GPU machine's torch; CI installs 2.13.0
    assert deps["triton"] == "triton>=3.6,<3.7"  # 3.6.0 everywhere; Gluon changes between releases
    ci = (REPO / ".ci" / "run").read_text()
    assert "torch==2.13.0" in ci and "triton==3.6.0" in ci


def test_license_is_bsd_3_clause():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "the fa2-compare authors" in text
    assert "Neither the name of the copyright holder" in text
    project = _project()
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]


def test_ci_runs_the_main_command_after_the_tests():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert lines.index("python3 -m pytest -q") < lines.index("python3 -m compare run")
