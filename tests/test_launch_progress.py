"""What a foreground launch shows while its jobs run: the live table on a terminal, progress lines elsewhere."""

from __future__ import annotations

import json
import os
import time

import pytest
from rich.console import Console

from cemctl.commands.launch import selection_line
from cemctl.commands.views.launch import LiveLaunchView, LogLaunchView, read_progress
from cemctl.executors.base import Job
from cemctl.executors.local import JobStatus
from cemctl.services.launch.select import Selection


def _running_run(tmp_path, name="abc"):
    run = tmp_path / name
    run.mkdir()
    (run / "heartbeat.json").write_text(json.dumps({"time": time.time(), "step": 7, "total_steps": 20, "tokens": 7 * 640}))
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 7, "train_loss": 2.71828,
                                                   "tokens_per_s": 12345.0}) + "\n")
    return run


def test_live_view_shows_the_runs_in_flight_with_their_axes_step_loss_speed_and_eta(tmp_path):
    run = _running_run(tmp_path)
    statuses = [
        JobStatus(job=Job("abc0000000001", run), state="running", slot="cpu1", started_time=time.time() - 65),
        JobStatus(job=Job("def0000000002", tmp_path / "def"), state="failed", slot="cpu0", reason="Traceback\nRuntimeError: boom"),
        JobStatus(job=Job("ghi0000000003", tmp_path / "ghi"), state="queued"),
    ]
    console = Console(width=100, record=True, file=open(os.devnull, "w"))
    view = LiveLaunchView(console)
    view.set_runs({"abc0000000001": {"model.attn_steps": 2}, "def0000000002": {"model.attn_steps": 1},
                   "ghi0000000003": {"model.attn_steps": 1}}, ["abc0000000001", "def0000000002", "ghi0000000003"])
    console.print(view.render(statuses))
    text = console.export_text()
    assert "3 runs: 1 failed, 1 queued, 1 running" in text
    row = next(line for line in text.splitlines() if "abc00000" in line)
    # step/total, loss (4 decimals), tokens/s, ETA = 13 steps x 640 tokens at 12345 tokens/s
    assert "7/20" in row and "2.7183" in row and "12.3k" in row and row.endswith(" 1s") and " 2 " in f" {row} "
    assert "def00000" not in text  # ended runs are printed above the table, not in it
    view.changes(statuses[:0])
    line = view.ended_line(statuses[1])
    assert "def00000" in line and "failed" in line and "RuntimeError: boom" in line and "attn_steps=1" in line


def test_log_view_prints_state_changes_and_a_progress_line_per_running_run_every_n_seconds(tmp_path):
    run = _running_run(tmp_path)
    lines: list[str] = []
    clock = [0.0]
    view = LogLaunchView(lines.append, every_s=30, clock=lambda: clock[0])
    view.set_runs({"abc0000000001": {"train.lr": 0.002}}, ["abc0000000001"])
    st = JobStatus(job=Job("abc0000000001", run), state="queued")
    view([st])
    assert lines == []  # queued at the start is not news
    st.state, st.slot = "running", "cpu0"
    view([st])
    assert len(lines) == 1 and "abc00000 running on cpu0" in lines[0]
    clock[0] = 29.0
    view([st])
    assert len(lines) == 1  # not yet
    clock[0] = 31.0
    view([st])
    assert len(lines) == 3 and "step 7/20 35%" in lines[1] and "loss 2.7183" in lines[1] and "12.3k tok/s" in lines[1]
    assert lines[2].endswith("1 run: 1 running; grid ETA 1s")  # and the grid's counts with its ETA
    st.state, st.ended_time, st.started_time = "done", time.time(), time.time() - 5
    (run / "result.json").write_text(json.dumps({"state": "done", "test_loss": 1.5}))
    view([st])
    assert "done" in lines[-1] and "test loss 1.5000" in lines[-1]


