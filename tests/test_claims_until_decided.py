"""`cemctl launch EXPERIMENT --until-decided`: seeds in rounds for the arms of undecided parts, until every part
is decided, the seed cap or the budget is reached; and the declarations registered at launch (confirmatory or
exploratory on the claims page).

The loop's tests run the real loop (`cemctl.services.launch.until_decided`) and the real planner with a launcher
that writes each run's result instead of training it (losses designed per arm and seed), so they take seconds;
the last test trains tiny models on the CPU through `cemctl launch --until-decided` (slow).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cem_core.errors import ConfigError
from cemctl.report.sequential import next_round
from tests.helpers import cli, finish_run, tiny_grid

CLAIM = '''
[axes]
"train.lr" = [0.0001, 0.001, 0.0011, 0.01]

[[claim]]
id = "U"
statement = "A high learning rate learns faster in six steps; a tenth more does nothing we can see"
[[claim.part]]
name = "lr 0.01 - lr 0.0001"
arms = [{ "train.lr" = 0.01 }, { "train.lr" = 0.0001 }]
expect = "lower"
margin = 0.0
[[claim.part]]
name = "lr 0.0011 - lr 0.001"
arms = [{ "train.lr" = 0.0011 }, { "train.lr" = 0.001 }]
expect = "lower"
margin = 0.0
'''


def _loss(lr: float, seed: int, small_effect: float) -> float:
    """Big gap between 0.01 and 0.0001; `small_effect` between 0.0011 and 0.001; seed noise of s.d. 0.02."""
    noise = float(np.random.default_rng([seed, int(lr * 1e5)]).normal(0, 0.02))
    base = {0.01: 4.0, 0.0001: 5.0, 0.001: 4.5, 0.0011: 4.5 + small_effect}[lr]
    return base + noise


class FakeLauncher:
    """The launcher's contract without training: plan (through the real planner, `keep_run` honoured), write each
    new run's result with a designed loss, sync, report what was 'submitted'."""

    def __init__(self, small_effect: float = 0.0, loss=None, cut_after: int | None = None) -> None:  # noqa: ANN001
        self.small_effect, self.cut_after = small_effect, cut_after  # cut_after: a round ends the session there
        self.loss = loss or (lambda cfg: _loss(float(cfg.train.lr), int(cfg.train.seed), self.small_effect))
        self.launches: list[list[str]] = []
        self.requests: list = []

    def __call__(self, req, url, runs_root):  # noqa: ANN001
        from cemctl.db import open_db, sync_runs
        from cemctl.services.claim_plans import register_claims
        from cemctl.services.plan import plan_experiment

        self.requests.append(req)
        plan = plan_experiment(req.target, scale=req.scale or "tiny", db_url=url, runs_root=runs_root,
                               seeds=req.seeds, only=req.keep_run, axes=getattr(req, "axes", None)).plan
        engine = open_db(url)
        register_claims(engine, plan.name, runs_root, scale=plan.scale)
        started = []
        for pr in plan.runs:
            folder = Path(runs_root) / pr.run_id
            if (folder / "result.json").exists():
                continue
            if self.cut_after is not None and self.launches and len(started) == self.cut_after:
                sync_runs(engine, runs_root)
                raise KeyboardInterrupt  # the session ends in the middle of a round
            finish_run(folder, test_loss=self.loss(pr.config))
            started.append(pr.run_id)
        sync_runs(engine, runs_root)
        self.launches.append(started)
        return SimpleNamespace(experiment=plan.name, submitted=[SimpleNamespace(run_id=r) for r in started],
                               summary=lambda: f"{len(started)} runs")


def _run(tmp_path, fake, extra=CLAIM, write=True, **kw):
    from cemctl.services.launch.launcher import LaunchRequest
    from cemctl.services.launch.until_decided import until_decided

    grid = tmp_path / "ud.toml"
    if write:
        grid.write_text(tiny_grid("ud", seeds="[0, 1, 2]", extra=extra))
    lines: list[str] = []
    report = until_decided(LaunchRequest(target=str(grid), scale="tiny"), f"sqlite:///{tmp_path / 'results.db'}",
                           tmp_path / "runs", launch_fn=fake, on_round=lines.append, **kw)
    return report, lines


