"""Arm identity (`cem_core.arms`): the whole config minus the seed; two runs differing in any other key are
never one arm, in the identity, in the labels or in any figure a report draws."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from cem_core.arms import ArmLabelCollision, arm_id, format_value, varying_keys
from cem_core.config import RunConfig, field_names, flatten, resolve
from cemctl.grid.kinds import FIGURE_KINDS
from tests.helpers import cli, finish_run


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 0.5
    return f"{value}-other"


BASE = flatten(resolve(RunConfig.from_dict({"model.attention": "cem", "model.kq_diagonal": "shared"})).to_dict())


def test_two_configs_differing_in_any_single_key_are_two_arms():
    from cemctl.records.labels import arm_labels

    for key in [k for k in field_names() if k != "train.seed"]:
        other = {**BASE, key: _other(BASE[key])}
        assert arm_id(other) != arm_id(BASE), key
        assert varying_keys([BASE, other]) == [key]
        ids, labels = arm_labels([BASE, other])
        assert ids[0] != ids[1] and labels[0] != labels[1], key
        assert all(lab.startswith(key.split(".")[-1] + "=") for lab in labels), (key, labels)


def test_seeds_and_declared_nuisance_keys_do_not_make_arms():
    seeds = [{**BASE, "train.seed": s} for s in range(3)]
    assert len({arm_id(c) for c in seeds}) == 1
    cache = {**BASE, "data.cache_dir": "/elsewhere"}
    assert arm_id(cache) != arm_id(BASE)
    assert arm_id(cache, nuisance=("train.seed", "data.cache_dir")) == arm_id(BASE, nuisance=("train.seed", "data.cache_dir"))


def test_labels_name_the_varying_keys_in_grid_order_and_values_as_grids_write_them():
    configs = [{**BASE, "model.attn_step_size": eta, "model.attn_steps": t, "train.seed": s}
               for eta in (0.5, 1.0) for t in (1, 2, 4) for s in (0, 1)]
    from cemctl.records.labels import arm_labels

    _, labels = arm_labels(configs, order=["model.attn_steps", "model.attn_step_size"])
    assert labels[0] == "attn_steps=1, attn_step_size=0.5"
    assert len(set(labels)) == 6 == len({arm_id(c) for c in configs})
    assert labels[0] == labels[1]  # the seed is not part of an arm
    assert format_value(1.0) == "1" and format_value(0.002) == "0.002" and format_value(True) == "true"
    assert format_value(1e-7) != format_value(1.0000001e-7)  # never two values under one text


def _twin(runs, curves, key="model.init_std", other=_other):
    """Every run once more, in an arm that differs only in `key` (another run id, a slightly worse loss)."""
    import pandas as pd

    twin = runs.copy()
    twin[key] = [other(v) for v in twin[key]]
    twin["run_id"] = [f"{r}x" for r in twin["run_id"]]
    for col in ("test_ppl", "val_ppl"):
        if col in twin:
            twin[col] = twin[col] * 1.05
    for col in ("test_loss", "val_loss"):
        if col in twin:
            twin[col] = twin[col] + math.log(1.05)
    if "test_rmse" in twin:
        twin["test_rmse"] = twin["test_rmse"] * 1.05
    tc = curves.copy()
    tc["run_id"] = [f"{r}x" for r in tc["run_id"]]
    return pd.concat([runs, twin], ignore_index=True), pd.concat([curves, tc], ignore_index=True)


def _row_sets(parts):
    return {t.name: [tuple(map(str, r)) for r in t.frame.itertuples(index=False)] for t in parts.tables}


def _assert_distinct(parts):
    """No table of the report shows two identical rows (two arms that read as one)."""
    for name, rows in _row_sets(parts).items():
        assert len(rows) == len(set(rows)), f"table {name} shows two arms as identical rows"


def _frames(kind):
    from tests.synthetic import synthetic_frames, synthetic_from_grid

    if kind == "gp_table":
        return synthetic_from_grid(str(Path(__file__).resolve().parents[1] / "experiments" / "gp.toml"), "tiny",
                                   failures=False)
    return synthetic_frames(kind, sizes=("nano",), seeds=(0, 1), steps=6, failures=False)


def _legend_labels(part) -> set[str]:
    """What names the series of a figure: its legend entries, and the arm names of a dot plot's y axis."""
    return {t.get_text() for leg in part.figure.legends for t in leg.get_texts()} | \
        {t.get_text() for ax in part.figure.axes if ax.get_legend() for t in ax.get_legend().get_texts()} | \
        {t.get_text() for ax in part.figure.axes if ax.get_ylabel() in ("arm", "arm (what differs from the defaults)")
         for t in ax.get_yticklabels()}


