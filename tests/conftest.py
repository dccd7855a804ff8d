"""Shared fixtures: where the real public payloads the tests read live (tests/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

REAL_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real public payloads kept in the repository (tests/data/README.md names each
    upstream, its version and licence): exporter pages and field lists, a few NAB files."""
    if not (REAL_DATA / "README.md").is_file():
        raise RuntimeError(f"{REAL_DATA}: the tests' data folder is missing (see git status)")
    return REAL_DATA