def test_only_the_undecided_parts_arms_get_seeds_until_the_cap(tmp_path):
    fake = FakeLauncher(small_effect=0.0)
    report, lines = _run(tmp_path, fake, max_seeds=9)
    assert report.stop == "seed cap" and "1 part undecided at the cap of 9 seeds" in report.message
    assert report.seeds == {"lr=0.0001": 3, "lr=0.001": 9, "lr=0.0011": 9, "lr=0.01": 3}
    assert [len(x) for x in fake.launches] == [12, 4, 4, 4]  # rounds of two seeds for two arms: 5, 7, 9
    assert lines[0].startswith("round 1: 1 part undecided; 4 runs: 2 arms to 5 seeds")
    design = json.loads(report.design_path.read_text())
    assert design["design"]["max_seeds"] == 9 and design["design"]["spending"] == "Lan-DeMets O'Brien-Fleming"
    assert [len(look["runs"]) for look in design["looks"]] == [12, 16, 20, 24]
    assert design["stopped"]["reason"] == "seed cap"
    parts = report.parts.set_index("part")
    assert parts.loc["lr 0.01 - lr 0.0001", "verdict_holm"] == "holds"
    assert parts.loc["lr 0.0011 - lr 0.001", "sequential"] == "4 looks at 3, 5, 7, 9 of 9 seeds"


def test_it_stops_when_every_part_is_decided(tmp_path):
    report, lines = _run(tmp_path, FakeLauncher(small_effect=-0.06), max_seeds=15)
    assert report.stop == "decided" and report.message == "every part is decided"
    # the big gap may need a round too (at 3 of 15 seeds O'Brien-Fleming asks ~5 standard errors of a 4-df t),
    # but it is decided no later than the small one, whose arms go on alone
    assert 3 < report.seeds["lr=0.0011"] < 15 and report.seeds["lr=0.01"] <= report.seeds["lr=0.0011"]
    assert report.parts.set_index("part").loc["lr 0.0011 - lr 0.001", "verdict_holm"] == "holds"


def test_it_stops_before_a_round_would_pass_the_budget(tmp_path):
    # each fake run takes 1 s: 12 s for the grid, a round of 4 runs more would reach 16 s
    report, _ = _run(tmp_path, FakeLauncher(), max_seeds=9, budget_hours=14 / 3600)
    assert report.stop == "budget" and "would pass the budget" in report.message
    assert report.seeds["lr=0.001"] == 3 and report.rounds == []


def test_the_budget_is_a_total_over_every_session_of_the_design(tmp_path):
    """Regression: the budget counted only the runs of the current invocation, so every session started it again.
    Each fake run takes 1 s: the grid's 12 runs and one round of 4 reach 16 s of a 17 s budget; a second session
    with the same budget may not start another round (16 + 4 > 17), and one with 21 s starts exactly one."""
    budget = 17 / 3600
    first, _ = _run(tmp_path, FakeLauncher(), max_seeds=9, budget_hours=budget)
    assert first.stop == "budget" and len(first.rounds) == 1
    assert first.spent_hours * 3600 == pytest.approx(16) and first.session_hours == first.spent_hours
    design = json.loads(first.design_path.read_text())
    assert [(r["round"], len(r["runs"]), r["hours"] * 3600) for r in design["rounds"]] == \
        [(0, 12, pytest.approx(12)), (1, 4, pytest.approx(4))]
    fake = FakeLauncher()
    again, _ = _run(tmp_path, fake, max_seeds=9)  # no --budget-hours: the recorded one holds
    assert again.stop == "budget" and again.rounds == [] and fake.launches == [[]]
    assert again.spent_hours * 3600 == pytest.approx(16) and again.session_hours == 0.0
    more, _ = _run(tmp_path, FakeLauncher(), max_seeds=9, budget_hours=21 / 3600)  # one round more: 20 of 21 s
    assert more.stop == "budget" and len(more.rounds) == 1 and more.seeds["lr=0.001"] == 7 and more.spent_hours * 3600 == pytest.approx(20)
    assert "run-hours spent by its rounds in all" in more.summary()
    assert json.loads(more.design_path.read_text())["design"]["budget_hours"] == pytest.approx(21 / 3600)


