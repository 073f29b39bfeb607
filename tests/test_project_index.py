"""The project index (rules/analysis/project.py): pmap aliases and pmapped functions that other modules
of the project define, found where they are used; the cache re-checks importers when they change.

`fixtures/projects/<case>/` are small projects (a `pyproject.toml` makes each its own root);
`expected.txt` holds what `check` reports on the whole tree. Regenerate with
`pytest tests/test_project_index.py --update-fixtures` and review the diff.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pmap_migrate.config import load_settings
from pmap_migrate.diagnostics import State
from pmap_migrate.rules import rules_by_code
from pmap_migrate.rules.analysis.facts import AliasFact, PmappedFact, absolute_name, module_facts
from pmap_migrate.rules.analysis.project import ModuleView, ProjectIndex, module_identity
from pmap_migrate.runner import run
from tests.support.projects import run_cli

PROJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "projects"
CASES = sorted(p for p in PROJECTS.iterdir() if p.is_dir())
CODES = tuple(rules_by_code())


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".py", ".ipynb"))


def _check(root: Path, files: list[str] | None = None, *, use_cache: bool = False):
    """`check` of ``files`` (default: every file) from ``root``, as the CLI runs it there."""
    previous = os.getcwd()
    os.chdir(root)
    try:
        return run(files if files is not None else _files(root), load_settings(None, root), CODES,
                   jobs=1, use_cache=use_cache)
    finally:
        os.chdir(previous)


def _render(outcome) -> str:
    lines = []
    for d in outcome.diagnostics:
        if d.state is State.ACTIVE:
            where = f"{d.path}:" + (f"cell {d.cell}:" if d.cell is not None else "")
            fix = " [fix]" if d.fix is not None else ""
            lines.append(f"{where}{d.line}:{d.column} {d.code} {d.message}{fix}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ facts and names
def test_module_facts_read_aliases_and_pmapped_functions():
    source = (
        "import functools, jax\n"
        "from jax import pmap as jp\n"
        "from . import utils\n"
        "pmap = functools.partial(jax.pmap, axis_name='batch')\n"
        "again = pmap\n"
        "plain = jax.pmap\n"
        "def moments(x):\n    return x.mean(), x.var()\n"
        "p_moments = pmap(moments, donate_argnums=0)\n"
        "@functools.partial(jax.pmap, axis_name='i')\ndef step(x):\n    return x\n"
        "@jp\ndef single(x):\n    return (x,)\n"
        "shadowed = jax.pmap\nshadowed = None\n"
    )
    facts = module_facts(source, "pkg.constants", False)
    assert facts.aliases == {
        "pmap": AliasFact("pkg.constants", "pmap", "axis_name='batch'"),
        "again": AliasFact("pkg.constants", "again", "axis_name='batch'"),
        "plain": AliasFact("pkg.constants", "plain", ""),
    }
    assert facts.pmapped == {
        "p_moments": PmappedFact("pkg.constants", "p_moments", "axis_name='batch', donate_argnums=0", True),
        "step": PmappedFact("pkg.constants", "step", "axis_name='i'", False),
        "single": PmappedFact("pkg.constants", "single", "", True),
    }
    assert facts.imports["utils"] == "pkg.utils"
    assert facts.imports["jp"] == "jax.pmap"


def test_module_without_pmap_has_only_its_imports_as_facts():
    facts = module_facts("from .constants import helper\n", "pkg.train", False)
    assert not facts.exports_pmap and facts.imports == {"helper": "pkg.constants.helper"}
    # read from the import statements alone, unless a name they bind is bound again
    rebound = module_facts("from .constants import helper\n\nhelper = wrap(helper)\n", "pkg.train", False)
    assert rebound.imports == {}
    listed = module_facts("from .steps import (\n    a,\n    b as c,\n)\n__all__ = ['c']\n", "pkg.api", False)
    assert listed.imports == {"a": "pkg.steps.a", "c": "pkg.steps.b"} and listed.public == ["c"]


@pytest.mark.parametrize("relative, module, package, expected", [
    (".constants.pmap", "pkg.train", False, "pkg.constants.pmap"),
    ("..constants.pmap", "pkg.sub.loop", False, "pkg.constants.pmap"),
    (".constants", "pkg", True, "pkg.constants"),
    (".", "pkg.train", False, "pkg"),
    ("...x", "pkg.train", False, None),
    ("pkg.constants", "anything", False, "pkg.constants"),
])
def test_absolute_name(relative, module, package, expected):
    assert absolute_name(relative, module, package) == expected


def test_module_identity_follows_packages(tmp_path: Path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for init in ("pkg/__init__.py", "pkg/sub/__init__.py"):
        (tmp_path / init).write_text("")
    (tmp_path / "pkg" / "sub" / "loop.py").write_text("")
    assert module_identity(str(tmp_path / "pkg" / "sub" / "loop.py")) == (str(tmp_path), "pkg.sub.loop", False)
    assert module_identity(str(tmp_path / "pkg" / "__init__.py")) == (str(tmp_path), "pkg", True)


def test_lookup_follows_re_exports_and_records_what_it_read(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .constants import pmap as shared\n")
    (tmp_path / "pkg" / "constants.py").write_text("import jax\npmap = jax.pmap\n")
    view = ModuleView(ProjectIndex((str(tmp_path),)), str(tmp_path), "main")
    assert view.lookup("pkg.shared") == AliasFact("pkg.constants", "pmap", "")
    assert view.used == {str(tmp_path / "pkg" / "__init__.py"), str(tmp_path / "pkg" / "constants.py")}
    assert view.lookup("pkg.constants.other") is None
    assert view.lookup("numpy.mean") is None


def test_a_repository_root_with_an_init_file_still_finds_its_packages(tmp_path: Path):
    """`repo/__init__.py` makes `repo` part of every module's name, yet the repository runs from
    its root: `from pkg import utils` in `repo/pkg/train.py` is `repo/pkg/utils.py`."""
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "__init__.py").write_text("")
    (tmp_path / "repo" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "repo" / "pkg" / "utils.py").write_text("import jax\np_split = jax.pmap(lambda k: k)\n")
    base, name, package = module_identity(str(tmp_path / "repo" / "pkg" / "train.py"))
    assert (base, name) == (str(tmp_path), "repo.pkg.train")
    view = ModuleView(ProjectIndex(), base, name, package)
    assert view.lookup("pkg.utils.p_split") == PmappedFact("pkg.utils", "p_split", "", False)


# ------------------------------------------------------------------ fixture projects
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_project(case: Path, request):
    expected_file = case / "expected.txt"
    actual = _render(_check(case))
    if request.config.getoption("--update-fixtures"):
        expected_file.write_text(actual)
    assert actual == expected_file.read_text()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_one_file_sees_the_rest_of_the_project(case: Path):
    """pre-commit passes only the changed files: each importer alone gets the findings it gets in
    the whole tree's run (the modules it imports are read from the tree)."""
    whole = _check(case).diagnostics
    for file in _files(case):
        alone = _check(case, [file]).diagnostics
        assert alone == [d for d in whole if d.path == file], file


