"""`cemctl demo`: finds its grid, runs plan -> launch -> status -> report, stops at the first failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cemctl.cli import app

REPO = Path(__file__).resolve().parent.parent


def test_missing_grid_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--grid", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2
    assert "nope.toml: no such grid file" in result.output
    assert not (tmp_path / "results.db").exists()


def test_bad_grid_stops_before_launch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = tmp_path / "bad.toml"
    grid.write_text('[experiment]\nfigure = "curves"\n[base]\n"model.attention" = "flash"\n')
    result = CliRunner().invoke(app, ["demo", "--grid", str(grid)])
    assert result.exit_code == 2
    assert "model.attention" in result.output and "cemctl launch" not in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_demo_runs_the_four_commands_end_to_end(tmp_path, monkeypatch):
    """A 2-run, 4-step version of the demo grid goes through plan, launch, status and report."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    text = (REPO / "experiments" / "demo.toml").read_text()
    text = text.replace('"train.max_steps" = 120', '"train.max_steps" = 4').replace('"train.eval_every_steps" = 20', '"train.eval_every_steps" = 2')
    text = text.replace('"data.tokenizer" = "bpe"', '"data.tokenizer" = "byte"').replace('"model.size" = "micro"', '"model.size" = "nano"')
    grid = tmp_path / "experiments" / "demo.toml"
    grid.parent.mkdir()
    grid.write_text(text)
    result = CliRunner().invoke(app, ["demo"])  # finds ./experiments/demo.toml
    assert result.exit_code == 0, result.output
    for step in ("cemctl plan", "cemctl launch", "cemctl status demo", "cemctl report demo"):
        assert step in result.output
    index = tmp_path / "reports" / "demo" / "index.md"
    assert index.exists() and "done" in index.read_text()
    assert len(list((tmp_path / "runs").glob("*/result.json"))) == 4
    # The second demo starts nothing new.
    again = CliRunner().invoke(app, ["demo"])
    assert again.exit_code == 0, again.output
    assert "4 runs" in again.output
