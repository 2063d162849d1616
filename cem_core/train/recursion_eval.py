"""Test-time recursion: a trained CEM model's test perplexity at other recursion depths (`cemctl eval RUN --steps 1,2,4,8`).

A CEM sublayer's weights do not depend on its number of recursive steps T, so
the final checkpoint of a run trained with T steps can be evaluated with any
other T. `evaluate_steps(run_dir, steps)`:

1. checks the run (`check_evaluable`, torch-free): its config has a CEM
   sublayer of the chosen kind (`--sublayer attention|mlp|both`; attention
   `cem`, MLP `cem` / `cem_param_matched`), result.json says `done` and the final
   checkpoint (step == total steps, which the trainer always keeps) is there;
2. for each T rebuilds the model with `model.attn_steps` and/or
   `model.mlp_steps` replaced, loads the final weights (strictly: the same
   tensors for every T), and evaluates it with the trainer's own `evaluate` on
   exactly the trainer's fixed test set (`train.test_tokens`, same micro-batch,
   same autocast), so T equal to the trained T reproduces result.json's
   `test_loss` (up to float summation order);
3. merges the rows into `RUN_DIR/evals.json` (atomic write under a lock file;
   rows keyed by (attn_steps, mlp_steps), a re-evaluation replaces its row).
   The run directory stays the ground truth; `cemctl.db.ingest` reads the file
   into the `evals` table.

evals.json: `{"run_id": ..., "evals": [row, ...]}`, row fields: attn_steps,
mlp_steps (evaluated), eval_steps (T), sublayer (what was varied: attention,
mlp or both), test_loss, test_ppl, test_tokens, flops_per_token (forward
FLOPs/token of the modified config, `cem_core.counts.flops_per_token`),
trained_attn_steps, trained_mlp_steps, device, eval_time_s, time (unix s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any, Iterator

from cem_core import runfiles
from cem_core.config import RunConfig, resolve, run_id, total_steps
from cem_core.errors import CemError, ConfigError

from cem_core.runfiles.files import EVALS_FILE  # noqa: E402 - one name for the file (runfiles)
LOCK_FILE = ".evals.lock"
SUBLAYERS = ("both", "attention", "mlp")
MAX_EVAL_STEPS = 64  # config.validate's bound on model.attn_steps / model.mlp_steps


class EvalRefused(CemError):
    """The run cannot be evaluated at other recursion depths (unknown, not done, no CEM sublayer)."""


# ---------------------------------------------------------------------------
# Torch-free checks


def parse_steps(text: str | list[int]) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (sorted, unique); anything else raises ConfigError naming --steps."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: set[int] = set()
    words, outside = [], []
    for item in items:
        try:
            value = int(str(item).strip())
        except ValueError:
            words.append(str(item).strip())
            continue
        if not 1 <= value <= MAX_EVAL_STEPS:
            outside.append(value)
        out.add(value)
    if words:  # every bad value named, not only the first
        raise ConfigError("--steps", f"must be comma-separated integers, got {', '.join(map(repr, words))} in {text!r}",
                          allowed=f"1..{MAX_EVAL_STEPS}, e.g. 1,2,4,8")
    if outside:
        raise ConfigError("--steps", f"each T must be between 1 and {MAX_EVAL_STEPS}, got "
                          f"{', '.join(map(str, outside))}", allowed=f"1..{MAX_EVAL_STEPS}")
    if not out:
        raise ConfigError("--steps", "needs at least one T", allowed=f"1..{MAX_EVAL_STEPS}, e.g. 1,2,4,8")
    return sorted(out)


def _recursing(kind: str) -> list[str]:
    """The variants of a sublayer kind with T steps inside (their spec says `recurses`)."""
    from cem_core.variants import ATTENTION, MLPS

    registry = ATTENTION if kind == "attention" else MLPS
    return [name for name in registry.names() if registry.spec(name).recurses]


def cem_sublayers(cfg: RunConfig) -> list[str]:
    """The CEM sublayer kinds of a config: a subset of ["attention", "mlp"]."""
    from cem_core.variants import TASKS

    if not TASKS.spec(cfg.task).recursion_eval:
        return []
    return [kind for kind, name in (("attention", cfg.model.attention), ("mlp", cfg.model.mlp))
            if name in _recursing(kind)]


def chosen_sublayers(cfg: RunConfig, sublayer: str, *, name: str = "") -> list[str]:
    """The sublayers whose T is varied for `--sublayer` (raises EvalRefused when the run has none of them)."""
    if sublayer not in SUBLAYERS:
        raise ConfigError("--sublayer", f"unknown sublayer {sublayer!r}", value=sublayer, allowed=SUBLAYERS)
    present = cem_sublayers(cfg)
    who = f"run {name}" if name else "the run"
    if not present:
        from cem_core.variants import TASKS

        what = (f"task {cfg.task!r}" if not TASKS.spec(cfg.task).recursion_eval
                else f"model.attention={cfg.model.attention!r}, model.mlp={cfg.model.mlp!r}")
        raise EvalRefused(f"{who} has no CEM sublayer ({what}); eval varies the recursion steps of CEM attention "
                          f"({', '.join(_recursing('attention'))}) or CEM MLP ({', '.join(_recursing('mlp'))})")
    if sublayer == "both":
        return present
    if sublayer not in present:
        value = cfg.model.attention if sublayer == "attention" else cfg.model.mlp
        key = "model.attention" if sublayer == "attention" else "model.mlp"
        raise EvalRefused(f"{who}: --sublayer {sublayer} but {key}={value!r} is not a CEM sublayer "
                          f"(CEM sublayers of this run: {', '.join(present)})")
    return [sublayer]


def sublayer_label(chosen: list[str]) -> str:
    return "both" if len(chosen) == 2 else chosen[0]


def _run_file(rd: Path, rel: str) -> Path:
    """`rd/rel` if it is a regular file inside the run directory; EvalRefused (one line) otherwise.

    Every file eval reads goes through `cem_core.runfiles`' confinement: a symlink out of the run, a FIFO or a
    device is refused without blocking (FileNotFoundError when it is missing).
    """
    import stat as _stat

    from cem_core.runfiles.files import RunFileError, confined_path

    try:
        path = confined_path(rd, rel)
    except RunFileError as e:
        raise EvalRefused(f"run {rd.name}: {rel}: {str(e).split(': ', 1)[-1]}") from None
    st = os.stat(path)  # FileNotFoundError when missing
    if not _stat.S_ISREG(st.st_mode):
        raise EvalRefused(f"run {rd.name}: {rel}: refused: not a regular file")
    return path


def check_evaluable(run_dir: str | os.PathLike[str], sublayer: str = "both") -> tuple[RunConfig, list[str]]:
    """(resolved config, sublayers to vary) of a finished CEM run; EvalRefused (one line) otherwise."""
    from cem_core.runfiles import CONFIG_FILE, RESULT_FILE, read_result

    rd = Path(run_dir)
    name = rd.name
    try:
        config = _run_file(rd, CONFIG_FILE)
    except FileNotFoundError:
        raise EvalRefused(f"unknown run {name!r}: no run directory with a config.json at {str(rd)!r}") from None
    from cem_core.config import load_run_config

    try:
        cfg = resolve(load_run_config(str(config)))
    except ValueError as e:
        raise EvalRefused(f"run {name}: bad config.json ({' '.join(str(e).split())})") from None
    chosen = chosen_sublayers(cfg, sublayer, name=name)
    try:
        _run_file(rd, RESULT_FILE)
    except FileNotFoundError:
        pass
    result = read_result(rd)
    state = result.state if result is not None else None
    if state != "done":
        raise EvalRefused(f"run {name} is not done (state: {state or 'no result.json yet'}); eval needs a finished run")
    total = total_steps(cfg)
    rel = f"{runfiles.CHECKPOINT_DIR}/{runfiles.checkpoint_name(total)}"
    try:
        _run_file(rd, rel)
    except FileNotFoundError:
        raise EvalRefused(f"run {name}: the final checkpoint {rel} (step {total}) is missing; "
                          "cannot evaluate (retrain the run)") from None
    return cfg, chosen


def eval_config(cfg: RunConfig, chosen: list[str], steps: int) -> RunConfig:
    """`cfg` with the recursion steps of the chosen sublayers set to `steps` (validated)."""
    changes: dict[str, int] = {}
    if "attention" in chosen:
        changes["attn_steps"] = steps
    if "mlp" in chosen:
        changes["mlp_steps"] = steps
    return resolve(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **changes)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# evals.json


def read_evals(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of RUN_DIR/evals.json through its one reader (`cem_core.runfiles.evals`: [] when missing, one line
    when it cannot be read, never taken for empty)."""
    from cem_core.runfiles.evals import read_evals as read

    return read(run_dir)


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold RUN_DIR/.evals.lock: opened without following a link and without blocking (a FIFO or a link planted
    there is refused, never written through or waited on)."""
    from cem_core.runfiles.files import RunFileError
    from cem_core.runfiles.lock import file_lock

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(run_dir / LOCK_FILE))
        except RunFileError as e:
            raise EvalRefused(f"run {run_dir.name}: {str(e).replace(str(run_dir) + '/', '')}") from None
        yield


def merge_evals(run_dir: str | os.PathLike[str], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge `rows` into RUN_DIR/evals.json (atomically, under a lock); returns all rows, sorted."""
    from cem_core.runfiles import atomic_write_json

    from cem_core.runfiles.evals import EvalsUnreadable

    rd = Path(run_dir)
    with _locked(rd):
        try:
            earlier = read_evals(rd)
        except EvalsUnreadable as e:  # its rows would be lost under the new ones: refused, the file untouched
            raise EvalRefused(f"run {rd.name}: {e}") from None
        merged = {(int(r["attn_steps"]), int(r["mlp_steps"])): r for r in earlier}
        for r in rows:
            merged[(int(r["attn_steps"]), int(r["mlp_steps"]))] = r
        ordered = [merged[k] for k in sorted(merged)]
        atomic_write_json(rd / EVALS_FILE, {"run_id": rd.name, "evals": ordered})
    return ordered


