"""Is the process a run file names still the one it names? (`cemctl cancel`, `cemctl launch`, `cemctl status`)

A PID alone proves nothing: after a crash the number is reused by an unrelated
process, which a signal by PID would hit and a liveness check by PID would
call "still running" forever. So an executor records, with the PID, the
process's start time (`process_start`: the boot id and the start tick from
/proc, unique for the life of the machine) and gives the trainer a random token
in its environment (`TOKEN_ENV`). `process_matches` checks both before anyone
believes the process is alive or sends it a signal: a process that is gone, or
started at another time, or lacks the token (another user's, or another
program) is not the run's.

Records written by an older cemctl have no start time or token: their process
must at least show the expected words in its command line (the run's folder
for a trainer, `cemctl` for an orchestrator). Where /proc does not exist, the
answer is None ("cannot tell"). Torch-free, Linux /proc only.
"""

from __future__ import annotations

from pathlib import Path

TOKEN_ENV = "CEMCTL_JOB_TOKEN"
_PROC = Path("/proc")


def _boot_id() -> str:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 = state first); None when gone."""
    try:
        data = (_PROC / str(int(pid)) / "stat").read_text()
    except (OSError, ValueError):
        return None
    return data.rsplit(")", 1)[1].split()


def process_start(pid: int | None) -> str:
    """'<boot id>:<start tick>' of a live process ('' when it is gone or /proc cannot tell)."""
    if not pid:
        return ""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] == "Z":
        return ""
    return f"{_boot_id()}:{fields[19]}"  # field 22 of /proc/<pid>/stat: start time in clock ticks since boot


def proc_available() -> bool:
    return (_PROC / "self" / "stat").exists()


def _environ_has(pid: int, entry: str) -> bool:
    try:
        data = (_PROC / str(int(pid)) / "environ").read_bytes()
    except OSError:  # gone, or another user's process: not ours either way
        return False
    return entry.encode() in data.split(b"\0")


def _cmdline_has(pid: int, words: tuple[str, ...]) -> bool:
    try:
        data = (_PROC / str(int(pid)) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return all(w in data for w in words)


def started_at(pid: int) -> float | None:
    """The unix time a live process started; None when it cannot be told.

    Its age comes from one clock, the time since boot (/proc/uptime against the start tick in /proc/<pid>/stat),
    and is subtracted from the wall clock read at the same moment: /proc/stat's btime is a whole second and, in a
    VM restored from a snapshot or a sandbox, may be stale by more than that (a process then seemed to start in
    the future). A start later than now is read as now."""
    import os
    import time

    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        uptime_s = float((_PROC / "uptime").read_text().split()[0])
        age_s = max(0.0, uptime_s - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - age_s


def process_matches(pid: int | None, start: str = "", token: str = "", *, legacy_words: tuple[str, ...] = (),
                    legacy_not_after: float | None = None) -> bool | None:
    """True when `pid` is alive and is the recorded process: same start time (when recorded) and the token in its
    environment (when recorded). A record without either (an older cemctl's) needs every one of `legacy_words` in
    the process's command line AND a process that started no later than `legacy_not_after` (the record's own
    write time): never a match by the command line alone (a `tail -f` of the run's log names its folder too).
    False when it is gone or another process. None when this system has no /proc to tell."""
    if not pid:
        return False
    if not proc_available():
        return None
    now = process_start(pid)
    if not now:
        return False  # gone (or a zombie: exited, not reaped)
    if start and now != start:
        return False  # the PID was reused
    if token and not _environ_has(pid, f"{TOKEN_ENV}={token}"):
        return False
    if not start and not token:
        if not legacy_words or legacy_not_after is None or not _cmdline_has(pid, legacy_words):
            return False
        began = started_at(pid)
        return began is not None and began <= legacy_not_after + 2.0  # the record was written after it started
    return True


def describe_mismatch(pid: int | None, start: str = "") -> str:
    """Why the recorded process is not the run's, in words (for a stale reason)."""
    if not pid:
        return "no process recorded"
    now = process_start(pid)
    if not now:
        return f"process {pid} is gone"
    return f"PID {pid} now belongs to another process" + (" (started at another time)" if start and now != start else "")
