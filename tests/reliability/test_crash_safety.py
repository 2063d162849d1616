"""SIGKILL of the real trainer (`python -m cem_core.train RUN_DIR`) at chosen and random moments.

One run is killed again and again, each time in a different phase, and resumed
after each kill: while writing a checkpoint, right after a metrics line, while
writing the heartbeat, during the final test evaluation, while writing
result.json, during start-up, and at random times (several seeds). After some
kills the files are damaged on purpose the way a crash on a less careful file
system would leave them: a truncated last metrics line, a half-written newest
checkpoint, a garbage checkpoint file. After every kill the run must be
reportable (ingest works, it is never shown as `running` without a fresh
heartbeat) and resumable (a launch would resume it); at the end it finishes
with metrics that have no gaps and no duplicates and the losses of an
uninterrupted run of the same config, bit for bit (CPU, one thread).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.helpers import subprocess_env as env, read_jsonl

STEPS = 12
SLEEP_S = 0.15  # per step (CEMCTL_TEST_SLEEP_PER_STEP_S): a 12-step attempt trains for ~2 s
# Every atomic write (checkpoint, heartbeat, result) holds its temp file this long before the rename
# (CEMCTL_TEST_WRITE_PAUSE_S): the kill windows of "checkpoint write", "heartbeat write" and "result write"
# are then 50 ms wide, not the fraction of a millisecond a fast disk takes, so the 1 ms poll cannot miss
# them. (A miss let the attempt run to the end, which skipped the later phases: the flake.)
WRITE_PAUSE_S = 0.05


def tiny_config(cache: str) -> dict:
    from cem_core.config import RunConfig, resolve

    return resolve(RunConfig.from_dict({
        "model.size": "nano", "model.context_len": 32, "data.tokenizer": "byte", "data.cache_dir": cache,
        "train.max_steps": STEPS, "train.batch_seqs": 4, "train.micro_batch_seqs": 4, "train.log_every_steps": 1,
        "train.eval_every_steps": 4, "train.ckpt_every_steps": 2, "train.ckpt_keep": 3, "train.val_tokens": 256,
        "train.test_tokens": 256, "train.seed": 3,
    })).to_dict()


@pytest.fixture(scope="module")
def data_cache(tmp_path_factory) -> str:
    from cem_core.config import DataConfig
    from cem_core.data import prepare_data

    cache = str(tmp_path_factory.mktemp("crash-data-cache"))
    prepare_data(DataConfig(tokenizer="byte", cache_dir=cache))
    return cache


def make_run(root: Path, name: str, cfg: dict) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(cfg))
    return run_dir


class Trainer:
    """One `python -m cem_core.train` process on a run dir."""

    def __init__(self, run_dir: Path, *, sleep_s: float = SLEEP_S) -> None:
        self.run_dir = run_dir
        self.log = open(run_dir.parent / f"{run_dir.name}.stderr", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cem_core.train", str(run_dir), "--device", "cpu"],
            env=env(CEMCTL_TEST_SLEEP_PER_STEP_S=str(sleep_s), CEMCTL_HEARTBEAT_S="0.3",
                    CEMCTL_TEST_WRITE_PAUSE_S=str(WRITE_PAUSE_S if sleep_s else 0)),
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def wait_for(self, pred: Callable[[], bool], timeout_s: float = 180.0) -> bool:
        """Poll `pred` every ~1 ms; False if the process ended (or timed out) first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return True
            if self.proc.poll() is not None:
                return pred()
            time.sleep(0.001)
        return False

    def kill(self) -> int | None:
        """SIGKILL; returns None if it was killed, else the exit code it had already ended with."""
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()
        return None if rc is None else rc

    def finish(self, timeout_s: float = 300) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        self.log.close()
        return rc


# --- predicates on the run directory -------------------------------------


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def tmp_in(folder: Path, prefix: str) -> Callable[[], bool]:
    return lambda: any(n.startswith(prefix) and n.endswith(".tmp") for n in _names(folder))


def running_events(run_dir: Path) -> int:
    return sum(1 for e in read_jsonl(run_dir / "events.jsonl") if e.get("state") == "running")


