"""`cemctl confirm`: stage 2 of a claim, made from stage 1 and registered before any of its runs trains.

On a grid of our own with learning-rate profiles (fabricated run folders, losses designed per arm, rate and seed):
the confirmation grid holds each arm at the rate stage 1 chose, fresh seeds only, the margin, variance model,
alpha and power; it is recorded and registered with no run finished; the page shows the part as stage 2 (not run
until its runs finish, then decided and confirmatory) with stage 1 beside it; bad input is one line with exit 2:
a stage-1 seed reused (by `confirm --seeds`, `plan --seeds`, or the grid), a design changed after one of its runs
finished, a budget that buys fewer than 3 seeds, an arm whose chosen rate is the edge of its profile; an
lr_optimum part is confirmed by both arms at both chosen rates.
"""

from __future__ import annotations

import json
import math
import tomllib

import numpy as np
import pandas as pd
import pytest

from tests.helpers import cli, finish_run, tiny_grid

RATES = [0.001, 0.0014, 0.002, 0.0028, 0.004]
BEST = {"llama": 0.0028, "cem": 0.0014}
GAP = 0.05  # CEM attention's tuned loss above Llama's

GRID = tiny_grid("mine", seeds="[0, 1, 2]", extra=f'''
[axes]
"model.attention" = ["llama", "cem"]
"train.lr" = {RATES}

[[claim]]
id = "A"
statement = "CEM attention is worse than Llama attention at its best rate"
[[claim.part]]
name = "CEM attention - Llama, each at its own rate"
arms = [{{ "model.attention" = "cem" }}, {{ "model.attention" = "llama" }}]
expect = "higher"
at = "own_optimum"
[[claim.part]]
name = "CEM attention prefers a lower rate than Llama"
statistic = "lr_optimum"
arms = [{{ "model.attention" = "cem" }}, {{ "model.attention" = "llama" }}]
expect = "lower"
''')


def loss(attention: str, lr: float, seed: int, noise: float = 0.004) -> float:
    rng = np.random.default_rng([seed, int(lr * 1e5), attention == "cem"])
    return 1.5 + (GAP if attention == "cem" else 0.0) + 0.05 * math.log2(lr / BEST[attention]) ** 2 \
        + float(rng.normal(0, noise))


def _finish(tmp_path, grid, *args, gap=GAP):
    res = cli(tmp_path, "plan", str(grid), "--json", *args)
    assert res.returncode == 0, res.output
    for r in json.loads(res.stdout)["runs"]:
        a = r["axes"]
        attention = a.get("model.attention", r.get("config", {}).get("model.attention"))
        lr = float(a.get("train.lr"))
        value = loss(attention, lr, int(a["train.seed"])) - (GAP - gap if attention == "cem" else 0.0)
        result = finish_run(tmp_path / "runs" / r["run_id"], test_loss=value, steps=6)
        result["wall_time_s"] = 60.0  # a minute a run: the run-hours the design estimates
        big = a.get("model.size") == "micro"
        result.update(params_non_embedding=2e5 if big else 1e5, train_flops=2e12 if big else 1e12)
        (tmp_path / "runs" / r["run_id"] / "result.json").write_text(json.dumps(result))
    return json.loads(res.stdout)["runs"]


@pytest.fixture
def stage1(tmp_path):
    (tmp_path / "mine.toml").write_text(GRID)
    _finish(tmp_path, tmp_path / "mine.toml")
    return tmp_path


