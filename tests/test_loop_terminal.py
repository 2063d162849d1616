"""What issue 37 asks of the terminal, on a real one (80x24 and 120x40, `tests.helpers.on_pty`): `plan` keeps
every axis (the seed too) so that no two rows look alike and says what it recorded; launch's live table shows the
grid's ETA; `cemctl --help` shows each command's whole first sentence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import on_pty, tiny_grid

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]

FOUR_AXES = tiny_grid("q", seeds="[0, 1]", extra='"model.attention" = "cem"\n"model.attn_precond" = "diag_lowrank"\n'
                      '[axes]\n"model.kq_diagonal" = ["shared", "per_head"]\n"model.attn_precond_rank" = [2, 4]\n'
                      '"model.attn_steps" = [1, 2]\n')


RANK_AXIS = '"model.attention" = "cem"\n"model.attn_precond" = "diag_lowrank"\n[axes]\n"model.attn_precond_rank" = [2, 4]\n'


def table_rows(lines: list[str]) -> tuple[str, list[str]]:
    """The header and the rows of the first table on the screen (the lines after the rule under the header)."""
    rule = next(i for i, ln in enumerate(lines) if ln and set(ln.replace(" ", "")) <= {"-", "\u2500"})
    rows = []
    for ln in lines[rule + 1:]:
        if not re.match(r"^[0-9a-f]{8}\s", ln):
            break
        rows.append(ln)
    return lines[rule - 1], rows


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_plan_keeps_every_axis_and_the_seed_and_says_what_it_recorded(tmp_path: Path, size: tuple[int, int]) -> None:
    (tmp_path / "q.toml").write_text(FOUR_AXES)
    screen = on_pty(["plan", "q.toml", "--axis", "model.attn_step_size=0.5,1"], tmp_path, cols=size[0], rows=60,
                    cwd=tmp_path)
    screen.assert_clean(0)
    header, rows = table_rows(screen.lines)
    assert len(rows) == 32 and "seed" in header.split()
    assert len({row.split(None, 1)[1] for row in rows}) == 32  # without the run id, still no two rows alike
    screen.assert_fits()
    text = " ".join(screen.text.split())
    assert "recorded 32 runs of q at scale tiny in results.db (32 new, 1 axis from --axis)" in text
    if size[0] == 80:  # the axes' headers were cut: their names are given in order under the table
        assert "axes, left to right: kq_diagonal, attn_precond_rank, attn_steps, attn_step_size, seed" in text
    dry = on_pty(["plan", "q.toml", "--dry-run"], tmp_path, cols=size[0], rows=60, cwd=tmp_path)
    dry.assert_clean(0)
    assert "dry run: nothing recorded" in dry.text and "recorded 16" not in dry.text


def test_plan_at_80_columns_keeps_every_axis_and_the_seed_and_names_the_cut_axes(tmp_path: Path) -> None:
    """The fast tier's form of the test above (its table laid out for COLUMNS=80, in this process)."""
    from tests.helpers import cli

    (tmp_path / "q.toml").write_text(FOUR_AXES)
    res = cli(tmp_path, "plan", "q.toml", "--axis", "model.attn_step_size=0.5,1", env={"COLUMNS": "80"}, cwd=tmp_path)
    assert res.returncode == 0, res.output
    lines = res.stdout.splitlines()
    header, rows = table_rows(lines)
    assert len(rows) == 32 and "seed" in header.split()
    assert len({row.split(None, 1)[1] for row in rows}) == 32  # without the run id, still no two rows alike
    assert all(len(ln) <= 80 for ln in [header, *rows]), header
    text = " ".join(res.output.split())
    assert "recorded 32 runs of q at scale tiny in results.db (32 new, 1 axis from --axis)" in text
    assert "axes, left to right: kq_diagonal, attn_precond_rank, attn_steps, attn_step_size, seed" in text