TWIN_KEYS = ["model.init_std", "model.attn_precond_rank", "model.attn_start", "model.attn_step_size"]


@pytest.fixture
def plugin_twins():
    """A plugin's preconditioner beside each built-in one, labelled as the built-in one is (`<name>_mine`, label
    'diag' beside 'diag'): registered in this process, removed after."""
    from cem_core import variants as V
    from cem_core.spec import PreconditionerSpec, register

    names = list(V.PRECONDITIONERS.names())
    for name in names:
        register(PreconditionerSpec(f"{name}_mine", "mine:Precond", f"a plugin's {name}",
                                    V.PRECONDITIONERS.spec(name).label, params=lambda n, width, rank: n, plugin="mine"))
    try:
        yield lambda v: f"{v}_mine"
    finally:  # leave the registry as every other test expects it
        for table in (V.PRECONDITIONERS._items, V.PRECONDITIONERS._specs, V.PRECONDITIONERS._descriptions):
            for name in names:
                table.pop(f"{name}_mine", None)


PLUGIN_TWINS = [("plugins", lambda v: "scalar_precond"), ("model.attn_precond", None), ("model.mlp_precond", None)]


def _energy_lines(run_ids):
    """Energy lines of two evaluations per run: two attention layers, t = 0..2, descending."""
    import pandas as pd

    rows = [{"run_id": rid, "step": step, "tokens": 100 * step, "layer": layer, "sublayer": "attention", "t": t,
             "energy": 1.0 - 0.1 * t - 0.01 * i + 0.001 * step, "descent_frac": 0.5 + 0.1 * t}
            for i, rid in enumerate(run_ids) for step in (10, 20) for layer in (0, 1) for t in range(3)]
    return pd.DataFrame(rows)


def test_the_energy_figures_draw_two_arms_differing_in_one_key_apart(plugin_twins):
    """The energy figures (one column per run, named by the one labelling path) and their table tell twins apart,
    for every key of TWIN_KEYS and PLUGIN_TWINS."""
    for key, other in [(k, _other) for k in TWIN_KEYS] + PLUGIN_TWINS:
        _check_energy_twins(key, other or plugin_twins)


def _check_energy_twins(key, other):
    from cemctl.report.figures import energy

    runs, curves = _frames("recursion")
    runs = runs[runs["model.attention"].eq("cem") & runs["model.attn_steps"].eq(2)
                & runs["model.attn_precond"].eq("diag")].head(1)
    twins, _ = _twin(runs, curves[curves["run_id"].isin(runs["run_id"])], key, other)
    parts = energy.render(twins, _energy_lines(twins["run_id"]))
    assert [p.name for p in parts.figures] == ["energy_descent", "energy_training"]
    table = parts.tables[0].frame
    assert table.groupby("run_id")["series"].nunique().eq(1).all() and table["series"].nunique() == 2
    for part in parts.figures:
        titles = [ax.get_title() for ax in part.figure.axes if ax.get_title()]
        assert len(titles) == 2 and len(set(titles)) == 2, titles  # a column per run, named apart
        part.figure.clear()


def test_the_test_time_recursion_figure_draws_two_arms_differing_in_one_key_apart():
    """The regression of issue 32: two arms differing only in the precond rank were drawn as one zig-zag line."""
    for key, values in [("model.attn_precond_rank", (4, 16)), ("model.attn_start", ("h", "norm")),
                        ("model.attn_step_size", (0.5, 1.0))]:
        _check_test_time_twins(key, values)


