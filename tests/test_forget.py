"""Mistakes that can be undone (issue 37, item 2): `cemctl forget EXPERIMENT` removes a plan made by mistake and
its claims (never a run that holds anything or that another experiment links); claim ids are one claim across the
project and a claim selector matching no arm is refused at plan."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import assert_clean_error, cli, finish_run, tiny_grid

CLAIM = """
[[claim]]
id = "q"
statement = "CEM attention is close to Llama's"
[[claim.part]]
name = "{part}"
arms = [{{ "model.attention" = "cem" }}, {{ "model.attention" = "llama" }}]
expect = "close"
margin = "5%"
"""


def _grid(where: Path, name: str, part: str = "cem - llama", claim: str = CLAIM, extra_axes: str = "") -> Path:
    path = where / f"{name}.toml"
    path.write_text(tiny_grid(name, seeds="[0, 1, 2]", extra=f'[axes]\n"model.attention" = ["llama", "cem"]\n{extra_axes}')
                    + claim.format(part=part))
    return path


def _plan(where: Path, grid: Path) -> list[str]:
    res = cli(where, "plan", str(grid), "--json")
    assert res.returncode == 0, res.output
    return [r["run_id"] for r in json.loads(res.stdout)["runs"]]


def _claims(where: Path) -> tuple[str, str]:
    res = cli(where, "claims", "--out", str(where / "claims"))
    assert res.returncode == 0, res.output
    return res.stdout, (where / "claims" / "claims.csv").read_text()


def test_a_grid_planned_by_mistake_is_forgotten_and_the_claims_page_is_as_before(tmp_path):
    real = _plan(tmp_path, _grid(tmp_path, "real"))
    for i, rid in enumerate(real):
        finish_run(tmp_path / "runs" / rid, test_loss=2.0 + 0.01 * i)
    before = _claims(tmp_path)
    # the mistake: another experiment with a part of claim q of its own, and runs of its own (two more seeds)
    oops_grid = _grid(tmp_path, "oops", part="cem - llama, again")
    oops_grid.write_text(oops_grid.read_text().replace("seeds = [0, 1, 2]", "seeds = [0, 1, 2, 3, 4]"))
    oops = _plan(tmp_path, oops_grid)
    shared = sorted(set(real) & set(oops))
    own = sorted(set(oops) - set(real))
    assert len(shared) == 6 and len(own) == 4
    (tmp_path / "runs" / own[0] / "checkpoints").mkdir()  # one of its own runs holds a checkpoint folder: it stays
    (tmp_path / "runs" / own[1] / "notes.txt").write_text("mine")  # one holds a file cemctl did not write: stays
    assert _claims(tmp_path) != before  # its part entered the claims page

    dry = cli(tmp_path, "forget", "oops", "--dry-run")
    assert dry.returncode == 0, dry.output
    assert dry.stdout.startswith("would forget experiment oops: its plan (") and "its claims (q)" in dry.stdout
    assert all((tmp_path / "runs" / rid).is_dir() for rid in oops)  # a dry run removes nothing

    res = cli(tmp_path, "forget", "oops")
    assert res.returncode == 0, res.output
    assert "forgot experiment oops" in res.stdout
    assert f"kept {len(shared)} runs other experiments link" in res.stdout
    kept = res.stdout[res.stdout.index("nobody links any more"):]
    assert own[0][:8] in kept and "checkpoints" in kept and own[1][:8] in kept and "notes.txt" in kept
    removed = [rid for rid in own[2:]]
    assert removed and all(not (tmp_path / "runs" / rid).exists() for rid in removed)
    assert all((tmp_path / "runs" / rid).is_dir() for rid in [*real, *own[:2]])  # results never touched
    assert _claims(tmp_path) == before  # the claims page is as before
    status = json.loads(cli(tmp_path, "status", "--json").stdout)
    by_name = {e["name"]: e["runs"] for e in status["experiments"]}
    assert set(by_name) == {"real", "(no experiment)"}  # the two runs that hold files stay visible, in no experiment
    assert sorted(r["run_id"] for r in by_name["(no experiment)"]) == own[:2]
    line = assert_clean_error(cli(tmp_path, "forget", "oops"))
    assert "unknown experiment 'oops' (known: real)" in line


def test_a_second_grid_declaring_the_same_claim_part_is_refused_naming_both_files(tmp_path):
    first = _grid(tmp_path, "real")
    _plan(tmp_path, first)
    copy = _grid(tmp_path, "copy")  # the same grid under another name: every part would count twice
    line = assert_clean_error(cli(tmp_path, "plan", str(copy)))
    assert str(copy) in line and str(first) in line and "part 'cem - llama' of claim 'q'" in line
    assert "`cemctl forget real`" in line
    other = _grid(tmp_path, "other", claim=CLAIM.replace("close to Llama's", "better than Llama's"))
    line = assert_clean_error(cli(tmp_path, "plan", str(other), "--dry-run"))
    assert "claim 'q' is already declared by experiment real" in line and "another statement" in line
    # parts of one claim from two grids (as fig2c and fig2d declare claim 3) are one claim: allowed
    assert cli(tmp_path, "plan", str(_grid(tmp_path, "more", part="cem - llama, at another lr"))).returncode == 0


def test_a_claim_selector_that_matches_no_arm_is_refused_at_plan(tmp_path):
    grid = _grid(tmp_path, "sel", claim=CLAIM.replace('"model.attention" = "cem" }', '"model.attention" = "cem", '
                                                      '"model.attn_steps" = 3 }'))
    line = assert_clean_error(cli(tmp_path, "plan", str(grid)))
    assert line == (f"error: {grid}: claim[0].part[0].arms[0]: claim 'q': selector {{ model.attention = \"cem\", "
                    "model.attn_steps = 3 } matches no arm of this grid (the keys its arms vary: model.attention)")
    assert not (tmp_path / "results.db").exists()


def test_a_selector_of_another_scale_is_found_there_when_an_override_does_not_apply_at_that_scale(tmp_path):
    """Regression: the selectors pin the cpu scale's lr, and `--set train.micro_batch_seqs=4` is valid at the scale
    planned (batch 4) but not at cpu (batch 2); the check loaded cpu with the override, failed, and refused the plan
    with "matches no arm" (`cemctl plan fig2a --scale paper --set train.micro_batch_seqs=64` did this). Where the
    overrides do not apply, the other scale is read as the grid defines it. An override that removes an arm
    everywhere is still refused."""
    claim = CLAIM.replace('{{ "model.attention" = "cem" }}, {{ "model.attention" = "llama" }}',
                          '{{ "model.attention" = "cem", "train.lr" = 0.004 }}, '
                          '{{ "model.attention" = "llama", "train.lr" = 0.004 }}')
    grid = _grid(tmp_path, "xs", claim=claim + '''
[scale.tiny.base]
"train.lr" = 0.002
[scale.cpu.base]
"train.lr" = 0.004
"train.batch_seqs" = 2
"train.micro_batch_seqs" = 2
''')
    res = cli(tmp_path, "plan", str(grid), "--set", "train.micro_batch_seqs=4", "--dry-run")
    assert res.returncode == 0, res.output
    line = assert_clean_error(cli(tmp_path, "plan", str(grid), "--set", "train.micro_batch_seqs=4", "--set",
                                  "model.attention=cem", "--dry-run"))
    assert "selector { model.attention = \"llama\", train.lr = 0.004 } matches no arm of this grid" in line


def test_each_claim_part_names_its_experiment(tmp_path):
    from cemctl.services.claims import claims_report

    for name, part in (("real", "cem - llama"), ("more", "cem - llama, at another lr")):
        ids = _plan(tmp_path, _grid(tmp_path, name, part=part))
        for i, rid in enumerate(ids):
            finish_run(tmp_path / "runs" / rid, test_loss=2.0 + 0.01 * i)
    parts = claims_report(f"sqlite:///{tmp_path / 'results.db'}", runs_root=tmp_path / "runs").parts
    assert dict(zip(parts["part"], parts["experiment"])) == {"cem - llama": "real", "cem - llama, at another lr": "more"}


def test_a_planned_run_with_rows_in_any_derived_table_is_kept_and_a_removed_run_leaves_no_row(tmp_path):
    """What the database holds of a run is asked of every table keyed by a run id (cemctl.db.projection), not of a
    hand list: a row in run_environment keeps the run; the runs removed leave no row in any run-keyed table."""
    from sqlalchemy import func, select

    from cemctl.db import open_db
    from cemctl.db.engine import read_session, write_session
    from cemctl.db.models import Run, RunEnvironment
    from cemctl.db.projection import _run_column, _run_keyed_tables

    oops = _plan(tmp_path, _grid(tmp_path, "oops"))
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}", create=False)
    with write_session(engine) as s:
        s.add(RunEnvironment(run_id=oops[0], attempt=1, recorded_at=1.0))
    res = cli(tmp_path, "forget", "oops")
    assert res.returncode == 0, res.output
    assert f"{oops[0][:8]} (rows in run_environment)" in res.stdout
    with read_session(engine) as s:
        assert s.get(Run, oops[0]) is not None
        gone = oops[1:]
        assert all(s.get(Run, rid) is None for rid in gone)
        for table in _run_keyed_tables():
            n = s.scalar(select(func.count()).select_from(table).where(_run_column(table).in_(gone)))
            assert n == 0, table.name