def test_a_round_cut_short_by_the_end_of_a_session_still_counts(tmp_path):
    """A session that ends in the middle of a round (two of its four runs finished) has recorded the round's runs
    before they trained, so the next session counts their run-hours: 12 + 2 s spent, not 12."""
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, FakeLauncher(cut_after=2), max_seeds=9)
    report, _ = _run(tmp_path, FakeLauncher(), max_seeds=9, budget_hours=15 / 3600)
    assert report.stop == "budget" and report.spent_hours * 3600 == pytest.approx(14)
    rounds = json.loads(report.design_path.read_text())["rounds"]
    assert [(r["round"], len(r["runs"]), r["hours"] * 3600) for r in rounds] == \
        [(0, 12, pytest.approx(12)), (1, 4, pytest.approx(2))]


NO_LR_AXIS = '''
[axes]
"model.attn_step_size" = [1.0, 0.5]

[[claim]]
id = "N"
statement = "The step size makes no difference"
[[claim.part]]
name = "step 0.5 - step 1"
arms = [{ "model.attn_step_size" = 0.5 }, { "model.attn_step_size" = 1.0 }]
expect = "lower"
margin = 0.0
'''


def test_a_grid_without_an_lr_axis_gets_seeds_like_any_other(tmp_path):
    """Regression (issue 47): a grid whose learning rate is not an axis (one rate in [base]) never got seeds: the
    loop's planned arms were filtered by the lr axis it did not have, and it stopped at once with a false "seed
    cap"."""
    def loss(cfg) -> float:  # noqa: ANN001
        return 4.5 + float(np.random.default_rng([int(cfg.train.seed), int(cfg.model.attn_step_size * 10)])
                           .normal(0, 0.02))

    fake = FakeLauncher(loss=loss)
    report, lines = _run(tmp_path, fake, extra=NO_LR_AXIS, max_seeds=7)
    assert [len(x) for x in fake.launches] == [6, 4, 4]  # rounds of two seeds for both arms: 5, 7
    assert report.stop == "seed cap" and "at the cap of 7 seeds" in report.message
    assert set(report.seeds.values()) == {7}
    assert lines[0].startswith("round 1: 1 part undecided; 4 runs: 2 arms to 5 seeds")


def test_a_stage_1_part_gets_no_seeds_and_the_line_says_how_to_confirm_it(tmp_path):
    from cem_core.errors import CemError

    extra = '''
[axes]
"train.lr" = [0.001, 0.002, 0.004]
"model.attn_step_size" = [1.0, 0.5]

[[claim]]
id = "O"
statement = "The step size makes no difference once each arm has its own learning rate"
[[claim.part]]
name = "step 0.5 - step 1 at their own optima"
arms = [{ "model.attn_step_size" = 0.5 }, { "model.attn_step_size" = 1.0 }]
expect = "lower"
at = "own_optimum"
'''
    fake = FakeLauncher(loss=lambda cfg: 4.5)
    with pytest.raises(CemError, match="decided by a confirmation on fresh seeds: `cemctl confirm ud --scale tiny`"):
        _run(tmp_path, fake, extra=extra, max_seeds=5)


def test_the_seed_cap_of_a_started_design_cannot_change_and_is_refused_before_anything_trains(tmp_path):
    """Regression (issue 47): `--max-seeds` changed mid-design trained the new runs and only then refused."""
    _run(tmp_path, FakeLauncher(), max_seeds=5)
    grid = tmp_path / "ud.toml"  # one seed more in the grid: a launch would train it
    grid.write_text(grid.read_text().replace("seeds = [0, 1, 2]", "seeds = [0, 1, 2, 3]"))
    fake = FakeLauncher()
    with pytest.raises(ConfigError, match="started with --max-seeds 5"):
        _run(tmp_path, fake, write=False, max_seeds=9)
    assert fake.requests == []  # nothing was launched
    report, _ = _run(tmp_path, FakeLauncher())  # without --max-seeds: the design's cap
    assert report.stop == "seed cap" and "cap of 5 seeds" in report.message


