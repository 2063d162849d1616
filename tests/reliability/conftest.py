"""Fixtures of the hostile-user tests."""

from __future__ import annotations

import pytest

from tests.helpers import finish_run, plan_ids, tiny_grid


A_CLAIM = """
[[claim]]
id = "lr"
statement = "a higher learning rate helps"
[[claim.part]]
name = "lr 0.004 - lr 0.002"
statistic = "difference"
arms = [{ "train.lr" = 0.004 }, { "train.lr" = 0.002 }]
expect = "lower"
margin = "1%"
"""


@pytest.fixture
def finished(tmp_path):
    """An experiment of two finished runs (files written as a trainer leaves them, no training): one seed at two
    learning rates, the two arms its claim compares (a selector matching no arm is refused at plan)."""
    grid, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0]", extra='[axes]\n"train.lr" = [0.002, 0.004]\n'
                                             + A_CLAIM))
    for i, rid in enumerate(ids):
        finish_run(tmp_path / "runs" / rid, test_loss=1.5 + 0.1 * i)
    return grid, ids


@pytest.fixture(scope="session")
def trained_project(tmp_path_factory):
    """A project folder (results.db + runs/, both recorded relative to it) holding one finished CEM run trained
    on the CPU in this process (`run_training`, what `python -m cem_core.train` runs; final checkpoint kept), and
    its run id. Tests copy it (`copy_project`); never change it."""
    from cem_core.train import run_training
    from tests.helpers import cli, tiny_grid

    root = tmp_path_factory.mktemp("trained") / "project"
    root.mkdir()
    (root / "exp.toml").write_text(tiny_grid("exp", seeds="[0]", steps=4, ckpt=4,
                                             extra='"model.attention" = "cem"\n"model.attn_steps" = 2\n'))
    res = cli(None, "plan", "exp.toml", "--json", cwd=root)
    assert res.returncode == 0, res.output
    import json

    (run_id,) = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    assert run_training(root / "runs" / run_id, device="cpu")["state"] == "done"
    assert cli(None, "status", "--json", cwd=root).returncode == 0  # ingested
    return root, run_id


@pytest.fixture
def copy_project(tmp_path):
    """copy_project(src, name) -> `cp -a src tmp_path/name` (links, modes and times kept)."""
    import subprocess

    def copy(src, name="copy"):
        dest = tmp_path / name
        subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
        return dest

    return copy