def test_uses_of_an_imported_alias_carry_their_rewrite():
    """The uses of an alias another module defines get the rewrite a local alias's use gets
    (rules/analysis/imported.py); what the index shows of imported pmapped functions keeps no fix."""
    outcome = _check(PROJECTS / "shared_alias", ["pkg/train.py"])
    uses = [d for d in outcome.diagnostics if d.code == "PM101" and "(alias)" in d.message]
    assert [d.line for d in uses] == [15, 16, 30]
    assert all(d.fix is not None and not d.fix.shimmed for d in uses)
    # the outer pmap goes to the shim (a pmapped function of another module runs in it): the
    # nesting goes with that fix
    nested = [d.fix for d in outcome.diagnostics if d.code == "PM102"]
    assert len(nested) == 1 and nested[0].shimmed and "keep the nesting" in nested[0].summary, nested


def test_without_the_index_nothing_is_found_across_modules(monkeypatch):
    """The importers' findings come from the index: the modules analysed alone show none of them."""
    from pmap_migrate.engine import lint_bytes

    data = (PROJECTS / "shared_alias" / "pkg" / "sub" / "loop.py").read_bytes()
    assert lint_bytes(data, "loop.py", tuple(rules_by_code().values())).diagnostics == []


# ------------------------------------------------------------------ the cache
def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(PROJECTS / "shared_alias", root, ignore=shutil.ignore_patterns("expected*"))
    return root


