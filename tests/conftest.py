"""Shared fixtures: where the real public data lives (../shared/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real public data set beside the project (exporter payloads, NAB, fault trace)."""
    if not SHARED_DATA.is_dir():
        raise RuntimeError(f"real data not found at {SHARED_DATA}: tests need ../shared/data")
    return SHARED_DATA
