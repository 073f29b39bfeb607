"""`fix` through the project index: the uses of a pmap alias another module defines are rewritten as
a local alias's uses are (rules/analysis/imported.py), and the alias module and its importers are
fixed together (codemod/crossmodule.py): the alias goes only when every importer in the project is
rewritten in the run, else it stays on `runtime_shim.pmap` saying which importers keep it.

`fixtures/projects/alias_package/` is a runnable package (legacy jax 0.7.2 vs its fixed form on the
newest jax); `expected_fix.diff` holds what `fix --diff` writes on it. Regenerate with
`pytest tests/test_imported_alias_fix.py --update-fixtures` and review the diff.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from pmap_migrate.config import load_settings
from pmap_migrate.crossmodule import alias_decisions
from pmap_migrate.rules import rules_by_code
from pmap_migrate.rules.analysis.facts import module_facts
from pmap_migrate.runner import run
from tests.support.projects import package_stdout, run_cli

PROJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "projects"
PACKAGE = PROJECTS / "alias_package"
CODES = tuple(rules_by_code())


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("expected*"))
    return target


def _check(root: Path, files: list[str], *, use_cache: bool = False):
    previous = os.getcwd()
    os.chdir(root)
    try:
        return run(files, load_settings(None, root), CODES, jobs=1, use_cache=use_cache)
    finally:
        os.chdir(previous)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return root


# ------------------------------------------------------------------ the index's facts
def test_an_alias_fact_says_which_names_its_options_read_and_which_are_the_modules_constants():
    facts = module_facts(
        "import functools\nimport jax\nfrom .config import SIZE\n"
        "AXIS = 'i'\nOTHER = 'j'\nOTHER = 'k'\n"
        "p = functools.partial(jax.pmap, axis_name=AXIS)\n"
        "q = functools.partial(jax.pmap, axis_name=OTHER, axis_size=SIZE)\n"
        "r = functools.partial(jax.pmap, axis_name='i', donate_argnums=(0,))\n",
        "pkg.constants", False)
    assert (facts.aliases["p"].names, facts.aliases["p"].stable) == (("AXIS",), ("AXIS",))
    # bound twice, or imported: the importer cannot read them as the alias did
    assert (facts.aliases["q"].names, facts.aliases["q"].stable) == (("OTHER", "SIZE"), ())
    assert (facts.aliases["r"].names, facts.aliases["r"].stable) == ((), ())


def test_a_name_a_function_rebinds_is_not_a_constant():
    facts = module_facts("import functools\nimport jax\nAXIS = 'i'\n"
                         "def reset():\n    global AXIS\n    AXIS = 'j'\n"
                         "p = functools.partial(jax.pmap, axis_name=AXIS)\n", "m", False)
    assert facts.aliases["p"].stable == ()


# ------------------------------------------------------------------ the package: fixed text and counts
def test_fix_diff_of_the_package(tmp_path: Path, request):
    root = _copy(PACKAGE, tmp_path / "alias_package")
    result = run_cli(root, "fix", "--diff", "--no-cache", ".")
    expected_file = PACKAGE / "expected_fix.diff"
    if request.config.getoption("--update-fixtures"):
        expected_file.write_text(result.stdout)
    assert result.stdout == expected_file.read_text()


def test_check_fix_diff_report_and_fix_count_the_same(tmp_path: Path):
    root = _copy(PACKAGE, tmp_path / "alias_package")
    check = run_cli(root, "check", "--no-cache", ".")
    assert "Found 5 legacy patterns in 4 files." in check.output and "[*] 5 fixable" in check.output
    diff = run_cli(root, "fix", "--diff", "--no-cache", ".")
    assert "Would fix 5 of 5 legacy patterns" in diff.output
    report = run_cli(root, "report", "--no-cache", "--output-format", "json", ".")
    import json

    sites = json.loads(report.stdout)["sites"]
    assert sorted(s["state"] for s in sites) == ["fixable-safe"] * 4 + ["shimmed"]
    fixed = run_cli(root, "fix", "--no-cache", ".")
    assert "Fixed 5 of 5 legacy patterns" in fixed.output and "All checks passed!" in fixed.output
    assert "All checks passed!" in run_cli(root, "check", "--no-cache", ".").output
    texts = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")}
    # No shim left: every use was visible, so the alias went with the imports it used.
    assert not [name for name, text in texts.items() if re.search(r"^\s*(import|from) runtime_shim", text, re.MULTILINE)]
    assert not re.search(r"^pmap =", texts["mp/constants.py"], re.MULTILINE) and "import jax" not in texts["mp/constants.py"]
    assert "from ..constants import AXIS" in texts["mp/sub/evaluate.py"]
    assert "cpmap" not in texts["mp/sub/evaluate.py"]


# ------------------------------------------------------------------ subsets of the project
def _consistent(root: Path) -> None:
    """Every module that still names the alias finds it defined."""
    constants = (root / "mp" / "constants.py").read_text()
    users = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
             if re.search(r"constants\.pmap|import pmap as", p.read_text())]
    if users:
        assert re.search(r"^pmap = ", constants, re.MULTILINE), users


def test_fix_of_subsets_never_leaves_the_package_inconsistent(tmp_path: Path):
    root = _copy(PACKAGE, tmp_path / "alias_package")
    constants = (root / "mp" / "constants.py").read_text()
    # One importer alone (pre-commit): rewritten; the alias module, outside the run, is left as it is.
    result = run_cli(root, "fix", "--no-cache", "mp/sub/evaluate.py")
    assert result.exit_code == 0 and "cpmap" not in (root / "mp" / "sub" / "evaluate.py").read_text()
    assert (root / "mp" / "constants.py").read_text() == constants
    _consistent(root)
    # The alias module with another importer: the last importer, outside the run, keeps the alias
    # (on the shim, saying why); the one rewritten before no longer counts.
    result = run_cli(root, "fix", "--no-cache", "mp/constants.py", "mp/train.py")
    assert result.exit_code == 0, result.output
    constants = (root / "mp" / "constants.py").read_text()
    assert "pmap = functools.partial(runtime_shim.pmap, axis_name=AXIS)" in constants
    comment = " ".join(line.lstrip("# ") for line in constants.splitlines() if line.startswith("#"))
    assert "the public alias `pmap` is kept for importers outside this run: mp/metrics.py" in comment
    assert "constants.pmap" not in (root / "mp" / "train.py").read_text()
    _consistent(root)


def test_without_a_configuration_importers_anywhere_in_the_repository_keep_the_alias(tmp_path: Path):
    """No configuration, `fix` run from the package's directory over all its modules: a script at
    the repository's top that imports the alias keeps it (on the shim, named in its comment)."""
    root = _copy(PACKAGE, tmp_path / "alias_package")
    (root / "pyproject.toml").unlink()
    (root / ".git").mkdir()
    (root / "scripts").mkdir()
    (root / "scripts" / "bench.py").write_text(
        "from mp import constants\n\nstep = constants.pmap(lambda x: x + 1)\n")
    result = run_cli(root / "mp", "fix", "--no-cache", "--unsafe-fixes", ".")
    assert result.exit_code in (0, 1), result.output
    constants = (root / "mp" / "constants.py").read_text()
    assert "pmap = functools.partial(runtime_shim.pmap, axis_name=AXIS)" in constants
    comment = " ".join(line.lstrip("# ") for line in constants.splitlines() if line.startswith("#"))
    assert "kept for importers outside this run: scripts/bench.py" in comment, comment


