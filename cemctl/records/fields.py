"""The field catalogue: every fact about a run a user can show, filter, sort, group, export or read from the API.

    field("test")                    -> Field(name="test_loss", ...)    # by name, short name or alias
    resolve("attn_steps")            -> "model.attn_steps"               # a config key by its unique last part
    resolve("tag.phase")             -> "tag.phase"
    resolve("test_los")              -> ConfigError: unknown field 'test_los' (did you mean test_loss?) ...
    catalogue()                      -> [Field, ...]: the run fields, then every config key

A field has one name (what `--where`, `--columns`, `--sort`, export, the API and the
dashboard call it), a short name (a table header), a type, a unit, the source it is read
from (the run's link to its experiment, its state, its progress, its result, its arm, its
tags and notes, its code fingerprint, its config) and a one-line meaning. The run fields are
the attributes of the typed record (`cemctl.records.record.RunRecord`, their metadata is this
catalogue); nothing else names a fact about a run.
Torch-free and pandas-free (status imports it on every call).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Sequence

from cem_core.errors import ConfigError

from cemctl.records.record import LOSS_UNIT as LOSS_UNIT  # the catalogue's home (re-exported)
from cemctl.records.record import RUN_FIELDS as RUN_FIELDS
from cemctl.records.record import SOURCES as SOURCES
from cemctl.records.record import Field as Field

TAG_PREFIX = "tag."
TAG_FIELD = re.compile(r"^tag\.[A-Za-z][A-Za-z0-9_.-]{0,63}$")
TAG_HELP = "a tag set with `cemctl tag RUN NAME=VALUE` (letters, digits, _ . -)"


@lru_cache(maxsize=1)
def _by_name() -> dict[str, Field]:
    return {f.name: f for f in RUN_FIELDS}


@lru_cache(maxsize=1)
def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for f in RUN_FIELDS:
        for a in (f.short, *f.aliases):
            if a and a != f.name:
                out.setdefault(a, f.name)
    return out


@lru_cache(maxsize=1)
def config_fields() -> tuple[Field, ...]:
    """One field per config key `cem_core` accepts (its type and meaning from `cem_core.keydoc`)."""
    from cem_core.keydoc import key_docs

    return tuple(Field(d.key, d.kind, "config", d.help, d.unit) for d in key_docs())


def config_keys() -> list[str]:
    return [f.name for f in config_fields()]


def catalogue() -> list[Field]:
    """Every field: the run fields, then every config key (tags are `tag.NAME`, any name)."""
    return [*RUN_FIELDS, *config_fields()]


def is_tag(name: str) -> bool:
    return name.startswith(TAG_PREFIX)


def field(name: str) -> Field:
    """The field a canonical name (from `resolve`) stands for."""
    if name in _by_name():
        return _by_name()[name]
    if is_tag(name):
        return Field(name, "str", "tags", TAG_HELP)
    for f in config_fields():
        if f.name == name:
            return f
    return Field(name, "str", "config", "a config key of a plugin")


def column_field(name: str) -> Field:
    """`field(name)` for a table column: a config key as a config field without reading every key's documentation
    (`cem_core.keydoc`: a table writes a config value as a grid file does, whatever its type)."""
    if name in _by_name() or is_tag(name):
        return field(name)
    return Field(name, "str", "config", "")


def source_of(name: str) -> str:
    return field(name).source


def allowed_names() -> list[str]:
    """What an error lists as allowed (the closest names come first, in the message itself)."""
    return ["a run field (state, test_loss, note, arm_label, ...)", "tag.NAME",
            "a config key (model.*, train.*, data.*, gp.*, task, plugins) or its last part; `cemctl keys` lists them all"]


def resolve(name: str, known: Iterable[str] = (), *, what: str = "--where") -> str:
    """The canonical field name of `name`: a run field by its name, short name or alias; `tag.NAME`; a config key
    by its dotted name or its unique last part (`known`: extra keys, e.g. a plugin's). Unknown or ambiguous: a
    ConfigError naming `what` and the closest names."""
    text = (name or "").strip()
    if text in _by_name():
        return text
    if text in _aliases():
        return _aliases()[text]
    if is_tag(text):
        if not TAG_FIELD.match(text):
            raise ConfigError(what, f"bad tag name in {text!r}", allowed=["tag.NAME (a letter, then letters, digits, _ . -)"])
        return text
    keys = list(dict.fromkeys([*config_keys(), *known]))
    if text in keys:
        return text
    tails = [k for k in keys if k.split(".")[-1] == text]
    if len(tails) == 1:
        return tails[0]
    if tails:
        raise ConfigError(what, f"ambiguous key {text!r}", allowed=tails)
    raise ConfigError(what, f"unknown field {text!r}" + _suggest(text, keys), allowed=allowed_names())


def _suggest(text: str, keys: Sequence[str]) -> str:
    """' (did you mean a or b?)': the closest run fields and config keys, a run field first when one is close."""
    import difflib

    runs = [f.name for f in RUN_FIELDS] + list(_aliases())
    by_tail = {k.split(".")[-1]: k for k in keys}
    close_runs = difflib.get_close_matches(text, runs, n=2, cutoff=0.75)
    close_keys = difflib.get_close_matches(text, [*keys, *by_tail], n=3, cutoff=0.75)
    names = list(dict.fromkeys([_aliases().get(c, c) for c in close_runs] + [by_tail.get(c, c) for c in close_keys]))
    return f" (did you mean {' or '.join(names[:3])}?)" if names else ""


def resolve_all(names: Iterable[str], known: Iterable[str] = (), *, what: str) -> list[str]:
    """Each name resolved; every unknown one is named in one error (not only the first)."""
    out, bad = [], []
    known = list(known)
    for n in names:
        try:
            out.append(resolve(n, known, what=what))
        except ConfigError as e:
            bad.append(e)
    if len(bad) == 1:
        raise bad[0]
    if bad:
        raise ConfigError(what, "; ".join(e.message for e in bad), allowed=allowed_names())
    return out


def sources(names: Iterable[str]) -> set[str]:
    """What the loader must read to have these fields."""
    return {source_of(n) for n in names}


def unit_of(name: str, tokenizers: Iterable[str] = (), task: str | None = "lm") -> str:
    """The unit of a field as it is for these runs: a loss by their tokenizer and task (`loss_unit`), any other
    field its catalogue unit."""
    f = field(name)
    return loss_unit(tokenizers, task) if f.kind == "loss" else f.unit


def loss_unit(tokenizers: Iterable[str], task: str | None = "lm") -> str:
    """The unit of a loss as it is: nats per byte with the byte tokenizer, nats per token otherwise (mixed: token)."""
    kinds = {str(t) for t in tokenizers if t is not None}
    if task == "gp":
        return "squared error"
    return "nats/byte" if kinds == {"byte"} else "nats/token"
