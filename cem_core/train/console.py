"""Log lines and the progress bar of a training run (`python -m cem_core.train RUN_DIR`).

Rank 0 always appends plain lines (every logged step included) to
RUN_DIR/train.log. On a terminal it also shows a rich progress bar, with the
other log lines (evaluations, checkpoints) printed above it; otherwise
(executors, pipes) it prints the same plain lines as the file to stdout. Other ranks only print
warnings and errors to stderr, prefixed with their rank.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

LOGGER_NAME = "cem_core.train"
PROGRESS_LINE = "cemctl_progress_line"  # `extra` flag: a per-step line the progress bar replaces on a terminal


def _not_progress_line(record: logging.LogRecord) -> bool:
    return not getattr(record, PROGRESS_LINE, False)
FORMAT = "%(asctime)s %(levelname)s %(message)s"


class RunConsole:
    """Context manager: installs the run's log handlers and, on a terminal, a progress bar."""

    def __init__(self, log_path: Path, *, rank: int, total_steps: int, start_step: int = 0,
                 tty: bool | None = None) -> None:
        self.log_path = log_path
        self.rank = rank
        self.total_steps = total_steps
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.logger = logging.getLogger(LOGGER_NAME)
        self._handlers: list[logging.Handler] = []
        self._progress: Any = None
        self._task: Any = None
        self._old_level = self.logger.level
        self._old_propagate = self.logger.propagate

    def __enter__(self) -> "RunConsole":
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        if self.rank == 0:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            fh = logging.FileHandler(self.log_path, mode="a", encoding="utf-8")
            fh.setFormatter(logging.Formatter(FORMAT))
            self._add(fh)
            if self.tty:
                from rich.console import Console
                from rich.logging import RichHandler
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                console = Console()
                self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console)
                self._progress.start()
                self._task = self._progress.add_task("train", total=self.total_steps, info="")
                rich_handler = RichHandler(console=console, show_path=False, markup=False)
                rich_handler.addFilter(_not_progress_line)  # per-step lines: file only, the bar shows them
                self._add(rich_handler)
            else:
                sh = logging.StreamHandler(sys.stdout)
                sh.setFormatter(logging.Formatter(FORMAT))
                self._add(sh)
        else:
            sh = logging.StreamHandler(sys.stderr)
            sh.setLevel(logging.WARNING)
            sh.setFormatter(logging.Formatter(f"[rank {self.rank}] " + FORMAT))
            self._add(sh)
        return self

    def _add(self, handler: logging.Handler) -> None:
        self.logger.addHandler(handler)
        self._handlers.append(handler)

    def progress(self, step: int, info: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step, info=info)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
        for h in self._handlers:
            self.logger.removeHandler(h)
            h.close()
        self.logger.setLevel(self._old_level)
        self.logger.propagate = self._old_propagate
