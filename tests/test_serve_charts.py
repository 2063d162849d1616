"""The dashboard's charts and tables as the report draws them (issue 46 item 3: one presentation) and as a researcher
reads them (issue 48): names, colours, whiskers and the default view are the report's; integer and learning-rate
axes get their own ticks; more colours than one can tell apart become panels; curves are smoothed as the report
smooths them; arms are named short, in a visible order; runs in flight count as `status` counts them; a run's time
is one number everywhere. On a grid of our own (the attention step size against T, at five learning rates), planned
and finished without training. Library level: the pages through `Dashboard.handle`."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest

from tests.helpers import cli, finish_run, plan_ids, tiny_grid

LRS = [0.0005, 0.001, 0.002, 0.004, 0.008]
OWN = tiny_grid("own", seeds="[0, 1]", extra=f'''"model.attention" = "cem"

[axes]
"model.attn_step_size" = [0.5, 1.0]
"model.attn_steps" = [1, 2]
"train.lr" = {LRS}
''').replace('figure = "curves"', 'figure = "curves"\nx = "model.attn_steps"')


def _loss(cfg: dict, seed: int) -> float:
    """A test loss with a known optimum per arm: lr 0.002 for T=1, 0.001 for T=2; step size 0.5 costs 0.05."""
    best = 0.002 if cfg["model"]["attn_steps"] == 1 else 0.001
    return 1.5 + 0.1 * abs(math.log2(cfg["train"]["lr"] / best)) + (0.05 if cfg["model"]["attn_step_size"] == 0.5
                                                                     else 0) + 0.01 * seed


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    where = tmp_path_factory.mktemp("own")
    _, ids = plan_ids(where, OWN, "own")
    for rid in ids:
        cfg = json.loads((where / "runs" / rid / "config.json").read_text())
        finish_run(where / "runs" / rid, test_loss=_loss(cfg, cfg["train"]["seed"]), steps=40)
    assert cli(where, "sync").returncode == 0
    return where


def _app(where: Path):
    from cemctl.serve.app import Dashboard
    from cemctl.services.dashboard import open_source

    return Dashboard(open_source(f"sqlite:///{where / 'results.db'}", where / "runs"), log=print)


def _json(app, path: str) -> dict:
    resp = app.handle("GET", path)
    assert resp.status == 200, resp.body[:400]
    return json.loads(resp.body)


def _status(where: Path) -> list[dict]:
    res = cli(where, "status", "own", "--json")
    assert res.returncode == 0, res.output
    return json.loads(res.stdout)["experiments"][0]["runs"]


def test_the_metric_chart_is_the_reports_figure(own):
    """main drew its own chart: a 10-colour cycle by series order (the report: its palette, Llama pink), whiskers of a
    95% t interval (the report: +-1 s.d.), every (arm, rate) a series (the report: each arm at its chosen rate)."""
    from cemctl.db.engine import open_readonly_db
    from cemctl.grid.spec import options_from_text
    from cemctl.records import load_records
    from cemctl.report.build import ExperimentInfo, figure_runs, report_palette
    from cemctl.report.generic import metric_points

    chart = _json(_app(own), "/experiments/own/metric.json")
    recs = load_records(open_readonly_db(f"sqlite:///{own / 'results.db'}"), "own")
    meta = recs.experiments["own"]
    info = ExperimentInfo("own", meta.figure, options=options_from_text(meta.grid_text, meta.grid_path),
                          axes=meta.axes)
    frame = recs.frame()
    shown, choice = figure_runs(info, frame)
    pal = report_palette(info, frame)
    pts = metric_points(shown, x=pal.x, metric="test_loss", order=meta.axes, palette=pal)
    assert choice is not None and chart["chosen_rates"] and chart["x"] == pal.x == "model.attn_steps"
    drawn = {s["label"].rsplit(", n=", 1)[0]: s for c in chart["charts"] for s in c["series"]}
    assert set(drawn) == {look.label for look in pts.looks.values()}
    from cemctl.report.style import hex_of

    for look in pts.looks.values():
        assert drawn[look.label]["color"] == hex_of(look.color), look.label
    # whiskers: mean +- 1 s.d. of the chosen rate's seeds, from the losses themselves (T=1 at 0.002, T=2 at 0.001)
    runs = _status(own)
    for series in drawn.values():
        size = 0.5 if "0.5" in series["label"] else 1.0
        points = [p for p in zip(series["y"], series["lo"], series["hi"], series["n"]) if p[0] is not None]
        for steps, (y, lo, hi, n) in zip((1, 2), points):  # each series at its own (dodged) x, left to right
            best = 0.002 if steps == 1 else 0.001
            losses = [r["test_loss"] for r in runs if r["axes"]["model.attn_step_size"] == size
                      and r["axes"]["model.attn_steps"] == steps and r["axes"]["train.lr"] == best]
            mean, sd = statistics.mean(losses), statistics.stdev(losses)
            assert n == 2 and y == pytest.approx(mean) and (lo, hi) == (pytest.approx(mean - sd), pytest.approx(mean + sd))
    assert "1 s.d." in chart["note"]


def test_axes_get_their_own_ticks_and_a_sweep_a_log_x(own):
    """main: an integer axis ticked 1.05 ... 1.95 and a log lr axis labelled 3 of its gridlines; an lr sweep
    defaulted to x = attn_steps."""
    app = _app(own)
    steps = _json(app, "/experiments/own/metric.json")["charts"][0]
    assert steps["ticks"] == [1.0, 2.0] and steps["tick_labels"] == ["1", "2"] and not steps["log_x"]
    every = _json(app, "/experiments/own/metric.json?rates=all")
    assert every["x"] == "train.lr" and not every["chosen_rates"]
    for chart in every["charts"]:
        assert chart["log_x"] and chart["ticks"] == LRS and chart["tick_labels"] == [str(x) for x in LRS]
    linear = _json(app, "/experiments/own/metric.json?rates=all&logx=0")["charts"][0]
    assert not linear["log_x"]


def test_more_colours_than_one_tells_apart_become_panels(own):
    """main drew fig4's 18 and 27 series in a repeating 10-colour cycle."""
    from cemctl.services.dashboard.charts import MAX_HUES

    chart = _json(_app(own), "/experiments/own/metric.json?rates=all&x=model.attn_steps")  # 2 step sizes x 5 rates
    assert chart["panel"] is not None and len(chart["charts"]) >= 2 and "one panel per" in chart["note"]
    for c in chart["charts"]:
        assert 1 < len({s["color"] for s in c["series"]}) <= MAX_HUES


