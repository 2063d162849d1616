"""One attempt of a run from its run directory: the bookkeeping around the training loop (`run_training`).

`run_training(run_dir)` reads and checks RUN_DIR/config.json, holds the run's lock, records the attempt
(events.jsonl, the heartbeat, environment.json and its system samples) and writes its outcome once,
atomically, as a `cem_core.runfiles.RunResult` in result.json: `done` (exit 0), `diverged` (non-finite loss or
gradient norm, exit 3), `failed` (an exception, exit 1), or, after a preemption signal, a `stale` event and
exit 4 with no result (`cem_core.train.preempt`). Bad configuration raises `ConfigError` before anything is
written (exit 2). The training itself is `cem_core.train.loop`.

Not part of the code fingerprint (`cem_core.fingerprint`): how an outcome is recorded decides nothing about the
numbers, so a fix here never marks finished runs as trained by older code.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from cem_core.config import RunConfig, resolve, run_id, total_steps
from cem_core.counts import run_counts
from cem_core.errors import ConfigError, RunDiverged
from cem_core.runfolder import checked_config
from cem_core.runfiles import (
    EXIT_PREEMPTED,
    Heartbeat,
    RunDir,
    RunResult,
    call_quietly,
    cancel_requested,
    hostname,
    read_result_file,
)
from cem_core.train.console import RunConsole
from cem_core.train.environment import RunMonitor
from cem_core.train.evaluate import perplexity
from cem_core.train.failure import error_tail, error_text, fingerprint_or_error
from cem_core.train.loop import RunState, World, grad_accum_steps, log, resolve_device, set_threads, train
from cem_core.train.preempt import Preempted, Preemption
from cem_core.train.tasks import task_class

EXIT_CODES = {"done": 0, "failed": 1, "diverged": 3, "preempted": EXIT_PREEMPTED}
EXIT_BAD_CONFIG = 2


def make_result(cfg: RunConfig, st: RunState, state: str, *, code: str, error: str | None = None,
                diverged_step: int | None = None, attempt: int = 1, world: World | None = None,
                device: torch.device | None = None) -> RunResult:
    """The attempt's outcome as result.json holds it (`RunResult` checks it: a `done` without a finite test loss is
    refused here, and the attempt is recorded as failed instead)."""
    counts = run_counts(cfg)
    fpt = counts["flops_per_token"]
    return RunResult.parse({
        "state": state, "test_loss": st.test_loss, "test_ppl": perplexity(st.test_loss),
        "val_loss": st.val_loss, "val_ppl": perplexity(st.val_loss),
        "params_total": counts["params_total"], "params_non_embedding": counts["params_non_embedding"],
        "flops_per_token": fpt, "train_flops": 3 * fpt * st.tokens, "tokens": st.tokens, "steps": st.step,
        "total_steps": total_steps(cfg), "wall_time_s": round(st.elapsed_s(), 3), "error": error,
        "diverged_step": diverged_step, "test_tokens": st.test_tokens, "val_tokens": st.val_tokens, "attempt": attempt,
        "world_size": world.size if world else 1, "device": str(device) if device is not None else None,
        "host": hostname(), "run_id": run_id(cfg), "code_fingerprint": code,
    } | task_class(cfg).result_fields(cfg, examples=st.tokens, val_loss=st.val_loss, test_loss=st.test_loss,
                                      **st.task_info))  # the task's own fields (the GP study's) win


def run_training(run_dir: str | os.PathLike[str], device: str | None = None) -> dict[str, Any]:
    """Train (or resume) the run in `run_dir`; returns the result dict also written to result.json.

    Raises `ConfigError` (before writing anything) when the config or the device
    is bad; every other problem ends as a `failed` result.
    """
    rd = RunDir(run_dir)
    cfg = check_run_dir(rd)
    world = World.from_env()
    grad_accum_steps(cfg, world.size)
    dev = resolve_device(device, world)
    threads_before = torch.get_num_threads()
    set_threads()
    try:
        with rd.exclusive(enabled=world.rank == 0):  # a second trainer of this run waits, then resumes or stops
            return _run(rd, cfg, world, dev)
    finally:
        torch.set_num_threads(threads_before)  # the library form must not change its caller's process


def check_run_dir(rd: RunDir) -> RunConfig:
    """The run's resolved config; a run directory that is damaged (`cem_core.runfolder`: a config.json that is
    another run's, a result.json that is no result) is refused with ConfigError (exit 2, nothing written)."""
    cfg = resolve(checked_config(rd.path)[1])  # the trainer imports the plugins a config names
    found = read_result_file(rd.path)
    if found.mtime is not None and found.result is None:
        raise ConfigError("result.json", "is not a result (a damaged file); it is never overwritten silently: "
                          "`cemctl launch --redo-damaged` moves it aside and trains again", source=str(rd.result))
    return cfg