def _touch_later(path: Path, text: str) -> None:
    """Write ``text`` with an mtime the cache cannot mistake for the old one."""
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000_000))


def test_changing_the_alias_module_re_checks_its_importers(tmp_path: Path):
    root = _copy(tmp_path)
    cold = _check(root, use_cache=True)
    warm = _check(root, use_cache=True)
    assert warm.cached == warm.files and warm.diagnostics == cold.diagnostics
    importer = [d for d in cold.diagnostics if d.path == "pkg/sub/loop.py"]
    assert {d.code for d in importer} == {"PM101", "PM201", "PM202"}

    # `C.plain` no longer an alias of jax.pmap: the importer's PM101 on it goes on the next warm run.
    constants = root / "pkg" / "constants.py"
    _touch_later(constants, constants.read_text().replace("plain = jax.pmap", "plain = jax.vmap"))
    after = _check(root, use_cache=True)
    assert [d for d in after.diagnostics if d.path == "pkg/sub/loop.py" and "C.plain" in d.message] == []
    assert after.diagnostics == _check(root).diagnostics  # what a run without the cache says
    # Re-checked: the alias module and every module that asked the index about it (the importers,
    # and `pkg/__init__.py`, which re-exports); from the cache: pkg/utils.py, pkg/sub/__init__.py.
    assert (after.files, after.cached) == (8, 2)


def test_a_change_that_keeps_the_facts_keeps_the_importers_cached(tmp_path: Path):
    root = _copy(tmp_path)
    _check(root, use_cache=True)
    constants = root / "pkg" / "constants.py"
    _touch_later(constants, constants.read_text() + "\n# a comment\n")
    after = _check(root, use_cache=True)
    assert after.files - after.cached == 1  # constants.py only


def test_a_file_read_as_two_modules_keeps_both_fingerprints(tmp_path: Path):
    """One file can be two modules of a run (`acme/jax/__init__.py` is `acme.jax` from the
    repository's root and `jax` from its parent directory): the cache keeps the fingerprint of
    each, so that a warm run neither reads the file again nor rewrites the cache."""
    from pmap_migrate.cache import ResultCache
    from pmap_migrate.diagnostics import FileResult
    from pmap_migrate.rules.analysis.project import facts_fingerprint

    module = tmp_path / "pkg" / "jax" / "__init__.py"
    module.parent.mkdir(parents=True)
    module.write_text("import jax\npmap = jax.pmap\n")
    stat = module.stat()
    path = str(module)
    dependencies = tuple((path, name, facts_fingerprint(module_facts(module.read_bytes(), name, True)),
                          stat.st_size, stat.st_mtime_ns, True) for name in ("pkg.jax", "jax"))
    importer = str(tmp_path / "train.py")
    first = ResultCache(tmp_path / "cache", "k")
    first.store(importer, stat, b"digest", FileResult("train.py"), dependencies)
    first.save()

    again = ResultCache(tmp_path / "cache", "k")
    assert not again.dependencies_changed(importer, frozenset({path}))
    assert not again.dirty  # nothing recomputed: nothing to write


def test_a_notebook_importer_follows_the_alias_module(tmp_path: Path):
    root = _copy(tmp_path)
    before = _check(root, use_cache=True)
    assert [d.code for d in before.diagnostics if d.path == "notebooks/demo.ipynb"] == ["PM101", "PM201"]
    constants = root / "pkg" / "constants.py"
    _touch_later(constants, constants.read_text().replace(
        'pmap = functools.partial(jax.pmap, axis_name="batch")', "pmap = jax.vmap"))
    after = _check(root, use_cache=True)
    assert [d for d in after.diagnostics if d.path == "notebooks/demo.ipynb"] == []


def _copy_importers(tmp_path: Path) -> Path:
    root = tmp_path / "importers"
    shutil.copytree(PROJECTS / "importers_without_pmap", root, ignore=shutil.ignore_patterns("expected*"))
    return root