def test_selection_lines_say_the_action_once(tmp_path):
    assert selection_line(Selection("a" * 12, tmp_path, "start", "start")).split() == ["a" * 12, "start"]
    line = selection_line(Selection("b" * 12, tmp_path, "resume", "resume from checkpoint step 40"))
    assert line.split() == ["b" * 12, "resume", "from", "checkpoint", "step", "40"]
    line = selection_line(Selection("c" * 12, tmp_path, "skip", "failed (use --retry-failed to run it again)"))
    assert line.split()[:3] == ["c" * 12, "skip", "failed"]


def test_an_ended_run_line_fits_an_80_column_terminal_and_keeps_its_result(tmp_path):
    run = tmp_path / "abc"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state": "done", "test_loss": 6.26651}))
    keys = ["model.attention", "model.kq_diagonal", "model.attn_steps", "model.mlp", "model.mlp_steps",
            "model.attn_precond", "model.mlp_precond"]
    view = LiveLaunchView(Console(width=80, file=open(os.devnull, "w")))
    view.set_runs({"abc0000000001": dict(zip(keys, ["llama", "none", 1, "llama", 1, "identity", "identity"])),
                   "def0000000002": dict(zip(keys, ["cem", "shared", 2, "cem", 2, "diag_lowrank", "diag_lowrank"]))},
                  ["abc0000000001", "def0000000002"])
    st = JobStatus(job=Job("abc0000000001", run), state="done", started_time=time.time() - 77, ended_time=time.time())
    line = view.ended_line(st, width=80)
    assert len(line) <= 80 and line.rstrip().endswith("test loss 6.2665  in 1m17s") and "llama" in line
    assert "mlp_precond=identity" in view.ended_line(st)  # a log line (no width) keeps every axis


@pytest.mark.parametrize("width", [80, 120])
def test_ended_run_lines_stand_in_columns_under_a_header_that_names_the_keys(tmp_path, width):
    """The README's demo grid: four arms over seven keys; the lines show the values of the keys that tell the runs
    apart, each under its name (cut with '…' at 80 columns), and every line keeps its result."""
    run = tmp_path / "abc"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state": "done", "test_loss": 6.26651}))
    keys = ["model.attention", "model.kq_diagonal", "model.attn_steps", "model.mlp", "model.mlp_steps",
            "model.attn_precond", "model.mlp_precond"]
    arms = [["llama", "none", 1, "llama", 1, "identity", "identity"], ["cem", "shared", 1, "llama", 1, "identity",
            "identity"], ["cem", "shared", 2, "llama", 1, "identity", "identity"],
            ["cem", "shared", 2, "cem", 2, "diag_lowrank", "diag_lowrank"]]
    ids = ["3fa2c1d0aa11", "77b1e0c2bb22", "a0c3d9e1cc33", "c9d8e7f6dd44"]
    view = LiveLaunchView(Console(width=width, file=open(os.devnull, "w")))
    view.set_runs({i: dict(zip(keys, a)) for i, a in zip(ids, arms)}, ids)
    header = view.ended_header(width)
    lines = [view.ended_line(JobStatus(job=Job(i, run), state="done", started_time=time.time() - 77,
                                       ended_time=time.time()), width=width) for i in ids]
    assert header.split()[:3] == ["time", "run", "state"] and header.split()[-1] == "result"
    named = header.split()[3:-1]
    assert len(named) == 3  # attention, attn_steps, mlp tell the four arms apart; their zip partners are left out
    if width == 120:
        assert named == ["attention", "attn_steps", "mlp"] and view.ended_legend(width) == ""
    else:  # attn_steps by its last word; attention, which has none, cut; the legend names them all
        assert named == ["atten\u2026", "steps", "mlp"]
        assert view.ended_legend(width) == "axes, left to right: attention, attn_steps, mlp"
    for line, arm in zip(lines, arms):
        assert len(line) <= width and line.endswith("test loss 6.2665  in 1m17s"), line
        cells = line.split()
        assert cells[3:6] == [str(arm[0]), str(arm[2]), str(arm[3])]  # the values, whole
    for name, value_col in zip(named, range(3)):  # each value starts under its name
        at = header.index(name)
        assert all(line[at:].startswith(str(arm[[0, 2, 3][value_col]])) for line, arm in zip(lines, arms))
    assert header.index("result") == lines[0].index("test loss")


