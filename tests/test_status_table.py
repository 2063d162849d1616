"""`cemctl status` and `cemctl plan` tables that fit the terminal: what is shown at 80 and 120 columns,
`--columns`, `--wide`, `--state`, `--sort`, plain tables for pipes, and one number format per column.

The grid is a researcher's own: `model.attn_step_size` x `model.attn_steps` x 2 seeds (12 runs), finished
by writing the files a trainer leaves (no training), so every test here is fast.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from cemctl.commands.views.table import Cell, Column, fit, render_plain
from tests.helpers import assert_clean_error, cli, finish_run, on_pty

OWN_GRID = """seeds = [0, 1]
[experiment]
name = "stepsize"
figure = "curves"
[base]
"model.size" = "nano"
"model.attention" = "cem"
"model.kq_diagonal" = "shared"
"data.tokenizer" = "byte"
"train.max_steps" = 40
[axes]
"model.attn_step_size" = [0.5, 1.0, 2.0]
"model.attn_steps" = [1, 2]
"""
LOSS4 = re.compile(r"\b\d\.\d{4}\b")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 12-run grid planned, 10 runs finished (losses 1.5000 + i/100), one failed, one still planned."""
    where = tmp_path_factory.mktemp("table")
    (where / "own.toml").write_text(OWN_GRID)
    res = cli(where, "plan", str(where / "own.toml"), "--json")
    assert res.returncode == 0, res.output
    ids = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    for i, rid in enumerate(ids[:10]):
        finish_run(where / "runs" / rid, test_loss=1.5 + i / 100, steps=40)
    finish_run(where / "runs" / ids[10], state="failed", error="Traceback\nRuntimeError: the loss went to nan at step 3")
    assert cli(where, "status").returncode == 0  # sync the files in
    return where


def _rows(text: str, ids: list[str]) -> list[str]:
    return [ln for ln in text.splitlines() if any(ln.startswith(rid[:8]) for rid in ids)]


def _ids(where: Path) -> list[str]:
    res = cli(where, "status", "stepsize", "--json")
    return [r["run_id"] for r in json.loads(res.stdout)["experiments"][0]["runs"]]


def test_status_at_80_and_120_columns_fits_and_keeps_state_progress_and_test_loss_readable(project):
    """The fast tier's form of the terminal test below: the table laid out for COLUMNS=80 and 120, in this process;
    every state whole (main of 2026-11-23 cut it to 'do…' at 120 columns)."""
    ids = _ids(project)
    for cols in (80, 120):
        res = cli(project, "status", "stepsize", "--limit", "0", env={"COLUMNS": str(cols)})
        assert res.returncode == 0, res.output
        lines = _rows(res.stdout, ids)
        assert len(lines) == 12, res.stdout
        assert all(len(ln) <= cols for ln in lines), res.stdout
        header = next(ln for ln in res.stdout.splitlines() if ln.startswith("run "))
        for name in ("attn_step_size", "attn_steps", "seed", "state", "progress", "test"):
            assert name in header.split(), header
        done = [ln for ln in lines if re.search(r"\bdone\b", ln)]
        assert len(done) == 10 and all("40/40 100%" in ln and LOSS4.search(ln) for ln in done)
        assert any(re.search(r"\bfailed\b", ln) for ln in lines) and any(re.search(r"\bplanned\b", ln) for ln in lines)
        assert not any(re.search(r"\b(do|fa|pl)\u2026", ln) for ln in lines)
        if cols >= 120:
            assert all(len(LOSS4.findall(ln)) == 3 for ln in done)  # train, val and test
        else:
            assert "hidden at 80 columns:" in res.stdout


@pytest.mark.slow
@pytest.mark.parametrize("cols,rows", [(80, 24), (120, 40)])
def test_status_on_a_terminal_fits_and_keeps_state_progress_and_test_loss_readable(project, cols, rows):
    screen = on_pty(["status", "stepsize", "--limit", "0"], project, cols=cols, rows=rows, cwd=project)
    screen.assert_clean(0)
    ids = _ids(project)
    lines = _rows(screen.text, ids)
    assert len(lines) == 12, screen.text
    screen.assert_fits()  # nothing wrapped by the terminal
    header = next(ln for ln in screen.lines if ln.startswith("run "))
    for name in ("attn_step_size", "attn_steps", "seed", "state", "progress", "test"):
        assert name in header.split(), header
    done = [ln for ln in lines if re.search(r"\bdone\b", ln)]
    assert len(done) == 10 and all("40/40 100%" in ln and LOSS4.search(ln) for ln in done)
    assert any(re.search(r"\bfailed\b", ln) for ln in lines) and any(re.search(r"\bplanned\b", ln) for ln in lines)
    assert "same for every run shown" not in screen.text  # every axis varies among these runs
    if cols >= 120:  # the losses and tokens/s too
        for name in ("train", "val", "tok/s"):
            assert name in header.split(), header
        assert all(len(LOSS4.findall(ln)) == 3 for ln in done)  # train, val and test
    else:
        assert "hidden at 80 columns:" in screen.text


