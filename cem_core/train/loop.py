"""The training of one run: setup (task, model, optimizer), resume (newest checkpoint), then per optimizer step
`_step` (forward/backward over the micro-batches, clip, update) and `_step_end` (log, evaluate, checkpoint), then
the test evaluation (`train`). What an attempt records around it (result.json, events, the heartbeat) is
`cem_core.train.attempt`; this file and what it imports to compute are the code fingerprint (`cem_core.fingerprint`).

What differs between tasks is a `cem_core.train.tasks.Task`: `LMTask` (language modelling) or the GP
study's `GPTask` (examples instead of token sequences, MSE evaluation; result.json then carries `test_rmse`,
`val_rmse` and the GP counts).

Data parallelism: under `torchrun` (WORLD_SIZE > 1) each process joins the process group (NCCL on CUDA, gloo
on CPU), takes its slice of each global batch, and gradients are averaged by DDP. Only rank 0 writes files.

Preemption (`cem_core.train.preempt`): after a signal the loop finishes the step it is in, writes a checkpoint of
it and raises `Preempted`; the next attempt resumes from that very step.

Determinism: the model is initialised from `torch.manual_seed(train.seed)`, the data order is a pure function of
(seed, step, micro-step, rank), and a checkpoint holds model, optimizer, scheduler, step, tokens and the torch RNG
states, so on the CPU a resumed run repeats the uninterrupted run's losses exactly (same thread count).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

from cem_core.config import RunConfig, total_steps
from cem_core.errors import ConfigError, RunDiverged
from cem_core.runfiles import Heartbeat, RunDir, truncate_metrics
from cem_core.train.checkpoint import load_latest, rng_state, save_checkpoint, set_rng_state
from cem_core.train.console import LOGGER_NAME, PROGRESS_LINE, RunConsole
from cem_core.train.hooks import TestHooks
from cem_core.train.optim import build_optimizer, build_scheduler
from cem_core.train.preempt import Preempted, Preemption
from cem_core.train.sampler import BatchSampler
from cem_core.train.tasks import make_task, task_class

log = logging.getLogger(LOGGER_NAME)



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
    return compiled  # type: ignore[return-value]


def compile_probe(compiled: torch.nn.Module, model: torch.nn.Module,
                  batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                  autocast: Callable[[], contextlib.AbstractContextManager]) -> torch.nn.Module:
    """A compiled model compiles at its first forward and backward: do both now on one micro-batch.

    A failure (an unsupported op, a compiler error) returns the eager model, with the reason logged; running
    out of memory is not a compile failure and is raised. The probe's gradients are dropped; it draws no
    random numbers, so the run's losses do not depend on it.
    """
    x, y = batch()
    try:
        with autocast():
            _, loss = compiled(x, y)
        loss.backward()
    except torch.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - eager computes the same function, only slower
        reason = " ".join(str(e).split())[:200]
        log.warning("torch.compile failed at the first step (%s: %s); training eagerly", type(e).__name__, reason)
        return model
    finally:
        model.zero_grad(set_to_none=True)
    return compiled


def model_uses_attention_kernel(model: torch.nn.Module) -> bool:
    from cem_core.model.attention import CEMAttention

    return any(isinstance(m, CEMAttention) and (m.position == "alibi" or m.kq_diagonal != "none")
               for m in model.modules())


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
    task_info: dict[str, Any] = field(default_factory=dict)  # Task.info, once the task is up

    def elapsed_s(self) -> float:
        return self.elapsed_prev_s + (time.time() - self.start_time)


@dataclass
class _Training:
    """Everything one attempt trains with (built by `_setup`)."""

    task: Any  # cem_core.train.tasks.Task
    model: torch.nn.Module
    train_model: torch.nn.Module  # compiled and/or DDP-wrapped view of `model`
    optimizer: torch.optim.Optimizer
    scheduler: Any
    sampler: BatchSampler
    autocast: Callable[[], contextlib.AbstractContextManager]
    accum: int
    total: int
    eval_every: int
    ckpt_every: int
    clip: float


def _setup(cfg: RunConfig, world: World, dev: torch.device, st: RunState) -> _Training:
    """The task (data), the model, optimizer and schedule of this run."""
    t = cfg.train
    task = make_task(cfg, dev, world)
    st.task_info = dict(task.info)
    torch.manual_seed(t.seed)
    model = task.build_model().to(dev)
    if t.activation_checkpointing and hasattr(model, "checkpoint_blocks"):
        model.checkpoint_blocks = True  # type: ignore[assignment]
    optimizer = build_optimizer(model, t, dev)
    total = total_steps(cfg)
    scheduler = build_scheduler(optimizer, t, total)
    sampler = BatchSampler(seed=t.seed, num_sequences=task.num_train, batch_seqs=t.batch_seqs,
                           micro_batch_seqs=t.micro_batch_seqs, world_size=world.size)
    autocast = autocast_factory(t.precision, dev)
    if model_uses_attention_kernel(model):
        from cem_core.model.flex import describe_kernel

        log.info("%s", describe_kernel(dev))
    fwd_model = maybe_compile(model, t.compile, dev)
    if fwd_model is not model:
        fwd_model = compile_probe(fwd_model, model, lambda: task.train_batch(sampler.indices(1, 0, world.rank)),
                                  autocast)
    if world.size > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model: torch.nn.Module = DDP(fwd_model, device_ids=[dev.index] if dev.type == "cuda" else None)
    else:
        train_model = fwd_model
    return _Training(task, model, train_model, optimizer, scheduler, sampler, autocast,
                     grad_accum_steps(cfg, world.size), total, schedule_every(t.eval_every_steps, total),
                     schedule_every(t.ckpt_every_steps, total), t.grad_clip if t.grad_clip > 0 else float("inf"))


def _resume(tr: _Training, rd: RunDir, world: World, dev: torch.device, st: RunState,
            heartbeat: Heartbeat | None) -> int:
    """Load the newest valid checkpoint (every rank the same one); returns the step to continue after."""
    ckpt = load_latest(rd.checkpoints)
    start_step = 0
    if ckpt is not None:
        tr.model.load_state_dict(ckpt["model"])
        tr.optimizer.load_state_dict(ckpt["optimizer"])
        tr.scheduler.load_state_dict(ckpt["scheduler"])
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
    st.step, st.tokens = start_step, start_step * tr.task.tokens_per_step
    if world.rank == 0:
        truncate_metrics(rd.metrics, start_step)
    if heartbeat is not None:
        heartbeat.update(step=st.step, tokens=st.tokens)
        heartbeat.beat()
    return start_step


def _step(tr: _Training, step: int, world: World, hooks: TestHooks) -> tuple[float, float, float]:
    """One optimizer step over `accum` micro-batches: (train loss, grad norm, lr used)."""
    loss_sum = torch.zeros((), dtype=torch.float32, device=next(tr.model.parameters()).device)
    for a in range(tr.accum):
        x, y = tr.task.train_batch(tr.sampler.indices(step, a, world.rank))
        sync = tr.train_model.no_sync() if (world.size > 1 and a < tr.accum - 1) else contextlib.nullcontext()  # type: ignore[operator]
        with sync:
            with tr.autocast():
                _, loss = tr.train_model(x, y)
            loss = hooks.loss(step, loss)
            (loss / tr.accum).backward()
        loss_sum += loss.detach().float()
    world.all_sum(loss_sum)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(tr.model.parameters(), tr.clip))
    train_loss = float(loss_sum) / (tr.accum * world.size)
    if not (math.isfinite(train_loss) and math.isfinite(grad_norm)):
        raise RunDiverged(step, train_loss if not math.isfinite(train_loss) else grad_norm)
    lr = tr.optimizer.param_groups[0]["lr"]
    tr.optimizer.step()
    tr.scheduler.step()
    tr.optimizer.zero_grad(set_to_none=True)
    return train_loss, grad_norm, lr


def _evaluate(tr: _Training, split: str, world: World) -> Any:
    return tr.task.evaluate(tr.model, split, autocast=tr.autocast, rank=world.rank, world_size=world.size)


def _step_end(tr: _Training, cfg: RunConfig, rd: RunDir, world: World, dev: torch.device, st: RunState,
              ui: RunConsole, step: int, losses: tuple[float, float, float], tokens_per_s: float | None) -> None:
    """After an optimizer step: the metrics line and progress, evaluation, checkpoint (rank 0 writes)."""
    rank0 = world.rank == 0
    if tokens_per_s is not None and rank0:
        train_loss, grad_norm, lr = losses
        rd.append_metrics({"kind": "train", "step": step, "tokens": st.tokens, "train_loss": train_loss,
                           "lr": lr, "grad_norm": grad_norm, "tokens_per_s": round(tokens_per_s, 1),
                           "time_s": round(st.elapsed_s(), 3)})
        info = f"loss {train_loss:.4f} lr {lr:.2e} gnorm {grad_norm:.3f} {tokens_per_s:,.0f} tok/s"
        ui.progress(step, info)
        log.info("step %d/%d %s", step, tr.total, info, extra={PROGRESS_LINE: True})
    if step % tr.eval_every == 0 or step == tr.total:
        val = _evaluate(tr, "val", world)
        st.val_loss, st.val_tokens = val.loss, val.tokens
        if rank0:
            rd.append_metrics({"kind": "val", "step": step, "tokens": st.tokens, "val_loss": val.loss,
                               "time_s": round(st.elapsed_s(), 3)})
            log.info("step %d/%d val loss %.4f (%s)", step, tr.total, val.loss, task_class(cfg).quality(val.loss))
            tr.task.diagnostics(rd, tr.model, step, st.tokens)
    if (step % tr.ckpt_every == 0 or step == tr.total) and rank0:
        _save(tr, cfg, rd, dev, st, step)


def _save(tr: _Training, cfg: RunConfig, rd: RunDir, dev: torch.device, st: RunState, step: int) -> None:
    """The checkpoint of `step` (rank 0): model, optimizer, schedule, RNG, metrics offset, elapsed time."""
    path = save_checkpoint(rd.checkpoints, {
        "model": tr.model.state_dict(), "optimizer": tr.optimizer.state_dict(),
        "scheduler": tr.scheduler.state_dict(), "step": step, "tokens": st.tokens,
        "rng": rng_state(dev), "metrics_offset": rd.metrics.stat().st_size if rd.metrics.exists() else 0,
        "elapsed_s": st.elapsed_s(), "val_loss": st.val_loss, "val_tokens": st.val_tokens,
        "config": cfg.to_dict(),
    }, keep=cfg.train.ckpt_keep)
    log.info("checkpoint %s", path.name)


def train(cfg: RunConfig, rd: RunDir, world: World, dev: torch.device, attempt: int, st: RunState,
          ui: RunConsole, heartbeat: Heartbeat | None, preempt: Preemption | None = None) -> None:
    """Train the run to its last step and evaluate it on the test split (`st` holds what the result needs)."""
    tr = _setup(cfg, world, dev, st)
    start_step = _resume(tr, rd, world, dev, st, heartbeat)
    if preempt is not None and preempt.requested(world, dev):  # during setup: nothing new to save
        raise Preempted(start_step, preempt.name, checkpointed=start_step > 0)
    hooks = TestHooks.from_env(attempt)
    log_every = cfg.train.log_every_steps
    tr.model.train()
    interval_tokens, interval_time = 0, 0.0
    for step in range(start_step + 1, tr.total + 1):
        hooks.before_step(step)
        t0 = time.perf_counter()
        try:
            losses = _step(tr, step, world, hooks)
        except RunDiverged:
            st.step = step - 1
            raise
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        interval_time += time.perf_counter() - t0
        interval_tokens += tr.task.tokens_per_step
        st.step, st.tokens = step, step * tr.task.tokens_per_step
        if heartbeat is not None:
            heartbeat.update(step=step, tokens=st.tokens)
        tokens_per_s = None
        if step % log_every == 0 or step == tr.total:
            tokens_per_s = interval_tokens / max(interval_time, 1e-9)
            interval_tokens, interval_time = 0, 0.0
            if heartbeat is not None:
                heartbeat.beat()
        _step_end(tr, cfg, rd, world, dev, st, ui, step, losses, tokens_per_s)
        if preempt is not None and step < tr.total and preempt.requested(world, dev):
            if step % tr.ckpt_every != 0 and world.rank == 0:  # else _step_end saved this very step
                _save(tr, cfg, rd, dev, st, step)
            world.barrier()
            raise Preempted(step, preempt.name, checkpointed=True)

    ui.progress(tr.total)
    test = _evaluate(tr, "test", world)
    st.test_loss, st.test_tokens = test.loss, test.tokens
    if st.val_loss is None:  # resumed from the final checkpoint of an older format
        val = _evaluate(tr, "val", world)
        st.val_loss, st.val_tokens = val.loss, val.tokens
    if not math.isfinite(st.test_loss):
        raise RunDiverged(tr.total, st.test_loss)
