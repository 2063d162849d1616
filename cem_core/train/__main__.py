"""`python -m cem_core.train RUN_DIR [--device cpu|cuda|cuda:N]` (also under `torchrun`).

Trains or resumes the run in RUN_DIR (see cem_core/train/attempt.py). Exit code:
0 done, 3 diverged, 1 failed, 2 bad config or arguments (one line on stderr). A failure before the attempt
could record one (no result.json) ends, after its traceback, with one line `error: ...` on stderr too.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cem_core.train",
                                     description="Train or resume the run in RUN_DIR (reads RUN_DIR/config.json).")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory (holds config.json)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: $CEMCTL_DEVICE, else cuda if available)")
    args = parser.parse_args(argv)

    from pathlib import Path

    from cem_core.errors import ConfigError
    from cem_core.plugins import PLUGINS_DIR, add_search_path
    from cem_core.train.attempt import EXIT_BAD_CONFIG, EXIT_CODES, run_training

    if not os.environ.get("CEMCTL_SNAPSHOT"):  # a job of a code snapshot imports the plugins copied into it
        add_search_path(Path(args.run_dir).resolve().parent / PLUGINS_DIR)  # else: the sources plan copied

    try:
        result = run_training(args.run_dir, device=args.device)
    except ConfigError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    except Exception as e:  # noqa: BLE001 - before the attempt could record it: the traceback, then one line
        import traceback

        from cem_core.runfiles.failure import failure_line

        traceback.print_exc()
        print(f"error: {failure_line(e)}", file=sys.stderr)  # the executor records this line as the reason
        return 1
    return EXIT_CODES.get(result.get("state", "failed"), 1)


if __name__ == "__main__":
    sys.exit(main())