@pytest.mark.slow
def test_status_of_old_main_squeezed_the_state_at_120_columns_regression(project):
    """On the main of 2026-11-23 the state read 'do…' at 120 columns; every state is whole now."""
    screen = on_pty(["status", "stepsize", "--limit", "0"], project, cols=120, rows=40, cwd=project)
    lines = _rows(screen.text, _ids(project))
    assert len(lines) == 12 and not any(re.search(r"\b(do|fa|pl)\u2026", ln) for ln in lines)
    assert all(re.search(r"\b(done|failed|planned)\b", ln) for ln in lines)
    assert not any(re.search(r"\d\.\u2026", ln) for ln in lines)  # no loss cut to '6.…'
    assert "RuntimeError" in screen.text  # the failed run's reason, cut to what is left of the line


def test_constant_axes_go_in_a_header_line(project):
    res = cli(project, "status", "stepsize", "--state", "done", "--limit", "0", env={"COLUMNS": "100"})
    assert res.returncode == 0, res.output
    # all shown runs are done; every axis still varies among them
    assert len(_rows(res.stdout, _ids(project))) == 10
    one_arm = cli(project, "status", "stepsize", "--state", "failed", env={"COLUMNS": "100"})
    assert "same for every run shown: attn_step_size=" in one_arm.stdout and "attn_steps=" in one_arm.stdout
    assert "RuntimeError: the loss went to nan at step 3" in one_arm.stdout


def test_columns_wide_state_and_sort(project):
    ids = _ids(project)
    res = cli(project, "status", "stepsize", "--columns", "run,attn_step_size,test", "--sort", "-test", "--limit", "0")
    assert res.returncode == 0, res.output
    lines = _rows(res.stdout, ids)
    header = res.stdout.splitlines()[1].split()
    assert header == ["run", "attn_step_size", "test"]
    losses = [float(ln.split()[-1]) for ln in lines if LOSS4.search(ln)]
    assert losses == sorted(losses, reverse=True) and len(losses) == 10
    assert lines[-1].split()[-1] not in ("", None) or True  # runs with no test loss come last
    assert all(not LOSS4.search(ln) for ln in lines[10:])
    wide = cli(project, "status", "stepsize", "--wide", "--limit", "0", env={"COLUMNS": "60"})
    head = next(ln for ln in wide.stdout.splitlines() if ln.startswith("run "))
    assert {"job", "att", "elapsed", "tok/s"} <= set(head.split())  # everything, whatever the width
    failed = cli(project, "status", "--state", "failed,planned", "--json")
    states = {r["state"] for e in json.loads(failed.stdout)["experiments"] for r in e["runs"]}
    assert states == {"failed", "planned"}
    by_config = cli(project, "status", "stepsize", "--columns", "run,train.lr,model.size", env={"COLUMNS": "80"})
    assert "0.002" in by_config.stdout and "nano" in by_config.stdout


@pytest.mark.parametrize("args,what", [
    (["--columns", "run,nonsense"], "unknown field 'nonsense'"),
    (["--sort", "bogus"], "unknown field 'bogus'"),
    (["--state", "finished"], "unknown state 'finished'"),
])
def test_bad_table_options_are_one_line(project, args, what):
    res = cli(project, "status", *args)
    line = assert_clean_error(res, contains=what)
    assert "allowed" in line


def test_pipes_get_a_plain_table_with_every_default_column_and_columns_sets_its_width(project):
    plain = cli(project, "status", "stepsize", "--limit", "0", subprocess=True, env={"COLUMNS": ""})
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout  # no escape codes in a file
    head = next(ln for ln in plain.stdout.splitlines() if ln.startswith("run "))
    assert {"train", "val", "test", "tok/s", "elapsed", "att"} <= set(head.split())
    narrow = cli(project, "status", "stepsize", "--limit", "0", subprocess=True, env={"COLUMNS": "80"})
    assert max(len(ln) for ln in narrow.stdout.splitlines() if not ln.startswith("hidden")) <= 80