@pytest.mark.parametrize("width", [80, 120])
def test_ended_run_headers_name_keys_that_share_a_prefix(tmp_path, width):
    """attn_precond_rank, attn_steps and attn_step_size were all cut to 'att…' at 80 columns (a header that names
    nothing): each gives way to its last words first ('rank', 'steps'), never to a name another key ends with nor to
    another key's name (issue 48: 'size' read as model.size; attn_step_size is then 'step_size', cut if it must be,
    with the legend line naming every axis)."""
    import itertools

    run = tmp_path / "abc"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state": "done", "test_loss": 6.26651}))
    keys = ["model.attn_precond_rank", "model.attn_steps", "model.attn_step_size"]
    axes = {f"{i:02d}c1d0aa11": dict(zip(keys, values)) for i, values in enumerate(itertools.product([2, 8], [1, 2], [0.5, 1.0]))}
    view = LiveLaunchView(Console(width=width, file=open(os.devnull, "w")))
    view.set_runs(axes, list(axes))
    header = view.ended_header(width)
    named = header.split()[3:-1]
    assert len(header) <= width, header
    if width == 120:
        assert "\u2026" not in header, header
        assert named == ["attn_precond_rank", "attn_steps", "attn_step_size"] and not view.ended_legend(width), header
    else:
        assert named[:2] == ["rank", "steps"] and "step_size".startswith(named[2].rstrip("\u2026")), header
        assert view.ended_legend(width) == "axes, left to right: attn_precond_rank, attn_steps, attn_step_size"
    st = JobStatus(job=Job(next(iter(axes)), run), state="done", started_time=time.time() - 77, ended_time=time.time())
    line = view.ended_line(st, width=width)
    assert len(line) <= width and line.split()[3:6] == ["2", "1", "0.5"], line
    for name, value in zip(named, ["2", "1", "0.5"]):  # each value under its name
        assert line[header.index(name):].startswith(value), (header, line)


def test_an_ended_line_never_cuts_a_value_for_its_padding(tmp_path):
    """Own grid (CEM MLP at T=2: diag vs diag+low-rank at ranks 2 and 8, seeds 4 and 5) at 80 columns: the headers
    could not shrink below three characters ('ra…', 'se…'), so the padded columns were two characters too wide
    and the seed's one-digit value was cut to '4…'. The padding goes first; the values stay whole."""
    run = tmp_path / "abc"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state": "done", "test_loss": 2.94261}))
    keys = ["model.mlp_precond", "model.mlp_precond_rank", "train.seed"]
    arms = [["diag", 8, 4], ["diag", 8, 5], ["diag_lowrank", 2, 4], ["diag_lowrank", 8, 5]]
    ids = ["9b614576aa11", "919a7e0fbb22", "1de37000cc33", "24bdcec0dd44"]
    view = LiveLaunchView(Console(width=80, file=open(os.devnull, "w")))
    view.set_runs({i: dict(zip(keys, a)) for i, a in zip(ids, arms)}, ids)
    for i, arm in zip(ids, arms):
        st = JobStatus(job=Job(i, run), state="done", started_time=time.time() - 103, ended_time=time.time())
        line = view.ended_line(st, width=80)
        assert len(line) <= 80 and line.endswith("test loss 2.9426  in 1m43s"), line
        assert line.split()[3:6] == [str(v) for v in arm], line  # no value cut ('4…' before)
    assert view.ended_legend(80) == "axes, left to right: mlp_precond, mlp_precond_rank, seed"