@pytest.mark.parametrize("parts,kw,stop,arms", [
    ([{"key": "a", "decided": True, "arms": ["x"]}], {}, "decided", []),
    ([{"key": "a", "decided": False, "arms": ["x", "y"]}, {"key": "b", "decided": True, "arms": ["z"]}], {}, "",
     ["x", "y"]),
    ([{"key": "a", "decided": False, "arms": ["x"]}], {"arm_seeds": {"x": 16}}, "seed cap", []),
    ([{"key": "a", "decided": False, "arms": ["x", "y"]}], {"budget_hours": 1.0, "spent_hours": 0.95}, "budget", []),
])
def test_the_rounds_decision_is_a_pure_function(parts, kw, stop, arms):
    args = dict(arm_seeds={"x": 3, "y": 3, "z": 3}, max_seeds=16, round_seeds=2, spent_hours=0.0,
                budget_hours=None, hours_per_run=0.05)
    args.update(kw)
    decision = next_round(parts, **args)
    assert decision.stop == stop and decision.arms == arms
    if not stop:
        assert decision.seeds == 5


def test_the_next_rounds_cost_is_its_arms_own_run_time():
    """A round is priced by the run-hours of the arms that get seeds (their own finished runs), an arm with none at
    the mean of every run (main: every arm at the mean of every finished run of the scale, stage 1's loaded profiles
    included: fig2b-confirm's 14 runs priced at 1.15 run-hours where its arms' runs took about 0.03 h each)."""
    parts = [{"key": "a", "decided": False, "arms": ["x", "y"]}]
    args = dict(arm_seeds={"x": 3, "y": 3}, max_seeds=16, round_seeds=2, spent_hours=0.5, budget_hours=0.8,
                hours_per_run=0.1)
    assert next_round(parts, **args).stop == "budget"  # 4 runs at 0.1: 0.4 more
    fast = next_round(parts, **args, arm_hours={"x": 0.03, "y": 0.03})  # 4 runs at 0.03: 0.12 more
    assert fast.stop == "" and fast.arms == ["x", "y"]
    mixed = next_round(parts, **args, arm_hours={"x": 0.03})  # y has no run yet: 2 x 0.03 + 2 x 0.1 = 0.26
    assert mixed.stop == ""
    assert next_round(parts, **{**args, "budget_hours": 0.75}, arm_hours={"x": 0.03}).stop == "budget"


def test_a_round_stopped_midway_is_completed_not_overtaken():
    """Regression: a round to 5 seeds stopped after one arm's fourth seed finished: the next session planned every
    arm to 6 (the most seeds among them + 2), 11 runs where the recorded round needed 7. It completes the round."""
    from cemctl.services.launch.until_decided import _unfinished_round

    parts = [{"key": "a", "decided": False, "arms": ["w", "x", "y", "z"]}]
    args = dict(arm_seeds={"w": 4, "x": 3, "y": 3, "z": 3}, max_seeds=9, round_seeds=2, spent_hours=0.0,
                budget_hours=None, hours_per_run=0.1)
    assert next_round(parts, **args).seeds == 6  # nothing recorded as unfinished: the usual step
    resumed = next_round(parts, **args, unfinished_round=5)
    assert resumed.seeds == 5 and resumed.message.startswith("7 runs")
    done = next_round(parts, **{**args, "arm_seeds": {"w": 5, "x": 5, "y": 5, "z": 5}}, unfinished_round=5)
    assert done.seeds == 7  # every arm reached it: the next round as usual
    record = {"rounds": [{"round": 0, "seeds": None, "runs": ["a", "b"]}, {"round": 1, "seeds": 5, "runs": ["c", "d"]}]}
    assert _unfinished_round(record, {"a", "b", "c"}) == 5
    assert _unfinished_round(record, {"a", "b", "c", "d"}) is None
    assert _unfinished_round({"rounds": [record["rounds"][0]]}, set()) is None
    # a run of the round that failed or was cancelled ends its wait: the loop moves on (no retry it never asked for)
    assert _unfinished_round(record, {"a", "b", "c"}, {"d": "failed"}.get) is None
    assert _unfinished_round(record, {"a", "b", "c"}, {"d": "stale"}.get) == 5


def test_until_decided_refuses_what_cannot_wait(tmp_path):
    from cemctl.services.launch.launcher import LaunchRequest
    from cemctl.services.launch.until_decided import until_decided

    with pytest.raises(ConfigError, match="local executor"):
        until_decided(LaunchRequest(target="x", executor="slurm"), "sqlite:///x.db", tmp_path)
    with pytest.raises(ConfigError, match="--max-seeds"):
        until_decided(LaunchRequest(target="x"), "sqlite:///x.db", tmp_path, max_seeds=2)