def test_confirm_writes_registers_and_records_stage_2_before_any_run(stage1):
    from cemctl.services.claim_plans import read_registry

    res = cli(stage1, "confirm", "mine", "--scale", "tiny", "--max-seeds", "8")
    assert res.returncode == 0, res.output
    path = stage1 / "mine-confirm.toml"
    doc = tomllib.loads(path.read_text())
    assert doc["confirm"]["of"] == "mine" and doc["confirm"]["stage1_seeds"] == [0, 1, 2]
    seeds = doc["scale"]["tiny"]["seeds"]
    assert seeds[0] == 3 and 3 <= len(seeds) <= 8 and not set(seeds) & {0, 1, 2}
    diff, pref = doc["claim"][0]["part"]
    assert diff["rates"] == {"nano": [BEST["cem"], BEST["llama"]]} and diff["variance"] == "welch"
    assert diff["margin"] == pytest.approx(0.01 * 1.5, rel=0.02)  # 1% of Llama's loss at its rate, in nats
    assert pref["statistic"] == "lr_optimum" and pref["rates"] == {"nano": [BEST["cem"], BEST["llama"]]}
    cells = list(zip(doc["zip"][0]["model.attention"], doc["zip"][0]["train.lr"]))
    assert sorted(cells) == sorted([("cem", 0.0014), ("llama", 0.0028), ("cem", 0.0028), ("llama", 0.0014)])
    assert "registered before any of its runs trained" in res.stdout and "run-hours" in res.stdout
    [line] = [r for r in read_registry(stage1 / "runs") if r["experiment"] == "mine-confirm"]
    assert {p["finished"] for p in line["parts"]} == {0} and line["grid_text"] == path.read_text()
    # the page: stage 2, not run yet, stage 1 beside it
    res = cli(stage1, "claims", "--out", str(stage1 / "c"))
    assert res.returncode == 0, res.output
    parts = pd.read_csv(stage1 / "c" / "claims.csv").set_index("part")
    row = parts.loc["CEM attention - Llama, each at its own rate"]
    assert (row["stage"], row["verdict"], row["confirmed_by"]) == ("stage 2", "not run", "mine-confirm")
    assert row["stage1_effect"] == pytest.approx(GAP, abs=0.01)
    # what decides it is the registered loop, not the stage-1 grid again (the page said `cemctl launch mine`)
    assert "to decide more: cemctl launch mine-confirm --scale tiny --until-decided" in res.stdout, res.stdout
    assert "cemctl launch mine --scale" not in res.stdout
    # a second confirm of the same design: the same file, written again identically, nothing replaced
    again = cli(stage1, "confirm", "mine", "--scale", "tiny", "--max-seeds", "8")
    assert again.returncode == 0, again.output


def test_stage_2_is_decided_on_its_fresh_seeds_and_is_confirmatory(stage1):
    assert cli(stage1, "confirm", "mine", "--scale", "tiny", "--max-seeds", "6").returncode == 0
    runs = _finish(stage1, stage1 / "mine-confirm.toml", "--scale", "tiny")
    assert {r["axes"]["train.seed"] for r in runs} == set(range(3, 3 + len({r["axes"]["train.seed"] for r in runs})))
    res = cli(stage1, "claims", "--out", str(stage1 / "c"), env={"COLUMNS": "160"})
    assert res.returncode == 0, res.output
    parts = pd.read_csv(stage1 / "c" / "claims.csv").set_index("part")
    diff = parts.loc["CEM attention - Llama, each at its own rate"]
    assert diff["stage"] == "stage 2" and diff["label_holm"] == "higher" and diff["verdict_holm"] == "holds"
    assert diff["effect"] == pytest.approx(GAP, abs=0.01) and diff["declared"].startswith("confirmatory")
    assert diff["rates"] == "0.0014 / 0.0028" and diff["stage1_rates"] == "0.0014 / 0.0028"
    used = diff["runs"].split(",")
    seeds = {r["run_id"]: r["axes"]["train.seed"] for r in runs}
    assert used and all(seeds.get(rid, -1) >= 3 for rid in used)  # stage 2's own runs only: no stage-1 seed
    pref = parts.loc["CEM attention prefers a lower rate than Llama"]
    # the rates are an octave apart: CEM loses 0.05 nats going up from its optimum, Llama as much going down:
    # [cem(lo) - cem(hi)] - [llama(lo) - llama(hi)] = -0.05 - 0.05
    assert pref["effect"] == pytest.approx(-0.1, abs=0.01) and pref["label_holm"] == "lower"
    assert pref["verdict_holm"] == "holds" and pref["unit"] == "nats" and pref["stage1_effect"] == -1.0
    assert "confirmatory" in res.stdout
    md = (stage1 / "c" / "claims.md").read_text()
    assert "## Stage 1 beside stage 2" in md and "**holds**" in md


def test_a_stage_1_seed_is_never_trained_again(stage1):
    res = cli(stage1, "confirm", "mine", "--scale", "tiny", "--seeds", "2,3,4", subprocess=True)
    assert res.returncode == 2 and "would train seed 2 again, which chose the rates in stage 1" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (stage1 / "mine-confirm.toml").exists()
    assert cli(stage1, "confirm", "mine", "--scale", "tiny", "--max-seeds", "4").returncode == 0
    res = cli(stage1, "launch", str(stage1 / "mine-confirm.toml"), "--scale", "tiny", "--seeds", "1,5,6",
              "--dry-run", subprocess=True)
    assert res.returncode == 2 and "would train seed 1 again" in res.output
    grid = stage1 / "mine-confirm.toml"  # the grid edited to a stage-1 seed (before any run finished)
    text = grid.read_text()
    grid.write_text(text.replace("seeds = [3,", "seeds = [0,").replace("seeds = [3, ", "seeds = [0, "))
    res = cli(stage1, "plan", str(grid), "--scale", "tiny", subprocess=True)
    assert res.returncode == 2 and "would train seed 0 again" in res.output