PLAIN_STEPS = "def p_double(x):\n    return 2 * x\n"


@pytest.mark.parametrize("files", [None, ["pkg/use2.py"]], ids=["whole tree", "the importer alone"])
def test_a_module_without_pmap_is_re_checked_when_what_it_imports_becomes_pmapped(tmp_path: Path, files):
    """`pkg/use2.py` never spells pmap: it was checked without the index, and its cached result
    (nothing) holds only while the project exports nothing new that it names. When `steps.py` makes
    `p_double` a pmapped function, a warm run checks the importer again, with the index: also when
    only the importer is passed (pre-commit), `steps.py` read from the tree. And back."""
    root = _copy_importers(tmp_path)
    steps = root / "pkg" / "steps.py"
    pmapped = steps.read_text()
    _touch_later(steps, PLAIN_STEPS)

    def importer(outcome) -> list[str]:
        return [d.code for d in outcome.diagnostics if d.path == "pkg/use2.py"]

    assert importer(_check(root, files, use_cache=True)) == []
    warm = _check(root, files, use_cache=True)
    assert warm.cached == warm.files and importer(warm) == []

    _touch_later(steps, pmapped)
    after = _check(root, files, use_cache=True)
    assert importer(after) == ["PM201"]
    assert after.diagnostics == _check(root, files).diagnostics  # what a run without the cache says
    again = _check(root, files, use_cache=True)
    assert again.cached == again.files and importer(again) == ["PM201"]

    _touch_later(steps, PLAIN_STEPS)
    assert importer(_check(root, files, use_cache=True)) == []


def test_a_new_export_re_checks_only_the_modules_that_name_it(tmp_path: Path):
    """A module that does not name what the project now exports keeps its cached result; one that
    does is checked again."""
    root = _copy_importers(tmp_path)
    _check(root, use_cache=True)
    (root / "pkg" / "more.py").write_text("import jax\n\np_triple = jax.pmap(lambda x: 3 * x)\n")
    after = _check(root, _files(root), use_cache=True)
    assert after.files - after.cached == 1  # the new module: no module names `p_triple`
    plain = root / "pkg" / "plain.py"
    _touch_later(root / "pkg" / "more.py", "import jax\n\np_double = jax.pmap(lambda x: 3 * x)\n")
    after = _check(root, _files(root), use_cache=True)
    # more.py, and the modules that name `p_double` and import a module named `more`: none (plain.py
    # imports `.other`), the importers of `steps` keep theirs; but scripts/run.py, which imports what
    # the package re-exports of a `p_double` (re-exports are followed by name: an over-approximation)
    assert after.files - after.cached == 2
    _touch_later(plain, plain.read_text().replace("from .other import", "from .more import"))
    after = _check(root, _files(root), use_cache=True)
    assert after.files - after.cached == 1
    assert [d.code for d in after.diagnostics if d.path == "pkg/plain.py"] == ["PM201"]


def _copy_importers_configured(tmp_path: Path, configured: bool) -> Path:
    root = _copy_importers(tmp_path)
    if not configured:  # the root is the working directory: the run's files are the project
        (root / "pyproject.toml").unlink()
    return root


def _codes_of(outcome, path: str) -> list[str]:
    return [d.code for d in outcome.diagnostics if d.path == path]


@pytest.mark.parametrize("configured", [True, False], ids=["configuration", "no configuration"])
def test_a_deleted_exporter_re_checks_its_importers(tmp_path: Path, configured: bool):
    """Deleting the module that pmaps `p_double`: its importer that never spells pmap loses its
    finding on the next warm run, as a run without the cache says."""
    root = _copy_importers_configured(tmp_path, configured)
    assert _codes_of(_check(root, use_cache=True), "pkg/use2.py") == ["PM201"]
    (root / "pkg" / "steps.py").unlink()
    after = _check(root, use_cache=True)
    assert _codes_of(after, "pkg/use2.py") == []
    assert after.diagnostics == _check(root).diagnostics