def test_curves_are_smoothed_as_the_report_smooths_and_show_validation_points(own):
    """main had no smoothing (the report smooths over ~5% of the steps) and no validation points in the curves."""
    import numpy as np

    from cemctl.report.style import smooth_window

    app = _app(own)
    off = _json(app, "/experiments/own/curves.json?smooth=off")["charts"][0]
    report = _json(app, "/experiments/own/curves.json")["charts"][0]
    first = next(s for s in off["series"] if s.get("legend") is not False)
    same = next(s for s in report["series"] if s["label"] == first["label"])
    raw = np.array([v for v in first["y"] if v is not None])
    smoothed = np.array([v for v in same["y"] if v is not None])
    import pandas as pd

    window = smooth_window(40)  # the report's: a centred rolling mean over 5% of a curve's points
    assert window == 2 and len(raw) == len(smoothed) == 40
    expected = pd.Series(raw).rolling(window, center=True, min_periods=1).mean().to_numpy()
    assert smoothed == pytest.approx(expected) and not np.allclose(smoothed, raw)
    assert any(s.get("legend") is False and s["color"] == first["color"] for s in report["series"])  # its points
    assert report.get("extra_legend") and app.handle("GET", "/experiments/own/curves.json?smooth=bogus").status == 400


def test_arms_are_named_short_with_the_numbers_first_in_the_grids_order(own):
    """main named arms by every varying key (75 characters in the demo, 130 in fig3a), their config columns first
    (the numbers behind a scrollbar), in no visible order."""
    page = _app(own).handle("GET", "/experiments/own/arms").body.decode()
    head = re.search(r"<thead>.*?</thead>", page, re.S).group(0)
    headers = [re.sub(r"<[^>]+>|[▲▼]", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", head, re.S)]
    assert headers[1:5] == ["arm", "seeds", "test mean", "s.d."]  # the numbers right after the name
    rows = re.findall(r'<td class="name"><a [^>]*title="([^"]*) \(arm [0-9a-f]+; its runs\)">([^<]*)</a>', page)
    assert len(rows) == 20
    labels, names = [r[0] for r in rows], [r[1] for r in rows]
    assert len(set(names)) == 20 and all(n.startswith("attention T=") for n in names)  # as the legends name T
    order = [tuple(float(v) for v in re.findall(r"=([\d.]+)", lb)) for lb in labels]
    assert order == sorted(order)  # attn_step_size, attn_steps, lr: the grid's axes
    # an arm has one name: the report's arms table names it as the dashboard does (main: the full label there)
    from cemctl.db.engine import open_readonly_db
    from cemctl.grid.spec import options_from_text
    from cemctl.records import load_records
    from cemctl.report.build import ExperimentInfo, figure_runs, generic_parts

    recs = load_records(open_readonly_db(f"sqlite:///{own / 'results.db'}"), "own")
    meta = recs.experiments["own"]
    info = ExperimentInfo("own", meta.figure, options=options_from_text(meta.grid_text, meta.grid_path),
                          axes=meta.axes)
    frame = recs.frame()
    report = generic_parts(info, frame, None, include_curves=False, shown=figure_runs(info, frame)[0]).tables[0].frame
    assert set(report["arm"]) == set(names)


def test_a_bad_where_keeps_the_page_and_its_filter_box(own):
    """main replaced the whole page, filter box included, with a 400."""
    resp = _app(own).handle("GET", "/experiments/own?where=bogus%3C1")
    page = resp.body.decode()
    assert resp.status == 400 and 'id="error-message"' in page and "bogus" in page
    assert 'value="bogus&lt;1"' in page and 'id="runs"' in page and 'id="metric-chart"' in page
    assert re.search(r'data-fragment="/experiments/own/live"', page)  # the fragments load without the bad where


def test_a_run_finished_in_its_folder_counts_in_the_arms_and_the_chart_as_status_counts_it(tmp_path):
    """main's arms table read the database only: a run its folder shows done said 0/2 while status said done."""
    _, ids = plan_ids(tmp_path, tiny_grid("live", seeds="[0, 1]"), "live")
    finish_run(tmp_path / "runs" / ids[0], test_loss=1.25)
    assert cli(tmp_path, "sync").returncode == 0
    app = _app(tmp_path)
    assert "1/2" in app.handle("GET", "/experiments/live/arms").body.decode()
    finish_run(tmp_path / "runs" / ids[1], test_loss=1.75)  # ended in its folder; the database does not know yet
    arms = app.handle("GET", "/experiments/live/arms").body.decode()
    chart = _json(app, "/experiments/live/metric.json")
    runs = cli(tmp_path, "status", "live", "--json", "--no-sync")
    assert "2/2" in arms and "1.5000" in arms  # the mean of 1.25 and 1.75
    series = chart["charts"][0]["series"][0]
    assert series["n"] == [2] and series["y"] == [pytest.approx(1.5)], series
    assert runs.returncode == 0


def test_the_parts_a_page_asks_for_at_one_moment_show_one_read_of_the_folders(tmp_path):
    """The page's clock asks for its runs table, its arms table and its metric chart at one moment (X-Cemctl-Moment);
    a run that ends in its folder between their requests is shown by none or by all (main read the folders once per
    request, and each part on its own timer: the arms table said 2/2 while the runs table beside it said running)."""
    _, ids = plan_ids(tmp_path, tiny_grid("live", seeds="[0, 1]"), "live")
    finish_run(tmp_path / "runs" / ids[0], test_loss=1.25)
    assert cli(tmp_path, "sync").returncode == 0
    app = _app(tmp_path)

    def states(page: str) -> list[str]:
        return re.findall(r'<tr class="st-row-(\w+)"', page)

    def seeds(moment: str) -> list[int]:
        resp = app.handle("GET", "/experiments/live/metric.json", moment=moment)
        return json.loads(resp.body)["charts"][0]["series"][0]["n"]

    live = app.handle("GET", "/experiments/live/live", moment="p:1").body.decode()
    finish_run(tmp_path / "runs" / ids[1], test_loss=1.75)  # ends between the requests of one moment
    arms = app.handle("GET", "/experiments/live/arms", moment="p:1").body.decode()
    assert states(live).count("done") == 1 and ">1/2<" in arms and seeds("p:1") == [1]  # the moment before it ended
    live = app.handle("GET", "/experiments/live/live", moment="p:2").body.decode()
    arms = app.handle("GET", "/experiments/live/arms", moment="p:2").body.decode()
    assert states(live) == ["done", "done"] and ">2/2<" in arms and seeds("p:2") == [2]  # the next: all show it
    assert ">2/2<" in app.handle("GET", "/experiments/live/arms").body.decode()  # no moment: read now


def test_a_runs_time_is_one_number_everywhere(tmp_path):
    """main: one run's time read 3m38s in launch, 3m21s in status and 198.8 s in the report (the orchestrator's
    clock, the events' and the trainer's)."""
    from cemctl.commands.views.launch import LogLaunchView
    from cemctl.executors.base import Job
    from cemctl.executors.local import JobStatus
    from cemctl.report.arms import arms_display, arms_table, with_arms
    from cemctl.report.frame import runs_frame

    _, ids = plan_ids(tmp_path, tiny_grid("clock", seeds="[0]"), "clock")
    run = tmp_path / "runs" / ids[0]
    finish_run(run, test_loss=1.5)
    result = json.loads((run / "result.json").read_text())
    result["wall_time_s"] = 201.0  # the trainer trained 3m21s; its events are 1 s apart, the launch saw 3m38s
    (run / "result.json").write_text(json.dumps(result))
    assert cli(tmp_path, "sync").returncode == 0
    row = json.loads(cli(tmp_path, "status", "clock", "--json").stdout)
    assert row["experiments"][0]["runs"][0]["elapsed_s"] == 201.0
    table = cli(tmp_path, "status", "clock", env={"COLUMNS": "160"}).stdout
    assert "3m21s" in table
    live = _app(tmp_path).handle("GET", "/experiments/clock/live").body.decode()
    arms = _app(tmp_path).handle("GET", "/experiments/clock/arms").body.decode()
    assert ">3m21s<" in live and ">3m21s<" in arms
    lines: list[str] = []
    view = LogLaunchView(lines.append)
    view.set_runs({ids[0]: {}}, [ids[0]])
    import time

    st = JobStatus(job=Job(ids[0], run), state="done", started_time=time.time() - 218, ended_time=time.time())
    assert view.ended_line(st).endswith("in 3m21s")
    frame = with_arms(runs_frame([{"run_id": ids[0], "state": "done", "config": json.loads(
        (run / "config.json").read_text()), "test_loss": 1.5, "wall_time_s": 201.0}]))
    assert arms_display(arms_table(frame), "test_loss")["wall time"].iloc[0] == "3m21s"
