"""Shared fixtures: a real SQLite results database and a runs folder in tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """URL of a results database file that does not exist yet."""
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture
def engine(db_url: str):
    """An opened (created, migrated) results database."""
    from cemctl.db import open_db

    return open_db(db_url)


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path
