"""Where a fixed module's shared helpers live: one ``_pmap_compat.py`` per package, created or
extended by `fix` (its text: pmap_migrate.rules.fixes.shared).

The rule, for a module at ``path``:

- in a package (its directory has ``__init__.py``): the module goes in the top package (the
  highest directory of the unbroken chain of ``__init__.py`` above it). A module that imports
  relatively imports it relatively (``from .._pmap_compat import ...``), any other by the top
  package's name (``from pkg._pmap_compat import ...``), as it would any module of its package;
  but a script (``if __name__ == "__main__":``) that imports nothing of its package may be run as
  ``python pkg/script.py``, where the package is not importable: no shared module;
- a test in a directory without ``__init__.py`` (named as pytest collects tests) that imports a
  top package of its own project by name (``import kfac_jax`` in ``tests/optimizer_test.py``,
  ``kfac_jax/__init__.py`` in a directory above the test's, within the project): the tests run
  against that package, so they import its module by that name (one copy of the helpers for the
  package and its tests);
- in a directory without ``__init__.py``, a script or a test (``if __name__ == "__main__":``, or
  named as pytest collects tests: ``test_*.py``, ``*_test.py``, ``conftest.py``), unless the
  directory is a namespace package (its parent is a package, or the module imports its own
  directory by name: ``python -m pkg.tool`` does not put the directory on the path): a sibling module,
  imported by its plain name, which works when the script runs (its directory is first on
  ``sys.path``) and under pytest's default import mode (it puts the test's directory there). Two
  directories of tests may meet in one pytest session, where the first ``_pmap_compat`` imported
  serves both: the sibling modules of the project's directories that hold tests therefore hold
  the same helpers, what any of them needs (fix grows them all when one grows), so that any one
  serves them all (a directory of scripts only: the helpers its modules use);
- a module of a namespace package inside a regular package, which imports that package's top by
  name (``from pkg.x import y``): the top package's module, imported by its name;
- a module (not a script) that none of the above places, whose sibling modules import a
  directory above them by name (``import big_vision.pp.builder``, or ``from kfac_alpha import
  utils`` in a package whose top directory is not importable): that directory's module, by that
  name, as it is imported the way its siblings are;
- anything else (another module of a namespace package, a top package whose name is not an identifier,
  a ``_pmap_compat.py`` or ``_pmap_compat/`` that this tool did not write, an unreadable one): no
  shared module; the helpers are written in the module itself. One that an earlier version of
  this tool wrote is this tool's: written anew, with today's helpers, when a fix needs it.
"""

from __future__ import annotations

import keyword
import os
import re
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from pmap_migrate.importorder import ImportOrder, line_key, member_key, section
from pmap_migrate.projectstyle import import_order, project_root
from pmap_migrate.rules.fixes.shared import INDENT, MODULE_NAME, helpers_in, is_current, module_text

FILE_NAME = f"{MODULE_NAME}.py"
_TEST_NAME = ("test_", "_test.py", "conftest.py")


@dataclass(frozen=True)
class SharedLocation:
    """The shared module of one fixed module: its file, and how that module imports it."""

    file: str  # the path of the shared module, as the fixed module's path was given (relative or not)
    module: str  # ``from <module> import ...`` (without the leading dots of a relative import)
    relative: int = 0  # the leading dots
    beside_tests: bool = False  # holds what every module beside the project's tests holds (module's docstring)


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _is_script(module: cst.Module, name: str) -> bool:
    """A script or a test: named as pytest collects tests (``name``; "" to ask about the
    ``__main__`` guard only), or with ``if __name__ == "__main__":``."""
    if name and (name.startswith(_TEST_NAME[0]) or name.endswith(_TEST_NAME[1]) or name == _TEST_NAME[2]):
        return True
    for statement in module.body:
        if isinstance(statement, cst.If) and isinstance(statement.test, cst.Comparison):
            test = statement.test
            if (isinstance(test.left, cst.Name) and test.left.value == "__name__" and len(test.comparisons) == 1
                    and isinstance(test.comparisons[0].operator, cst.Equal)
                    and isinstance(test.comparisons[0].comparator, cst.SimpleString)
                    and test.comparisons[0].comparator.evaluated_value == "__main__"):
                return True
    return False


