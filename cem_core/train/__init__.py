"""Training engine: `python -m cem_core.train RUN_DIR` and `run_training(run_dir, device=None)`.

Used by every executor (`cemctl launch`): one call trains or resumes one run
from its run directory and returns its result dict (also RUN_DIR/result.json).
Modules: attempt (one attempt: its files and result), loop (the training), preempt (signals), optim (recipe), sampler (data order), evaluate
(held-out perplexity), checkpoint (atomic, rotated), console (logs, progress
bar), hooks (test hooks). The run directory's files: `cem_core.runfiles`.
"""

from __future__ import annotations

from cem_core.train.attempt import EXIT_BAD_CONFIG, EXIT_CODES, run_training

__all__ = ["run_training", "EXIT_CODES", "EXIT_BAD_CONFIG"]
