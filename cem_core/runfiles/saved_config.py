"""The one reader of a saved config.json (the trainer, `sync`, `import`, `launch`, every database record of a config).

    saved = read_run_config(run_dir)                 # RUN_DIR/config.json, confined to the run directory
    saved = read_config_file("x/config.json")        # any config.json (a regular file)
    saved = parse_config(data, source="a.tar.gz: runs/3f2a.../config.json")   # bytes or text already read
    saved.config  -> RunConfig (typed, strict; not resolved or validated: `cem_core.config.resolve` does that)
    saved.raw     -> the JSON object as saved (what the database records)

Strict: anything that is not a JSON object of the keys and types a `RunConfig` has (bad
JSON, a list, nesting too deep to parse, an unknown key, a wrong type, a NaN) is one
`ConfigError` line naming the file (or the record) and, where there is one, the key. A
file is read like every run file (`cem_core.runfiles.files.read_bytes`): a regular file
only, never blocking on a FIFO, at most `MAX_JSON_BYTES`. Torch-free; it imports the
config types (`cem_core.schema`), never the validation above them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cem_core.errors import ConfigError
from cem_core.runfiles.files import CONFIG_FILE, RunFileError, read_bytes, read_run_file
from cem_core.schema import RunConfig


@dataclass(frozen=True)
class SavedConfig:
    raw: dict[str, Any]  # the JSON object as saved
    config: RunConfig  # typed from it (strict)


def parse_config(data: bytes | str | None, source: str) -> SavedConfig:
    """A saved config from its JSON text; one `ConfigError` line naming `source` for any other shape."""
    try:
        raw = json.loads(data if data is not None else "null")
    except RecursionError:
        raise ConfigError(CONFIG_FILE, "is nested too deeply to be a run config", source=source) from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ConfigError(CONFIG_FILE, f"is not valid JSON ({e})", source=source) from None
    return config_from_object(raw, source)


def config_from_object(raw: Any, source: str) -> SavedConfig:
    """A saved config from its parsed JSON (a reader that parsed the file already); the same checks."""
    if not isinstance(raw, dict):
        raise ConfigError(CONFIG_FILE, f"must be a JSON object, got {type(raw).__name__}", source=source)
    try:
        return SavedConfig(raw, RunConfig.from_dict(raw))
    except ConfigError as e:
        raise e.with_source(source) from None
    except RecursionError:
        raise ConfigError(CONFIG_FILE, "is nested too deeply to be a run config", source=source) from None


def read_config_file(path: str | os.PathLike[str]) -> SavedConfig:
    """A config.json anywhere (a regular file, size-capped); one `ConfigError` line naming it otherwise."""
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        raise ConfigError(CONFIG_FILE, "missing", source=str(path)) from None
    except RunFileError as e:
        raise ConfigError(CONFIG_FILE, str(e).split(": ", 1)[-1], source=str(path)) from None
    except OSError as e:
        raise ConfigError(CONFIG_FILE, f"cannot be read ({e.strerror or e})", source=str(path)) from None
    return parse_config(data, str(path))


def read_run_config(run_dir: str | os.PathLike[str]) -> SavedConfig:
    """RUN_DIR/config.json, read only inside the run directory (a link out of it, a FIFO, a folder are refused)."""
    run_dir = Path(run_dir)
    path = run_dir / CONFIG_FILE
    if not run_dir.is_dir():
        raise ConfigError("RUN_DIR", f"run directory {str(run_dir)!r} does not exist")
    try:
        data = read_run_file(run_dir, CONFIG_FILE)
    except FileNotFoundError:
        raise ConfigError(CONFIG_FILE, f"missing in run directory {str(run_dir)!r} (the planner writes it)") from None
    except RunFileError as e:
        raise ConfigError(CONFIG_FILE, str(e).split(": ", 1)[-1], source=str(path)) from None
    except OSError as e:
        raise ConfigError(CONFIG_FILE, f"cannot be read ({e.strerror or e})", source=str(path)) from None
    return parse_config(data, str(path))


def config_of_record(config_json: str | dict[str, Any] | None, run_id: str) -> RunConfig:
    """The RunConfig a results database recorded for a run (its `config_json`, or that already parsed); one line
    naming the record otherwise."""
    source = f"the results database's record of run {run_id}"
    if isinstance(config_json, dict):
        return config_from_object(config_json, source).config
    return parse_config(config_json or "null", source).config