# ---------------------------------------------------------------------------------------------- registrations


def test_a_part_declared_before_its_runs_is_confirmatory_and_one_changed_after_is_exploratory(tmp_path):
    fake = FakeLauncher()
    _run(tmp_path, fake, max_seeds=3)  # registered at the first launch, before any run finished
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    declared = pd.read_csv(tmp_path / "c" / "claims.csv").set_index("part")["declared"]
    assert declared.str.startswith("confirmatory (declared ").all()
    grid = tmp_path / "ud.toml"  # the second part's margin changes after its results exist
    grid.write_text(grid.read_text().replace("margin = 0.0\n[[claim.part]]", "margin = 0.0\n[[claim.part]]", 1)
                    .replace('name = "lr 0.0011 - lr 0.001"\narms = [{ "train.lr" = 0.0011 }, { "train.lr" = 0.001 }]\n'
                             'expect = "lower"\nmargin = 0.0', 'name = "lr 0.0011 - lr 0.001"\narms = [{ "train.lr" = '
                             '0.0011 }, { "train.lr" = 0.001 }]\nexpect = "lower"\nmargin = 0.01'))
    fake(SimpleNamespace(target=str(grid), scale="tiny", seeds=None, keep_run=None), f"sqlite:///{tmp_path / 'results.db'}",
         tmp_path / "runs")
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"), env={"COLUMNS": "120"})
    declared = pd.read_csv(tmp_path / "c" / "claims.csv").set_index("part")["declared"]
    assert declared["lr 0.01 - lr 0.0001"].startswith("confirmatory")
    assert declared["lr 0.0011 - lr 0.001"].startswith("exploratory (changed ")
    assert "after 6 of its runs had finished" in declared["lr 0.0011 - lr 0.001"]
    assert "exploratory (changed" in (tmp_path / "c" / "claims.md").read_text()


def test_a_part_without_a_registration_says_so(tmp_path):
    grid = tmp_path / "ud.toml"
    grid.write_text(tiny_grid("ud", seeds="[0, 1, 2]", extra=CLAIM))
    res = cli(tmp_path, "plan", str(grid), "--json")
    for r in json.loads(res.stdout)["runs"]:
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=_loss(r["axes"]["train.lr"], r["axes"]["train.seed"], 0))
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    assert res.returncode == 0, res.output
    assert set(pd.read_csv(tmp_path / "c" / "claims.csv")["declared"]) == {"not registered"}


