"""Every command a researcher meets first, on a real terminal (a pseudo-terminal of 80x24 and 120x40).

Each command runs as a process whose stdout/stderr is a pty of that size (`tests.helpers.on_pty`),
exactly as in a user's terminal; what the screen shows is read back through a terminal emulator.
The live displays (launch's progress, `status --watch`, `data prepare`'s bars, `logs -f`) only
draw on a terminal, so only these tests exercise them: each must exit as it should and show no
interpreter dump or traceback, and the tables must stay readable at the width they are given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import assert_clean_error, cli, on_pty, tiny_grid

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
LOSS = re.compile(r"\b\d+\.\d{4}\b")


def _grid(where: Path, name: str = "term", **kw: object) -> Path:
    path = where / f"{name}.toml"
    path.write_text(tiny_grid(name, **kw))  # type: ignore[arg-type]
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with a tiny grid trained (2 runs, both done): for the slow tests, which drive a terminal."""
    where = tmp_path_factory.mktemp("terminal")
    grid = _grid(where)
    res = cli(where, "launch", str(grid), "--workers", "2", subprocess=True)
    assert res.returncode == 0, res.output
    return where


def _run_ids(where: Path) -> list[str]:
    import json

    res = cli(where, "status", "--json")
    return [r["run_id"] for e in json.loads(res.stdout)["experiments"] for r in e["runs"]]


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_demo_on_a_terminal_plans_launches_and_reports(tmp_path: Path, size: tuple[int, int]) -> None:
    grid = _grid(tmp_path, "demo_term")
    screen = on_pty(["demo", "--grid", str(grid), "--out", str(tmp_path / "report")], tmp_path, cols=size[0],
                    rows=size[1], cwd=tmp_path)
    screen.assert_clean(0)
    screen.assert_fits()  # every line, the report's last one too (the terminal cut it between "figures," and "runs")
    assert "report written to" in screen.text
    assert (tmp_path / "report" / "index.md").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_foreground_launch_on_a_terminal(tmp_path: Path, size: tuple[int, int]) -> None:
    grid = _grid(tmp_path)
    screen = on_pty(["launch", str(grid), "--workers", "2"], tmp_path, cols=size[0], rows=size[1], cwd=tmp_path)
    screen.assert_clean(0)
    assert "launched 2 of 2 runs" in screen.text
    summary = screen.text[screen.text.index("launched 2 of 2 runs"):]
    assert re.search(r"code snapshot\s+[0-9a-f]{16}\b", summary), summary  # wrapped between words, not inside one
    screen.assert_fits()


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_status_on_a_terminal(project: Path, size: tuple[int, int]) -> None:
    screen = on_pty(["status"], project, cols=size[0], rows=size[1], cwd=project)
    screen.assert_clean(0)
    assert "2 runs" in screen.text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_status_watch_on_a_terminal_leaves_on_ctrl_c(project: Path, size: tuple[int, int]) -> None:
    screen = on_pty(["status", "--watch", "--follow", "--interval-s", "0.2"], project, cols=size[0], rows=size[1],
                    cwd=project, ctrl_c_when=lambda raw: b"2 runs" in raw, timeout_s=60)
    screen.assert_clean(0)
    assert "2 runs" in screen.text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_status_watch_ends_by_itself_once_nothing_is_queued_or_running(project: Path, size: tuple[int, int]) -> None:
    """issue 37.5: --watch kept refreshing after everything ended; --follow is the way to keep going."""
    screen = on_pty(["status", "--watch", "--interval-s", "0.2"], project, cols=size[0], rows=size[1], cwd=project,
                    timeout_s=60)  # no Ctrl-C: it must end on its own
    screen.assert_clean(0)
    assert "2 runs" in screen.text
    screen.assert_fits()