def _imports(module: cst.Module):
    for statement in module.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                yield small


def _imports_relatively(module: cst.Module) -> bool:
    return any(isinstance(small, cst.ImportFrom) and small.relative for small in _imports(module))


def _names_directory(module: cst.Module, name: str) -> bool:
    """Whether an absolute import of the module names ``name`` (its directory) as a package
    (``from examples import utils``, ``import scenic.projects.unloc.model``): it is then run or
    imported as a module of a namespace package, where its directory is not on ``sys.path``."""
    for small in _imports(module):
        if isinstance(small, cst.ImportFrom):
            names = [small.module] if small.module is not None and not small.relative else []
        else:
            names = [alias.name for alias in small.names]
        for node in names:
            parts = []
            while isinstance(node, cst.Attribute):
                parts.append(node.attr.value)
                node = node.value
            # (`import a.b.c`: c may be the module itself; `from a.b import c`: a and b are packages)
            packages = parts if isinstance(small, cst.ImportFrom) else parts[1:]
            if isinstance(node, cst.Name) and name in [node.value, *packages]:
                return True
    return False


def _imports_package(module: cst.Module, package: str) -> bool:
    """Whether the module imports its top package by name (``import pkg.x``, ``from pkg import x``)."""
    for small in _imports(module):
        if isinstance(small, cst.ImportFrom):
            names = [small.module] if small.module is not None and not small.relative else []
        else:
            names = [alias.name for alias in small.names]
        for name in names:
            while isinstance(name, cst.Attribute):
                name = name.value
            if isinstance(name, cst.Name) and name.value == package:
                return True
    return False


def usable(file: Path) -> bool:
    """Whether ``file`` may hold the shared module: absent (and nothing else of that name), or this
    tool's own text."""
    if file.with_suffix("").exists() or file.is_symlink():
        return False
    if not file.exists():
        return True
    try:
        return file.is_file() and helpers_in(file.read_text(encoding="utf-8")) is not None
    except (OSError, UnicodeDecodeError):
        return False


def location_for(path: str, module: cst.Module) -> SharedLocation | None:
    """The shared module of the module at ``path`` (source ``module``), or None (see the rule)."""
    if not path.endswith(".py"):
        return None
    given = Path(path)
    try:
        directory = given.resolve().parent
    except OSError:
        return None
    if not directory.is_dir():
        return None
    if (directory / "__init__.py").is_file():
        found = _package_user(given, directory, module) or _by_layout(given, directory, module) \
            or _above_by_name(given, directory, module)
        if found is None and not _is_script(module, ""):
            found = _above_by_siblings(given, directory)
    else:
        # Outside a package, what the module imports by a name above it comes first: that name
        # works however it runs (`python -m pkg.tool` too, where a sibling module imported by its
        # plain name would not be found).
        found = _package_user(given, directory, module) or _above_by_name(given, directory, module) \
            or _by_layout(given, directory, module) or _beside_by_plain_name(given, directory, module)
        if found is None and not _is_script(module, given.name):
            found = _above_by_siblings(given, directory)
    return found if found is not None and found.module else None  # (a place taken: no shared module)


def _by_layout(given: Path, directory: Path, module: cst.Module) -> SharedLocation | None:
    if (directory / "__init__.py").is_file():
        top, depth = directory, 0
        while (top.parent / "__init__.py").is_file() and top.parent != top:
            top, depth = top.parent, depth + 1
        if not _is_identifier(top.name) or not usable(top / FILE_NAME):
            return None
        file = given.parent.joinpath(*[os.pardir] * depth, FILE_NAME)
        shown = os.path.normpath(file)
        if _imports_relatively(module):
            return SharedLocation(shown, MODULE_NAME, relative=depth + 1)
        if _is_script(module, "") and not _imports_package(module, top.name):
            return None
        return SharedLocation(shown, f"{_imported_as(top)}.{MODULE_NAME}")
    if (directory.parent / "__init__.py").is_file():
        return _in_namespace_package(given, directory, module)
    if (not _is_script(module, given.name) or _names_directory(module, directory.name)
            or not usable(directory / FILE_NAME)):
        return None
    return SharedLocation(os.path.normpath(given.parent / FILE_NAME), MODULE_NAME,
                          beside_tests=_holds_tests(directory))