@pytest.mark.parametrize("configured", [True, False], ids=["configuration", "no configuration"])
def test_a_new_exporter_re_checks_its_importers(tmp_path: Path, configured: bool):
    """An importer that never spells pmap names `p_triple` of a module that does not exist yet:
    once the module is written, pmapping it, the next warm run reports the importer's use."""
    root = _copy_importers_configured(tmp_path, configured)
    (root / "pkg" / "use4.py").write_text(
        "import numpy as np\n\nfrom .more import p_triple\n\n\ndef first():\n    return p_triple(np.ones((8, 2)))[0]\n")
    assert _codes_of(_check(root, use_cache=True), "pkg/use4.py") == []
    assert _check(root, use_cache=True).cached == len(_files(root))
    (root / "pkg" / "more.py").write_text("import jax\n\np_triple = jax.pmap(lambda x: 3 * x)\n")
    after = _check(root, use_cache=True)
    assert _codes_of(after, "pkg/use4.py") == ["PM201"]
    assert after.diagnostics == _check(root).diagnostics
    again = _check(root, use_cache=True)
    assert again.cached == again.files and _codes_of(again, "pkg/use4.py") == ["PM201"]


def test_without_a_configuration_an_exporter_that_leaves_the_run_is_read_again_when_back(tmp_path: Path):
    """Without a configuration the exports are the run's files' own: a run without `steps.py`
    forgets what it exports, and the run that passes it again, unchanged, must read it again
    (rather than take it, unchanged since its cached result, for a module without pmap)."""
    root = _copy_importers_configured(tmp_path, False)
    files = ["pkg/__init__.py", "pkg/steps.py", "pkg/use2.py"]
    assert _codes_of(_check(root, files, use_cache=True), "pkg/use2.py") == ["PM201"]
    assert _codes_of(_check(root, ["pkg/use2.py"], use_cache=True), "pkg/use2.py") == []
    back = _check(root, files, use_cache=True)
    assert _codes_of(back, "pkg/use2.py") == ["PM201"]
    assert back.diagnostics == _check(root, files).diagnostics


def test_the_warm_run_after_the_run_that_filled_the_cache_writes_nothing(tmp_path: Path, monkeypatch):
    """The run that fills the cache reads every module for its share of the exports; those without
    pmap are left to their results, so the next run has nothing to drop and nothing to write."""
    from pmap_migrate import cache as cache_module

    root = _copy_importers(tmp_path)
    _check(root, use_cache=True)
    written: list[Path] = []
    store = cache_module.store_pickle
    monkeypatch.setattr(cache_module, "store_pickle", lambda file, value: written.append(file) or store(file, value))
    warm = _check(root, use_cache=True)
    assert warm.cached == warm.files and written == []


def test_a_warm_run_reuses_the_exports_while_their_contributions_hold(tmp_path: Path, monkeypatch):
    """The exports are made again only when a module's contribution was read anew (or forgotten):
    not on a warm run, but on the run after `steps.py` changed."""
    from pmap_migrate import crossmodule

    root = _copy_importers(tmp_path)
    _check(root, use_cache=True)
    made: list[int] = []
    exports_of = crossmodule._exports_of
    monkeypatch.setattr(crossmodule, "_exports_of", lambda parts: made.append(len(parts)) or exports_of(parts))
    assert _check(root, use_cache=True).cached == len(_files(root)) and made == []
    _touch_later(root / "pkg" / "steps.py", PLAIN_STEPS)
    after = _check(root, use_cache=True)
    assert len(made) == 1 and _codes_of(after, "pkg/use2.py") == []
    assert _check(root, use_cache=True).cached == len(_files(root)) and len(made) == 1


def test_modules_without_pmap_that_import_nothing_pmapped_are_not_analysed(tmp_path: Path, monkeypatch):
    """The text test before the index: a module that never spells pmap nor a name the project
    exports together with its module is not parsed (`pkg/other.py`, `pkg/plain.py`, which applies
    a plain function of the same name as the pmapped one)."""
    from pmap_migrate import runner

    root = _copy_importers(tmp_path)
    seen: list[str] = []
    original = runner._checked

    def checked(data, shown, codes, options, text_matched, project=None):
        if project is not None:
            seen.append(shown)
        return original(data, shown, codes, options, text_matched, project)

    monkeypatch.setattr(runner, "_checked", checked)
    _check(root)
    assert "pkg/plain.py" not in seen and "pkg/other.py" not in seen
    assert {"pkg/use.py", "pkg/use2.py", "pkg/use3.py", "scripts/run.py"} <= set(seen)


