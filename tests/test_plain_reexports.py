"""Re-exports through plain modules (issue 26): a module that never spells `pmap` and is not a
package, but imports a pmapped function or a pmap alias by name (`from .steps import p_double` in
`pr/api.py`), passes it on to its own importers (`from .api import p_double`, `api.p_double`,
`import pr.api as a`), as far as the chain goes (`pr/facade.py` imports from `pr/api.py`). `check`
reports each use as it reports an import from the defining module; a warm run notices when a
module starts or stops re-exporting; `fix` rewrites the uses and keeps the alias the re-exporting
modules import.

`fixtures/projects/plain_reexports/` is a runnable package: legacy jax 0.7.2 vs its fixed form on
the newest jax."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.projects import findings, package_stdout, run_cli

PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "plain_reexports"
PMAPPED = 'p_double = jax.pmap(_double, axis_name="i")'


def _copy(tmp_path: Path, config: bool = True) -> Path:
    root = shutil.copytree(PACKAGE, tmp_path / "project")
    if not config:
        (root / "pyproject.toml").unlink()
    return root


def test_check_reports_the_uses_through_modules_that_never_spell_pmap():
    assert [f for f in findings(PACKAGE) if not f.startswith("pr/steps.py")] == [
        "pr/direct.py:7:12: PM201",  # `from .steps import p_double`: for comparison
        "pr/far.py:13:12: PM101",  # `on_devices` from `pr.facade`, which has it from `pr.api`
        "pr/far.py:9:12: PM201",  # `twice`: `pr.facade`'s name for `pr.api`'s `p_double`
        "pr/main.py:7:12: PM201",  # `from .api import p_double`
        "pr/through_module.py:13:12: PM201",  # `import pr.api as a`, `a.p_double(x)[1]`
        "pr/through_module.py:9:12: PM201",  # `from . import api`, `api.p_double(x)[0]`
    ]


def test_the_chain_s_use_gets_what_the_direct_import_gets():
    """`pr/main.py` imports from the re-exporting module what `pr/direct.py` imports from the
    defining one: the same findings, the same fixes."""
    from pmap_migrate.config import load_settings
    from pmap_migrate.rules import rules_by_code
    from pmap_migrate.runner import run

    previous = os.getcwd()
    os.chdir(PACKAGE)
    try:
        results = run(["pr/direct.py", "pr/main.py"], load_settings(None, PACKAGE), tuple(rules_by_code()),
                      use_cache=False, jobs=1).results
    finally:
        os.chdir(previous)
    direct, main_ = ([(d.code, d.line, d.column, d.message, d.fix is None) for d in r.active] for r in results)
    assert direct and direct == main_


@pytest.mark.parametrize("config", [True, False], ids=["configuration", "the run's files"])
def test_a_warm_run_notices_a_module_starting_and_stopping_to_re_export(tmp_path: Path, config: bool):
    """The cache keeps no entry for a module without pmap that re-exports nothing; when the module it
    imports from starts exporting the name (or it starts importing an exported name), a warm run
    reads it again, and its importers are checked again."""
    root = _copy(tmp_path, config)
    steps = root / "pr" / "steps.py"
    api = root / "pr" / "api.py"
    pmapped, text = steps.read_text(), api.read_text()
    steps.write_text(pmapped.replace(PMAPPED, "p_double = _double"))
    states = [
        lambda: None,  # no pmapped function: nothing to re-export
        lambda: steps.write_text(pmapped),  # `pr/api.py`, unchanged, re-exports it now
        lambda: api.write_text('"""Nothing of the steps."""\n\n\ndef p_double(x):\n    return [x]\n\n\n'
                               'def on_devices(f):\n    return f\n'),
        lambda: api.write_text(text),
        lambda: steps.write_text(pmapped.replace(PMAPPED, "p_double = _double")),
    ]
    for change in states:
        change()
        warm = findings(root, ".")
        assert warm == findings(root), change
        assert warm == findings(root, "."), change  # and warm again
    assert "pr/main.py:7:12: PM201" not in warm


def test_the_cache_keeps_the_re_exporting_modules_and_no_other_module_without_pmap(tmp_path: Path):
    from pmap_migrate.cache import EXPORTS_KEY, load_pickle

    root = _copy(tmp_path)
    (root / "pr" / "unrelated.py").write_text("from .util import helper\n\nx = helper()\n")
    run_cli(root, "check", ".")
    (results,) = (root / ".pmap_migrate_cache").glob("results-*.pickle")
    contributions = load_pickle(results)[EXPORTS_KEY][0]
    assert all(part is not None for _, _, part in contributions.values())
    kept = sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in contributions)
    # the modules that import what the project exports (each binds it for its own importers)
    assert kept == ["pr/api.py", "pr/direct.py", "pr/facade.py", "pr/far.py", "pr/main.py", "pr/steps.py"]


def test_fix_rewrites_the_uses_and_keeps_the_alias_the_re_exporting_modules_import(tmp_path: Path):
    root = _copy(tmp_path)
    result = run_cli(root, "fix", "--no-cache", ".")
    assert result.exit_code == 1, result.output
    far = (root / "pr" / "far.py").read_text()
    assert "on_devices" not in far and 'jax.jit(_shard_mapped(lambda v: lax.psum(v.sum(), "i"), "i"))(x)' in far
    steps = (root / "pr" / "steps.py").read_text()
    assert "kept on the legacy shim: the public alias `on_devices` is kept for uses\n#   not rewritten in: " \
           "pr/api.py, pr/facade.py" in steps, steps
    assert 'on_devices = functools.partial(runtime_shim.pmap, axis_name="i")' in steps
    # left: `[0]` of a pmap output (PM201), where each import of the function reads it
    assert findings(root) == ["pr/direct.py:7:12: PM201", "pr/far.py:11:12: PM201",
                                            "pr/main.py:7:12: PM201", "pr/through_module.py:13:12: PM201",
                                            "pr/through_module.py:9:12: PM201"]


def test_fix_of_the_alias_module_alone_keeps_the_alias(tmp_path: Path):
    """pre-commit passes only the changed files: the re-exporting modules, outside the run, keep
    importing the alias."""
    root = _copy(tmp_path)
    run_cli(root, "fix", "--no-cache", "pr/steps.py")
    steps = (root / "pr" / "steps.py").read_text()
    assert "on_devices = functools.partial(runtime_shim.pmap" in steps
    assert "importers outside this run: pr/api.py, pr/facade.py, pr/far.py" in steps, steps


# ------------------------------------------------------------------ differential
def test_the_fixed_package_prints_on_the_newest_jax_what_the_legacy_package_printed(tmp_path: Path):
    from tests.support import jaxenv

    legacy = shutil.copytree(PACKAGE, tmp_path / "legacy")
    fixed = shutil.copytree(PACKAGE, tmp_path / "fixed")
    result = run_cli(fixed, "fix", "--no-cache", ".")
    assert "Found 5 legacy patterns in 4 files." in result.output, result.output
    reference = package_stdout(jaxenv.LEGACY, legacy)
    assert reference.count("\n") == 6, reference
    for env in (jaxenv.NEWEST, jaxenv.LEGACY):
        assert package_stdout(env, fixed) == reference, env.name
