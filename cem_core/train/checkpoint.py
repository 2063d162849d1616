"""Atomic, rotated checkpoints of a run (`python -m cem_core.train RUN_DIR` saves and resumes).

A checkpoint is `RUN_DIR/checkpoints/step_XXXXXXXX.pt` (8-digit optimizer step),
a `torch.save` dict holding the model, optimizer and scheduler state, step,
tokens, the torch RNG states, the metrics byte offset and the elapsed time.

- Saving writes a temp file in the same folder, fsyncs it and renames it into
  place, so a kill at any moment leaves either no new checkpoint or a whole one;
  then all but the newest `keep` are deleted.
- Loading tries the newest file first; one that does not load (truncated,
  garbled, missing keys) is logged, skipped, and the previous one is used.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from cem_core.runfiles.files import CHECKPOINT_RE, atomic_write, checkpoint_name, list_checkpoints

log = logging.getLogger("cem_core.train")

REQUIRED_KEYS = ("model", "optimizer", "scheduler", "step", "tokens")
FORMAT_VERSION = 1


def checkpoint_path(ckpt_dir: str | os.PathLike[str], step: int) -> Path:
    return Path(ckpt_dir) / checkpoint_name(step)


def save_checkpoint(ckpt_dir: str | os.PathLike[str], state: dict[str, Any], *, keep: int) -> Path:
    """Write `state` (must hold 'step') atomically, then keep only the newest `keep` files."""
    d = Path(ckpt_dir)
    d.mkdir(parents=True, exist_ok=True)
    step = int(state["step"])
    final = checkpoint_path(d, step)
    state = {**state, "format_version": FORMAT_VERSION}
    try:
        atomic_write(final, lambda f: torch.save(state, f))  # a kill leaves no new checkpoint or a whole one
    except (RuntimeError, OSError) as e:  # torch's own words for a full disk name no file ("file write failed")
        if _no_space(e, d, _nbytes(state)):
            import errno

            raise OSError(errno.ENOSPC, "no space left on device writing a checkpoint", str(final)) from None
        raise
    rotate(d, keep=keep)
    return final


def _nbytes(obj: Any) -> int:
    """The bytes of the tensors in a checkpoint state (what writing it needs, roughly)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _no_space(e: BaseException, folder: Path, needed: int) -> bool:
    """Whether a failed write failed for want of space (torch's own error names no errno: the free space tells)."""
    import errno
    import shutil

    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    try:
        return shutil.disk_usage(folder).free < needed + (1 << 20)
    except OSError:
        return False


def rotate(ckpt_dir: str | os.PathLike[str], *, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints, and stale temp files."""
    files = list_checkpoints(ckpt_dir)
    for _, p in files[: max(0, len(files) - max(1, keep))]:
        try:
            p.unlink()
        except OSError:
            pass
    for p in Path(ckpt_dir).glob(".step_*.tmp"):  # a killed writer's temp file (this one's was renamed)
        try:
            p.unlink()
        except OSError:
            pass


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load one checkpoint (`RUN_DIR/checkpoints/step_*.pt`) on the CPU; raises ValueError when it is unusable.

    Read through `cem_core.runfiles.open_run_file`, confined to its run directory: a checkpoint (or the
    checkpoints folder) that is a symlink out of the run, a FIFO or a device is refused, never read.
    """
    from cem_core.runfiles.files import RunFileError, open_run_file

    p = Path(path)
    try:
        f = open_run_file(p.parent.parent, Path(p.parent.name) / p.name)
    except (RunFileError, OSError) as e:
        raise ValueError(f"{p.name}: {str(e).split(': ', 1)[-1] if isinstance(e, RunFileError) else e}") from None
    try:
        with f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, bad pickle, EOF ...
        raise ValueError(f"{Path(path).name}: cannot be read ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(state, dict):
        raise ValueError(f"{Path(path).name}: not a checkpoint dict")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise ValueError(f"{Path(path).name}: missing keys {missing}")
    m = CHECKPOINT_RE.match(Path(path).name)
    if m and int(m.group(1)) != int(state["step"]):
        raise ValueError(f"{Path(path).name}: holds step {state['step']}")
    return state


def load_latest(ckpt_dir: str | os.PathLike[str], *, max_step: int | None = None) -> dict[str, Any] | None:
    """The newest checkpoint that loads (optionally with step <= max_step), or None."""
    for step, path in reversed(list_checkpoints(ckpt_dir)):
        if max_step is not None and step > max_step:
            continue
        try:
            state = load_checkpoint(path)
        except ValueError as e:
            log.warning("skipping corrupt checkpoint %s", e)
            continue
        return state
    return None


def rng_state(device: torch.device) -> dict[str, Any]:
    """The torch RNG states to restore for an exact resume."""
    out: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def set_rng_state(state: dict[str, Any] | None, device: torch.device) -> None:
    if not state:
        return
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