def test_a_finished_run_shows_its_average_tokens_per_s(project):
    res = cli(project, "status", "stepsize", "--json", "--state", "done")
    run = json.loads(res.stdout)["experiments"][0]["runs"][0]
    # finish_run: 40 steps x 128 tokens in a wall time of 1 s; its last metrics line says 1e4 tokens/s
    assert run["avg_tokens_per_s"] == pytest.approx(40 * 128 / 1.0)
    table = cli(project, "status", "stepsize", "--columns", "run,state,tok/s", "--state", "done")
    assert "5.12k" in table.stdout and "10k" not in table.stdout


def test_fit_keeps_required_columns_whole_and_drops_the_least_important_first():
    cols = [Column("run", "run", required=True), Column("axis", "a_long_axis_name", priority=2, shrink_to=6),
            Column("state", "state", required=True), Column("job", "job", priority=8),
            Column("reason", "reason", priority=4, shrink_to=8)]
    rows = [{"run": Cell("abcdef12"), "axis": Cell("value"), "state": Cell("done"), "job": Cell("local:1"),
             "reason": Cell("a long explanation of what went wrong")}]
    wide = fit(cols, rows, None)
    assert [c.key for c, _ in wide.columns] == ["run", "axis", "state", "job", "reason"]
    narrow = fit(cols, rows, 48)
    lines = render_plain(narrow, rows)
    assert all(len(ln) <= 48 for ln in lines)
    assert "done" in lines[-1] and "abcdef12" in lines[-1]
    assert [c.key for c in narrow.hidden] == ["job"]  # the reason took what was left, cut with an ellipsis
    assert "\u2026" in lines[-1]
    tight = fit(cols, rows, 20)
    assert {c.key for c, _ in tight.columns} == {"run", "state"}


@pytest.mark.slow
@pytest.mark.parametrize("cols,rows", [(80, 24), (120, 40)])
def test_plan_at_paper_scale_names_every_size_and_shows_its_cost(tmp_path, cols, rows):
    screen = on_pty(["plan", "fig3a", "--scale", "paper", "--dry-run"], None, cols=cols, rows=rows, cwd=tmp_path)
    screen.assert_clean(0)
    body = [ln for ln in screen.lines if re.match(r"^[0-9a-f]{8}\s", ln)]
    assert len(body) == 40
    screen.assert_fits()
    header = next(ln for ln in screen.lines if ln.startswith("run "))
    assert {"size", "params", "tokens", "GPU-h", "state"} <= set(header.split())
    for size in ("86M", "108M", "134M", "162M"):
        assert any(f" {size} " in f" {ln} " for ln in body), size
    assert "not a CPU job" in screen.text
    assert not (tmp_path / "results.db").exists()


def test_plan_numbers_have_one_format_per_column(tmp_path):
    res = cli(tmp_path, "plan", "fig2c", "--scale", "paper", "--dry-run", env={"COLUMNS": "200"})
    body = [ln.split() for ln in res.stdout.splitlines() if re.match(r"^[0-9a-f]{8}\s", ln)]
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("run ")).split()
    params = [row[header.index("params")] for row in body]
    assert all(re.fullmatch(r"\d+(\.\d+)?[kMG]", p) for p in params), params
    assert "86.4M" in params  # the Llama baseline at 86M (86,372,352 parameters)
    steps = [row[header.index("attn_steps")] for row in body]
    assert set(steps) == {"1", "2"}  # as status prints them (never 1.0)


def test_plan_dry_run_consults_the_database(project):
    res = cli(project, "plan", str(project / "own.toml"), "--dry-run", env={"COLUMNS": "200"})
    assert res.returncode == 0, res.output
    assert "12 runs, 0 new" in res.stdout
    states = [ln.split()[-1] for ln in res.stdout.splitlines() if re.match(r"^[0-9a-f]{8}\s", ln)]
    assert states.count("done") == 10 and "new" not in states


