"""Fixtures of the hostile-user tests."""

from __future__ import annotations

import pytest

from tests.helpers import finish_run, plan_ids


@pytest.fixture
def finished(tmp_path):
    """An experiment of two finished runs (files written as a trainer leaves them, no training)."""
    grid, ids = plan_ids(tmp_path)
    for i, rid in enumerate(ids):
        finish_run(tmp_path / "runs" / rid, test_loss=1.5 + 0.1 * i)
    return grid, ids
