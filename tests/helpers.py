"""The test suite's shared helpers: one CLI runner, one `wait_for`, one tiny grid, one fake finished run.

    res = cli(tmp_path, "plan", "grid.toml", "--json")       # in-process, --db/--runs-dir under tmp_path
    res = cli(tmp_path, "status", subprocess=True)           # a real `python -m cemctl.cli` process
    wait_for(lambda: path.exists(), timeout_s=30)
    (tmp_path / "g.toml").write_text(tiny_grid("exp"))
    finish_run(run_dir, test_loss=1.5)                       # a result.json + metrics as a trainer leaves them
    screen = on_pty(["status"], tmp_path, cols=80, rows=24)   # a real terminal: what the user sees (pyte)
    screen = on_screen(["status"], tmp_path, cols=80, terminal=False)  # the same in this process, COLUMNS=80
"""

from __future__ import annotations

import json
import math
import os
import subprocess as sp
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
HOSTILE_DIR = ROOT / "tests" / "reliability" / "hostile_grids"


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.output.splitlines() if ln.strip()]


def slurm_cluster_problem() -> str | None:
    """Why the SLURM tests cannot run here (None: a cluster answers with a usable node)."""
    import shutil

    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "SLURM is not installed (no sinfo/sbatch); run .ci/setup_slurm.sh as root"
    try:
        out = sp.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except (OSError, sp.TimeoutExpired) as e:
        return f"sinfo failed: {e}"
    if out.returncode != 0 or not any(s.rstrip("*") in ("idle", "mix", "alloc", "comp") for s in out.stdout.split()):
        return f"the SLURM cluster is not up (sinfo: {out.stdout.strip() or out.stderr.strip()!r}); run .ci/setup_slurm.sh"
    return None


def subprocess_env(**extra: str) -> dict[str, str]:
    """An environment that imports this checkout, one thread per process, no inherited CEMCTL_DB/RUNS."""
    out = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CEMCTL_NUM_THREADS": "1"}
    for key in ("CEMCTL_DB", "CEMCTL_RUNS", "CEMCTL_HEARTBEAT_TIMEOUT_S"):
        out.pop(key, None)
    out.update(extra)
    return out


def cli(where: Path | None, *args: str, subprocess: bool = False, env: dict[str, str] | None = None,
        cwd: Path | None = None, timeout: float = 300, input: str | None = None) -> CliResult:
    """Run `cemctl ARGS`; with `where`, `--db where/results.db --runs-dir where/runs` come first
    (commands that take no database get neither: pass where=None)."""
    argv = list(args)
    if where is not None:
        argv += ["--db", str(Path(where) / "results.db"), "--runs-dir", str(Path(where) / "runs")]
    if subprocess:
        proc = sp.run([sys.executable, "-m", "cemctl.cli", *argv], cwd=cwd, env=subprocess_env(**(env or {})),
                      capture_output=True, text=True, timeout=timeout, input=input)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    from typer.testing import CliRunner

    from cemctl.cli import _run_app

    # In this process, through the command line's own entry (`cemctl.cli._run_app`: a usage error is its one line,
    # as in a real process); an exception that escapes it is raised here (a real process would write a crash log).
    old_cwd, old_argv, code = os.getcwd(), sys.argv, 0
    if cwd is not None:
        os.chdir(cwd)
    try:
        with CliRunner().isolation(input=input, env=env) as (out, err, _):
            sys.argv = ["cemctl", *argv]
            try:
                _run_app()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
                if not isinstance(e.code, (int, type(None))):
                    sys.stderr.write(f"{e.code}\n")
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            stdout, stderr = out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    return CliResult(code, stdout, stderr)


def assert_clean_error(proc: Any, *, code: int = 2, contains: str = "") -> str:
    """The process failed with `code` and printed exactly one non-empty line, no traceback; returns it."""
    stderr = getattr(proc, "stderr", "") or ""
    stdout = getattr(proc, "stdout", "") or ""
    rc = getattr(proc, "returncode", getattr(proc, "exit_code", None))
    assert rc == code, f"exit code {rc}, expected {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = [ln for ln in (stderr + stdout).splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n" + "\n".join(lines[:20])
    assert "Traceback" not in stderr + stdout
    assert lines[0].startswith("error: "), lines[0]
    assert contains in lines[0], f"{contains!r} not in {lines[0]!r}"
    return lines[0]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every parseable object line of a JSONL file (a truncated line is skipped)."""
    from cem_core.runfiles import read_jsonl as _read

    return _read(path)


def wait_for(predicate: Callable[[], Any], *, timeout_s: float = 60, poll_s: float = 0.1, what: str = "") -> Any:
    """Poll until `predicate()` is truthy; returns its value or fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or predicate}")
        time.sleep(poll_s)