def test_the_alias_goes_once_its_last_importers_are_rewritten(tmp_path: Path):
    root = _copy(PACKAGE, tmp_path / "alias_package")
    assert run_cli(root, "fix", "--no-cache", "mp/sub/evaluate.py").exit_code == 0
    _consistent(root)
    result = run_cli(root, "fix", "--no-cache", "mp/constants.py", "mp/train.py", "mp/metrics.py")
    assert result.exit_code == 0, result.output
    assert not re.search(r"^pmap =", (root / "mp" / "constants.py").read_text(), re.MULTILINE)
    _consistent(root)


def test_an_importer_not_rewritten_keeps_the_alias_and_is_named(tmp_path: Path):
    root = _write(tmp_path / "proj", {
        "pkg/__init__.py": "",
        "pkg/constants.py": "import functools\nimport jax\nfrom .config import AXIS\n\n"
                            "pmap = functools.partial(jax.pmap, axis_name=AXIS)\n",
        "pkg/config.py": "AXIS = 'i'\n",
        "pkg/user.py": "from pkg import constants\n\n\ndef f(x):\n    return x\n\n\nstep = constants.pmap(f)\n",
    })
    # The alias's axis name is an import of its module: the use cannot spell it, and says why.
    found = _check(root, ["pkg/user.py"]).results[0].active
    assert [d.fix for d in found] == [None]
    assert "not rewritten here: the alias's options read `AXIS`, which is not a module-level constant of " \
           "`pkg.constants`" in found[0].message
    # With the alias module in the run, the use counts as shimmed: the alias module's fix keeps it.
    found = _check(root, ["pkg/constants.py", "pkg/user.py"]).results
    use = [d for r in found for d in r.active if d.path == "pkg/user.py"]
    assert [d.fix.shimmed for d in use] == [True]
    result = run_cli(root, "fix", "--no-cache", ".")
    assert "Fixed 2 of 2 legacy patterns" in result.output, result.output
    constants = (root / "pkg" / "constants.py").read_text()
    joined = constants.replace("\n#   ", " ")  # the shim comment, wrapped at the line length
    assert "runtime_shim.pmap" in constants and "uses not rewritten in: pkg/user.py" in joined
    assert "constants.pmap(f)" in (root / "pkg" / "user.py").read_text()
    assert "import jax\n" not in constants  # `jax.pmap` was its only use: no unused import (F401)


