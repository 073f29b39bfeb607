"""`fix` of a project's pmap aliases and of the modules that import them, together.

A module such as ferminet's ``constants.py`` defines ``pmap = functools.partial(jax.pmap, ...)``
and other modules apply it (``constants.pmap(f)``). `fix` rewrites those uses in the importers
(rules/analysis/imported.py); the alias itself may go only when no module of the project needs it
any more. Which modules import it is read from the whole project under the configuration's root,
files outside the run included (pre-commit passes only the changed ones): every Python file that
spells the alias's name (a notebook: its code cells) is parsed with `ast` and asked whether it
names the alias (``refers_to``). After the run's fixes, an alias goes when every importer is
in the run and its fixed text no longer names it; otherwise it stays on `runtime_shim.pmap`, and
the comment its fix writes says which importers keep it. An alias no module of the project
imports stays too (a library's public name).

A module whose pmapped functions a multi-process program of the project calls runs in that
program: `fix` writes its pmaps for every process (``multi_process_callers`` finds the programs
the same way, by the functions' names, then `ast`).

The project's exported pmap names (``project_exports``) also decide which modules that never spell
`pmap` are analysed with the index at all: an importer of a pmapped function (``from .steps import
p_double``) names it, and the module it comes from, in its text (``imports_exports``). Such a
module's own `from ... import` names are exported too (``from .api import p_double`` where
``api.py`` imports it from ``steps.py``), as far as the chain goes.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the index loads when a module is read for its facts (a warm run lists files only)
    from pmap_migrate.rules.analysis.facts import AliasFact
    from pmap_migrate.rules.analysis.project import ModuleView, ProjectIndex

# Directories never read for importers: tools' and environments' own.
SKIPPED_DIRECTORIES = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})


def _project_files(root: str) -> Iterator[str]:
    """The Python files and notebooks under ``root`` (hidden directories and virtual environments
    aside)."""
    for entry in _project_entries(root):
        yield entry.path


def _project_entries(directory: str, top: bool = True) -> Iterator[os.DirEntry]:
    """``_project_files`` as directory entries (each directory listed once, its files in order
    first, then its subdirectories; symbolic links to directories are not followed)."""
    try:
        with os.scandir(directory) as listing:
            entries = list(listing)
    except OSError:
        return
    if not top and any(e.name == "pyvenv.cfg" and e.is_file() for e in entries):
        return  # a virtual environment
    subdirectories = []
    for entry in sorted(entries, key=lambda e: e.name):
        try:
            is_directory = entry.is_dir()
        except OSError:
            is_directory = False
        if is_directory:
            if not entry.name.startswith(".") and entry.name not in SKIPPED_DIRECTORIES and not entry.is_symlink():
                subdirectories.append(entry.path)
        elif entry.name.endswith((".py", ".ipynb")):
            yield entry
    for subdirectory in subdirectories:
        yield from _project_entries(subdirectory, False)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _view(index: ProjectIndex, path: str) -> ModuleView:
    from pmap_migrate.rules.analysis.project import ModuleView, module_identity

    base, name, package = module_identity(path)
    return ModuleView(index, base, name, package)


def _parsed(data: bytes, path: str, index: ProjectIndex) -> tuple[str, ast.Module, ModuleView] | None:
    """The file's text ``data`` (a module, or a notebook: its code cells), its `ast` and how it sees
    the project; None when it does not parse."""
    from pmap_migrate.notebooks import NotebookError, load
    from pmap_migrate.rules.analysis.project import ModuleView

    try:
        if path.endswith(".ipynb"):
            text = load(data, path).settle()
            view = ModuleView(index, os.path.dirname(path), "__notebook__")
            return text, ast.parse(text), view
        view = _view(index, path)
        return data.decode("utf-8", "replace"), ast.parse(data), view  # (the bytes: a coding line holds)
    except (NotebookError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _names_alias(data: bytes, path: str, index: ProjectIndex, alias: AliasFact, owner: str) -> bool:
    """Whether the file's text ``data`` (a module, or a notebook: its code cells) names ``alias``,
    which the file ``owner`` defines."""
    from pmap_migrate.rules.analysis.project import refers_to

    parsed = _parsed(data, path, index)
    if parsed is None:  # it may need the alias
        return True
    _, tree, view = parsed
    return bool(refers_to(tree, view, {(owner, alias.name)}, by_path=True))


_STAR = re.compile(rb"\bimport\s*\*")


def alias_decisions(candidates: Sequence[str], files: Sequence[str], fixed: Mapping[str, bytes], root: str,
                    exports: Iterable[Export] = ()) -> dict[str, tuple[tuple[str, str], ...]]:
    """For each of the ``candidates`` (files of the run that may define public pmap aliases) whose
    module defines aliases that modules of the project import: per alias, why it is kept ("" when
    every importer is among the run's ``files`` and its text after the run's fixes names the alias
    no more). ``fixed``: the new text of each file the run changes, by absolute path (any other
    file is as it is on disk). ``exports``: the project's (``project_exports``): an importer may
    name an alias by another name a module re-exports it as (``from pkg import P``)."""
    from pmap_migrate.rules.analysis.project import ProjectIndex

    index = ProjectIndex((root,))
    run = {os.path.abspath(f) for f in files}
    defined: dict[str, list[AliasFact]] = {}
    for path in sorted({os.path.abspath(c) for c in candidates}):
        if path.endswith(".ipynb"):
            continue
        data = _read(path)
        if data is None or b"pmap" not in data:
            continue
        view = _view(index, path)
        facts = index.facts_at(path, view.name)
        if facts is not None:
            public = [a for a in facts.aliases.values() if not a.name.startswith("_")]
            if public:
                defined[path] = public
    if not defined:
        return {}
    spellings: dict[tuple[str, str], set[bytes]] = {
        (owner, alias.name): {alias.name.encode()} for owner, aliases in defined.items() for alias in aliases}
    for export in exports:
        if export.origin in spellings:
            spellings[export.origin].add(export.name)
    wanted = set().union(*spellings.values())
    importers: dict[tuple[str, str], list[str]] = {}
    for path in _project_files(root):
        path = os.path.abspath(path)
        data = _read(path)
        star = data is not None and _STAR.search(data) is not None  # `from .constants import *` names none
        if data is None or not (star or any(name in data for name in wanted)):
            continue
        for owner, aliases in defined.items():
            for alias in aliases:
                if path != owner and (star or any(name in data for name in spellings[owner, alias.name])) \
                        and _names_alias(data, path, index, alias, owner):
                    importers.setdefault((owner, alias.name), []).append(path)
    decisions: dict[str, tuple[tuple[str, str], ...]] = {}
    for owner, aliases in defined.items():
        decided = []
        for alias in aliases:
            found = importers.get((owner, alias.name))
            if not found:
                continue
            outside = [p for p in found if p not in run]
            left = [p for p in found if p in run
                    and _names_alias(fixed[p] if p in fixed else (_read(p) or b""), p, index, alias, owner)]
            reasons = []
            if outside:
                reasons.append("importers outside this run: " + _shown(outside, root))
            if left:
                reasons.append("uses not rewritten in: " + _shown(left, root))
            decided.append((alias.name, "; ".join(reasons)))
        if decided:
            decisions[owner] = tuple(decided)
    return decisions


def multi_process_callers(candidates: Sequence[str], root: str) -> dict[str, tuple[str, ...]]:
    """For each of the ``candidates`` (files of the run) whose module pmaps functions at module
    level without using the multi-process API itself: the modules of the project that do use it
    (`jax.process_index()`, `jax.distributed`, ...) and name one of those functions, or one of its
    functions that return their outputs (``steps.p_double``, ``from .steps import run_step``),
    shown relative to ``root``. Those programs run the module's pmaps with this process's rows:
    `fix` writes them for every process (PM501's global-mesh rewrite, the boundary form for
    callers it does not see) instead of for one process, which would raise there."""
    from pmap_migrate.rules.analysis.facts import multi_process_module
    from pmap_migrate.rules.analysis.project import ProjectIndex, refers_to

    index = ProjectIndex((root,))
    defined: dict[str, set[tuple[str, str]]] = {}
    for path in sorted({os.path.abspath(c) for c in candidates}):
        facts = None if path.endswith(".ipynb") else index.facts_at(path, _view(index, path).name)
        if facts is not None and facts.pmapped and not any(f.multi_process for f in facts.pmapped.values()):
            defined[path] = {(path, f.name) for f in (*facts.pmapped.values(), *facts.returning.values())}
    if not defined:
        return {}
    words = {name.encode() for wanted in defined.values() for _, name in wanted}
    callers: dict[str, list[str]] = {}
    for path in _project_files(root):
        path = os.path.abspath(path)
        data = _read(path)
        if data is None or path in defined or not any(word in data for word in words):
            continue
        parsed = _parsed(data, path, index)
        if parsed is None:
            continue
        text, tree, view = parsed
        if not multi_process_module(text, tree, view.name, view.package):
            continue
        named = refers_to(tree, view, set().union(*defined.values()), by_path=True)
        for owner, wanted in defined.items():
            if named & wanted:
                callers.setdefault(owner, []).append(path)
    return {owner: tuple(sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in found))
            for owner, found in callers.items()}


def _shown(paths: Sequence[str], root: str, most: int = 5) -> str:
    shown = sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in paths)
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


# ------------------------------------------------------------------ the names the project exports
@dataclass(frozen=True)
class Export:
    """A module-level name of a project module that the index knows as a pmap alias or a pmapped
    function (``origin``: (defining file, name)), or that a module mentioning pmap imports such a
    name as (a re-export). ``handle``: the last component of the module's name (the file's stem, a
    package's directory), which an import of the module spells; ``package``: an ``__init__.py``,
    which its own modules also import from as ``from . import name``."""

    handle: bytes
    package: bool
    name: bytes
    origin: tuple[str, str]


# A module's contribution, as the cache keeps it by (size, mtime): None when it does not mention
# pmap (and imports nothing the project exports); else (its facts' names, none for a module without
# pmap, the (imported name, local name) pairs of its module-level `from ... import` statements).
Contribution = tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None

# The texts `may_define_facts` and `contribution` search, compiled when first used (a warm run
# reads no module).
_TEXTS = {
    # where a pmap fact can start: the name `pmap` (``jax.pmap``, an import of it), or a helper
    # that `fix` writes (its outputs are pmap's stacks)
    "fact root": rb"\bpmap\b|\b_shard_mapped\b|\b_global_call\b|\b_global_pmap\b",
    # a line that starts a statement at module level (or is text at column 0 in a string)
    "column zero": rb"(?m)^[^ \t\r\n\f#]",
    # statements whose bodies the facts never read; a `def` line itself binds no fact (its
    # decorators do)
    "block": rb"(?:async|def|class|if|elif|else|for|while|with|try|except|finally)\b",
    "import": rb"(?:from|import)\b",
    "renamed": rb"\w*[ \t]+as\b",
    "from import": rb"(?m)^from[ \t]+[\w.]+[ \t]+import[ \t]*(\([^)]*\)|[^\n]*(?:\\\r?\n[^\n]*)*)",
    "imported": rb"(\w+)(?:\s+as\s+(\w+))?",
}


@cache
def _text(name: str) -> re.Pattern[bytes]:
    return re.compile(_TEXTS[name])


def may_define_facts(data: bytes) -> bool:
    """Whether the module ``data`` can have pmap facts (rules/analysis/project.py), judged from its
    text (False only when sure, string literals aside): every fact is a module-level statement (an
    assignment, or a definition's decorators) reaching ``pmap`` or a helper `fix` writes, directly
    or through the module's imports and aliases, which spell it at module level too. So some such
    word must occur outside the bodies of definitions and blocks (the nearest statement at column 0
    above it, past the lines that close brackets, opens no body), outside comments, and not only in
    an import that binds it under its own name."""
    starts: list[int] | None = None
    for match in _text("fact root").finditer(data):
        if starts is None:
            starts = [m.start() for m in _text("column zero").finditer(data)]
        position = match.start()
        i = bisect.bisect_right(starts, position) - 1
        while i >= 0 and data[starts[i]] in b")]}":
            i -= 1
        if i < 0:
            return True
        start = starts[i]
        if _text("block").match(data, start):
            continue
        if _text("import").match(data, start):
            if _text("renamed").match(data, match.end()):
                return True
            continue
        before = data[data.rfind(b"\n", 0, position) + 1:position]
        if b"#" in before and b"'" not in before and b'"' not in before:
            continue
        return True
    return False


def contribution(data: bytes, path: str) -> Contribution:
    """What the module ``data`` (the file ``path``) brings to the project's exports."""
    if b"pmap" not in data:
        return None
    names: tuple[str, ...] = ()
    if may_define_facts(data):
        from pmap_migrate.rules.analysis.facts import module_facts
        from pmap_migrate.rules.analysis.project import module_identity

        _, name, package = module_identity(path)
        facts = module_facts(data, name, package)
        names = tuple(sorted({*facts.aliases, *facts.pmapped, *facts.returning}))
    return names, _imported(data)


def _imported(data: bytes) -> tuple[tuple[str, str], ...]:
    """The (imported name, local name) pairs of the module-level `from ... import` statements of
    the module ``data``."""
    imported = []
    for statement in _text("from import").finditer(data):
        for match in _text("imported").finditer(statement.group(1)):
            original, local = match.group(1).decode(), (match.group(2) or match.group(1)).decode()
            if original not in ("import", "as"):
                imported.append((original, local))
    return tuple(imported)


def _handle(path: str) -> tuple[bytes, bool]:
    """(The module's last name component as an import spells it, whether it is a package); a file
    name that is not UTF-8 (no module an import can name) as its bytes."""
    directory, filename = os.path.split(path)
    if filename == "__init__.py":
        return os.fsencode(os.path.basename(directory)), True
    return os.fsencode(filename.rsplit(".", 1)[0]), False


class ExportsPass:
    """``project_exports`` one file at a time, for a caller that goes over the files anyway (the
    runner's single pass: each file statted once, its cache entry looked up once). ``known``: each
    file's contribution by (size, mtime) from an earlier run (the cache's), updated here; a file
    whose size and mtime are unchanged is not read. A file the caller vouches for (its size and
    mtime are those an earlier run saw: the result cache's) that ``known`` does not hold did not
    mention pmap, nor import what that run's project exported, and ``known`` keeps only the files
    that mention it, those that import exports, and those not vouched for (a warm run of a large
    tree loads and stores a few hundred entries, not one per file). ``plain`` lists the files
    without a contribution (the caller adds those it vouches for itself): ``finish`` reads them
    when the exports have grown, for the ones that import what they export now."""

    def __init__(self, known: dict[str, tuple[int, int, Contribution]] | None = None,
                 vouched: Callable[[str, os.stat_result], bool] | None = None) -> None:
        self.known = {} if known is None else known
        self.vouched = vouched  # for the files of ``walk`` (``add`` is told)
        self.changed = False
        self._contributions: dict[str, Contribution] = {}
        self._seen: set[str] = set()  # of the files ``known`` holds: the others are gone
        self.forgotten: list[str] = []
        self.sources: frozenset[str] = frozenset()
        self.plain: list[str] = []  # unchanged, without a contribution
        self._read_now: list[str] = []  # read by this pass, without a contribution

    def walk(self, root: str, run: frozenset[str]) -> frozenset[str]:
        """Add the Python modules under ``root`` (``_project_files``) but the run's (``run``:
        absolute paths); those of the run that the walk found, for the caller to add."""
        found = []
        for entry in _project_entries(os.path.abspath(root)):
            path = entry.path
            if not path.endswith(".py"):
                continue
            if path in run:
                found.append(path)
                continue
            try:
                stat = entry.stat()
            except OSError:
                self.missing(path)
                continue
            self.add(path, stat)
        return frozenset(found)

    def missing(self, path: str) -> None:
        """The file ``path`` could not be statted: what ``known`` holds of it stays."""
        if path in self.known:
            self._seen.add(path)

    def add(self, path: str, stat: os.stat_result, vouched: bool | None = None) -> None:
        """The module ``path`` (absolute), of size and mtime ``stat``; ``vouched``: whether the
        caller vouches for them (None: ask ``self.vouched``)."""
        entry = self.known.get(path)
        if entry is None:
            if vouched is None:
                vouched = self.vouched is not None and self.vouched(path, stat)
            if vouched:
                self.plain.append(path)
                return  # unchanged, and without a contribution
        if entry is None or entry[0] != stat.st_size or entry[1] != stat.st_mtime_ns:
            data = _read(path)
            if data is None:
                if entry is not None:
                    self._seen.add(path)
                return
            entry = self.known[path] = (stat.st_size, stat.st_mtime_ns, contribution(data, path))
            self.changed = True
            if entry[2] is None:
                self._read_now.append(path)
        elif entry[2] is None:
            self.plain.append(path)
        self._seen.add(path)
        if entry[2] is not None:
            self._contributions[path] = entry[2]
        else:
            if vouched is None:
                vouched = self.vouched is not None and self.vouched(path, stat)
            if vouched:
                del self.known[path]  # the result cache's entry stands for it from now on
                self.changed = True

    def finish(self, earlier: frozenset[Export] | None = None, sources: frozenset[str] | None = None
               ) -> tuple[frozenset[Export], bool]:
        """The project's exports, and whether ``known`` changed (it forgets the files not seen).
        ``earlier``: the exports made from ``known`` as it was, from the contributions of the files
        ``sources``: they stand while ``known`` is unchanged and those files are this run's too.
        Left for the caller: ``self.sources``, the files whose contributions the exports are made
        from; ``self.forgotten``, the files not seen whose contribution mentioned pmap (gone, or
        not in this run when the run's files are the project), which the caller vouches for no
        more (were one to come back unchanged, it would be taken for a file without pmap)."""
        for gone in [p for p in self.known if p not in self._seen]:
            if self.known.pop(gone)[2] is not None:
                self.forgotten.append(gone)
            self.changed = True
        if earlier is not None and not self.changed and sources == frozenset(self._contributions):
            self.sources = sources
            return earlier, False
        exports = self._importers(_exports_of(self._contributions), earlier)
        self.sources = frozenset(self._contributions)
        return exports, self.changed

    def _importers(self, exports: frozenset[Export], earlier: frozenset[Export] | None) -> frozenset[Export]:
        """``exports`` with those of the modules without pmap that import them by name, from their
        modules (``imports_exports``): the files this pass read, and the unchanged ones
        (``plain``), which imported none of ``earlier`` (the exports of the run that saw them
        last), as far as the chain goes."""
        groups = [(self._read_now, frozenset()), (self.plain, earlier or frozenset())]
        for _ in range(8):
            found = False
            for group, (paths, tested) in enumerate(groups):
                new = importable(exports - tested)
                named = _names_imported(tuple(sorted({e.name for e in new})))
                left = []
                for path in paths if new else ():
                    data = _read(path)
                    if data is None or b"pmap" in data:  # changed since it was statted: the next run reads it
                        continue
                    if named.search(data) is None or not imports_exports(data, new):
                        left.append(path)
                        continue
                    entry = self.known.get(path)
                    if entry is None:
                        try:
                            stat = os.stat(path)
                        except OSError:
                            continue
                        entry = (stat.st_size, stat.st_mtime_ns, None)
                    part = self._contributions[path] = ((), _imported(data))
                    self.known[path] = (entry[0], entry[1], part)
                    self._seen.add(path)
                    self.changed = found = True
                groups[group] = (left if new else paths, exports)
            if not found:
                break
            exports = _exports_of(self._contributions)
        # a module without pmap whose imports the project exports no more contributes nothing
        names = {e.name for e in exports}
        for path, (own, imported) in list(self._contributions.items()):
            if not own and not any(original.encode() in names for original, _ in imported):
                del self._contributions[path]
                self.known[path] = (*self.known[path][:2], None)
                self.changed = True
        return exports


def project_exports(root: str | None, known: dict[str, tuple[int, int, Contribution]] | None = None,
                    files: Iterable[str] = (), vouched: Callable[[str, os.stat_result], bool] | None = None,
                    earlier: frozenset[Export] | None = None, sources: frozenset[str] | None = None
                    ) -> tuple[frozenset[Export], bool]:
    """The exports of the project's Python modules under ``root`` (``_project_files``; None: no
    tree) and of the run's ``files`` (absolute paths: some may lie elsewhere), and whether
    ``known`` changed (``ExportsPass``, which says what ``known``, ``vouched``, ``earlier`` and
    ``sources`` are)."""
    files = frozenset(files)
    exports = ExportsPass(known, vouched)
    found = exports.walk(root, files) if root is not None else frozenset()
    inside = None if root is None else os.path.join(os.path.abspath(root), "")
    for path in sorted(files):
        if path.endswith(".py") and (inside is None or path in found or not path.startswith(inside)):
            try:
                stat = os.stat(path)
            except OSError:
                exports.missing(path)
                continue
            exports.add(path, stat)
    return exports.finish(earlier, sources)


def _exports_of(contributions: dict[str, Contribution]) -> frozenset[Export]:
    """The exports of the modules' ``contributions`` (by path: in the order of their paths)."""
    exports: set[Export] = set()
    by_name: dict[str, set[tuple[str, str]]] = {}  # exported name -> its origins
    ordered = sorted(contributions.items())
    for path, (names, _) in ordered:
        handle, package = _handle(path)
        for name in names:
            exports.add(Export(handle, package, name.encode(), (path, name)))
            by_name.setdefault(name, set()).add((path, name))
    # Re-exports (``from .steps import p_double as pd`` in a package's `__init__.py`), also of
    # re-exports: by name, as far as they go.
    for _ in range(8):
        grown = False
        for path, (_, imported) in ordered:
            handle, package = _handle(path)
            for original, local in imported:
                for origin in tuple(by_name.get(original, ())):
                    export = Export(handle, package, local.encode(), origin)
                    if export not in exports:
                        exports.add(export)
                        by_name.setdefault(local, set()).add(origin)
                        grown = True
        if not grown:
            break
    return frozenset(exports)


def importable(exports: Iterable[Export]) -> list[Export]:
    """The ``exports`` that a module not spelling `pmap` can name, in order of their names."""
    return sorted((e for e in exports if b"pmap" not in e.name), key=lambda e: (e.name, e.handle, e.origin))


def imports_exports(data: bytes, exports: Iterable[Export]) -> bool:
    """Whether the text ``data`` (a module, or a notebook's JSON) may refer to one of ``exports``:
    it spells the name, and the module as an import or an attribute chain spells it
    (``from .steps import``, ``steps.p_double``, ``import pkg.steps as s``; for a package, also
    ``from . import``). An over-approximation: the index, asked next, decides."""
    name, spelled = None, False
    for export in exports:  # in order of their names (a name of several modules is searched once)
        if export.name != name:
            name, spelled = export.name, export.name in data
        if spelled and _import_pattern(export.handle, export.package, export.name).search(data):
            return True
    return False


@lru_cache(maxsize=8)
def _names_imported(names: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """An import statement that names one of ``names`` (a module without pmap exports only what
    its `from ... import` statements bind): searched for the word `import` first, which is quick."""
    return re.compile(rb"import(?:[ \t]*\([^)]*?|[^\n]*?)\b(?:" + b"|".join(re.escape(n) for n in names) + rb")\b")


@lru_cache(maxsize=1024)
def _import_pattern(handle: bytes, package: bool, name: bytes) -> re.Pattern[bytes]:
    module, name = re.escape(handle), re.escape(name)
    forms = [rb"\b" + module + rb"\s*\.\s*" + name + rb"\b",  # an attribute of the module
             rb"\bfrom\s+[\w.]*\b" + module + rb"\s+import\b",  # `from pkg.steps import` (star too)
             rb"\b" + module + rb"\s+as\s+\w"]  # the module under another name
    if package:
        forms.append(rb"\bfrom\s+\.+\s*import\b")
    return re.compile(b"|".join(forms))