@pytest.mark.slow
def test_a_real_launch_registers_the_plan_and_a_later_edit_is_exploratory(tmp_path):
    """`cemctl launch` of a grid with a claim (four tiny CPU runs) registers the plan before any run finished: the
    grid's text and sha256 as planned, the claims and each part's declaration hashed; the part is confirmatory.
    Its margin edited after the results exist and launched again (nothing to train): a second registration with
    4 finished runs, and the page labels the part exploratory."""
    import hashlib

    from cemctl.grid.claims import recorded_claims
    from cemctl.services.claim_plans import _sha, read_registry

    claim = '''
[axes]
"train.lr" = [0.01, 0.0001]

[[claim]]
id = "R"
statement = "A high learning rate learns faster in six steps"
[[claim.part]]
name = "lr 0.01 - lr 0.0001"
arms = [{ "train.lr" = 0.01 }, { "train.lr" = 0.0001 }]
expect = "lower"
margin = 0.0
'''
    grid = tmp_path / "reg.toml"
    grid.write_text(tiny_grid("reg", seeds="[0, 1]", extra=claim))
    res = cli(tmp_path, "launch", str(grid), "--workers", "2", subprocess=True, timeout=600)
    assert res.returncode == 0, res.output
    [entry] = read_registry(tmp_path / "runs")
    text = grid.read_text()
    assert entry["experiment"] == "reg" and entry["scale"] == "tiny" and entry["grid_text"] == text
    assert entry["grid_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    [part] = recorded_claims(text)[0].parts
    assert entry["parts"] == [{"claim": "R", "part": "lr 0.01 - lr 0.0001", "sha256": _sha(part.declaration()),
                               "finished": 0}]
    assert entry["claims"][0]["statement"] == "A high learning rate learns faster in six steps"
    assert entry["claims_sha256"] == _sha(entry["claims"])
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    assert res.returncode == 0, res.output
    row = pd.read_csv(tmp_path / "c" / "claims.csv").iloc[0]
    assert row["declared"].startswith("confirmatory (declared ") and row["n"] == 2
    grid.write_text(text.replace("margin = 0.0", "margin = 0.01"))
    res = cli(tmp_path, "launch", str(grid), subprocess=True, timeout=600)
    assert res.returncode == 0, res.output
    first, second = read_registry(tmp_path / "runs")
    assert second["parts"][0]["finished"] == 4 and second["grid_text"] == grid.read_text() != first["grid_text"]
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    declared = pd.read_csv(tmp_path / "c" / "claims.csv").iloc[0]["declared"]
    assert declared.startswith("exploratory (changed ") and "after 4 of its runs had finished" in declared


# ---------------------------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_until_decided_end_to_end_trains_only_the_undecided_arms(tmp_path):
    """A claim of our own on a tiny grid, trained on the CPU: the big learning-rate gap is decided at the first look
    (3 seeds), the tenth-more gap is not, so only its two arms get seeds, up to the cap of 5."""
    grid = tmp_path / "ud.toml"
    grid.write_text(tiny_grid("ud", seeds="[0, 1, 2]", extra=CLAIM))
    res = cli(tmp_path, "launch", str(grid), "--until-decided", "--max-seeds", "5", "--workers", "2",
              subprocess=True, timeout=900)
    assert res.returncode == 0, res.output
    assert "stopped after 1 round: seed cap: 1 part undecided at the cap of 5 seeds per arm" in res.stdout
    seeds = {line.split("seeds")[1].strip(): int(line.split()[0]) for line in res.stdout.splitlines()
             if line.strip().split(" ")[0].isdigit() and "seeds" in line}
    assert seeds == {"lr=0.0001": 3, "lr=0.001": 5, "lr=0.0011": 5, "lr=0.01": 3}
    status = json.loads(cli(tmp_path, "status", "ud", "--json").stdout)["experiments"][0]
    assert status["counts"] == {"done": 16}  # the round planned only the runs it launched
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c"))
    parts = pd.read_csv(tmp_path / "c" / "claims.csv").set_index("part")
    assert parts.loc["lr 0.01 - lr 0.0001", "verdict_holm"] == "holds"
    assert parts.loc["lr 0.0011 - lr 0.001", "sequential"].startswith("2 looks at 3, 5 of 5 seeds")
    assert math.isfinite(parts.loc["lr 0.01 - lr 0.0001", "effect"])


def test_an_imported_experiment_is_refused_before_anything_launches_and_the_line_says_what_to_do(tmp_path):
    """Regression (the cpu project, 2026-11-27): `launch fig2b --until-decided` on an experiment imported from an
    archive launched its runs first and then stopped with "has no grid file to plan more seeds from". It is refused
    before anything launches, and the line says how to go on."""
    from sqlalchemy import update

    from cemctl.db import open_db
    from cemctl.db.engine import write_session
    from cemctl.db.models import Experiment
    from cemctl.services.launch.launcher import LaunchRequest
    from cemctl.services.launch.until_decided import until_decided

    fake = FakeLauncher()
    _run(tmp_path, fake, max_seeds=3)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with write_session(open_db(url)) as s:  # what an import records: the archive's copy of the grid
        s.execute(update(Experiment).values(grid_path="old.tar.gz:ud.toml"))
    fake.launches.clear()
    from cem_core.errors import CemError

    with pytest.raises(CemError) as e:
        until_decided(LaunchRequest(target="ud", scale="tiny"), url, tmp_path / "runs", launch_fn=fake, max_seeds=3)
    assert fake.launches == []  # before the fix: the grid's runs were launched first
    assert str(e.value) == (
        "launch --until-decided: 'ud' was planned from old.tar.gz:ud.toml, not a file here, so its rounds cannot plan "
        "more seeds; launch its grid file instead (`cemctl launch PATH --until-decided`), and if that file has "
        "changed since, `cemctl forget ud` first (runs that hold results are kept)")