def test_status_watch_interval_is_bounded(finished_project: Path) -> None:
    for interval in ("1e-9", "0", "-1", "1e308", "nan"):
        res = cli(finished_project, "status", "--watch", "--interval-s", interval)
        assert_clean_error(res, contains="--interval-s: must be between 0.2 and 3600 seconds")


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_data_prepare_on_a_terminal(tmp_path: Path, size: tuple[int, int]) -> None:
    grid = _grid(tmp_path, cache_dir=str(tmp_path / "cache"))
    screen = on_pty(["data", "prepare", str(grid), "--workers", "1"], tmp_path, cols=size[0], rows=size[1],
                    cwd=tmp_path)
    screen.assert_clean(0)
    assert "train" in screen.text and "tokens" in screen.text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_logs_follow_on_a_terminal_stops_on_ctrl_c(project: Path, size: tuple[int, int]) -> None:
    run = _run_ids(project)[0]
    screen = on_pty(["logs", run, "--follow"], project, cols=size[0], rows=size[1], cwd=project,
                    ctrl_c_when=lambda raw: b"train.log" in raw, timeout_s=60)
    screen.assert_clean(130)
    assert "train.log" in screen.text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_report_on_a_terminal(project: Path, size: tuple[int, int]) -> None:
    screen = on_pty(["report", "term", "--out", str(project / f"report-{size[0]}")], project, cols=size[0],
                    rows=size[1], cwd=project)
    screen.assert_clean(0)
    assert "report written to" in screen.text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_claims_on_a_terminal(project: Path, size: tuple[int, int]) -> None:
    assert cli(project, "plan", "fig2a", "--scale", "tiny").returncode == 0  # a grid that declares a claim
    screen = on_pty(["claims", "--out", str(project / f"claims-{size[0]}")], project, cols=size[0], rows=size[1],
                    cwd=project)
    screen.assert_clean(0)
    assert "claims.md" in screen.text


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_plan_on_a_terminal(project: Path, size: tuple[int, int]) -> None:
    screen = on_pty(["plan", str(project / "term.toml")], project, cols=size[0], rows=size[1], cwd=project)
    screen.assert_clean(0)
    assert "2 runs" in screen.text


def test_the_pty_helper_works_with_a_descriptor_above_selects_limit(tmp_path):
    """Late in a full run the test process held ~1,200 descriptors (engines left open), the pseudo-terminal's was
    above select()'s limit of 1024, select raised, and the helper then waited forever on a child that was still
    watching: the suite hung. The helper polls (no such limit) and never waits on a live child."""
    import os
    import resource

    from tests.helpers import on_pty

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"this process may open only {soft} files")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        screen = on_pty(["--help"], cols=80, rows=40, cwd=tmp_path)
    finally:
        for fd in held:
            os.close(fd)
    screen.assert_clean(0)
    assert "Usage" in screen.text, screen.text


@pytest.mark.slow
def test_fig4_status_at_80_columns_keeps_every_grid_axis(tmp_path: Path) -> None:
    """main hid `lr`, a grid axis of fig4, while showing `kq_diagonal`, which repeats `attention` (its [[zip]]
    partner): rows looked like duplicates with different losses."""
    import json

    from tests.helpers import finish_run

    res = cli(tmp_path, "plan", "fig4", "--scale", "cpu", "--json")
    assert res.returncode == 0, res.output
    ids = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    for i, rid in enumerate(ids[:24]):
        finish_run(tmp_path / "runs" / rid, test_loss=1.4 + 0.01 * i, steps=900)
    assert cli(tmp_path, "sync").returncode == 0
    screen = on_pty(["status", "fig4", "--limit", "12"], tmp_path, cols=80, rows=40, cwd=tmp_path)
    screen.assert_clean(0)
    screen.assert_fits()
    header = next(line for line in screen.lines if line.startswith("run "))
    for axis in ("attention", "(attn_)?steps", "lr"):  # model.attention, model.attn_steps (or its last word), train.lr
        assert re.search(rf"\b{axis}\b", header), header
    assert "kq_diagonal" not in header and "size" not in header.split()
    hidden = next((line for line in screen.lines if line.startswith("hidden at 80 columns")), "")
    assert "kq_diagonal" in hidden and not re.search(r"\b(lr|attention|attn_steps)\b", hidden), hidden
    rows = [line.split() for line in screen.lines if re.match(r"^[0-9a-f]{8} ", line)]
    assert len(rows) == 12 and len({tuple(r[1:4]) + (r[4],) for r in rows}) == len(rows)  # no two rows alike