def test_a_cached_importer_result_follows_the_alias_module_into_and_out_of_the_run(tmp_path: Path):
    root = _write(tmp_path / "proj", {
        "pkg/__init__.py": "",
        "pkg/constants.py": "import functools\nimport jax\nfrom .config import AXIS\n\n"
                            "pmap = functools.partial(jax.pmap, axis_name=AXIS)\n",
        "pkg/config.py": "AXIS = 'i'\n",
        "pkg/user.py": "from pkg import constants\n\n\ndef f(x):\n    return x\n\n\nstep = constants.pmap(f)\n",
    })

    def use_fix(files):
        results = _check(root, files, use_cache=True).results
        return [d.fix is not None for r in results for d in r.active if d.path == "pkg/user.py"]

    assert use_fix(["pkg/constants.py", "pkg/user.py"]) == [True]
    assert use_fix(["pkg/user.py"]) == [False]
    assert use_fix(["pkg/constants.py", "pkg/user.py"]) == [True]


def test_importers_are_found_outside_the_run_notebooks_and_re_exports_included():
    root = PROJECTS / "shared_alias"
    previous = os.getcwd()
    os.chdir(root)
    try:
        decided = dict(alias_decisions(["pkg/constants.py"], ["pkg/constants.py"], {}, str(root))[
            str(root / "pkg" / "constants.py")])
    finally:
        os.chdir(previous)
    assert decided == {
        "pmap": "importers outside this run: notebooks/demo.ipynb, pkg/__init__.py, pkg/sub/loop.py, pkg/train.py, "
                "scripts/run.py",
        "plain": "importers outside this run: pkg/sub/loop.py",
    }


# ------------------------------------------------------------------ differential
def test_the_fixed_package_prints_on_the_newest_jax_what_the_legacy_package_printed(tmp_path: Path):
    """The package on jax 0.7.2 (legacy pmap) vs the package fixed with `fix` (no shim left) on the
    newest jax, and on jax 0.7.2 unchanged."""
    from tests.support import jaxenv

    legacy = _copy(PACKAGE, tmp_path / "legacy")
    fixed = _copy(PACKAGE, tmp_path / "fixed")
    assert run_cli(fixed, "fix", "--no-cache", ".").exit_code == 0
    assert not [p for p in fixed.rglob("*.py") if "import runtime_shim" in p.read_text()]
    reference = package_stdout(jaxenv.LEGACY, legacy, repo_on_path=False)
    assert reference.strip().endswith("(8, 2) float32"), reference
    for env in (jaxenv.NEWEST, jaxenv.LEGACY):
        assert package_stdout(env, fixed, repo_on_path=False) == reference, env.name