def _run(rd: RunDir, cfg: RunConfig, world: World, dev: torch.device) -> dict[str, Any]:
    previous = read_result_file(rd.path).result
    if previous is not None and previous.state == "done":
        return previous.to_json()
    attempt = rd.previous_attempts() + 1
    code, unreadable = fingerprint_or_error(cfg)  # the model and training code this attempt runs ("": unreadable)
    world.init(dev)
    total = total_steps(cfg)
    st = RunState()
    heartbeat: Heartbeat | None = None
    monitor: RunMonitor | None = None  # environment.json and the system samples (rank 0)
    preempt = Preemption().install()
    try:
        world.barrier()  # every rank has read `attempt` before rank 0 appends to events.jsonl
        with RunConsole(rd.log, rank=world.rank, total_steps=total) as ui:
            if world.rank == 0:
                if previous is not None:  # a retry of a failed / diverged attempt
                    call_quietly(rd.result.unlink)
                rd.append_event("running", f"attempt {attempt} on {dev}", attempt=attempt, code_fingerprint=code)
                heartbeat = Heartbeat(rd.heartbeat, total_steps=total, attempt=attempt).start()
                monitor = RunMonitor.start(rd, cfg, st, dev, world, attempt=attempt, code=code)
            log.info("run %s attempt %d: %d steps on %s (world size %d, %d threads, code %s)", rd.path.name, attempt,
                     total, dev, world.size, torch.get_num_threads(), code)
            try:
                if unreadable is not None:  # e.g. a plugin source that does not parse: this attempt fails with it
                    raise unreadable
                train(cfg, rd, world, dev, attempt, st, ui, heartbeat, preempt)
                result = make_result(cfg, st, "done", code=code, attempt=attempt, world=world, device=dev)
                log.info("done: test loss %.4f (%s) over %s %s, %.1f s", st.test_loss,
                         task_class(cfg).quality(st.test_loss), st.test_tokens,
                         task_class(cfg).unit, st.elapsed_s())
            except Preempted as p:
                saved = (f"checkpoint step {p.step} written" if p.checkpointed else
                         "no step trained yet, nothing to save")
                reason = f"preempted by {p.signame} after step {p.step} ({saved}); resumes from its checkpoint"
                log.warning("%s: exiting so that the executor restarts it", reason)
                if world.rank == 0:
                    _final_heartbeat(heartbeat, st)
                    heartbeat = None
                    if cancel_requested(rd.path):  # `cemctl cancel` sent the signal: the run stays cancelled
                        rd.append_event("cancelled", f"cancelled by user ({saved})", attempt=attempt)
                    else:
                        rd.append_event("stale", reason, attempt=attempt)
                return {"state": "preempted", "step": p.step, "reason": reason, "attempt": attempt}
            except RunDiverged as e:
                log.error("diverged: %s", e)
                result = make_result(cfg, st, "diverged", code=code, error=str(e), diverged_step=e.step,
                                     attempt=attempt, world=world, device=dev)
            except Exception as e:  # noqa: BLE001 - recorded as failed, never lost
                log.error("failed:\n%s", error_tail(e, 40))
                result = make_result(cfg, st, "failed", code=code, error=error_text(e, previous), attempt=attempt,
                                     world=world, device=dev)
            if world.rank == 0:
                _final_heartbeat(heartbeat, st)  # the last heartbeat is older than result.json
                heartbeat = None
                if monitor is not None:
                    monitor.stop()  # the peaks are in environment.json before the result appears
                rd.write_result(result)
                last = (result.error or "").strip().splitlines()[-1:] or [""]
                rd.append_event(result.state, last[0][:500], attempt=attempt)
    finally:
        preempt.restore()
        if monitor is not None:
            monitor.stop()
        _final_heartbeat(heartbeat, st)
        world.close()
    return result.to_json()


def _final_heartbeat(heartbeat: Heartbeat | None, st: RunState) -> None:
    if heartbeat is not None:
        heartbeat.stop()
        heartbeat.update(step=st.step, tokens=st.tokens)
        heartbeat.beat()