def test_where_selects_runs_and_says_how_many(project):
    res = cli(project, "status", "stepsize", "--where", "attn_steps=2", "--where", "attn_step_size<2",
              "--limit", "0", env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    lines = _rows(res.stdout, _ids(project))
    assert len(lines) == 4  # eta 0.5 and 1, two seeds each
    assert "same for every run shown: attn_steps=2" in res.stdout
    assert "4 of 12 runs meet --where attn_steps=2 and attn_step_size<2" in res.stdout
    assert "more runs not shown" not in res.stdout
    by_result = cli(project, "status", "--where", "test_loss<1.52", "--json")
    losses = [r["test_loss"] for e in json.loads(by_result.stdout)["experiments"] for r in e["runs"]]
    assert losses and all(x < 1.52 for x in losses)
    assert_clean_error(cli(project, "status", "--where", "attn_stepz=2"), contains="did you mean")


def test_arms_view_has_one_row_per_arm(project):
    res = cli(project, "status", "stepsize", "--arms", env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    rows = [ln for ln in res.stdout.splitlines() if re.match(r"^(0\.5|1|2)\s+[12]\s", ln)]
    assert len(rows) == 6
    assert "6 arms" in res.stdout
    # 10 finished runs in grid order: the first five arms have both seeds done, the last arm none
    assert sum(" 2/2 " in ln for ln in rows) == 5 and sum(" 0/2 " in ln for ln in rows) == 1
    assert any("1 failed, 1 planned" in ln for ln in rows)
    first = rows[0]
    assert "1.5050 \u00b1 0.0071" in first  # seeds 0 and 1: 1.50 and 1.51


@pytest.mark.slow
@pytest.mark.parametrize("cols,rows", [(80, 24), (120, 40)])
def test_status_watch_shows_the_grids_eta_while_runs_are_in_flight(tmp_path, cols, rows):
    """issue 37.5: `status --watch` ends with the whole grid's time left (`_grid_eta_line`), read here on a terminal.
    Two runs done in 100 s and 140 s, one running with 60 s left (40 of 100 steps, 64 tokens a step at 64 tokens/s),
    one queued: 60 s + one queued run at the finished runs' mean of 120 s, one run at a time = 3m00s."""
    from cem_core import runfiles
    from tests.helpers import plan_ids, tiny_grid

    _, ids = plan_ids(tmp_path, tiny_grid("eta", seeds="[0, 1, 2, 3]"), "eta")
    runs = tmp_path / "runs"
    for rid, wall in zip(ids[:2], (100.0, 140.0)):
        result = finish_run(runs / rid)
        (runs / rid / "result.json").write_text(json.dumps(dict(result, wall_time_s=wall)))
    running, queued = runs / ids[2], runs / ids[3]
    runfiles.append_event(running, "queued", "test", attempt=0)
    runfiles.append_event(running, "running", "attempt 1", attempt=1)
    now = time.time()  # a fresh heartbeat: the run is alive (the heartbeat's clock, not a sleep)
    (running / "heartbeat.json").write_text(json.dumps({"time": now, "step": 40, "total_steps": 100, "tokens": 2560,
                                                         "pid": 1, "host": "h", "attempt": 1}))
    (running / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 40, "tokens": 2560, "train_loss": 3.25,
                                                       "tokens_per_s": 64.0, "time_s": 40.0}) + "\n")
    runfiles.append_event(queued, "queued", "test", attempt=0)
    screen = on_pty(["status", "eta", "--watch", "--interval-s", "0.2"], tmp_path, cols=cols, rows=rows, cwd=tmp_path,
                    ctrl_c_when=lambda raw: b"left" in raw, timeout_s=60)  # in flight: it would watch on, so Ctrl-C
    screen.assert_clean(0)
    screen.assert_fits()
    assert re.search(r"\b4 runs\b", screen.text), screen.text
    line = next(ln for ln in screen.lines if ln.startswith("grid:"))
    line = line.removesuffix("^C")  # the terminal echoes the Ctrl-C typed once "left" arrived, on the same row
    assert line == "grid: 1 running, 1 queued; about 3m00s left", screen.text


def test_the_grid_line_counts_every_run_not_the_rows_shown(tmp_path):
    """With --limit (50 rows shared by every experiment by default) the grid line counted only the rows shown: a
    cpu-scale project of nine grids showed 'grid: 2 running, 12 queued' with 35 runs queued. Two runs done in
    100 s and 140 s and four queued, one row shown: 4 queued, at 120 s each, one at a time (nothing runs yet)."""
    from cem_core import runfiles
    from tests.helpers import plan_ids, tiny_grid

    _, ids = plan_ids(tmp_path, tiny_grid("many", seeds="[0, 1, 2, 3, 4, 5]"), "many")
    runs = tmp_path / "runs"
    for rid, wall in zip(ids[:2], (100.0, 140.0)):
        result = finish_run(runs / rid)
        (runs / rid / "result.json").write_text(json.dumps(dict(result, wall_time_s=wall)))
    for rid in ids[2:]:
        runfiles.append_event(runs / rid, "queued", "test", attempt=0)
    res = cli(tmp_path, "status", "many", "--limit", "1")
    assert res.returncode == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("grid:"))
    assert line == "grid: 0 running, 4 queued; about 8m00s left", res.stdout