def train_steps(run_dir: Path) -> list[int]:
    return [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl") if m.get("kind") == "train"]


def started(run_dir: Path, attempts_before: int) -> Callable[[], bool]:
    return lambda: running_events(run_dir) > attempts_before


def resume_step(run_dir: Path) -> int:
    from cem_core.train.checkpoint import load_latest

    state = load_latest(run_dir / "checkpoints")
    return int(state["step"]) if state else 0


def metrics_line_after(run_dir: Path, start_step: int) -> Callable[[], bool]:
    """Just after an odd step's train line (checkpoints are at even steps): a line the resume must drop."""
    path = run_dir / "metrics.jsonl"

    def pred() -> bool:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return False
        if not raw.endswith(b"\n"):
            return False
        try:
            last = json.loads(raw.rstrip(b"\n").rsplit(b"\n", 1)[-1])
        except ValueError:
            return False
        return last.get("kind") == "train" and last["step"] % 2 == 1 and last["step"] > start_step

    return pred


def in_loop(run_dir: Path, attempt: int, start_step: int) -> Callable[[], bool]:
    """This attempt's heartbeat reports a step past the checkpoint it resumed from."""
    def pred() -> bool:
        hb = read_json(run_dir / "heartbeat.json") or {}
        return hb.get("attempt") == attempt and int(hb.get("step") or 0) > start_step
    return pred


def final_eval(run_dir: Path) -> Callable[[], bool]:
    final = run_dir / "checkpoints" / f"step_{STEPS:08d}.pt"
    return lambda: final.exists() and not (run_dir / "result.json").exists()


# --- damage ----------------------------------------------------------------


def truncate_last_metrics_line(run_dir: Path) -> None:
    with open(run_dir / "metrics.jsonl", "ab") as f:
        f.write(b'{"kind": "train", "step": 9999, "tokens": 12, "train_lo')


def half_write_newest_checkpoint(run_dir: Path) -> int | None:
    from cem_core.train.checkpoint import list_checkpoints

    ckpts = list_checkpoints(run_dir / "checkpoints")
    if len(ckpts) < 2:
        return None
    step, path = ckpts[-1]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return step


def garbage_checkpoint(run_dir: Path) -> int:
    from cem_core.train.checkpoint import list_checkpoints

    ckpts = list_checkpoints(run_dir / "checkpoints")
    step = (ckpts[-1][0] + 1) if ckpts else 1
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    (run_dir / "checkpoints" / f"step_{step:08d}.pt").write_bytes(os.urandom(3000))
    return step


# --- the checks after each kill -----------------------------------------------


def check_reportable_and_resumable(engine, run_dir: Path) -> str:
    from cemctl.db import get_run, ingest_run
    from cemctl.services.launch.select import select_runs

    state = ingest_run(engine, run_dir, heartbeat_timeout_s=5.0, now=time.time() + 60)
    assert state != "running", "a killed run must not look running once its heartbeat is old"
    row = get_run(engine, run_dir.name)
    assert row is not None and row.state == state
    result = read_json(run_dir / "result.json")
    (sel,) = select_runs([(run_dir.name, run_dir)])
    if result and result.get("state") == "done":
        assert sel.action == "skip"
    else:
        assert sel.action in ("start", "resume"), sel
    return state


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def losses(run_dir: Path) -> dict[tuple[str, int], float]:
    return {(m["kind"], m["step"]): m.get("train_loss", m.get("val_loss")) for m in read_jsonl(run_dir / "metrics.jsonl")
            if m.get("kind") in ("train", "val")}


@pytest.mark.slow
def test_sigkill_in_every_phase_then_resume_matches_an_uninterrupted_run(tmp_path: Path, data_cache: str, monkeypatch):
    from cemctl.db import open_db
    from cem_core.train import run_training

    cfg = tiny_config(data_cache)
    reference = make_run(tmp_path, "reference", cfg)
    monkeypatch.setenv("CEMCTL_NUM_THREADS", "1")
    assert run_training(reference, device="cpu")["state"] == "done"
    run_dir = make_run(tmp_path, "victim", cfg)
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")

    rng = random.Random(8)
    kills: list[dict] = []

    def attempt(phase: str, pred_factory: Callable[[], Callable[[], bool]] | None, damage: Callable[[], object] | None = None,
                delay_frac: float | None = None) -> None:
        if (read_json(run_dir / "result.json") or {}).get("state") == "done":
            kills.append({"phase": phase, "hit": False, "skipped": "the run had already finished"})
            return
        before = running_events(run_dir)
        start_step = resume_step(run_dir)
        t = Trainer(run_dir)
        if phase == "startup":
            hit = t.wait_for(lambda: (run_dir / "train.log").exists() or running_events(run_dir) > before)
        else:
            assert t.wait_for(started(run_dir, before)), "the trainer did not start"
            if phase not in ("final test evaluation", "result write"):  # wait until it trains past its checkpoint
                t.wait_for(in_loop(run_dir, before + 1, start_step))
            if delay_frac is not None:
                # a random moment within the steps left, so the kill lands before the run can finish
                time.sleep(delay_frac * max(STEPS - start_step - 1, 0) * SLEEP_S)
                hit = True
            elif phase == "metrics line":
                hit = t.wait_for(metrics_line_after(run_dir, start_step))
            else:
                assert pred_factory is not None
                hit = t.wait_for(pred_factory())
        rc = t.kill()
        record = {"phase": phase, "hit": hit and rc is None, "resumed_from": start_step,
                  "last_step": max(train_steps(run_dir), default=0),
                  "tmp_left": sorted(n for n in _names(run_dir) + _names(run_dir / "checkpoints") if n.endswith(".tmp"))}
        if rc is not None:
            record["ended_by_itself"] = rc
        if damage is not None:
            record["damage"] = (damage.__name__, damage())
        record["state_after"] = check_reportable_and_resumable(engine, run_dir)
        kills.append(record)

    ckpts = run_dir / "checkpoints"
    attempt("startup", None)
    attempt("checkpoint write", lambda: tmp_in(ckpts, ".step_"))
    attempt("metrics line", None, damage=lambda: truncate_last_metrics_line(run_dir))
    attempt("heartbeat write", lambda: tmp_in(run_dir, ".heartbeat.json."))
    for frac in (rng.uniform(0.0, 0.7) for _ in range(3)):
        attempt("random", None, delay_frac=frac)
    attempt("checkpoint write", lambda: tmp_in(ckpts, ".step_"), damage=lambda: half_write_newest_checkpoint(run_dir))
    attempt("metrics line", None, damage=lambda: garbage_checkpoint(run_dir))
    attempt("final test evaluation", lambda: final_eval(run_dir))
    attempt("result write", lambda: tmp_in(run_dir, ".result.json."))

    if not (read_json(run_dir / "result.json") or {}).get("state") == "done":
        assert Trainer(run_dir, sleep_s=0.0).finish() == 0
        # the last trainer removed the temp files of the writes the kills interrupted
        assert [n for n in _names(run_dir) if n.endswith(".tmp")] == []
    result = read_json(run_dir / "result.json")
    assert result["state"] == "done" and result["steps"] == STEPS

    # metrics: every step exactly once, the same values as the uninterrupted run
    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in lines if m["kind"] == "train"] == list(range(1, STEPS + 1))
    assert [m["step"] for m in lines if m["kind"] == "val"] == [4, 8, 12]
    assert losses(run_dir) == losses(reference)
    assert result["test_loss"] == read_json(reference / "result.json")["test_loss"]

    # events: one running event per started attempt, one done
    events = read_jsonl(run_dir / "events.jsonl")
    assert [e["state"] for e in events].count("done") <= 1
    attempts = [e["attempt"] for e in events if e["state"] == "running"]
    assert attempts == list(range(1, len(attempts) + 1))

    # the database agrees with the files
    from cemctl.db import get_run, ingest_run
    from sqlalchemy import text

    assert ingest_run(engine, run_dir) == "done"
    assert get_run(engine, run_dir.name).last_step == STEPS
    with engine.connect() as c:
        rows = c.execute(text("SELECT kind, step FROM metrics WHERE run_id = :r ORDER BY kind, step"), {"r": run_dir.name}).all()
    assert [s for k, s in rows if k == "train"] == list(range(1, STEPS + 1))

    hit = [k for k in kills if k["hit"]]
    print("\ncrash kills:", json.dumps(kills, indent=None))
    phases = {k["phase"] for k in hit}
    # the targeted phases that have a window of milliseconds must have been hit
    assert {"checkpoint write", "metrics line", "random", "heartbeat write", "result write"} <= phases, kills
    assert len(hit) >= 9, kills