def _check_test_time_twins(key, values):
    import pandas as pd

    from cemctl.report.figures import test_time
    from cemctl.report.frame import runs_frame

    base = {"model": {"attention": "cem", "attn_steps": 2, "attn_precond": "diag_lowrank", "size": "nano"}}
    records, evals = [], []
    for i, v in enumerate(values):
        for seed in (0, 1):
            rid = f"r{i}{seed}"
            cfg = {**base, "model": {**base["model"], key.split(".")[1]: v}, "train": {"seed": seed}}
            records.append({"run_id": rid, "state": "done", "config": cfg, "test_ppl": 10.0 + i, "test_loss": 2.3})
            for t in (1, 2, 4):
                evals.append({"run_id": rid, "attn_steps": t, "mlp_steps": 1, "eval_steps": t, "sublayer": "attention",
                              "test_loss": 2.3 + i + t / 10, "test_ppl": 10.0 + i + t, "test_tokens": 100,
                              "flops_per_token": 1000 * t, "trained_attn_steps": 2, "trained_mlp_steps": 1})
    parts = test_time.render(runs_frame(records), pd.DataFrame(evals))
    table = parts.tables[0].frame
    assert table["series"].nunique() == 2 and len(table) == 6  # 2 arms x 3 depths, never 3 rows of a merge
    labels = [lab for lab in _legend_labels(parts.figures[0]) if "n=" in lab]
    assert len(labels) == 2 and all(key.split(".")[-1].split("_")[-1] in lab or "diag" in lab or "=" in lab
                                    for lab in labels), labels
    assert table.groupby("series")["test ppl (mean)"].apply(list).map(len).tolist() == [3, 3]
    parts.figures[0].figure.clear()


def test_the_check_catches_a_figure_kind_that_would_merge():
    """A figure naming its series by the paper's variant alone would show the twins as one row: the check fails."""
    from cemctl.report.aggregate import aggregate_seeds, series_labels
    from cemctl.report.parts import ReportParts, TablePart

    runs, curves = _twin(*_frames("components"))
    agg = aggregate_seeds(runs, "test_ppl")
    naive = agg.assign(variant=agg["role"])[["variant", "model.size", "n"]]  # named by the variant alone
    with pytest.raises(AssertionError, match="two arms as identical rows"):
        _assert_distinct(ReportParts(tables=[TablePart("naive", naive, "")]))
    # the one labelling path names the twins apart (by the key that differs), and refuses two series it cannot
    names = series_labels(agg, ["model.size"])
    assert names.nunique() == agg.drop(columns=["run_ids", "seeds"]).astype(str).drop_duplicates(
        [c for c in agg.columns if "." in c and c != "model.size"]).shape[0]
    assert any("init_std=" in n for n in names)
    clash = agg.iloc[:2].copy()
    clash["model.init_std"] = [1, "1"]  # two values that print alike
    for col in [c for c in clash.columns if "." in c and c != "model.init_std"]:
        clash[col] = [clash[col].iloc[0]] * 2
    with pytest.raises(ArmLabelCollision):
        series_labels(clash, ["model.size"])


OWN_GRID = """seeds = [0, 1]
[experiment]
name = "own"
description = "step size x steps of CEM attention: a question the paper never asks"
x = "model.attn_steps"
[base]
"model.size" = "nano"
"model.attention" = "cem"
"data.tokenizer" = "byte"
"train.max_steps" = 40
[axes]
"model.attn_step_size" = [0.5, 1.0, 2.0]
"model.attn_steps" = [1, 2]
"""


def test_a_grid_of_your_own_is_reported_with_six_distinct_arms(tmp_path):
    (tmp_path / "own.toml").write_text(OWN_GRID)
    res = cli(tmp_path, "plan", str(tmp_path / "own.toml"), "--json")
    assert res.returncode == 0, res.output
    runs = json.loads(res.stdout)["runs"]
    assert len(runs) == 12
    for i, r in enumerate(runs):
        eta, t = r["axes"]["model.attn_step_size"], r["axes"]["model.attn_steps"]
        finish_run(tmp_path / "runs" / r["run_id"], test_loss=1.5 + eta / 10 + t / 100 + r["axes"]["train.seed"] / 1000)
    out = tmp_path / "report"
    res = cli(tmp_path, "report", "own", "--out", str(out), "--format", "png")
    assert res.returncode == 0, res.output
    import pandas as pd

    arms = pd.read_csv(out / "tables" / "arms.csv")
    assert len(arms) == 6 and arms["arm"].is_unique
    assert set(arms["arm"]) == {f"attn_step_size={e}, attn_steps={t}" for e in ("0.5", "1", "2") for t in (1, 2)}
    assert set(arms["seeds done"]) == {2} and set(arms["seeds planned"]) == {2}
    row = arms[arms["arm"].eq("attn_step_size=0.5, attn_steps=2")].iloc[0]
    assert row["test_loss mean"] == pytest.approx(1.5 + 0.05 + 0.02 + 0.0005)  # seeds 0 and 1
    assert row["test_loss 95% low"] < row["test_loss mean"] < row["test_loss 95% high"]
    for name in ("metric.png", "training_curves.png"):
        assert (out / "figures" / name).exists(), name
    index = (out / "index.md").read_text()
    assert index.index("arms") < index.index("training_curves")  # the arms table comes first
    # the index names an arm by the fewest keys that tell the arms apart, T as the legends write it (issue 48);
    # arms.csv keeps the full label
    assert re.search(r"\| attention T=1, attn_step_size=2 \|", index), index


