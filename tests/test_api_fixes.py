"""Every name a PM401-PM404 fix writes must exist, spelled as the fix spells it, with the imports
the fix adds: checked in a fresh interpreter of the installed jax, jax 0.7.2 and the newest jax
(the fixed file runs on all of them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import jaxenv

from pmap_migrate.rules.fixes import api as api_rewrite
from pmap_migrate.rules.knowledge import tables

WRITTEN = sorted(
    {e.replacement for e in tables.REMOVED_NAMES + tables.EXPERIMENTAL_MAPS_NAMES if e.rename}
    | {tables.SHARD_MAP_REPLACEMENT, tables.PJIT_REPLACEMENT}
)

# Plain names first, right after `import jax`: a submodule a later check imports must not make
# an earlier one pass.
PROBE = """
import json, sys, warnings
warnings.simplefilter("ignore")
import jax
names = json.loads(sys.argv[1])
missing = []
for name, module in names:
    try:
        if module is not None:
            __import__(module)
        eval(name, {"jax": jax})
    except Exception as error:
        missing.append(f"{name} (import {module}): {type(error).__name__}: {error}")
print(json.dumps(missing))
"""


def spelled() -> list[tuple[str, str | None]]:
    """(expression, module the fix imports for it or None for `import jax`), plain ones first."""
    found = []
    for name in WRITTEN:
        module = next((m for m in api_rewrite.SEPARATE_MODULES if name == m or name.startswith(m + ".")), None)
        found.append((name, module))
    return sorted(found, key=lambda item: item[1] is not None)


def missing_in(python: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    environ["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([python, "-c", PROBE, json.dumps(spelled())], capture_output=True, text=True,
                          timeout=600, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_every_rename_names_a_replacement():
    for entry in tables.REMOVED_NAMES + tables.EXPERIMENTAL_MAPS_NAMES:
        if entry.rename:
            assert entry.replacement is not None and entry.replacement.startswith("jax"), entry


def test_replacements_exist_in_the_installed_jax():
    pytest.importorskip("jax")
    assert missing_in(sys.executable) == []


@pytest.mark.parametrize("env", [jaxenv.LEGACY, jaxenv.NEWEST], ids=lambda e: e.name)
def test_replacements_exist_in_legacy_and_newest_jax(env):
    try:
        python = str(jaxenv.python_for(env))
    except jaxenv.EnvUnavailable as error:
        pytest.skip(str(error))
    assert missing_in(python) == []
