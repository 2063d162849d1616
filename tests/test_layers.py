"""cem_core's foundation stands in layers importing only downward (issue 33, item 8; the contracts are in
pyproject.toml and `lint-imports` checks them): every module imports on its own, no function-local import holds a
cycle together, and cemctl's own variants are registered before any plugin's."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


from tests.helpers import ROOT, subprocess_env

FOUNDATION = ["errors", "convert", "identity", "names", "sizes", "plugin_context", "schema", "runfiles",
              "runfiles.files", "runfiles.lock", "runfiles.manifest", "runfiles.saved_config", "runfiles.rundir",
              "runfiles.job", "runfiles.tags", "runfiles.process", "registry", "spec", "variants", "counts",
              "gp.counts", "plugins", "config", "fingerprint", "arms"]

# Files where a function-local import of cem_core may stay: the training engine, whose import time and the
# files the code fingerprint hashes (cem_core.fingerprint.MODEL_CODE: editing one marks every finished run as
# trained by older code) are reasons of their own; none of them holds a cycle (hoisting each keeps every module
# importable). tags.py: its two lazy imports (json, the lock) are left for the tags.json work.
MAY_IMPORT_LATE = ("train/", "model/", "data/sources.py", "data/tokenizer.py", "gp/data.py", "runfiles/tags.py")


# One interpreter forks a fresh child per module (nothing of cem_core imported before the fork): each module
# imports on its own, first, as in a process of its own, without 25 interpreter start-ups.
_EACH_ON_ITS_OWN = """
import os, sys
bad = []
for module in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            __import__("cem_core." + module)
        except BaseException as e:
            sys.stderr.write(f"{module}: {type(e).__name__}: {e}\\n")
            os._exit(2)
        os._exit(3 if "torch" in sys.modules else 0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        bad.append(f"{module}: " + ("torch imported" if code == 3 else f"exit {code}"))
print("; ".join(bad))
sys.exit(1 if bad else 0)
"""


def test_every_foundation_module_imports_on_its_own_without_torch():
    res = subprocess.run([sys.executable, "-c", _EACH_ON_ITS_OWN, *FOUNDATION], capture_output=True, text=True,
                         env=subprocess_env())
    assert res.returncode == 0, res.stdout + res.stderr[-800:]


def test_no_function_local_import_of_cem_core_outside_the_engine():
    late = []
    for path in sorted((ROOT / "cem_core").rglob("*.py")):
        rel = path.relative_to(ROOT / "cem_core").as_posix()
        if rel.startswith(MAY_IMPORT_LATE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("cem_core"):
                        late.append(f"{rel}:{inner.lineno} {inner.module}")
                    elif isinstance(inner, ast.Import) and any(a.name.startswith("cem_core") for a in inner.names):
                        late.append(f"{rel}:{inner.lineno}")
    assert late == [], "import these at module top (the layers allow it): " + ", ".join(late)


def test_cemctl_s_own_variants_are_registered_before_a_plugin_can_take_their_names():
    """`register` no longer imports cem_core.variants itself; the registry loads it on its first use."""
    code = ("from cem_core.spec import PreconditionerSpec, register\n"
            "from cem_core.errors import ConfigError\n"
            "try:\n"
            "    register(PreconditionerSpec('diag', 'x:Y', 'mine', 'mine', params=lambda n, w, r: 0))\n"
            "except ConfigError as e:\n"
            "    print(e)\n"
            "from cem_core.spec import ATTENTION\n"
            "print(sorted(ATTENTION.names()))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env())
    assert res.returncode == 0, res.stderr[-800:]
    assert "preconditioner 'diag' is already registered by cemctl itself" in res.stdout
    assert "['cem', 'llama', 'reuse']" in res.stdout


def test_the_public_plugin_api_keeps_its_names():
    from cem_core import config, plugins, spec, variants

    assert plugins.PluginError is __import__("cem_core.plugin_context", fromlist=["x"]).PluginError
    assert callable(plugins.current_plugin) and callable(spec.register)
    assert variants.ATTENTION is spec.ATTENTION and variants.TASKS is spec.TASKS
    for name in ("RunConfig", "ModelConfig", "DataConfig", "TrainConfig", "GPConfig", "flatten", "nest",
                 "field_names", "deep_merge", "canonical_json", "load_run_config", "resolve", "run_id"):
        assert hasattr(config, name), name
    from cem_core.config import RunConfig, run_id

    assert run_id(RunConfig()) == "72f2cbfccd83"  # run ids are hashes of configs: never changed by a refactor
    assert Path(spec.__file__).parent == ROOT / "cem_core"