def test_a_shortened_header_never_takes_a_name_another_key_ends_with():
    from cemctl.commands.views.plan import axis_headers

    names = {"model.attn_steps": "attn_steps", "model.mlp_steps": "mlp_steps", "model.attn_precond_rank": "attn_precond_rank"}
    headers = axis_headers(names, {k: 1 for k in names}, 30)
    assert headers["model.attn_precond_rank"] == "rank"  # 'steps' would name either of the other two: they are cut
    assert headers["model.attn_steps"] != "steps" and headers["model.mlp_steps"] != "steps"
    assert sum(map(len, headers.values())) + 4 <= 30



def test_the_live_view_shows_the_grids_eta_as_status_watch_computes_it(tmp_path):
    """One run done in 30 s, one running with 13 steps left at 12345 tokens/s (1 s), two queued: the running run's
    own ETA plus 2 x 30 s, shared by the one run in flight (`cemctl.records.progress.grid_eta_s`)."""
    running = _running_run(tmp_path)
    done = tmp_path / "done"
    done.mkdir()
    (done / "result.json").write_text(json.dumps({"state": "done", "test_loss": 1.5, "wall_time_s": 30.0}))
    statuses = [JobStatus(job=Job("abc0000000001", running), state="running", slot="cpu0"),
                JobStatus(job=Job("don0000000002", done), state="done"),
                JobStatus(job=Job("que0000000003", tmp_path / "q1"), state="queued"),
                JobStatus(job=Job("que0000000004", tmp_path / "q2"), state="queued")]
    view = LiveLaunchView(Console(width=80, record=True, file=open(os.devnull, "w")))
    view.set_runs({}, [st.job.run_id for st in statuses])
    assert view.grid_eta(statuses) == pytest.approx(640 * 13 / 12345 + 60, abs=0.01)
    assert view.counts_line(statuses).endswith("4 runs: 1 done, 2 queued, 1 running; grid ETA 1m01s")
    statuses[1].state = "failed"  # nothing finished yet to time the queued runs by
    view = LiveLaunchView(Console(width=80, record=True, file=open(os.devnull, "w")))
    assert view.counts_line(statuses).endswith("; grid ETA not known yet")


def test_a_relaunch_times_the_grid_by_the_runs_it_skipped_as_finished(tmp_path):
    """A half-trained grid launched again (its orchestrator was killed): two runs finished before, in 100 s and 140 s,
    one running with 1 s left, two queued. The ETA is known at once: 1 s + 2 x 120 s on one slot (it said 'grid ETA
    not known yet' until one of this launch's own runs had ended)."""
    running = _running_run(tmp_path)
    before = []
    for name, wall in (("b1", 100.0), ("b2", 140.0)):
        d = tmp_path / name
        d.mkdir()
        (d / "result.json").write_text(json.dumps({"state": "done", "test_loss": 1.5, "wall_time_s": wall}))
        before.append(d)
    failed = tmp_path / "f1"
    failed.mkdir()  # a skipped failed run has no wall time: it sets no pace
    statuses = [JobStatus(job=Job("abc0000000001", running), state="running", slot="cpu0"),
                JobStatus(job=Job("que0000000003", tmp_path / "q1"), state="queued"),
                JobStatus(job=Job("que0000000004", tmp_path / "q2"), state="queued")]
    view = LiveLaunchView(Console(width=80, record=True, file=open(os.devnull, "w")))
    view.set_runs({}, [st.job.run_id for st in statuses], finished_before=[*before, failed])
    assert view.grid_eta(statuses) == pytest.approx(640 * 13 / 12345 + 240, abs=0.01)
    assert view.counts_line(statuses).endswith("3 runs: 2 queued, 1 running; grid ETA 4m01s")


def test_the_live_views_eta_is_the_runs_pace_so_far_not_its_last_steps_speed(tmp_path):
    """13 steps left; 7 steps took 14 s (2 s a step) while the last step's logged speed says 12345 tokens/s (0.7 s
    left): the view says 26 s, as status and the dashboard do (`records.progress.run_eta_s`)."""
    run = _running_run(tmp_path)
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 7, "train_loss": 2.71828,
                                                   "tokens_per_s": 12345.0, "time_s": 14.0}) + "\n")
    assert read_progress(run).eta_s == pytest.approx(26.0)