def test_project_exports_are_the_facts_names_and_their_re_exports(tmp_path: Path):
    from pmap_migrate.crossmodule import project_exports

    root = PROJECTS / "importers_without_pmap"
    exports, _ = project_exports(str(root))
    found = {(e.handle, e.package, e.name, os.path.relpath(e.origin[0], root), e.origin[1]) for e in exports}
    steps = os.path.join("pkg", "steps.py")
    same = os.path.join("pkg", "same.py")
    by_name = {(b"steps", False, b"p_double", steps, "p_double"),
               (b"same", False, b"p_double", same, "p_double"),
               (b"pkg", True, b"double_on_devices", steps, "p_double"),
               (b"pkg", True, b"double_on_devices", same, "p_double"),  # by name: over-approximated
               (b"same", False, b"run", same, "run")}  # returns `p_double(x)`
    # the modules without pmap that import them bind them too (another module may import them there)
    importers = {(handle, False, name, origin, "p_double") for handle, name in (
        (b"use", b"p_double"), (b"use2", b"p_double"), (b"run", b"double_on_devices")) for origin in (steps, same)}
    assert found == by_name | importers


def test_without_a_configuration_the_exports_are_the_run_files_own(tmp_path: Path):
    """Without a configuration the root is the working directory (a home directory, say), which is
    not listed: the exports come from the run's files."""
    from pmap_migrate.crossmodule import project_exports

    root = _copy_importers(tmp_path)
    steps, use = str(root / "pkg" / "steps.py"), str(root / "pkg" / "use2.py")
    exports, _ = project_exports(None, files=[steps, use])
    assert {(e.name, e.origin) for e in exports} == {(b"p_double", (steps, "p_double"))}
    assert project_exports(None, files=[use])[0] == frozenset()


@pytest.mark.parametrize("marker", [".git", "setup.py", "pyproject.toml"])
def test_without_a_configuration_a_repository_is_the_project(tmp_path: Path, marker: str):
    """No `[tool.pmap-migrate]`, but the working directory is a repository's (or a package's) top,
    where pre-commit runs: an importer passed alone still gets the findings its imports give it
    (`use2.py` never spells pmap; `steps.py` is read from the tree). From a subdirectory the
    project is the one above."""
    root = _copy_importers_configured(tmp_path, False)
    assert _codes_of(_check(root, ["pkg/use2.py"]), "pkg/use2.py") == []  # no project: the run's file alone
    (root / marker).mkdir() if marker == ".git" else (root / marker).write_text("")
    assert _codes_of(_check(root, ["pkg/use2.py"]), "pkg/use2.py") == ["PM201"]
    assert _codes_of(_check(root, ["pkg/use2.py"], use_cache=True), "pkg/use2.py") == ["PM201"]
    assert _codes_of(_check(root / "pkg", ["use2.py"]), "use2.py") == ["PM201"]


def test_without_a_configuration_files_outside_the_repository_are_their_own_project(tmp_path: Path, monkeypatch):
    """A run from inside one repository over files of another reads no module of the first; the
    home directory is never taken for a project's top."""
    from pmap_migrate.config import project_top

    root = _copy_importers_configured(tmp_path, False)
    here = tmp_path / "elsewhere"
    (here / ".git").mkdir(parents=True)
    (here / "pkg").mkdir()
    (here / "pkg" / "steps.py").write_text("import jax\n\np_double = jax.pmap(lambda x: x)\n")
    (here / "pkg" / "use2.py").write_text("from .steps import p_double\n\nprint(p_double(x)[0])\n")
    outcome = _check(here, [str(root / "pkg" / "use2.py")])
    assert outcome.diagnostics == []  # neither this tree's steps.py nor the other's
    assert project_top(here / "pkg") == here.resolve()
    monkeypatch.setenv("HOME", str(here))
    assert project_top(here / "pkg") is None