def test_a_design_changed_after_one_of_its_runs_finished_is_refused_before_anything_is_planned(stage1):
    from cemctl.db import get_experiment, open_db

    assert cli(stage1, "confirm", "mine", "--scale", "tiny", "--max-seeds", "4").returncode == 0
    grid = stage1 / "mine-confirm.toml"
    runs = _finish(stage1, grid, "--scale", "tiny")
    registered = grid.read_text()
    grid.write_text(registered.replace("expect = \"higher\"", "expect = \"close\""))
    before = sorted(p.name for p in (stage1 / "runs").iterdir())
    res = cli(stage1, "launch", str(grid), "--scale", "tiny", subprocess=True)
    assert res.returncode == 2, res.output
    assert f"the confirmation design 'mine-confirm' changed after {len(runs)} of its runs finished" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert sorted(p.name for p in (stage1 / "runs").iterdir()) == before
    exp = get_experiment(open_db(f"sqlite:///{stage1 / 'results.db'}"), "mine-confirm")
    assert exp.grid_text == registered  # nothing was planned from the edited file


def test_a_budget_that_buys_too_few_seeds_and_a_rate_at_the_edge_are_refused(stage1, tmp_path):
    # 4 cells x 1 minute a run: 3 seeds need 0.2 run-hours
    res = cli(stage1, "confirm", "mine", "--scale", "tiny", "--budget-hours", "0.1", subprocess=True)
    assert res.returncode == 2 and "buy 1 seed of the 4 cells" in res.output
    res = cli(stage1, "confirm", "mine", "--scale", "tiny", "--budget-hours", "0.25")
    assert res.returncode == 0, res.output
    doc = tomllib.loads((stage1 / "mine-confirm.toml").read_text())
    assert doc["scale"]["tiny"]["seeds"] == [3]  + [4, 5]  # 0.25 run-hours buy 3 seeds of 4 one-minute cells
    edge = tmp_path / "edge"
    edge.mkdir()
    (edge / "mine.toml").write_text(GRID.replace(f'"train.lr" = {RATES}', '"train.lr" = [0.0014, 0.002, 0.0028]'))
    _finish(edge, edge / "mine.toml")
    res = cli(edge, "confirm", "mine", "--scale", "tiny", subprocess=True)
    assert res.returncode == 2 and "arm 1's rate 0.0014 is the lowest of its profile" in res.output
    assert "extend the profile first, or pass --at-edge" in res.output
    assert cli(edge, "confirm", "mine", "--scale", "tiny", "--at-edge").returncode == 0


def test_a_ladder_trains_other_sizes_at_a_transferred_rate_and_never_decides_with_them(stage1):
    """`confirm --ladder micro`: every loss part's arms at micro too, at the rate chosen at nano scaled by 1/width
    (nano d 64 -> micro d 96: x 2/3, on the half-octave ladder), at nano's context length; the lr preference stays
    at nano. The page decides on nano alone and shows both rungs in the ladder, micro marked transferred."""
    res = cli(stage1, "confirm", "mine", "--scale", "tiny", "--max-seeds", "4", "--ladder", "micro")
    assert res.returncode == 0, res.output
    doc = tomllib.loads((stage1 / "mine-confirm.toml").read_text())
    assert doc["confirm"]["ladder"] == ["micro"] and doc["confirm"]["transfer"] == "width"
    diff, pref = doc["claim"][0]["part"]
    assert diff["rates"] == {"nano": [0.0014, 0.0028], "micro": [0.001, 0.002]}
    assert set(pref["rates"]) == {"nano"}
    cells = list(zip(doc["zip"][0]["model.size"], doc["zip"][0]["model.context_len"]))
    assert ("micro", 32) in cells and len(cells) == 6  # four at nano, two at micro: one context length
    runs = _finish(stage1, stage1 / "mine-confirm.toml", "--scale", "tiny")
    assert any(r["axes"].get("model.size") == "micro" for r in runs)
    res = cli(stage1, "claims", "--out", str(stage1 / "c"))
    assert res.returncode == 0, res.output
    row = pd.read_csv(stage1 / "c" / "claims.csv").set_index("part").loc["CEM attention - Llama, each at its own rate"]
    assert row["sizes"] == 2 and row["effect"] == pytest.approx(GAP, abs=0.01)  # nano's: the decision
    ladder = pd.read_csv(stage1 / "c" / "claims_ladder.csv")
    assert list(ladder["size"]) == ["nano", "micro"] and list(ladder["rate"]) == ["chosen", "transferred (width)"]
    assert "rate transferred (width)" in (stage1 / "c" / "claims.md").read_text()
    res = cli(stage1, "confirm", "mine", "--scale", "tiny", "--ladder", "huge", "-o", str(stage1 / "x.toml"),
              subprocess=True)
    assert res.returncode == 2 and "--ladder" in res.output and not (stage1 / "x.toml").exists()