def _frames_with(raw: bytes, needle: bytes, cols: int, rows: int) -> list[str]:
    """The screen as each redraw of the live table that drew `needle` left it (up to the next redraw's erase; the
    table itself is cleared when the launch ends)."""
    import pyte

    out = []
    start = 0
    while (i := raw.find(needle, start)) >= 0:
        end = raw.find(b"\r\x1b[2K", i)
        screen = pyte.Screen(cols, rows)
        pyte.ByteStream(screen).feed(raw[: end if end >= 0 else len(raw)])
        out.append("\n".join(line.rstrip() for line in screen.display).rstrip())
        start = i + len(needle)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_launch_live_table_shows_the_grids_eta(tmp_path: Path, size: tuple[int, int]) -> None:
    """The grid's ETA above the live table; above it, the ended runs under a header that names their keys (at 80
    columns attn_precond_rank by its last words, 'precond_rank', never 'att…', and a line with the whole names)."""
    (tmp_path / "e.toml").write_text(tiny_grid("e", seeds="[0, 1]", steps=40, ckpt=40, extra=RANK_AXIS)
                                     .replace('"train.log_every_steps" = 1', '"train.log_every_steps" = 2'))
    screen = on_pty(["launch", "e.toml", "--workers", "1"], tmp_path, cols=size[0], rows=size[1], cwd=tmp_path)
    screen.assert_clean(0)
    frames = _frames_with(screen.raw, b"1 done, 2 queued, 1 running; grid ETA", size[0], size[1])
    assert frames, screen.text  # once a run finished, the whole grid's time left at its speed is shown
    assert all(re.search(r"4 runs: 1 done, 2 queued, 1 running; grid ETA (\d+m)?\d+s", f) for f in frames), frames[0]
    screen.assert_fits()  # the ended lines and their header above the table (rich cuts a live row, never wraps it)
    for f in frames:  # so the table's header must reach its last required columns, step and loss
        assert re.search(r"^run\s.*\bstep\s+loss\b", f, re.M), f
    assert "ETA" in frames[-1].splitlines()[-3]  # each run's own ETA in the table's header too
    header = next(ln for ln in screen.lines if ln.startswith("time "))
    if size[0] == 80:
        assert header.split() == ["time", "run", "state", "precond_rank", "seed", "result"], header
        assert "axes, left to right: attn_precond_rank, seed" in screen.text
    else:
        assert header.split() == ["time", "run", "state", "attn_precond_rank", "seed", "result"], header
        assert "axes, left to right" not in screen.text
    ended = [ln for ln in screen.lines if re.match(r"^\d\d:\d\d:\d\d\s+[0-9a-f]{8}\s+done\s", ln)]
    assert len(ended) == 4 and all(re.search(r"\bdone\s+[24]\s+[01]\s+test loss \d\.\d{4}", ln) for ln in ended), ended


def test_top_level_help_shows_every_commands_whole_first_sentence_at_80_columns(tmp_path: Path) -> None:
    from cemctl.commands import SHORT_HELP

    screen = on_pty(["--help"], cols=80, rows=60, cwd=tmp_path)
    screen.assert_clean(0)
    listed = screen.text[screen.text.index("Commands:"):]
    assert "..." not in listed and "\u2026" not in listed  # main: 12 of 17 cut with "..."
    for name, sentence in SHORT_HELP.items():
        assert f"  {name} " in listed and sentence in listed, name


def test_placeholders_name_the_values_never_a_type(tmp_path: Path) -> None:
    """Every command's help: `--executor local|slurm`, `--scale tiny|cpu|gpu|paper`, never `<str>`, `{target}`."""
    from tests.helpers import cli

    commands = ["demo", "plan", "launch", "status", "serve", "report", "claims", "compare", "export", "tag", "note",
                "archive", "import", "sync", "logs", "cancel", "eval", "keys", "forget", "data prepare", "data info",
                "data clean"]
    from cemctl.commands.common import SCALE_HELP

    with_scale = []
    for command in commands:
        res = cli(None, *command.split(), "--help", env={"COLUMNS": "200"})
        assert res.returncode == 0, res.output
        text = res.stdout
        assert not re.search(r"<(str|int|float|int range|float range)>|\{[a-z_]+\}|\{[A-Z_]+\}", text), (command, text)
        generic = re.findall(r"--[a-z-]+ ([A-Z]+_[A-Z_]+)\b", text)  # the option's own name: '--reports-dir REPORTS_DIR'
        assert not generic, (command, generic)
        if "--scale" in text:
            with_scale.append(command)
            assert "--scale tiny|cpu|gpu|paper" in text, (command, text)
            assert SCALE_HELP in " ".join(text.split()), (command, text)  # described one way everywhere
    assert len(with_scale) >= 9, with_scale
    assert "-e, --executor local|slurm" in cli(None, "launch", "--help", env={"COLUMNS": "200"}).stdout
    assert "--reports-dir DIR " in cli(None, "serve", "--help", env={"COLUMNS": "200"}).stdout
    assert "--plugins MODULE,... " in cli(None, "keys", "--help", env={"COLUMNS": "200"}).stdout


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_detach_then_status_watch_finds_the_runs_in_flight(tmp_path: Path, size: tuple[int, int]) -> None:
    """The everyday pair, typed one after the other: `launch --detach` returns once its runs are queued (a line
    that fits, the log's path on its own line), so `status --watch` shows them in flight and the grid's ETA, and
    ends by itself when they are done (it used to find every run 'planned' and end at once)."""
    (tmp_path / "e.toml").write_text(tiny_grid("e", seeds="[0, 1]", steps=20, ckpt=20))
    launched = on_pty(["launch", "e.toml", "--workers", "1", "--detach"], tmp_path, cols=size[0], rows=size[1],
                      cwd=tmp_path)
    launched.assert_clean(0)
    launched.assert_fits()
    assert re.search(r"^launch orchestrator running in the background: pid \d+, 2 of 2 runs queued$",
                     launched.text, re.M), launched.text
    (log,) = (tmp_path / "runs" / ".launch").glob("launch-*.log")
    assert re.sub(r"\s", "", launched.text).endswith("log" + str(log)), launched.text  # last, folded where long
    watch = on_pty(["status", "e", "--watch", "--interval-s", "0.5"], tmp_path, cols=size[0], rows=size[1],
                   cwd=tmp_path, timeout_s=240)
    watch.assert_clean(0)  # it ended by itself once both runs were done
    assert re.search(rb"grid: \d running, \d queued", watch.raw), watch.text  # in flight when it started
    assert "2 runs: 2 done" in watch.text, watch.text
