"""Runs trained by older model code (`cemctl status`, `report`, `claims`, `launch --rerun-outdated`).

    outdated_runs(engine)                 -> {"3f2a...": Outdated(recorded="9f3a61c0b2d4", current="0b1c...")}
    outdated_runs(engine, ["3f2a..."])    -> only those runs

A run's id hashes its configuration, not the code that trained it. Each attempt
records the fingerprint of the model and training code it ran (`result.json`'s
`code_fingerprint`, `cem_core.fingerprint`: the syntax of the model, training step,
optimizer, sampling, evaluation, token stream and plugin sources, docstrings and
comments ignored). A finished run whose recorded fingerprint is not the one this
installation computes for the same configuration was trained by other code: its
numbers may not be what the code would produce now. It stays visible and counted
(nothing is dropped), and status, report and claims say how many there are; `cemctl
launch EXPERIMENT --rerun-outdated` trains exactly those runs again.

Runs finished before fingerprints were recorded (cemctl 0.2) have none and are not
called outdated: which code trained them cannot be told. A fingerprint shown by retraining to
compute what this code computes (`cem_core.fingerprint.EQUIVALENT`, with its evidence) is current.

The current fingerprint is computed once per process and plugin set (a few
milliseconds from the fingerprint cache); only runs whose recorded fingerprint
differs from the plain one are looked at closer (a run of a plugin variant counts
its plugin's source too; a run that uses none of a plugin's names does not, so editing
a plugin makes only the runs of its variants outdated). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Engine

    from cemctl.db.read import Reader

RERUN_HINT = "cemctl launch EXPERIMENT --rerun-outdated"


@dataclass(frozen=True)
class Outdated:
    recorded: str  # the fingerprint of the code that trained the run
    current: str  # the fingerprint of this installation's code for the same configuration


@lru_cache(maxsize=64)
def current_code(plugins: tuple[str, ...] = ()) -> str:
    """This installation's code fingerprint (with the sources of `plugins`)."""
    from cem_core.fingerprint import code_fingerprint

    return code_fingerprint(plugins=plugins)


def _current_for(config: Callable[[], Any], rid: str = "?") -> tuple[str, ...] | None:
    """The current fingerprints one run's configuration (`config()`: a RunConfig, a dict or its JSON) may have been
    recorded with: with the plugins whose names it uses, then (for runs trained before that rule) with every plugin
    it loads; None when it cannot be told (a plugin that no longer loads, a config missing or unreadable)."""
    from cem_core.errors import CemError
    from cem_core.plugins import load_plugins, loaded_plugins, used_plugins
    from cem_core.runfiles import config_of_record
    from cem_core.schema import RunConfig

    try:
        found = config()
        if found is None:
            return None
        cfg = found if isinstance(found, RunConfig) else config_of_record(found, rid)
        if cfg.plugins:
            load_plugins(cfg.plugins)
        used, loaded = used_plugins(cfg), loaded_plugins(cfg)
        return (current_code(used),) if used == loaded else (current_code(used), current_code(loaded))
    except (CemError, ValueError, TypeError):
        return None


def judge(recorded: Iterable[tuple[str, Any, Callable[[], Any]]]) -> dict[str, Outdated]:
    """(run id, recorded fingerprint, a function returning its config) -> the outdated ones. A run without a
    recorded fingerprint is not judged; the config is read only when the plain fingerprint differs.

    A plugin's source counts only for the runs whose config uses one of its registered names (`used_plugins`). A
    run trained before that rule recorded the fingerprint with every plugin its grid loads: it is current when
    that one matches too (it cannot tell which part changed when neither does, so it is outdated then)."""
    from cem_core.fingerprint import equivalent

    base = current_code()
    out: dict[str, Outdated] = {}
    for rid, code, config in recorded:
        if not isinstance(code, str) or not code or equivalent(code, base):
            continue  # this code, or code shown to compute the same (`cem_core.fingerprint.EQUIVALENT`)
        current = _current_for(config, rid)
        if current is not None and code not in current:
            out[rid] = Outdated(code, current[0])
    return out


def outdated_runs(source: "Engine | Reader", run_ids: Iterable[str] | None = None) -> dict[str, Outdated]:
    """Finished runs (done or diverged) whose recorded code fingerprint is not this installation's, as the
    database recorded them."""
    from cemctl.db.read import open_reader

    wanted = None if run_ids is None else set(run_ids)
    if wanted is not None and not wanted:
        return {}
    reader = open_reader(source)
    rows = [(rid, code, config) for rid, code, config in reader.rows(
        "SELECT res.run_id, res.code_fingerprint, r.config_json FROM results res JOIN runs r ON r.id = res.run_id "
        "WHERE r.state IN ('done', 'diverged') AND res.code_fingerprint IS NOT NULL "
        "AND res.code_fingerprint != :current", current=current_code())
        if wanted is None or rid in wanted]
    return judge((rid, code, partial(str, config)) for rid, code, config in rows)


def outdated_note(n: int, experiment: str | None = None) -> str:
    """The one line status, report and claims print about outdated runs ("" for none)."""
    if not n:
        return ""
    hint = RERUN_HINT.replace("EXPERIMENT", experiment) if experiment else RERUN_HINT
    one = n == 1
    return (f"{n} finished run{'' if one else 's'} {'was' if one else 'were'} trained by older model code "
            f"(`{hint}` trains {'it' if one else 'them'} again)")


def outdated_by_experiment(source: "Engine | Reader", outdated: dict[str, Outdated], *,
                           scale: str | None = None) -> dict[str, list[str]]:
    """Experiment name -> its outdated run ids (every run of it, not only the rows a table shows); runs linked to
    no experiment are not listed."""
    from cemctl.db.read import open_reader

    if not outdated:
        return {}
    ids = list(outdated)
    out: dict[str, set[str]] = {}
    for i in range(0, len(ids), 500):
        for name, rid in open_reader(source).rows(
                "SELECT e.name, er.run_id FROM experiments e JOIN experiment_runs er ON er.experiment_id = e.id "
                "WHERE er.run_id IN (:ids)" + (" AND er.scale = :scale" if scale is not None else ""),
                ids=ids[i:i + 500], **({"scale": scale} if scale is not None else {})):
            out.setdefault(name, set()).add(rid)
    return {name: sorted(rids) for name, rids in out.items()}
