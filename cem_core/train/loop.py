"""One training run from its run directory: `python -m cem_core.train RUN_DIR` / `run_training(run_dir)`.

Every executor (local CPU pool, GPU pinning, SLURM) runs this; it reads
RUN_DIR/config.json, resumes from the newest valid checkpoint, trains with the
recipe of optim.py on the data order of sampler.py, and writes the files of
cem_core.runfiles. Outcomes: `done` (exit 0), `diverged` (non-finite loss or gradient
norm, exit 3), `failed` (an exception, exit 1); each is written once,
atomically, to result.json and appended to events.jsonl. Bad configuration
raises `ConfigError` before anything is written (exit 2).

task = "gp" (the synthetic GP study) swaps in cem_core/gp/task.py for the data,
the model, the batches (examples instead of token sequences) and the evaluation
(MSE over the whole val / test split); result.json then carries `test_rmse`,
`val_rmse` and the GP counts, with null perplexities.

Data parallelism: under `torchrun` (WORLD_SIZE > 1) each process joins the
process group (NCCL on CUDA, gloo on CPU), takes its slice of each global
batch, and gradients are averaged by DDP. Only rank 0 writes files.

Determinism: the model is initialised from `torch.manual_seed(train.seed)`,
the data order is a pure function of (seed, step, micro-step, rank), and a
checkpoint holds model, optimizer, scheduler, step, tokens and the torch RNG
states, so on the CPU a resumed run repeats the uninterrupted run's losses
exactly (same thread count).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from cem_core.config import RunConfig, energy_layers, resolve, run_id, tokens_per_step, total_steps
from cem_core.counts import flops_per_token, param_counts
from cem_core.errors import ConfigError, RunDiverged
from cem_core.train.checkpoint import load_latest, rng_state, save_checkpoint, set_rng_state
from cem_core.train.console import LOGGER_NAME, PROGRESS_LINE, RunConsole
from cem_core.train.evaluate import evaluate
from cem_core.train.hooks import TestHooks
from cem_core.train.optim import build_optimizer, build_scheduler
from cem_core.runfiles import Heartbeat, RunDir, call_quietly, read_result, truncate_metrics
from cem_core.train.sampler import BatchSampler

log = logging.getLogger(LOGGER_NAME)

EXIT_CODES = {"done": 0, "failed": 1, "diverged": 3}
EXIT_BAD_CONFIG = 2
ERROR_TAIL_LINES = 15


# ---------------------------------------------------------------------------
# Process setup: world, device, threads, precision


@dataclass
class World:
    """This process's place in a data-parallel job (torchrun's environment)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @classmethod
    def from_env(cls) -> "World":
        size = int(os.environ.get("WORLD_SIZE", "1"))
        return cls(rank=int(os.environ.get("RANK", "0")), size=size,
                   local_rank=int(os.environ.get("LOCAL_RANK", "0")))

    def init(self, device: torch.device) -> None:
        if self.size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            self.owns_group = True

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.size > 1:
            dist.all_reduce(tensor)
        return tensor

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            # Meet before tearing down: a rank that destroys its gloo group while a peer is
            # still writing results can abort the peer ("terminate called without an active
            # exception"). Bounded, so a rank that died cannot hang the others here.
            try:
                if dist.get_backend() == "gloo":
                    dist.monitored_barrier(timeout=datetime.timedelta(seconds=120))
                else:
                    dist.barrier()
            except Exception:  # noqa: BLE001 - a peer is gone; tear down anyway
                pass
            dist.destroy_process_group()
            self.owns_group = False


