"""The import-linter layers contract names every module of the package.

import-linter's "layers" contract checks only the modules it names: a module left out of it may
import anything and be imported by anything, so the layering of ARCHITECTURE.md would hold for
it by luck. Session 24's gpu_activity.py and team_inference.py were such modules until this
test.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "detector"


def _layered_modules() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["name"].startswith("Layers point one way"))["layers"]
    names: set[str] = set()
    for layer in layers:
        for part in layer.replace("|", ":").split(":"):
            names.add(part.strip())
    return names


def _package_modules() -> set[str]:
    """Top-level modules and subpackages of detector (a subpackage is one layer entry)."""
    modules = {
        f"detector.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")
    }
    packages = {f"detector.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    return modules | packages


def test_every_module_is_in_a_layer() -> None:
    missing = sorted(_package_modules() - _layered_modules())
    assert not missing, f"not placed in pyproject.toml's layers contract: {missing}"


def test_the_contract_names_no_module_that_does_not_exist() -> None:
    stale = sorted(_layered_modules() - _package_modules())
    assert not stale, f"named in pyproject.toml's layers contract but not in detector/: {stale}"