def _beside_by_plain_name(given: Path, directory: Path, module: cst.Module) -> SharedLocation | None:
    """A module outside packages that imports a module beside it by its plain name (``import
    models`` with ``models.py`` beside it): its directory is on ``sys.path`` wherever it runs, so
    a sibling module, by its plain name (not where it imports its own directory by name)."""
    if _names_directory(module, directory.name):
        return None
    if any(len(parts) == 1 and parts[0] != given.stem and _exists_below(directory, parts[0])
           for parts in _absolute_imports(module)) and usable(directory / FILE_NAME):
        return SharedLocation(os.path.normpath(given.parent / FILE_NAME), MODULE_NAME,
                              beside_tests=_holds_tests(directory))
    return None


def _above_by_name(given: Path, directory: Path, module: cst.Module) -> SharedLocation | None:
    """What the module's own imports show to be importable wherever it runs: a directory above it
    that it imports by name, with what it imports from there (``import big_vision.pp.builder`` in
    ``big_vision/evaluators/psnr.py``, ``big_vision/pp/builder.py`` there): that directory's
    shared module, by that name; one with an empty ``module`` where that place is taken."""
    return _first_above(given, directory, _absolute_imports(module))


def _first_above(given: Path, directory: Path, imports) -> SharedLocation | None:
    """The shared module of the first directory above ``directory`` that one of ``imports`` (dotted
    names, as lists of their parts) names, with something below it: by that name; one with an
    empty ``module`` where that place is taken."""
    above = [directory, *directory.parents]
    for parts in imports:
        for depth, ancestor in enumerate(above):
            if ancestor.name == parts[0] and _is_identifier(parts[0]) and len(parts) > 1 \
                    and _exists_below(ancestor, parts[1]) and _package_in(ancestor, parts[0]) is None:
                file = os.path.normpath(given.parent.joinpath(*[os.pardir] * depth, FILE_NAME))
                if not usable(ancestor / FILE_NAME):
                    return SharedLocation(file, "")
                return SharedLocation(file, f"{parts[0]}.{MODULE_NAME}")
    return None


# Directories of a project that hold code run from the repository against its package, not
# shipped with it (tests are known by their file names).
_RUN_BESIDE = frozenset({"examples", "example", "benchmarks", "benchmark", "scripts", "demos", "demo"})


def _package_user(given: Path, directory: Path, module: cst.Module) -> SharedLocation | None:
    """A test (a file pytest collects by its name) outside packages, or a module of an examples,
    benchmarks or scripts directory of the project, that imports a top package of its own project
    by name (``import kfac_jax`` in ``tests/optimizer_test.py`` or ``examples/training.py``, with
    ``kfac_jax/__init__.py`` or ``src/kfac_jax/__init__.py`` in a directory above, within the
    project): it runs against that package, from the repository, so it imports the package's
    shared module by that name, one copy of the helpers for the package and the code that uses
    it. Not where a requirements file in between names the package (or its distribution): that
    directory installs a released package.
    None: no such package, or its place is taken."""
    root = project_root(os.fspath(given))
    if root is None:
        return None
    above = [d for d in [directory, *directory.parents] if d.is_relative_to(root)]
    test = _is_test_name(given.name) and not (directory / "__init__.py").is_file()
    path = directory / given.name
    for parts in _absolute_imports(module):
        name = parts[0]
        if not _is_identifier(name) or name == MODULE_NAME:
            continue
        for depth, ancestor in enumerate(above):
            package = _package_in(ancestor, name)
            if package is None or (ancestor / "__init__.py").is_file():
                continue
            below = path.relative_to(ancestor).parts[0]
            if below == package.parts[0] or not (test and depth > 0 or below in _RUN_BESIDE):
                continue
            names = _distribution_names(ancestor, name)
            if any(_installs_release(d, names) for d in above[:depth]) or not usable(ancestor / package / FILE_NAME):
                return None
            file = given.parent.joinpath(*[os.pardir] * depth, package, FILE_NAME)
            return SharedLocation(os.path.normpath(file), f"{name}.{MODULE_NAME}")
    return None