def test_a_header_never_shortens_to_another_keys_name_and_a_repeating_axis_goes_first():
    """main's ended lines shortened attn_step_size to `size` (model.size's name); fig4's kq_diagonal (which only
    repeats attention, its [[zip]] partner) was kept over lr."""
    from cemctl.commands.views.table import REPEAT_PRIORITY, axis_headers, axis_priorities

    names = {"model.attn_step_size": "attn_step_size", "model.attention": "attention"}
    for room in range(8, 30):
        headers = axis_headers(names, {"model.attn_step_size": 3, "model.attention": 5}, room)
        assert headers["model.attn_step_size"] != "size", room
    rows = [{"model.attention": a, "model.kq_diagonal": k, "train.lr": lr, "train.seed": s}
            for a, k in (("reuse", "none"), ("cem", "shared")) for lr in (0.001, 0.002) for s in (0, 1)]
    prio = axis_priorities(["model.attention", "model.kq_diagonal", "train.lr", "train.seed"], rows,
                           ["model.attention", "model.kq_diagonal", "train.lr"])
    assert prio["model.kq_diagonal"] == REPEAT_PRIORITY
    assert prio["model.attention"] == prio["train.lr"] < prio["train.seed"] < REPEAT_PRIORITY


def test_the_launch_table_keeps_the_axes_that_tell_runs_apart_once_losses_arrive(tmp_path):
    """main's live launch table dropped `mlp` (priority below tok/s and ETA) at 80 columns once losses arrived:
    the demo's two CEM rows read alike."""
    import json
    import os
    import time

    from rich.console import Console

    from cemctl.commands.views.launch import LiveLaunchView
    from cemctl.executors.base import Job
    from cemctl.executors.local import JobStatus

    axes = {f"r{i:011d}": a for i, a in enumerate([
        {"model.attention": "llama", "model.mlp": "llama", "model.kq_diagonal": "none", "model.attn_steps": 1},
        {"model.attention": "cem", "model.mlp": "llama", "model.kq_diagonal": "shared", "model.attn_steps": 2},
        {"model.attention": "cem", "model.mlp": "cem", "model.kq_diagonal": "shared", "model.attn_steps": 2}])}
    statuses = []
    for rid in axes:
        run = tmp_path / rid
        run.mkdir()
        (run / "heartbeat.json").write_text(json.dumps({"time": time.time(), "step": 7, "total_steps": 120,
                                                        "tokens": 7 * 2048}))
        (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 7, "train_loss": 5.12345,
                                                       "tokens_per_s": 12345.0}) + "\n")
        statuses.append(JobStatus(job=Job(rid, run), state="running", slot="cpu0", started_time=time.time() - 30))
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    view = LiveLaunchView(console)
    view.set_runs(axes, list(axes))
    console.print(view.render(statuses))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.startswith("run "))
    assert "mlp" in header and "attention" in header and "kq_diagonal" not in header, header
    rows = [line.split()[1:4] for line in lines if line.startswith("r0000")]
    assert len({tuple(r) for r in rows}) == 3, rows


def test_sort_takes_several_fields_and_never_keeps_only_the_last(project):
    """main refused `--sort a,b` and kept only the last of `--sort a --sort b` without a word."""
    ids = _ids(project)
    cols = ["--columns", "run,attn_step_size,test", "--limit", "0"]
    joined = cli(project, "status", "stepsize", *cols, "--sort", "attn_step_size,-test")
    repeated = cli(project, "status", "stepsize", *cols, "--sort", "attn_step_size", "--sort", "-test")
    assert joined.returncode == 0 and repeated.returncode == 0, joined.output + repeated.output
    assert joined.stdout == repeated.stdout
    rows = [ln.split() for ln in _rows(joined.stdout, ids) if LOSS4.search(ln)]
    keys = [(float(r[1]), -float(r[2])) for r in rows]
    assert len(rows) == 10 and keys == sorted(keys)  # by step size, then by test loss, highest first