# ---------------------------------------------------------------------------
# The evaluation


def evaluate_steps(run_dir: str | os.PathLike[str], steps: list[int] | str, *, sublayer: str = "both",
                   device: str | None = None) -> list[dict[str, Any]]:
    """Test loss/perplexity of the run's final weights with each T of `steps`; rows also merged into evals.json.

    Raises EvalRefused / ConfigError (one line) before any work when the run cannot be evaluated.
    Non-finite losses are stored as null perplexity (the row is kept: a depth that blows up is a result).
    """
    import torch

    from cem_core.counts import flops_per_token
    from cem_core.data import data_for_run
    from cem_core.model import build_model
    from cem_core.train.checkpoint import checkpoint_path, load_checkpoint
    from cem_core.train.evaluate import evaluate, perplexity
    from cem_core.train.loop import World, autocast_factory, resolve_device, set_threads

    rd = Path(run_dir)
    step_list = parse_steps(steps)
    cfg, chosen = check_evaluable(rd, sublayer)
    t, m = cfg.train, cfg.model
    total = total_steps(cfg)
    dev = resolve_device(device, World())
    threads_before = torch.get_num_threads()
    set_threads()
    try:
        try:
            ckpt = load_checkpoint(checkpoint_path(rd / "checkpoints", total))
        except ValueError as e:
            raise EvalRefused(f"run {rd.name}: final checkpoint unusable: {e}") from None
        weights = ckpt["model"]
        del ckpt
        data = data_for_run(cfg)
        autocast = autocast_factory(t.precision, dev)
        rows = []
        for T in step_list:
            cfg_t = eval_config(cfg, chosen, T)
            torch.manual_seed(t.seed)
            model = build_model(cfg_t.model).to(dev)
            model.load_state_dict(weights, strict=True)
            t0 = time.perf_counter()
            res = evaluate(model, data, "test", seq_len=m.context_len, n_tokens=t.test_tokens,
                           micro_batch_seqs=t.micro_batch_seqs, device=dev, autocast=autocast)
            elapsed = time.perf_counter() - t0
            loss = float(res.loss)
            rows.append({
                "attn_steps": cfg_t.model.attn_steps, "mlp_steps": cfg_t.model.mlp_steps, "eval_steps": T,
                "sublayer": sublayer_label(chosen),
                "test_loss": loss if math.isfinite(loss) else None, "test_ppl": perplexity(loss),
                "test_tokens": res.tokens, "flops_per_token": flops_per_token(cfg_t.model),
                "trained_attn_steps": m.attn_steps, "trained_mlp_steps": m.mlp_steps,
                "device": str(dev), "eval_time_s": round(elapsed, 3), "time": time.time(), "run_id": run_id(cfg),
            })
            del model
    finally:
        torch.set_num_threads(threads_before)
    merge_evals(rd, rows)
    return rows