def _installs_release(directory: Path, names: frozenset[str]) -> bool:
    """Whether a requirements file of ``directory`` names one of ``names`` (normalized package or
    distribution names): its code installs a release of the package, not the repository's."""
    try:
        files = sorted(directory.glob("requirements*.txt"))
    except OSError:
        return False
    for file in files:
        try:
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split(" #", 1)[0].strip()
            if line.startswith("-"):  # options: an index, another file; `-e` a path (the source) or a URL
                option, _, line = line.partition(" ")
                line = line.strip()
                if option not in ("-e", "--editable") or "://" not in line:
                    continue
            if "://" in line and not _NAMED_URL.match(line):  # `git+https://.../pkg.git`
                egg = re.search(r"#egg=([\w.-]+)", line)
                name = egg[1] if egg else line.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
            else:
                match = _REQUIREMENT_NAME.match(line)
                name = match[1] if match else ""
            if name and _normalized(name) in names:
                return True
    return False


_REQUIREMENT_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)")
_NAMED_URL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*@")  # `pkg @ https://...` (PEP 508)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distribution_names(root: Path, package: str) -> frozenset[str]:
    """``package`` and the distribution name ``root``'s packaging files give (``dm-haiku`` for
    ``haiku``), normalized."""
    names = {_normalized(package)}
    for file, pattern in (("pyproject.toml", r"(?m)^name\s*=\s*['\"]([^'\"]+)"),
                          ("setup.cfg", r"(?m)^name\s*=\s*([\w.-]+)"),
                          ("setup.py", r"\bname\s*=\s*['\"]([\w.-]+)['\"]")):
        try:
            match = re.search(pattern, (root / file).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if match:
            names.add(_normalized(match[1]))
    return frozenset(names)


_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\w+)|import[ \t]+([\w.]+))", re.MULTILINE)


def _above_by_siblings(given: Path, directory: Path) -> SharedLocation | None:
    """A module (not a script) that imports nothing above it by name, beside modules that do
    (``coltran_fid.py`` among ``big_vision/evaluators/proj/uvim/*.py``, which import
    ``big_vision.pp.builder``): it is imported as they are, so that directory's shared module
    by that name (the first such import of the siblings, in name order, decides)."""
    try:
        siblings = sorted(p for p in directory.glob("*.py") if p.name != given.name)[:50]
    except OSError:
        return None
    return _first_above(given, directory, (parts for sibling in siblings for parts in _imports_in_text(sibling)))


def _package_in(directory: Path, name: str) -> Path | None:
    """The package ``name`` that ``directory`` holds, relative to it: ``name`` (with its
    ``__init__.py``) or, in a ``src/`` layout, ``src/name``; None: neither. Where ``directory`` is
    on the path, ``import name`` is that package, not ``directory`` itself (a repository
    `diffusers/` holding `src/diffusers/` and `utils/`: `diffusers.utils` is the package's)."""
    return next((p for p in (Path(name), Path("src", name)) if (directory / p / "__init__.py").is_file()), None)