def _twins(runs, curves, twins):
    """Every run once more per (key, other): each copy an arm that differs from its original in that key alone (run
    ids `<id>~<i>`, a slightly worse loss each)."""
    import pandas as pd

    all_runs, all_curves = [runs], [curves]
    for i, (key, other) in enumerate(twins, start=1):
        twin = runs.copy()
        twin[key] = [other(v) for v in twin[key]]
        twin["run_id"] = [f"{r}~{i}" for r in twin["run_id"]]
        worse = 1.0 + 0.01 * i
        for col in ("test_ppl", "val_ppl", "test_rmse"):
            if col in twin:
                twin[col] = twin[col] * worse
        for col in ("test_loss", "val_loss"):
            if col in twin:
                twin[col] = twin[col] + math.log(worse)
        tc = curves.copy()
        tc["run_id"] = [f"{r}~{i}" for r in tc["run_id"]]
        all_runs.append(twin)
        all_curves.append(tc)
    return pd.concat(all_runs, ignore_index=True), pd.concat(all_curves, ignore_index=True)


def test_no_figure_kind_merges_two_arms(plugin_twins):
    """Every figure kind, in one render pass each: every arm once more in a key no figure plots, and once more in a
    plugin's preconditioner labelled as the built-in one (issue 32)."""
    _check_no_merge([("model.init_std", _other), ("model.attn_precond", plugin_twins)])


@pytest.mark.slow
def test_no_figure_kind_merges_two_arms_in_any_of_the_keys(plugin_twins):
    """The same for every key of TWIN_KEYS and PLUGIN_TWINS at once (8 copies of every arm)."""
    _check_no_merge([(k, _other) for k in TWIN_KEYS] + [(k, other or plugin_twins) for k, other in PLUGIN_TWINS])


def _check_no_merge(twins):
    """Every arm once more per (key, other), each copy differing from its original in that key alone, drawn by every
    figure kind. Every table has a row for each copy; no drawn series stands for an arm and its copy (what each
    artist drew, `style.RUNS_ATTR`) unless that key is its axis; every legend names more series than before."""
    from cemctl.report.build import ExperimentInfo, render_parts
    from cemctl.report.style import RUNS_ATTR

    for kind in FIGURE_KINDS:
        runs, curves = _frames(kind)
        plain = render_parts(ExperimentInfo("x", kind), runs, curves)
        twin_runs, twin_curves = _twins(runs, curves, twins)
        twin = render_parts(ExperimentInfo("x", kind), twin_runs, twin_curves)
        _assert_distinct(twin)
        for name, rows in _row_sets(plain).items():  # every table has a row for each copy too
            assert len(_row_sets(twin)[name]) == (1 + len(twins)) * len(rows), (kind, name)
        arms = next(t for t in twin.tables if t.name == "arms")
        assert arms.frame["arm"].is_unique and arms.csv["arm"].is_unique, kind  # short names, full labels
        for key, _ in twins:
            assert any(f"{key.split('.')[-1]}=" in a for a in arms.csv["arm"]), (kind, key)
        by_name = {p.name: p for p in plain.figures}
        for part in twin.figures:
            drawn = part.figure.findobj(lambda a: hasattr(a, RUNS_ATTR))
            for artist in drawn:  # a series stands for one copy's runs (of one arm or several), never an arm with
                # another copy of it, unless the key that tells them apart is the axis it is drawn along
                copies = {r.split("~")[1] if "~" in r else "" for r in getattr(artist, RUNS_ATTR)}
                along = artist.axes.get_xlabel() if artist.axes is not None else ""
                apart = [twins[int(c) - 1][0].split(".")[-1] for c in copies if c]
                assert len(copies) == 1 or all(k in along for k in apart), (kind, part.name, copies, along)
            before = _legend_labels(by_name[part.name]) if part.name in by_name else set()
            if before and part.name not in ("gp_rmse",):
                assert len(_legend_labels(part)) > len(before), (kind, part.name)
        for part in plain.figures + twin.figures:
            part.figure.clear()
