"""docs/architecture.md stays true: it names every folder of the package, the import-linter
contract has one entry per folder, and the top level holds only the shared leaves."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "detector"
LEAVES = {"__init__", "__main__", "model", "errors", "logs", "jit"}


def _folders() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_the_architecture_document_names_every_folder() -> None:
    """Each folder of detector/ appears in docs/architecture.md as `name/`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = sorted(f for f in _folders() if f"`{f}/`" not in text)
    assert [] == missing, f"folders not described in docs/architecture.md: {missing}"


def test_the_layers_contract_has_one_entry_per_folder() -> None:
    """Every folder is one entry of the layers contract (no submodule entries)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["name"].startswith("Layers point one way"))["layers"]
    entries = [p.strip() for layer in layers for p in layer.replace(":", "|").split("|")]
    folders = {f"detector.{f}" for f in _folders()}
    assert sorted(folders) == sorted(e for e in entries if e in folders)
    assert [] == [e for e in entries if e.count(".") > 1]


def test_the_top_level_holds_only_the_shared_leaves() -> None:
    """No stage module at the top of detector/: model, errors, logs, jit and the entry points."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert set() == modules - LEAVES


def test_the_readme_links_the_architecture_document() -> None:
    """README.md links docs/architecture.md."""
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text()
