"""A researcher's own question, end to end: compare, tags and notes (through `sync`), every export format
(TensorBoard read back with its own reader) and the Python API, on a grid of their own."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_clean_error, cli, finish_run

GRID = """seeds = [0, 1]
[experiment]
name = "mine"
[base]
"model.size" = "nano"
"model.attention" = "cem"
"data.tokenizer" = "byte"
"train.max_steps" = 8
[axes]
"model.attn_step_size" = [0.5, 1.0]
"model.attn_steps" = [1, 2]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    where = tmp_path_factory.mktemp("own")
    (where / "mine.toml").write_text(GRID)
    res = cli(where, "plan", str(where / "mine.toml"), "--json")
    assert res.returncode == 0, res.output
    runs = json.loads(res.stdout)["runs"]
    for r in runs:
        a = r["axes"]
        finish_run(where / "runs" / r["run_id"], steps=8,
                   test_loss=1.5 + a["model.attn_step_size"] / 10 + a["model.attn_steps"] / 100 + a["train.seed"] / 1000)
    assert cli(where, "sync").returncode == 0
    return {"where": where, "runs": runs}


def _id(project, eta, t, seed):
    return next(r["run_id"] for r in project["runs"] if r["axes"] == {"model.attn_step_size": eta,
                                                                      "model.attn_steps": t, "train.seed": seed})


def test_compare_two_runs_shows_only_what_differs(project):
    a, b = _id(project, 0.5, 1, 0), _id(project, 0.5, 2, 0)
    res = cli(project["where"], "compare", a[:6], b, "--json")
    assert res.returncode == 0, res.output
    out = json.loads(res.stdout)
    assert out["differing"] == {"model.attn_steps": ["1", "2"]} and not out["identical"]
    loss = dict(zip(["a", "b"], out["metrics"]["test_loss"]))
    assert loss["a"]["mean"] == pytest.approx(1.56) and loss["b"]["mean"] == pytest.approx(1.57)
    table = cli(project["where"], "compare", a, b, env={"COLUMNS": "100"}).stdout
    assert "config keys that differ" in table and "model.attn_steps" in table and "train.seed" not in table
    same = cli(project["where"], "compare", a, a[:8]).stdout
    assert "the configs are identical" in same


def test_compare_arms_by_label_means_over_seeds_and_overlays_curves(project, tmp_path):
    png = tmp_path / "cmp.png"
    res = cli(project["where"], "compare", "attn_step_size=0.5, attn_steps=1", "attn_step_size=1, attn_steps=1",
              "-e", "mine", "--curves", str(png), env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    assert "(2 runs, mine)" in res.stdout and "1.5605 \u00b1 0.0007 (n=2)" in res.stdout
    assert png.stat().st_size > 1000
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"a user's picture")
    refused = cli(project["where"], "compare", "attn_step_size=0.5, attn_steps=1", "attn_step_size=1, attn_steps=1",
                  "--curves", str(mine), subprocess=True)
    assert_clean_error(refused, contains="cemctl did not write it")
    assert mine.read_bytes() == b"a user's picture"
    again = cli(project["where"], "compare", "attn_step_size=0.5, attn_steps=1", "attn_step_size=1, attn_steps=1",
                "--curves", str(png))
    assert again.returncode == 0  # its own file: replaced


@pytest.mark.parametrize("args,what", [
    (["nothing-like-this", "x"], "no run or arm 'nothing-like-this'"),
    (["only-one"], "at least two"),
])
def test_compare_bad_items_are_one_line(project, args, what):
    assert_clean_error(cli(project["where"], "compare", *args), contains=what)


def test_tags_and_notes_live_in_the_run_and_come_back_through_sync(project, tmp_path):
    where = project["where"]
    a = _id(project, 1.0, 2, 1)
    assert cli(where, "tag", "mine", "phase=b").returncode == 0
    assert cli(where, "tag", a, "note=warmup sweep", "keep=yes").returncode == 0
    assert cli(where, "tag", a, "--remove", "keep").returncode == 0
    assert cli(where, "note", a[:8], "lr looked too high").returncode == 0
    on_disk = json.loads((where / "runs" / a / "tags.json").read_text())
    assert on_disk["tags"] == {"note": "warmup sweep", "phase": "b"} and on_disk["notes"][0]["text"] == "lr looked too high"
    # a new database from the run folders alone has them
    copy = tmp_path / "copy"
    shutil.copytree(where / "runs", copy / "runs")
    assert cli(copy, "sync").returncode == 0
    shown = cli(copy, "status", "--columns", "run,tag.phase,tag.note", "--where", "tag.note~WARMUP",
                env={"COLUMNS": "100"})
    assert shown.returncode == 0, shown.output
    assert a[:8] in shown.stdout and "warmup sweep" in shown.stdout and "1 of 8 runs meet" in shown.stdout
    import cemctl.api as api

    runs = api.runs(db=str(copy / "results.db"))
    row = runs[runs["run_id"].eq(a)].iloc[0]
    assert row["tag.phase"] == "b" and row["note"] == "lr looked too high"