def _imports_in_text(file: Path):
    """The dotted names the absolute imports of ``file`` read (as ``_absolute_imports``, the first
    name of a ``from`` import only), from its text, without parsing it."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for match in _IMPORT_LINE.finditer(text):
        yield (match.group(1) or match.group(3)).split(".") + ([match.group(2)] if match.group(2) else [])


def _absolute_imports(module: cst.Module):
    """The dotted names the module's absolute imports read: ``import a.b`` -> (a, b); ``from a
    import b, c`` -> (a, b), (a, c); ``from a.b import c`` -> (a, b, c)."""
    for small in _imports(module):
        if isinstance(small, cst.ImportFrom):
            if small.relative or small.module is None:
                continue
            head = _dotted(small.module)
            names = [] if isinstance(small.names, cst.ImportStar) else [
                alias.name.value for alias in small.names if isinstance(alias.name, cst.Name)]
            if head:
                yield from ([*head, name] for name in names) if names else [head]
        else:
            for alias in small.names:
                parts = _dotted(alias.name)
                if parts:
                    yield parts


def _dotted(node: cst.BaseExpression) -> list[str]:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    return [node.value, *reversed(parts)] if isinstance(node, cst.Name) else []


def _exists_below(directory: Path, name: str) -> bool:
    """A module or package ``name`` in ``directory``."""
    try:
        return (directory / f"{name}.py").is_file() or (directory / name).is_dir()
    except OSError:
        return False


def _in_namespace_package(given: Path, directory: Path, module: cst.Module) -> SharedLocation | None:
    """A module of a namespace package inside a regular one (``pkg/sub/ns/mod.py``, ``ns`` without
    ``__init__.py``) that imports the regular package's top by name (``from pkg.x import y``): that
    package is importable wherever the module runs, so the module imports the top package's
    shared module by its name."""
    top, depth = directory.parent, 1
    while (top.parent / "__init__.py").is_file() and top.parent != top:
        top, depth = top.parent, depth + 1
    if not _is_identifier(top.name) or not _imports_package(module, top.name) or not usable(top / FILE_NAME):
        return None
    file = given.parent.joinpath(*[os.pardir] * depth, FILE_NAME)
    return SharedLocation(os.path.normpath(file), f"{top.name}.{MODULE_NAME}")


def _imported_as(top: Path) -> str:
    """The name the modules of the top package ``top`` import it by: its own name, or, where they
    import it through the namespace packages above it (``from byol.utils import helpers`` in
    ``byol/utils/``, ``byol`` without ``__init__.py``), that dotted name."""
    pattern = re.compile(rf"^\s*(?:from|import)\s+((?:\w+\.)+){re.escape(top.name)}\b", re.MULTILINE)
    above = [parent.name for parent in top.parents]
    try:
        files = sorted(top.glob("*.py"))[:200]
    except OSError:
        return top.name
    for file in files:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in pattern.finditer(text):
            prefix = match.group(1).rstrip(".").split(".")
            if list(reversed(prefix)) == above[:len(prefix)] and all(_is_identifier(p) for p in prefix):
                return ".".join([*prefix, top.name])
    return top.name


def _holds_tests(directory: Path) -> bool:
    """Whether pytest collects tests in ``directory`` (files named as tests, or a conftest)."""
    try:
        return any(_is_test_name(entry.name) for entry in directory.iterdir() if entry.suffix == ".py")
    except OSError:
        return True


def _beside_tests_in(root: Path) -> dict[str, frozenset[str]]:
    """The shared modules this tool wrote beside tests in directories without ``__init__.py``
    under ``root`` (not below hidden directories or virtual environments), with what each holds."""
    found: dict[str, frozenset[str]] = {}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".") and d not in _NOT_SEARCHED
                             and not os.path.exists(os.path.join(directory, d, "pyvenv.cfg"))]
        if FILE_NAME not in files or "__init__.py" in files or not _holds_tests(Path(directory)):
            continue
        path = os.path.join(directory, FILE_NAME)
        try:
            held = helpers_in(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        if held:
            found[os.path.normpath(os.path.realpath(path))] = held
    return found


_NOT_SEARCHED = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})


def _is_test_name(name: str) -> bool:
    return name.startswith(_TEST_NAME[0]) or name.endswith(_TEST_NAME[1]) or name == _TEST_NAME[2]


@dataclass
class SharedModule:
    """One shared module to create or extend: its path, its bytes before (None: a new file), and
    the helpers it must hold."""

    file: str
    original: bytes | None
    helpers: frozenset[str]

    def text(self) -> bytes:
        return in_project_order(module_text(self.helpers, indent_near(self.file)),
                                import_order(self.file)).encode("utf-8")


# The body of a top-level definition: its first line shows the indentation unit of the file.
_BODY = re.compile(r"^(?:def|class)\b[^\n]*:[ \t]*\n(?:[ \t]*\n)*( +)\S", re.MULTILINE)


def indent_near(file: str | os.PathLike) -> str:
    """The indentation unit of the modules around ``file`` (the package or directory a shared
    module goes in, and below it): the most common among the first 20 that show one, so that the
    module is written as the project writes its code (two spaces in most of Google's); four
    spaces where none shows one."""
    counts: dict[str, int] = {}
    seen = 0
    for directory, subdirectories, files in os.walk(Path(file).parent):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith(".") and d not in _NOT_SEARCHED)
        for name in sorted(files):
            if not name.endswith(".py") or name == FILE_NAME:
                continue
            try:
                with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                    match = _BODY.search(handle.read(200_000))
            except OSError:
                continue
            if match:
                counts[match[1]] = counts.get(match[1], 0) + 1
                seen += 1
                if seen >= 20:
                    return max(counts, key=counts.__getitem__)
    return max(counts, key=counts.__getitem__) if counts else INDENT


def in_project_order(text: str, order: ImportOrder) -> str:
    """``text`` (``module_text``) with its import block sorted as the project sorts imports: its
    sections (``jax`` is first-party in jax's own repository), ``force-sort-within-sections``,
    ``force-single-line`` (``pmap_migrate.importorder``)."""
    lines = text.split("\n")
    at = [k for k, line in enumerate(lines) if line.startswith(("import ", "from "))]
    if not at:
        return text
    groups: dict[int, list[tuple[tuple, str]]] = {}
    for line in lines[at[0]:at[-1] + 1]:
        if not line:
            continue
        straight = line.startswith("import ")
        module = line.split()[1]
        head, _, names = line.partition(" import ")
        split = [f"{head} import {name.strip()}" for name in names.split(",")] if (
            not straight and order.force_single_line) else [line]
        for piece in split:
            key = (*line_key(module, straight, order), member_key(piece.rpartition(" import ")[2]))
            groups.setdefault(section(module, False, order), []).append((key, piece))
    block: list[str] = []
    for number in sorted(groups):
        block += [*(piece for _, piece in sorted(groups[number])), ""]
    return "\n".join([*lines[:at[0]], *block[:-1], *lines[at[-1] + 1:]])


def shared_modules(needs: list[tuple[SharedLocation, frozenset[str]]]) -> list[SharedModule]:
    """The shared modules the fixed modules need (each location with the helpers they import from
    it), merged by file, with what each already holds; only those that change."""
    wanted: dict[str, set[str]] = {}
    by_project: dict[Path | None, set[str]] = {}  # project -> its modules beside tests, in this run
    for location, names in needs:
        key = os.path.normpath(os.path.realpath(location.file))
        wanted.setdefault(key, set()).update(names)
        if location.beside_tests:
            by_project.setdefault(project_root(key), set()).add(key)
    shown = {os.path.normpath(os.path.realpath(location.file)): location.file for location, _ in needs}
    for root, keys in by_project.items():
        # every module beside tests of the project holds the same: what any of them needs or holds
        held = {} if root is None else _beside_tests_in(root)
        union = set().union(*(wanted[key] for key in keys), *held.values())
        for key in keys | set(held):
            wanted.setdefault(key, set()).update(union)
            shown.setdefault(key, os.path.relpath(key))
    out = []
    for key, names in sorted(wanted.items()):
        path = Path(key)
        original = None
        held: frozenset[str] = frozenset()
        current = True
        if path.exists():
            try:
                original = path.read_bytes()
                text = original.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            held = helpers_in(text) or frozenset()
            current = is_current(text, held)
        if not names <= held or not current:  # (an earlier version's helpers: written anew)
            out.append(SharedModule(shown[key], original, frozenset(held | names)))
    return out
