"""What `cemctl keys` lists: every config key `cem_core` accepts and every run field of the catalogue.

    config_rows("precond")  -> [{"key": "model.attn_precond", "type": "str", "default": "identity",
                                 "allowed": "identity, diag, diag_lowrank", "meaning": ..., "read_by": [...]}, ...]
    field_rows()            -> [{"field": "test_loss", "short": "test", "type": "loss", "unit": "nats/token",
                                 "source": "result", "meaning": ..., "aliases": [...]}, ...]

Config keys come from `cem_core.keydoc` (types and defaults from the config dataclasses,
allowed names from the registries, a plugin's names once its grid is planned: pass
`plugins`); run fields from `cemctl.records.fields`. A pattern keeps the rows whose name
or meaning contains it; a pattern that matches nothing is a ConfigError naming the
closest names. Torch-free.
"""

from __future__ import annotations

from typing import Any

from cem_core.errors import ConfigError


def _load_plugins(plugins: str) -> None:
    if plugins:
        from cem_core.plugins import load_plugins

        load_plugins(plugins)


def config_rows(pattern: str = "", *, plugins: str = "") -> list[dict[str, Any]]:
    from cem_core.keydoc import key_docs

    _load_plugins(plugins)
    rows = [{"key": d.key, "type": d.kind, "default": d.default, "allowed": d.allowed, "unit": d.unit,
             "meaning": d.help, "read_by": list(d.readers)} for d in key_docs()]
    return _match(rows, "key", pattern)


def field_rows(pattern: str = "") -> list[dict[str, Any]]:
    from cemctl.records.fields import RUN_FIELDS, TAG_HELP

    rows = [{"field": f.name, "short": f.header, "type": f.kind, "unit": f.unit, "source": f.source,
             "meaning": f.help, "aliases": [a for a in f.aliases if a != f.name]} for f in RUN_FIELDS]
    rows.append({"field": "tag.NAME", "short": "tag.NAME", "type": "str", "unit": "", "source": "tags",
                 "meaning": TAG_HELP, "aliases": []})
    return _match(rows, "field", pattern)


def _match(rows: list[dict[str, Any]], name: str, pattern: str) -> list[dict[str, Any]]:
    if not pattern:
        return rows
    p = pattern.lower()
    return [r for r in rows if p in str(r[name]).lower() or p in str(r["meaning"]).lower()]


def keys_listing(pattern: str = "", *, section: str = "all", plugins: str = "") -> dict[str, list[dict[str, Any]]]:
    """{"config": [...], "fields": [...]} (one of them for `section` "config" / "fields"); nothing matching `pattern`
    is a ConfigError with the closest names."""
    if section not in ("all", "config", "fields"):
        raise ConfigError("--section", f"unknown section {section!r}", value=section, allowed=("all", "config", "fields"))
    out = {}
    if section in ("all", "config"):
        out["config"] = config_rows(pattern, plugins=plugins)
    if section in ("all", "fields"):
        out["fields"] = field_rows(pattern)
    if pattern and not any(out.values()):
        import difflib

        names = [r["key"] for r in config_rows(plugins=plugins)] + [r["field"] for r in field_rows()]
        tails = {n.split(".")[-1]: n for n in names}
        close = difflib.get_close_matches(pattern, [*names, *tails], n=3, cutoff=0.6)
        close = list(dict.fromkeys(tails.get(c, c) for c in close))
        raise ConfigError("keys", f"no key or field matches {pattern!r}"
                          + (f" (did you mean {' or '.join(close)}?)" if close else ""),
                          allowed=["part of a key, a field or a meaning; `cemctl keys` lists them all"])
    return out