@pytest.mark.parametrize("text, expected", [
    ("import jax\n\ndef f(x):\n    return jax.pmap(g)(x)\n", False),
    ("import jax\n\nclass A:\n    step = jax.pmap(g)\n", False),
    ("import jax\n\ndef f(\n    x,\n) -> int:\n    return jax.pmap(g)(x)\n", False),
    ("import jax\n# jax.pmap below\nif X:\n    p = jax.pmap(g)\n", False),
    ("from jax import pmap\n\ndef f(x):\n    return pmap(g)(x)\n", False),
    ("import jax\n\np = jax.pmap(g)\n", True),
    ("import jax, functools\n\np = functools.partial(\n    jax.pmap, axis_name='i')\n", True),
    ("import jax\n\n@jax.pmap\ndef f(x):\n    return x\n", True),
    ("from jax import pmap as P\n\nf = P(g)\n", True),
    ("from ._pmap_compat import _shard_mapped\nimport jax\n\nf = jax.jit(_shard_mapped(g, 'i'))\n", True),
])
def test_may_define_facts_is_false_only_without_facts(text: str, expected: bool):
    from pmap_migrate.crossmodule import may_define_facts

    data = text.encode()
    facts = module_facts(data, "m", False)
    assert may_define_facts(data) == expected
    if facts.aliases or facts.pmapped:
        assert may_define_facts(data)


# ------------------------------------------------------------------ fix's counts
def test_fix_of_an_importer_alone_rewrites_its_imported_uses_and_counts_what_is_left(tmp_path: Path):
    """`fix` on one importer (pre-commit passes only the changed files) rewrites the uses of an alias
    another module defines, leaves that module as it is (other importers need the alias), and
    counts and lists what is left."""
    root = _copy(tmp_path)
    constants = (root / "pkg" / "constants.py").read_text()
    before = [d for d in _check(root, ["pkg/train.py"]).results[0].active]
    imported = [d for d in before if d.fix is not None and d.code == "PM101" and "(alias)" in d.message]
    assert len(imported) == 3, "the fixture's importer uses an imported alias"
    result = run_cli(root, "fix", "--no-cache", "pkg/train.py")
    left = [d for d in _check(root, ["pkg/train.py"]).results[0].active]
    assert not [d for d in left if "(alias)" in d.message]
    assert "constants.pmap" not in (root / "pkg" / "train.py").read_text()
    assert (root / "pkg" / "constants.py").read_text() == constants
    assert 0 < len(left) < len(before)
    assert f"Fixed {len(before) - len(left)} of {len(before)} legacy patterns" in result.output
    assert f"Found {len(left)} legacy patterns in 1 file." in result.output
    for d in left:
        assert f"pkg/train.py:{d.line}:{d.column}: {d.code}" in result.output


def test_fix_of_the_whole_project_counts_what_check_finds_after_it(tmp_path: Path):
    root = _copy(tmp_path)
    result = run_cli(root, "fix", "--no-cache", ".")
    after = run_cli(root, "check", "--no-cache", ".")
    left = sum(len(r.active) for r in _check(root).results)
    if left:
        assert f"Found {left} legacy pattern" in after.output
        assert f"Found {left} legacy pattern" in result.output
    else:
        assert "All checks passed!" in after.output and "All checks passed!" in result.output


@pytest.mark.parametrize("cache", [[], ["--no-cache"]], ids=["cache", "no cache"])
def test_fix_of_an_importer_without_pmap_alone_rewrites_what_check_reports_on_it(tmp_path: Path, cache):
    """`fix` sees an importer that never spells pmap as `check` does (the exports read with the
    cache `check` just filled, or anew): its committed input to the imported pmapped function is
    rewritten, the module that defines it is left as it is."""
    root = _copy_importers(tmp_path)
    steps = (root / "pkg" / "steps.py").read_text()
    before = _check(root, ["pkg/use.py"]).results[0].active
    assert [d.code for d in before] == ["PM304", "PM201"]
    result = run_cli(root, "fix", *cache, "pkg/use.py")
    assert "NamedSharding" in (root / "pkg" / "use.py").read_text()
    assert (root / "pkg" / "steps.py").read_text() == steps
    assert "Fixed 1 of 2 legacy patterns" in result.output, result.output
    assert [d.code for d in _check(root, ["pkg/use.py"]).results[0].active] == ["PM201"]
