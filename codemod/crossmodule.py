"""`fix` of a project's pmap aliases and of the modules that import them, together.

A module such as ferminet's ``constants.py`` defines ``pmap = functools.partial(jax.pmap, ...)``
and other modules apply it (``constants.pmap(f)``). `fix` rewrites those uses in the importers
(rules/analysis/imported.py); the alias itself may go only when no module of the project needs it
any more. Which modules import it is read from the whole project under the configuration's root,
files outside the run included (pre-commit passes only the changed ones): every Python file that
spells the alias's name (a notebook: its code cells) is parsed with `ast` and asked whether it
names the alias (``refers_to_alias``). After the run's fixes, an alias goes when every importer is
in the run and its fixed text no longer names it; otherwise it stays on `runtime_shim.pmap`, and
the comment its fix writes says which importers keep it. An alias no module of the project
imports stays too (a library's public name).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Mapping, Sequence

from pmap_migrate.rules.analysis.project import AliasFact, ModuleView, ProjectIndex, module_identity, refers_to_alias

# Directories never read for importers: tools' and environments' own.
SKIPPED_DIRECTORIES = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})


def _project_files(root: str) -> Iterator[str]:
    """The Python files and notebooks under ``root`` (hidden directories and virtual environments
    aside)."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(
            d for d in subdirectories if not d.startswith(".") and d not in SKIPPED_DIRECTORIES
            and not os.path.isfile(os.path.join(directory, d, "pyvenv.cfg")))
        for name in sorted(files):
            if name.endswith((".py", ".ipynb")):
                yield os.path.join(directory, name)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _view(index: ProjectIndex, path: str) -> ModuleView:
    base, name, package = module_identity(path)
    return ModuleView(index, base, name, package)


def _names_alias(data: bytes, path: str, index: ProjectIndex, alias: AliasFact) -> bool:
    """Whether the file's text ``data`` (a module, or a notebook: its code cells) names ``alias``."""
    from pmap_migrate.notebooks import NotebookError, load

    try:
        if path.endswith(".ipynb"):
            tree = ast.parse(load(data, path).settle())
            view = ModuleView(index, os.path.dirname(path), "__notebook__")
        else:
            tree = ast.parse(data)
            view = _view(index, path)
    except (NotebookError, SyntaxError, ValueError, RecursionError, MemoryError):  # it may need the alias
        return True
    return refers_to_alias(tree, view, alias)


def alias_decisions(candidates: Sequence[str], files: Sequence[str], fixed: Mapping[str, bytes], root: str
                    ) -> dict[str, tuple[tuple[str, str], ...]]:
    """For each of the ``candidates`` (files of the run that may define public pmap aliases) whose
    module defines aliases that modules of the project import: per alias, why it is kept ("" when
    every importer is among the run's ``files`` and its text after the run's fixes names the alias
    no more). ``fixed``: the new text of each file the run changes, by absolute path (any other
    file is as it is on disk)."""
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
    wanted = {alias.name.encode() for aliases in defined.values() for alias in aliases}
    importers: dict[tuple[str, str], list[str]] = {}
    for path in _project_files(root):
        path = os.path.abspath(path)
        data = _read(path)
        if data is None or not any(name in data for name in wanted):
            continue
        for owner, aliases in defined.items():
            for alias in aliases:
                if path != owner and alias.name.encode() in data and _names_alias(data, path, index, alias):
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
                    and _names_alias(fixed[p] if p in fixed else (_read(p) or b""), p, index, alias)]
            reasons = []
            if outside:
                reasons.append("importers outside this run: " + _shown(outside, root))
            if left:
                reasons.append("uses not rewritten in: " + _shown(left, root))
            decided.append((alias.name, "; ".join(reasons)))
        if decided:
            decisions[owner] = tuple(decided)
    return decisions


def _shown(paths: Sequence[str], root: str, most: int = 5) -> str:
    shown = sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in paths)
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more