@pytest.mark.parametrize("bad,what", [
    (["tag", "mine", "bad name=1"], "bad tag name"),
    (["tag", "mine", "x=a\x01b"], "no control characters"),
    (["tag", "mine", "novalue"], "NAME=VALUE"),
    (["note", "mine", "a note"], "no run 'mine'"),
    (["tag", "nope123", "a=b"], "not a grid file, an experiment or a run"),
])
def test_bad_tags_are_one_line_and_write_nothing(project, bad, what):
    before = sorted(p.name for p in (project["where"] / "runs").rglob("tags.json"))
    assert_clean_error(cli(project["where"], *bad), contains=what)
    assert sorted(p.name for p in (project["where"] / "runs").rglob("tags.json")) == before


def test_export_every_format(project, tmp_path):
    import pandas as pd

    where = project["where"]
    for fmt, read in (("csv", pd.read_csv), ("parquet", pd.read_parquet),
                      ("jsonl", lambda p: pd.read_json(p, lines=True))):
        out = tmp_path / f"mine.{fmt}"
        res = cli(where, "export", "mine", "--format", fmt, "-o", str(out))
        assert res.returncode == 0, res.output
        frame = read(out)
        assert len(frame) == 8 and {"run_id", "arm", "arm_label", "model.attn_step_size", "test_loss"} <= set(frame.columns)
        assert frame["arm"].nunique() == 4
    curves = tmp_path / "curves.csv"
    assert cli(where, "export", "--where", "attn_steps=2", "--curves", "-o", str(curves)).returncode == 0
    long = pd.read_csv(curves)
    assert set(long["metric"]) >= {"train_loss", "val_loss", "lr"} and long["run_id"].nunique() == 4
    assert set(long.columns) == {"run_id", "arm", "arm_label", "kind", "step", "tokens", "time_s", "metric", "value"}


def test_export_refuses_a_file_it_did_not_write_unless_forced(project, tmp_path):
    user = tmp_path / "results.csv"
    user.write_text("my own table\n")
    refused = cli(project["where"], "export", "mine", "-o", str(user), subprocess=True)
    assert_clean_error(refused, contains="--force")
    assert user.read_text() == "my own table\n"
    assert cli(project["where"], "export", "mine", "-o", str(user), "--force").returncode == 0
    assert "run_id" in user.read_text()
    assert cli(project["where"], "export", "mine", "-o", str(user)).returncode == 0  # now it is ours
    user.write_text(user.read_text() + "an edit\n")
    assert_clean_error(cli(project["where"], "export", "mine", "-o", str(user), subprocess=True), contains="changed since")


def test_tensorboard_export_is_read_back_by_tensorboard(project, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    res = cli(project["where"], "export", "mine", "--format", "tensorboard", "-o", str(out))
    assert res.returncode == 0, res.output
    acc = EventAccumulator(str(out / "attn_step_size=0.5,attn_steps=1" / "seed=0"))  # the run (0.5, 1, seed 0)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "val/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "result/test_loss"} <= tags
    train = acc.Scalars("train/loss")
    assert [e.step for e in train] == list(range(1, 9))
    assert train[-1].value == pytest.approx(1.56 + 1.0 / 8, rel=1e-6)  # finish_run's last training loss
    assert acc.Scalars("result/test_loss")[0].value == pytest.approx(1.56, rel=1e-6)
    arms = {p.name for p in out.iterdir() if p.is_dir()}  # a folder per arm, one per seed inside
    assert arms == {"attn_step_size=0.5,attn_steps=1", "attn_step_size=0.5,attn_steps=2",
                    "attn_step_size=1,attn_steps=1", "attn_step_size=1,attn_steps=2"}
    assert all(sorted(p.name for p in (out / a).iterdir()) == ["seed=0", "seed=1"] for a in arms)
    user = tmp_path / "tb-user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    assert_clean_error(cli(project["where"], "export", "mine", "-f", "tensorboard", "-o", str(user), subprocess=True),
                       contains="refused")
    assert (user / "notes.txt").read_text() == "mine"


def test_the_api_returns_frames_reads_only_and_imports_no_torch(project):
    import subprocess

    db = project["where"] / "results.db"
    code = f"""
import sys, os
import cemctl.api as cem
runs = cem.runs("mine", db={str(db)!r})
arms = cem.arms("mine", db={str(db)!r}, where=["attn_steps=1"])
curves = cem.curves(db={str(db)!r}, where=["attn_step_size=0.5"])
print(len(runs), len(arms), curves["run_id"].nunique(), "torch" in sys.modules)
print(sorted(arms["arm"]))
print(round(float(arms.loc[arms["arm"].str.startswith("attn_step_size=0.5"), "test_loss mean"].iloc[0]), 4))
"""
    before = db.stat().st_mtime_ns
    db.chmod(0o444)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             cwd=str(Path(__file__).resolve().parents[1]))
    finally:
        db.chmod(0o644)
    assert out.returncode == 0, out.stderr
    first, labels, mean = out.stdout.strip().splitlines()
    assert first == "8 2 4 False"
    assert labels == "['attn_step_size=0.5, attn_steps=1', 'attn_step_size=1, attn_steps=1']"
    assert float(mean) == pytest.approx(1.5605)
    assert db.stat().st_mtime_ns == before
    with pytest.raises(Exception, match="unknown experiment"):
        import cemctl.api as cem

        cem.runs("nope", db=str(db))