def resolve_device(device: str | None, world: World) -> torch.device:
    """`cpu`, `cuda` or `cuda:N`; default $CEMCTL_DEVICE, else CUDA when available."""
    name = device or os.environ.get("CEMCTL_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError("--device", f"unknown device {name!r}", allowed="cpu, cuda, cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError("--device", f"unsupported device {name!r}", allowed="cpu, cuda, cuda:N")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--device", f"{name!r} requested but CUDA is not available", allowed="cpu")
        if dev.index is None:
            dev = torch.device("cuda", world.local_rank if world.size > 1 else torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise ConfigError("--device", f"{name!r}: only {torch.cuda.device_count()} CUDA devices")
        torch.cuda.set_device(dev)
    return dev


def set_threads() -> int:
    """Respect $CEMCTL_NUM_THREADS, else $OMP_NUM_THREADS (the local executor splits cores)."""
    for var in ("CEMCTL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value:
            try:
                n = int(value)
            except ValueError:
                raise ConfigError(var, f"must be a positive integer, got {value!r}") from None
            if n >= 1:
                torch.set_num_threads(n)
                break
    return torch.get_num_threads()


def autocast_factory(precision: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """auto: bf16 autocast on CUDA, fp32 on CPU; fp32: none; bf16: autocast everywhere."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def grad_accum_steps(cfg: RunConfig, world_size: int) -> int:
    t = cfg.train
    per_round = t.micro_batch_seqs * world_size
    if t.batch_seqs % per_round:
        raise ConfigError("train.batch_seqs", f"must be a multiple of train.micro_batch_seqs x world size = "
                          f"{t.micro_batch_seqs} x {world_size} = {per_round}, got {t.batch_seqs}", value=t.batch_seqs)
    return t.batch_seqs // per_round


def maybe_compile(model: torch.nn.Module, mode: str, dev: torch.device) -> torch.nn.Module:
    """`train.compile`: on, off, or auto (on for CUDA). A model that fails to compile trains eagerly, with the reason logged."""
    if mode == "off" or (mode == "auto" and dev.type != "cuda"):
        return model
    try:
        compiled = torch.compile(model)
    except Exception as e:  # noqa: BLE001 - eager is always correct, only slower
        log.warning("torch.compile failed (%s: %s); training eagerly", type(e).__name__, str(e).splitlines()[0][:200])
        return model
    log.info("torch.compile: on (train.compile=%s, %s)", mode, dev.type)
    return compiled


def schedule_every(value: int, total: int, per_run: int = 10) -> int:
    """`value` steps, or (0) about `per_run` times per run."""
    return value if value > 0 else max(1, round(total / per_run))


# ---------------------------------------------------------------------------
# The run


@dataclass
class RunState:
    """What the result needs even when the run stops early."""

    step: int = 0
    tokens: int = 0
    elapsed_prev_s: float = 0.0
    start_time: float = field(default_factory=time.time)
    val_loss: float | None = None
    val_tokens: int | None = None
    test_loss: float | None = None
    test_tokens: int | None = None
    bayes_rmse: float | None = None  # task = "gp": the GP posterior mean's test RMSE

    def elapsed_s(self) -> float:
        return self.elapsed_prev_s + (time.time() - self.start_time)


def _ppl(loss: float | None) -> float | None:
    if loss is None:
        return None
    return math.exp(loss) if loss < 700 else float("inf")


def make_result(cfg: RunConfig, st: RunState, state: str, *, error: str | None = None,
                diverged_step: int | None = None, attempt: int = 1, world: World | None = None,
                device: torch.device | None = None) -> dict[str, Any]:
    counts = param_counts(cfg.model)
    fpt = flops_per_token(cfg.model)
    return {
        "state": state,
        "test_loss": st.test_loss, "test_ppl": _ppl(st.test_loss),
        "val_loss": st.val_loss, "val_ppl": _ppl(st.val_loss),
        "params_total": counts["total"], "params_non_embedding": counts["non_embedding"],
        "flops_per_token": fpt, "train_flops": 3 * fpt * st.tokens,
        "tokens": st.tokens, "steps": st.step, "total_steps": total_steps(cfg),
        "wall_time_s": round(st.elapsed_s(), 3),
        "error": error, "diverged_step": diverged_step,
        "test_tokens": st.test_tokens, "val_tokens": st.val_tokens,
        "attempt": attempt, "world_size": world.size if world else 1,
        "device": str(device) if device is not None else None,
        "host": socket.gethostname(), "run_id": run_id(cfg),
    } | _task_result_fields(cfg, st)


def _task_result_fields(cfg: RunConfig, st: RunState) -> dict[str, Any]:
    """task = "gp": GP counts, test/val RMSE, no perplexities (cem_core.gp.task)."""
    if cfg.task != "gp":
        return {}
    from cem_core.gp.task import gp_result_fields

    return gp_result_fields(cfg, examples=st.tokens, val_loss=st.val_loss, test_loss=st.test_loss,
                            bayes_rmse=st.bayes_rmse)


def _quality(cfg: RunConfig, loss: float | None) -> str:
    """'ppl X' of a language model's NLL, 'rmse X' of a GP run's MSE."""
    if loss is None:
        return "n/a"
    if cfg.task == "gp":
        return f"rmse {math.sqrt(loss):.4f}" if loss >= 0 else "rmse nan"
    return f"ppl {_ppl(loss):.2f}"


def error_tail(exc: BaseException, lines: int = ERROR_TAIL_LINES) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    return "\n".join(text.splitlines()[-lines:])


def write_energy_lines(rd: RunDir, model: torch.nn.Module, data: Any, seq_len: int, n_seqs: int,
                       dev: torch.device, layers: list[int], step: int, tokens: int) -> None:
    """`train.energy_layers`: energies along the CEM recursion on the first val sequences.

    One metrics line per (layer, sublayer, recursion step t): {"kind": "energy",
    "step" (optimizer step), "tokens", "layer", "sublayer", "t", "energy",
    "descent_frac"}; nothing for layers without CEM sublayers.
    """
    from cem_core.model.energy import energy_diagnostics

    n = min(n_seqs, int(data.num_sequences("val", seq_len)))
    if n < 1:
        return
    batch = torch.as_tensor(np.asarray(data.sequences("val", seq_len, np.arange(n))), dtype=torch.long).to(dev)
    was_training = model.training
    model.eval()
    try:
        rows = energy_diagnostics(model, batch[:, :-1], layers)
    finally:
        model.train(was_training)
    for row in rows:
        rd.append_metrics({"kind": "energy", "step": step, "tokens": tokens, "layer": row["layer"],
                           "sublayer": row["sublayer"], "t": row["step"], "energy": row["energy"],
                           "descent_frac": row["descent_frac"]})


def run_training(run_dir: str | os.PathLike[str], device: str | None = None) -> dict[str, Any]:
    """Train (or resume) the run in `run_dir`; returns the result dict also written to result.json.

    Raises `ConfigError` (before writing anything) when the config or the device
    is bad; every other problem ends as a `failed` result.
    """
    rd = RunDir(run_dir)
    cfg = resolve(rd.load_config())
    check_run_dir(rd, cfg)
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


def check_run_dir(rd: RunDir, cfg: RunConfig) -> None:
    """Refuse (ConfigError, exit 2, nothing written) a run directory that is damaged: named by a run id that
    is not its config's hash (an edited config.json, a copied folder), or holding a result.json that is no result."""
    name = rd.path.name
    if len(name) == 12 and all(c in "0123456789abcdef" for c in name) and run_id(cfg) != name:
        raise ConfigError("config.json", f"hashes to run id {run_id(cfg)}, not {name}: the run directory is damaged "
                          "(an edited config, or a folder copied under another name); `cemctl launch --redo-damaged` "
                          "restores the recorded config", source=str(rd.config))
    if rd.result.exists() and read_result(rd.path) is None:
        raise ConfigError("result.json", "is not a result (a damaged file); it is never overwritten silently: "
                          "`cemctl launch --redo-damaged` moves it aside and trains again", source=str(rd.result))


def _run(rd: RunDir, cfg: RunConfig, world: World, dev: torch.device) -> dict[str, Any]:
    previous = rd.read_result()
    if previous and previous.get("state") == "done":
        return previous
    attempt = rd.previous_attempts() + 1
    world.init(dev)
    total = total_steps(cfg)
    st = RunState()
    heartbeat: Heartbeat | None = None
    try:
        world.barrier()  # every rank has read `attempt` before rank 0 appends to events.jsonl
        with RunConsole(rd.log, rank=world.rank, total_steps=total) as ui:
            if world.rank == 0:
                if previous is not None:  # a retry of a failed / diverged attempt
                    call_quietly(rd.result.unlink)
                rd.append_event("running", f"attempt {attempt} on {dev}", attempt=attempt)
                heartbeat = Heartbeat(rd.heartbeat, total_steps=total, attempt=attempt).start()
            log.info("run %s attempt %d: %d steps on %s (world size %d, %d threads)", rd.path.name, attempt,
                     total, dev, world.size, torch.get_num_threads())
            try:
                _train(cfg, rd, world, dev, attempt, st, ui, heartbeat)
                result = make_result(cfg, st, "done", attempt=attempt, world=world, device=dev)
                log.info("done: test loss %.4f (%s) over %s %s, %.1f s", st.test_loss, _quality(cfg, st.test_loss),
                         st.test_tokens, "examples" if cfg.task == "gp" else "tokens", st.elapsed_s())
            except RunDiverged as e:
                log.error("diverged: %s", e)
                result = make_result(cfg, st, "diverged", error=str(e), diverged_step=e.step,
                                     attempt=attempt, world=world, device=dev)
            except Exception as e:  # noqa: BLE001 - recorded as failed, never lost
                log.error("failed:\n%s", error_tail(e, 40))
                result = make_result(cfg, st, "failed", error=error_tail(e), attempt=attempt,
                                     world=world, device=dev)
            if world.rank == 0:
                _final_heartbeat(heartbeat, st)  # the last heartbeat is older than result.json
                heartbeat = None
                rd.write_result(result)
                reason = (result["error"] or "").strip().splitlines()[-1:] or [""]
                rd.append_event(result["state"], reason[0][:500], attempt=attempt)
    finally:
        _final_heartbeat(heartbeat, st)
        world.close()
    return result


def _final_heartbeat(heartbeat: Heartbeat | None, st: RunState) -> None:
    if heartbeat is not None:
        heartbeat.stop()
        heartbeat.update(step=st.step, tokens=st.tokens)
        heartbeat.beat()


def _train(cfg: RunConfig, rd: RunDir, world: World, dev: torch.device, attempt: int, st: RunState,
           ui: RunConsole, heartbeat: Heartbeat | None) -> None:
    from cem_core.data import prepare_data
    from cem_core.model import build_model

    t, m = cfg.train, cfg.model
    total, tps, seq_len = total_steps(cfg), tokens_per_step(cfg), m.context_len
    accum = grad_accum_steps(cfg, world.size)
    rank0 = world.rank == 0
    hooks = TestHooks.from_env(attempt)

    # Data: rank 0 builds the cache first, the others then open it.
    data, gp = None, None
    if cfg.task == "gp":  # GP regression: an example plays the part of a token (cem_core/gp/task.py)
        from cem_core.gp.task import GPTask

        gp = GPTask(cfg, dev)
        tps, n_train, st.bayes_rmse = t.batch_seqs, gp.num_train, gp.data.bayes_rmse
    else:
        if rank0:
            data = prepare_data(cfg.data, min_train_tokens=total * tps)
        world.barrier()
        if data is None:
            data = prepare_data(cfg.data, min_train_tokens=total * tps)
        if data.vocab_size > m.vocab_size:
            raise ConfigError("model.vocab_size", f"is {m.vocab_size} but the tokenizer has {data.vocab_size} tokens")
        n_train = int(data.num_sequences("train", seq_len))
        if n_train < 1:
            raise ValueError(f"the train split has fewer than {seq_len + 1} tokens (model.context_len={seq_len})")

    # Model, optimizer, schedule; then the newest valid checkpoint.
    torch.manual_seed(t.seed)
    model = (gp.build_model() if gp is not None else build_model(m)).to(dev)
    if t.activation_checkpointing and hasattr(model, "checkpoint_blocks"):
        model.checkpoint_blocks = True
    optimizer = build_optimizer(model, t, dev)
    scheduler = build_scheduler(optimizer, t, total)
    ckpt = load_latest(rd.checkpoints)
    start_step = 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt.get("rng"), dev)
        start_step = int(ckpt["step"])
        st.elapsed_prev_s = float(ckpt.get("elapsed_s", 0.0))
        st.val_loss, st.val_tokens = ckpt.get("val_loss"), ckpt.get("val_tokens")
        log.info("resumed from checkpoint step %d (%d tokens)", start_step, int(ckpt["tokens"]))
        del ckpt
    if world.size > 1:  # every rank must resume from the same step
        steps = torch.tensor([start_step, -start_step], dtype=torch.long, device=dev)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        if int(steps[0]) != -int(steps[1]):
            raise RuntimeError("ranks resumed from different checkpoints")
    st.step, st.tokens = start_step, start_step * tps
    if rank0:
        truncate_metrics(rd.metrics, start_step)
    if heartbeat is not None:
        heartbeat.update(step=st.step, tokens=st.tokens)
        heartbeat.beat()

    fwd_model = maybe_compile(model, t.compile, dev)
    if world.size > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model: torch.nn.Module = DDP(fwd_model, device_ids=[dev.index] if dev.type == "cuda" else None)
    else:
        train_model = fwd_model
    autocast = autocast_factory(t.precision, dev)
    sampler = BatchSampler(seed=t.seed, num_sequences=n_train, batch_seqs=t.batch_seqs,
                           micro_batch_seqs=t.micro_batch_seqs, world_size=world.size)
    eval_every = schedule_every(t.eval_every_steps, total)
    ckpt_every = schedule_every(t.ckpt_every_steps, total)
    clip = t.grad_clip if t.grad_clip > 0 else float("inf")
    e_layers = energy_layers(cfg) if gp is None else []

    def run_eval(split: str, n_tokens: int):
        if gp is not None:  # the whole (fixed) val / test split
            return gp.evaluate(model, split, micro_batch=t.micro_batch_seqs, autocast=autocast,
                               rank=world.rank, world_size=world.size)
        return evaluate(model, data, split, seq_len=seq_len, n_tokens=n_tokens, micro_batch_seqs=t.micro_batch_seqs,
                        device=dev, autocast=autocast, rank=world.rank, world_size=world.size)

    model.train()
    interval_tokens, interval_time = 0, 0.0
    for step in range(start_step + 1, total + 1):
        hooks.before_step(step)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), dtype=torch.float32, device=dev)
        for a in range(accum):
            idx = sampler.indices(step, a, world.rank)
            if gp is not None:
                x, y = gp.batch("train", idx)
            else:
                batch = torch.as_tensor(np.asarray(data.sequences("train", seq_len, idx)), dtype=torch.long)
                batch = batch.to(dev, non_blocking=True)
                x, y = batch[:, :-1], batch[:, 1:]
            sync = train_model.no_sync() if (world.size > 1 and a < accum - 1) else contextlib.nullcontext()
            with sync:
                with autocast():
                    _, loss = train_model(x, y)
                loss = hooks.loss(step, loss)
                (loss / accum).backward()
            loss_sum += loss.detach().float()
        world.all_sum(loss_sum)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        train_loss = float(loss_sum) / (accum * world.size)
        if not (math.isfinite(train_loss) and math.isfinite(grad_norm)):
            st.step = step - 1
            raise RunDiverged(step, train_loss if not math.isfinite(train_loss) else grad_norm)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        interval_time += time.perf_counter() - t0
        interval_tokens += tps
        st.step, st.tokens = step, step * tps
        if heartbeat is not None:
            heartbeat.update(step=step, tokens=st.tokens)

        if step % t.log_every_steps == 0 or step == total:
            tokens_per_s = interval_tokens / max(interval_time, 1e-9)
            interval_tokens, interval_time = 0, 0.0
            if rank0:
                rd.append_metrics({"kind": "train", "step": step, "tokens": st.tokens, "train_loss": train_loss,
                                   "lr": lr, "grad_norm": grad_norm, "tokens_per_s": round(tokens_per_s, 1),
                                   "time_s": round(st.elapsed_s(), 3)})
                if heartbeat is not None:
                    heartbeat.beat()
                info = f"loss {train_loss:.4f} lr {lr:.2e} gnorm {grad_norm:.3f} {tokens_per_s:,.0f} tok/s"
                ui.progress(step, info)
                log.info("step %d/%d %s", step, total, info, extra={PROGRESS_LINE: True})
        if step % eval_every == 0 or step == total:
            val = run_eval("val", t.val_tokens)
            st.val_loss, st.val_tokens = val.loss, val.tokens
            if rank0:
                rd.append_metrics({"kind": "val", "step": step, "tokens": st.tokens, "val_loss": val.loss,
                                   "time_s": round(st.elapsed_s(), 3)})
                log.info("step %d/%d val loss %.4f (%s)", step, total, val.loss, _quality(cfg, val.loss))
                if e_layers:
                    try:
                        write_energy_lines(rd, model, data, seq_len, t.micro_batch_seqs, dev, e_layers, step, st.tokens)
                    except Exception as e:  # noqa: BLE001 - a diagnostic must not end the run
                        log.warning("energy diagnostics failed at step %d: %s", step, e)
        if (step % ckpt_every == 0 or step == total) and rank0:
            path = save_checkpoint(rd.checkpoints, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step, "tokens": st.tokens,
                "rng": rng_state(dev), "metrics_offset": rd.metrics.stat().st_size if rd.metrics.exists() else 0,
                "elapsed_s": st.elapsed_s(), "val_loss": st.val_loss, "val_tokens": st.val_tokens,
                "config": cfg.to_dict(),
            }, keep=t.ckpt_keep)
            log.info("checkpoint %s", path.name)

    ui.progress(total)
    test = run_eval("test", t.test_tokens)
    st.test_loss, st.test_tokens = test.loss, test.tokens
    if st.val_loss is None:  # resumed from the final checkpoint of an older format
        val = run_eval("val", t.val_tokens)
        st.val_loss, st.val_tokens = val.loss, val.tokens
    if not math.isfinite(st.test_loss):
        raise RunDiverged(total, st.test_loss)
