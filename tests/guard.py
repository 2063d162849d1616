"""The fast tier's guard (a pytest plugin, loaded by tests/conftest.py): a test not marked `slow` that starts a
trainer process or compiles fails, naming what it started.

- A trainer process: `python -m cem_core.train RUN_DIR` (or torchrun around it), started by the test's own process
  (`subprocess.Popen`: the executors' trainer spawn) or by any process it started (a `cemctl launch` subprocess, an
  orchestrator). Each test gives its processes a token in their environment (`CEMCTL_TEST_GUARD`, inherited by every
  child); while it runs, /proc is polled for a trainer carrying it (a trainer lives for seconds: torch alone takes
  one to import; the poll is every 0.2 s).
- A compilation: TorchDynamo processed a frame (`torch.compile`, any backend) in the test's process.

Training a tiny model in the test's own process (`cem_core.train.run_training`) is allowed: that is what the fast
tier's model tests do. `python -m pytest -m "not slow"` is the tier the guard keeps fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterable

import pytest

GUARD_ENV = "CEMCTL_TEST_GUARD"
POLL_S = 0.2
_TRAINER_ARGS = (b"\x00cem_core.train\x00", b"\x00cem_core.train")  # `-m cem_core.train` as its own argument


def is_trainer(argv: Iterable[Any] | bytes) -> bool:
    """True for the command line of a trainer process: `-m cem_core.train` (alone or under torch.distributed.run)."""
    if isinstance(argv, bytes):
        raw = b"\x00" + argv
    elif isinstance(argv, (str, os.PathLike)):
        return False  # a shell string: not how cemctl starts a trainer
    else:
        raw = b"\x00" + b"\x00".join(os.fsencode(str(a)) for a in argv) + b"\x00"
    return b"\x00-m\x00cem_core.train\x00" in raw or raw.endswith(b"\x00-m\x00cem_core.train")


def trainers_with_token(token: str, proc: str = "/proc") -> list[str]:
    """Command lines of the live trainer processes whose environment carries `GUARD_ENV=token`."""
    want = f"{GUARD_ENV}={token}\x00".encode()
    found = []
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if not is_trainer(cmdline.rstrip(b"\x00")):
                continue
            with open(f"{proc}/{pid}/environ", "rb") as f:
                environ = b"\x00" + f.read()
        except OSError:  # gone, or not ours to read
            continue
        if b"\x00" + want in environ + b"\x00":
            found.append(cmdline.rstrip(b"\x00").replace(b"\x00", b" ").decode(errors="replace"))
    return found


def dynamo_frames() -> int:
    """Frames TorchDynamo has processed in this process (0 before torch.compile was first used)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return 0
    return int(sum(dynamo.counters["frames"].values()))


class Watch:
    """What the test now running started: trainer command lines, and whether it compiled."""

    def __init__(self, frames: Callable[[], int] = dynamo_frames) -> None:
        self.frames = frames
        self.token: str | None = None
        self.spawned = False  # the test started a process (only then are there trainers to look for)
        self.started: list[str] = []
        self._frames = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._popen_init = subprocess.Popen.__init__
        self._forks: dict[str, Any] = {}

    def install(self) -> None:
        watch, original = self, self._popen_init

        def popen_init(popen: Any, args: Any, *a: Any, **k: Any) -> None:
            if watch.token is not None:
                if is_trainer(args if not isinstance(args, (str, bytes)) else [args]):
                    watch.note(" ".join(map(str, args)))
                watch.spawned = True
                watch._wake.set()
            original(popen, args, *a, **k)

        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):  # a pseudo-terminal's child, a worker
            if hasattr(os, name):
                self._forks[name] = getattr(os, name)
                setattr(os, name, self._spawner(self._forks[name]))
        if os.path.isdir("/proc"):
            self._thread = threading.Thread(target=self._poll, name="cemctl-test-guard", daemon=True)
            self._thread.start()

    def _spawner(self, original: Any) -> Any:
        def spawn(*a: Any, **k: Any) -> Any:
            if self.token is not None:
                self.spawned = True
                self._wake.set()
            return original(*a, **k)

        return spawn

    def uninstall(self) -> None:
        subprocess.Popen.__init__ = self._popen_init  # type: ignore[method-assign]
        for name, original in self._forks.items():
            setattr(os, name, original)

    def note(self, cmdline: str) -> None:
        with self._lock:
            if cmdline not in self.started:
                self.started.append(cmdline)

    def begin(self, token: str) -> None:
        self.started, self.spawned = [], False
        self._frames = self.frames()
        self.token = token
        os.environ[GUARD_ENV] = token

    def take(self, *, last: bool) -> tuple[list[str], bool]:
        """(trainers started, compiled) since `begin` or the last `take`; with `last`, stops watching."""
        if last and self.token is not None and self.spawned:
            for cmdline in trainers_with_token(self.token):  # one last look: a trainer started just now
                self.note(cmdline)
        if last:
            self.token = None
            os.environ.pop(GUARD_ENV, None)
        with self._lock:
            started, self.started = self.started, []
        frames, before = self.frames(), self._frames
        self._frames = frames
        return started, frames > 0 and frames != before

    def _poll(self) -> None:
        """While a test that started a process runs: look for its trainers every POLL_S seconds."""
        while True:
            self._wake.wait()
            token = self.token
            if token is None:
                self._wake.clear()  # asleep until the next test starts a process
                token = self.token
                if token is None:
                    continue
            for cmdline in trainers_with_token(token):
                self.note(cmdline)
            time.sleep(POLL_S)


_WATCH = Watch()


def pytest_configure(config: pytest.Config) -> None:
    _WATCH.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    _WATCH.uninstall()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if item.get_closest_marker("slow") is not None or _WATCH.token is None:
        return
    started, compiled = _WATCH.take(last=call.when == "teardown")
    if not started and not compiled:
        return
    what = [f"started a trainer process: {c}" for c in started] + (["compiled (torch.compile)"] if compiled else [])
    message = ("the fast tier's guard (tests/guard.py): a test not marked slow " + "; ".join(what)
               + ". Test the function it exercises instead, or mark the test @pytest.mark.slow.")
    if report.passed or report.skipped:
        report.outcome = "failed"
        report.longrepr = message
    else:
        report.sections.append(("fast tier guard", message))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slow") is None:
        _WATCH.begin(f"{os.getpid()}-{abs(hash(item.nodeid)):x}")