E2E = '''
[axes]
"model.attention" = ["llama", "cem"]
"model.size" = ["nano", "micro"]
"train.lr" = [0.01, 0.03, 0.1]

[[claim]]
id = "E"
statement = "CEM attention is close to Llama attention at its best rate, at two sizes"
[[claim.part]]
name = "CEM attention - Llama, each at its own rate"
arms = [{ "model.attention" = "cem" }, { "model.attention" = "llama" }]
expect = "close"
margin = "5%"
at = "own_optimum"
'''


@pytest.mark.slow
def test_a_claim_of_our_own_goes_through_stage_1_stage_2_and_a_two_rung_ladder_with_real_runs(tmp_path):
    """Real tiny runs on the CPU, the commands a user types: a grid of our own (Llama vs CEM attention, nano and
    micro at one context length, three rates, two seeds: 24 runs) is launched (stage 1); `cemctl claims` shows the
    part exploratory with its ladder; `cemctl confirm` writes and registers stage 2 (each arm at its chosen rate per
    size, fresh seeds); `launch --until-decided` trains it in rounds of its registered seeds; `cemctl claims`
    then shows the part as stage 2, confirmatory, with stage 1 beside it and the two-rung ladder (the gap per size,
    its slope per doubling of parameters with an interval, the Llama compute equivalent)."""
    text = tiny_grid("own", seeds="[0, 1]", extra=E2E).replace('"model.size" = "nano"\n', "")
    grid = tmp_path / "own.toml"
    grid.write_text(text)
    res = cli(tmp_path, "launch", str(grid), "--workers", "2", subprocess=True, timeout=1500)
    assert res.returncode == 0, res.output
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c1"))
    assert res.returncode == 0, res.output
    first = pd.read_csv(tmp_path / "c1" / "claims.csv").iloc[0]
    assert first["stage"] == "stage 1" and first["verdict"] == "inconclusive" and math.isnan(first["p"])
    assert "exploratory" in res.stdout and "cemctl confirm own --scale tiny" in res.stdout
    assert len(pd.read_csv(tmp_path / "c1" / "claims_ladder.csv")) == 2  # stage 1's gap at each size
    res = cli(tmp_path, "confirm", "own", "--scale", "tiny", "--max-seeds", "3", "--at-edge")
    assert res.returncode == 0, res.output
    doc = tomllib.loads((tmp_path / "own-confirm.toml").read_text())
    assert doc["scale"]["tiny"]["seeds"] == [2, 3, 4] and set(doc["claim"][0]["part"][0]["rates"]) == {"nano", "micro"}
    res = cli(tmp_path, "launch", "own-confirm", "--scale", "tiny", "--until-decided", "--workers", "2",
              subprocess=True, timeout=1500)
    assert res.returncode == 0, res.output
    assert "stopped after" in res.stdout
    res = cli(tmp_path, "claims", "--out", str(tmp_path / "c2"), env={"COLUMNS": "160"})
    assert res.returncode == 0, res.output
    row = pd.read_csv(tmp_path / "c2" / "claims.csv").iloc[0]
    assert row["stage"] == "stage 2" and row["declared"].startswith("confirmatory") and row["n"] == 3
    assert math.isfinite(row["effect"]) and math.isfinite(row["stage1_effect"])
    assert row["sequential"] == "1 look at 3 of 3 seeds"
    from cemctl.db.engine import open_existing_db
    from cemctl.records import load_records

    frame = load_records(open_existing_db(f"sqlite:///{tmp_path / 'results.db'}"), None).frame()
    seed_of = dict(zip(frame["run_id"], frame["train.seed"]))
    assert {int(seed_of[r]) for r in row["runs"].split(",")} == {2, 3, 4}  # fresh seeds only
    ladder = pd.read_csv(tmp_path / "c2" / "claims_ladder.csv")
    assert list(ladder["size"]) == ["nano", "micro"] and ladder["stage"].eq("stage 2").all()
    assert ladder["params_non_embedding"].is_monotonic_increasing
    assert ladder.loc[0, "slope_low"] < ladder.loc[0, "slope_per_doubling"] < ladder.loc[0, "slope_high"]
    # the compute equivalent where Llama's loss falls with compute from nano to micro (six steps may not show it)
    falls = ladder.loc[0, "llama_per_compute_doubling"] < 0
    assert ladder["compute_x"].notna().all() == falls
    md = (tmp_path / "c2" / "claims.md").read_text()
    assert "confirmatory" in md and "## The size ladder (directional)" in md and "## Stage 1 beside stage 2" in md