def tiny_grid(name: str, *, steps: int = 6, ckpt: int = 2, seeds: str = "[0, 1]", cache_dir: str = "",
              extra: str = "", figure: str = "curves") -> str:
    """A grid of tiny, fast CPU runs (nano model, byte tokenizer, 32-token context)."""
    cache = f'"data.cache_dir" = "{cache_dir}"\n' if cache_dir else ""
    return f"""seeds = {seeds}

[experiment]
name = "{name}"
figure = "{figure}"

[base]
"model.size" = "nano"
"model.context_len" = 32
"data.tokenizer" = "byte"
{cache}"train.max_steps" = {steps}
"train.batch_seqs" = 4
"train.micro_batch_seqs" = 4
"train.log_every_steps" = 1
"train.eval_every_steps" = {steps}
"train.ckpt_every_steps" = {ckpt}
"train.ckpt_keep" = 2
"train.val_tokens" = 256
"train.test_tokens" = 256
{extra}"""


def finish_run(run_dir: Path, *, test_loss: float = 1.5, state: str = "done", steps: int = 4,
               error: str | None = None) -> dict[str, Any]:
    """Write the files a finished trainer leaves (metrics, events, result.json) without training."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [{"kind": "train", "step": s, "tokens": s * 128, "train_loss": test_loss + 1.0 / s, "lr": 0.002,
              "grad_norm": 1.0, "tokens_per_s": 1e4, "time_s": s * 0.1} for s in range(1, steps + 1)]
    lines.append({"kind": "val", "step": steps, "tokens": steps * 128, "val_loss": test_loss, "time_s": 1.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    now = time.time()
    events = [{"time": now - 2, "state": "running", "reason": "attempt 1", "attempt": 1},
              {"time": now - 1, "state": state, "reason": error or "", "attempt": 1}]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in events))
    done = state == "done"
    result = {"state": state, "test_loss": test_loss if done else None, "test_ppl": math.exp(test_loss) if done else None,
              "val_loss": test_loss, "val_ppl": math.exp(test_loss), "params_total": 1000, "params_non_embedding": 100,
              "flops_per_token": 10, "train_flops": 1e6, "tokens": steps * 128, "steps": steps, "wall_time_s": 1.0,
              "error": error, "diverged_step": None, "run_id": run_dir.name}
    (run_dir / "result.json").write_text(json.dumps(result))
    return result


def write_json(path: Path | str, obj: Any, *, fsync: bool = True) -> None:
    """Write a JSON file atomically, creating its folder (what the planner and trainer do)."""
    from cem_core.runfiles import atomic_write_json

    atomic_write_json(path, obj, durable=fsync, make_parents=True)


def plan_ids(where: Path, text: str | None = None, name: str = "exp", *args: str) -> tuple[Path, list[str]]:
    """Write `text` (default: a two-seed tiny grid) as where/NAME.toml, plan it; returns (grid file, run ids)."""
    grid = Path(where) / f"{name}.toml"
    grid.write_text(text or tiny_grid(name, seeds="[0, 1]"))
    res = cli(where, "plan", str(grid), "--json", *args)
    assert res.returncode == 0, res.output
    return grid, [r["run_id"] for r in json.loads(res.stdout)["runs"]]


def status_rows(where: Path, *args: str, subprocess: bool = False) -> dict[str, dict[str, Any]]:
    """`cemctl status --json` as {run id: row} over every experiment."""
    res = cli(where, "status", "--json", *args, subprocess=subprocess)
    assert res.returncode == 0, res.output
    return {r["run_id"]: r for e in json.loads(res.stdout)["experiments"] for r in e["runs"]}


# ---------------------------------------------------------------------------
# A real terminal: run a command on a pseudo-terminal of a given size and keep what the screen shows.

def _screen(cols: int, rows: int) -> Any:
    """A pyte screen with scrollback that also notes every row the terminal itself wrapped: a character drawn
    after the last column (auto-wrap) means the program wrote a line wider than the terminal."""
    import pyte

    class Screen(pyte.HistoryScreen):
        def __init__(self) -> None:
            super().__init__(cols, rows, history=100_000, ratio=0.001)
            self.wrapped: list[str] = []  # each row the terminal continued on the next one

        def draw(self, data: str) -> None:
            if self.cursor.x + sum(max(0, pyte.screens.wcwidth(c)) for c in data) < self.columns:
                super().draw(data)  # cannot reach the last column: drawn at once
                return
            for char in data:
                if self.cursor.x >= self.columns and pyte.modes.DECAWM in self.mode and pyte.screens.wcwidth(char) > 0:
                    row = self.buffer[self.cursor.y]
                    self.wrapped.append("".join(row[x].data for x in range(self.columns)).rstrip() + char)
                super().draw(char)

    return Screen()


@dataclass
class PtyResult:
    returncode: int
    raw: bytes  # every byte the terminal received
    cols: int
    rows: int

    def _emulate(self) -> Any:
        import pyte

        screen = _screen(self.cols, self.rows)
        pyte.ByteStream(screen).feed(self.raw)
        return screen

    @property
    def lines(self) -> list[str]:
        """What the user saw, top to bottom: the scrollback, then the final screen (right-trimmed, a
        terminal emulator (pyte) applies the cursor moves, line clears and redraws of live displays).
        No line is wider than the terminal, so a width check on these cannot fail: use `assert_fits`."""
        screen = self._emulate()

        def text(line: Any) -> str:
            return "".join(line[x].data for x in range(self.cols)).rstrip()

        lines = [text(line) for line in screen.history.top] + [ln.rstrip() for ln in screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def wrapped(self) -> list[str]:
        """The rows the terminal had to continue on the next row (the program wrote a line wider than the
        terminal: a table cell folded, a header pushed onto a line of its own), as they stood when it wrapped."""
        return self._emulate().wrapped

    def assert_fits(self) -> None:
        """Nothing the program wrote was wider than the terminal (checked on the bytes, not on the screen, where
        every row is at most `cols` wide whatever was written)."""
        wrapped = self.wrapped
        assert not wrapped, (f"{len(wrapped)} line(s) wider than {self.cols} columns, wrapped by the terminal; the "
                             "first: " + repr(wrapped[0]) + "\n" + self.text)

    def assert_clean(self, code: int | None = 0) -> None:
        """The command exited with `code` and the screen shows no interpreter dump or traceback."""
        shown = self.text
        for bad in ("Traceback", "lost sys.stderr", "object address", "Error in sys.excepthook", "internal error"):
            assert bad not in shown, f"{bad!r} on the terminal:\n{shown}"
        if code is not None:
            assert self.returncode == code, f"exit {self.returncode}, expected {code}:\n{shown}"


def on_pty(args: list[str], where: Path | None = None, *, cols: int = 80, rows: int = 24, cwd: Path | None = None,
           env: dict[str, str] | None = None, timeout_s: float = 300, ctrl_c_when: Callable[[bytes], bool] | None = None,
           ctrl_c_after_s: float | None = None) -> PtyResult:
    """Run `cemctl ARGS` (`--db`/`--runs-dir` under `where` when given) on a pseudo-terminal of
    cols x rows, as a user's terminal would (controlling tty, TERM=xterm-256color, no COLUMNS/LINES).
    Ctrl-C is typed once `ctrl_c_when(bytes so far)` is true or `ctrl_c_after_s` have passed."""
    import fcntl
    import pty
    import select
    import signal
    import struct
    import termios

    argv = [sys.executable, "-m", "cemctl.cli", *args]
    if where is not None:
        argv += ["--db", str(Path(where) / "results.db"), "--runs-dir", str(Path(where) / "runs")]
    child_env = subprocess_env(**(env or {}))
    for key in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        child_env.pop(key, None)
    child_env["TERM"] = "xterm-256color"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal and stdin/stdout/stderr
        try:
            fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            if cwd is not None:
                os.chdir(cwd)
            os.execve(sys.executable, argv, child_env)
        finally:
            os._exit(127)
    raw = bytearray()
    start = time.monotonic()
    typed = False
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        while True:
            if not typed and ((ctrl_c_when is not None and ctrl_c_when(bytes(raw)))
                              or (ctrl_c_after_s is not None and time.monotonic() - start > ctrl_c_after_s)):
                os.write(fd, b"\x03")
                typed = True
            if time.monotonic() - start > timeout_s:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"cemctl {' '.join(args)} did not finish in {timeout_s} s on the terminal:\n"
                                     + bytes(raw).decode(errors="replace")[-3000:])
            # poll, not select: late in a full run the pty's descriptor can be above select's limit of 1024
            # (select then raised, and the finally below waited forever on a child that was still watching)
            if not poller.poll(100):
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            raw += data
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:  # left early (an error above, or a terminal that closed first): never wait on a live child
            if not sys.exc_info()[0]:  # the terminal closed while the child lives on: give it a moment to exit
                deadline = time.monotonic() + 10
                while not done and time.monotonic() < deadline:
                    time.sleep(0.05)
                    done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
        os.close(fd)
    return PtyResult(os.waitstatus_to_exitcode(status), bytes(raw), cols, rows)


def on_screen(args: list[str], where: Path | None = None, *, cols: int = 80, rows: int = 24, terminal: bool = False,
              cwd: Path | None = None, env: dict[str, str] | None = None, **pty: Any) -> PtyResult:
    """What `cemctl ARGS` shows `cols` columns wide: on a real pseudo-terminal (`terminal=True`: `on_pty`, the slow
    tier), or run in this process with COLUMNS/LINES set, its output read back through the same terminal emulator
    (the fast tier: the same layout, without a process or a terminal's live displays)."""
    if terminal:
        return on_pty(args, where, cols=cols, rows=rows, cwd=cwd, env=env, **pty)
    res = cli(where, *args, cwd=cwd, env={**(env or {}), "COLUMNS": str(cols), "LINES": str(rows)})
    raw = (res.stdout + res.stderr).replace("\r\n", "\n").replace("\n", "\r\n").encode()
    return PtyResult(res.returncode, raw, cols, rows)
