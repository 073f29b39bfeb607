"""The project index: what other modules of the project export that the analysis of one module needs.

Real projects define their pmap once (``pmap = functools.partial(jax.pmap, axis_name="i")`` in a
``constants.py``) and apply it everywhere. A module's own analysis (``SemanticModel``) sees only the
import; this index answers, for a dotted name a module imports, whether it is

- an alias of ``jax.pmap`` (plain ``pmap = jax.pmap``, ``functools.partial(jax.pmap, ...)``, an
  alias of an alias, a re-export ``from .constants import pmap`` in a package's ``__init__.py`` or
  in any other module);
- a pmapped function (``@jax.pmap def f``, ``@functools.partial(jax.pmap, ...)``, ``f =
  jax.pmap(g)``, through an alias too);
- a function returning a pmap output or a per-device stack on every return (``def run_step(x):
  return p_step(x)``, ``return jax.device_put_replicated(...)``): a row read from what it returns
  is a gather, as a row of the output is.

The facts of a module (``ModuleFacts``, analysis/facts.py) are read with Python's `ast`, module
level only (and what module-level functions return); a name a module star-imports (``from
.constants import *``) is looked up in the modules it star-imports, as far as their ``__all__`` or
leading underscores let the star bind it. Module names come from the package structure: a file's
module is its path below the first directory up that has no ``__init__.py`` (the file's base, where Python's import system
would find its top package). A module is looked up in the importer's base first, then in the
configuration's root (scripts of ``examples/`` importing the project's package).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import blake2b

from pmap_migrate.rules.analysis.facts import FactReader, Facts, ModuleFacts, absolute_name, module_facts

# How many re-exports and aliases of aliases a lookup follows (cycles end there too).
MAX_HOPS = 8


def module_identity(path: str, is_package_dir: Callable[[str], bool] | None = None) -> tuple[str, str, bool]:
    """``(base directory, dotted module name, is a package)`` of the Python file ``path``."""
    is_package_dir = is_package_dir or _has_init
    directory, filename = os.path.split(os.path.abspath(path))
    stem = filename.rsplit(".", 1)[0]
    package = stem == "__init__"
    parts = [] if package else [stem]
    while is_package_dir(directory):
        directory, name = os.path.split(directory)
        parts.insert(0, name)
        if not name:
            break
    return directory, ".".join(parts) or stem, package


def _has_init(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "__init__.py"))


class ProjectIndex:
    """Facts of the project's modules, by (base directory, module name), loaded from disk on demand.

    ``known`` holds the facts of files the caller read already (the files of a run); any other
    module is read when first asked for (a pre-commit run passes only the changed files)."""

    def __init__(self, roots: tuple[str, ...] = (), known: dict[str, ModuleFacts] | None = None,
                 read: Callable[[str], bytes | None] | None = None, run: frozenset[str] = frozenset()) -> None:
        self.roots = tuple(os.path.abspath(r) for r in roots)
        self.run = run  # the absolute paths of the run's files
        self._defined_at: dict[tuple[str, str], str] = {}  # (module, alias) -> the file found to define it
        self._by_path: dict[str, ModuleFacts | None] = dict(known or {})
        self._read = read or _read_file
        self._paths: dict[tuple[str, str], str | None] = {}
        self._star_depth = 0
        self._asked: set[tuple[str, str | tuple[str, ...]]] | None = None  # by the lookup under way

    def facts_at(self, path: str, name: str) -> ModuleFacts | None:
        """The facts of the file ``path``, read as module ``name``."""
        facts = self._by_path.get(path)
        if facts is None or facts.name != name:
            data = self._read(path)
            facts = None if data is None else module_facts(data, name, path.endswith("__init__.py"))
            self._by_path[path] = facts
        return facts

    def module_path(self, base: str | tuple[str, ...], name: str) -> tuple[str, str] | None:
        """``(base directory, file)`` of module ``name`` below ``base`` (one directory, or several
        in order), or else below a root, if the project has one."""
        for directory in (*((base,) if isinstance(base, str) else base), *self.roots):
            key = (directory, name)
            if key not in self._paths:
                stem = os.path.join(directory, *name.split("."))
                found = None
                for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                    if os.path.isfile(candidate):
                        found = candidate
                        break
                self._paths[key] = found
            if self._paths[key] is not None:
                return directory, self._paths[key]
        return None

    def defined_at(self, module: str, name: str) -> str | None:
        """The file found to define ``name`` of ``module`` (by an earlier ``lookup``)."""
        return self._defined_at.get((module, name))

    def defined_in_run(self, module: str, name: str) -> bool:
        """Whether the file that defines ``name`` of ``module`` (found by an earlier ``lookup``) is
        among the run's files."""
        return self._defined_at.get((module, name)) in self.run

    def facts_for(self, path: str) -> ModuleFacts | None:
        """The facts last read from ``path`` (None: not read, or unreadable)."""
        return self._by_path.get(path)

    def exports(self, dotted: str, base: str | tuple[str, ...], used: set[str] | None = None) -> bool:
        """Whether ``dotted`` names something that the index knows, or a module of the project
        that defines or re-exports an alias of pmap or a pmapped function."""
        if self.lookup(dotted, base, used) is not None:
            return True
        where = self.module_path(base, dotted)
        if where is None:
            return False
        facts = self.facts_at(where[1], dotted)
        if used is not None:
            used.add(where[1])
        if facts is None:
            return False
        return facts.exports_pmap or any(
            self.lookup(target, where[0], used) is not None for target in facts.imports.values()) or any(
            self._star_exports(star, where[0], used) for star in facts.stars)

    def _star_exports(self, star: str, base: str | tuple[str, ...], used: set[str] | None) -> bool:
        """Whether the module ``star`` (imported with `*`) defines an alias of pmap or a pmapped
        function that the star import binds."""
        where = self.module_path(base, star)
        facts = self.facts_at(where[1], star) if where is not None else None
        if used is not None and where is not None:
            used.add(where[1])
        return facts is not None and any(facts.star_exports(n)
                                         for n in (*facts.aliases, *facts.pmapped, *facts.returning))

    def lookup(self, dotted: str, base: str | tuple[str, ...], used: set[str] | None = None) -> Facts | None:
        """What the absolute ``dotted`` name (``pkg.constants.pmap``) is, seen from a module whose
        base is ``base``: an alias of pmap, a pmapped function, or nothing the index knows.
        ``used`` receives the paths of the modules the answer was read from."""
        if self._asked is not None:
            return self._lookup(dotted, base, used)
        self._asked = set()
        try:
            return self._lookup(dotted, base, used)
        finally:
            self._asked = None

    def _lookup(self, dotted: str, base: str | tuple[str, ...], used: set[str] | None) -> Facts | None:
        """``lookup``, within one: a name it asked about already (through other star imports, or
        in a cycle) has no answer that was not found then."""
        for _ in range(MAX_HOPS):
            if (dotted, base) in self._asked:
                return None
            self._asked.add((dotted, base))
            parts = dotted.split(".")
            found = None
            # The longest prefix that is a module of the project, then the name inside it.
            for cut in range(len(parts) - 1, 0, -1):
                module = ".".join(parts[:cut])
                where = self.module_path(base, module)
                if where is not None:
                    found = (where, module, parts[cut:])
                    break
            if found is None:
                return None
            (base, path), module, rest = found
            facts = self.facts_at(path, module)
            if used is not None:
                used.add(path)
            if facts is None:
                return None
            head = rest[0]
            if len(rest) == 1:
                fact = facts.aliases.get(head) or facts.pmapped.get(head) or facts.returning.get(head)
                if fact is not None:
                    self._defined_at[(fact.module, fact.name)] = path
                    return fact
            target = facts.imports.get(head)
            if target is None:
                return self._through_stars(facts, rest, base, used)
            dotted = ".".join([target, *rest[1:]])  # a re-export, or a submodule bound by `from . import x`
        return None

    def _through_stars(self, facts: ModuleFacts, rest: list[str], base: str | tuple[str, ...],
                       used: set[str] | None) -> Facts | None:
        """``rest`` of a module whose ``facts`` do not bind its first name: a name its star imports
        bind (`from .constants import *` in a package's `__init__.py`), the first that the index
        knows."""
        if self._star_depth >= MAX_HOPS:  # star imports of each other
            return None
        self._star_depth += 1
        try:
            for star in facts.stars:
                where = self.module_path(base, star)
                module = self.facts_at(where[1], star) if where is not None else None
                if module is not None and module.star_exports(rest[0]):
                    found = self._lookup(".".join([star, *rest]), base, used)
                    if found is not None:
                        return found
            return None
        finally:
            self._star_depth -= 1


def facts_fingerprint(facts: ModuleFacts) -> str:
    return blake2b(repr(facts.key()).encode(), digest_size=12).hexdigest()


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


@dataclass
class ModuleView:
    """The index as one module sees it: its own name resolves relative imports, its base finds
    absolute ones (then the directories between the module and its base, nearest first: a
    repository whose root holds an ``__init__.py`` is still run from its root or a script's
    directory); ``used`` collects the files its answers came from (its result depends on them)."""

    index: ProjectIndex
    base: str
    name: str
    package: bool = False
    used: set[str] = field(default_factory=set)
    _refers: bool | None = field(default=None, repr=False)
    bases: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        levels = self.name.count(".") + (1 if self.package else 0)
        directories = [self.base]
        if levels:
            directory = os.path.join(self.base, *self.name.split(".")[:levels])
            while len(directories) <= levels and directory != self.base:
                directories.insert(1, directory)
                directory = os.path.dirname(directory)
        self.bases = (directories[0], *reversed(directories[1:]))

    def lookup(self, qualified: str) -> Facts | None:
        """``qualified``: a name as libcst's QualifiedNameProvider spells it (``.constants.pmap``,
        ``ferminet.constants.pmap``)."""
        dotted = absolute_name(qualified, self.name, self.package)
        if dotted is None or "." not in dotted:
            return None
        return self.index.lookup(dotted, self.bases, self.used)

    def star_binds(self, spelled: str, name: str) -> bool:
        """Whether `from <spelled> import *` in this module binds ``name`` (the star module's
        `__all__`, else its names without a leading underscore; a module not in the project: no)."""
        dotted = absolute_name(spelled, self.name, self.package)
        where = self.index.module_path(self.bases, dotted) if dotted is not None else None
        if where is None:
            return False
        self.used.add(where[1])
        facts = self.index.facts_at(where[1], dotted)
        return facts is not None and facts.star_exports(name)

    def refers_to_exports(self, tree: ast.Module) -> bool:
        """Whether the module's imports (module level, and in its top-level ``if``/``try``
        blocks) bring in anything of the project that the index knows (``exports``)."""
        if self._refers is None:
            self._refers = self._refers_to_exports(tree)
        return self._refers

    def _refers_to_exports(self, tree: ast.Module) -> bool:
        statements = list(tree.body)
        for statement in tree.body:
            if isinstance(statement, (ast.If, ast.Try)):
                statements.extend(statement.body)
                statements.extend(statement.orelse)
                for handler in getattr(statement, "handlers", ()):
                    statements.extend(handler.body)
        for statement in statements:
            if isinstance(statement, ast.Import):
                names = [alias.name for alias in statement.names]
            elif isinstance(statement, ast.ImportFrom):
                module = absolute_name("." * statement.level + (statement.module or ""), self.name, self.package)
                if module is None:
                    continue
                names = [module if alias.name == "*" else f"{module}.{alias.name}" for alias in statement.names]
            else:
                continue
            if any(self.index.exports(name, self.bases, self.used) for name in names):
                return True
        return False


def refers_to(tree: ast.Module, view: ModuleView, wanted: set[tuple[str, str]], by_path: bool = False
              ) -> set[tuple[str, str]]:
    """Which of the facts ``wanted`` (aliases of pmap, pmapped functions, ...: by module and name;
    ``by_path``: by the file defining them and name, which holds where a module has two names,
    below a repository whose root holds an ``__init__.py``) the module ``tree`` (seen as ``view``)
    names anywhere: an import of it (``from .constants import pmap as p``, through re-exports too)
    or an attribute of a module it imports (``constants.pmap``, ``pkg.constants.pmap``)."""
    facts = ModuleFacts(view.name, view.package)
    reader = FactReader("", facts)
    reader.read(ast.Module(body=[s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))],
                           type_ignores=[]))
    imports = facts.imports
    # imports in functions and blocks count too (the module binds the name there)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
            inner = ModuleFacts(view.name, view.package)
            FactReader("", inner).read(ast.Module(body=[node], type_ignores=[]))
            imports = {**inner.imports, **imports}
    asked: set[str] = set()
    found: set[tuple[str, str]] = set()

    def names(dotted: str) -> bool:
        if dotted in asked:
            return False
        asked.add(dotted)
        fact = view.index.lookup(dotted, view.bases)
        key = None if fact is None else (fact.module, fact.name)
        if by_path and key is not None:
            key = (view.index.defined_at(*key), fact.name)
        if key in wanted:
            found.add(key)
            return True
        return False

    for target in imports.values():
        names(target)
    # `from .constants import *`: a package's re-export for its importers; another module's import
    # for its own code, a use where that code still reads the name and binds it nowhere itself
    read: set[str] | None = None  # the names the module reads, for a star import's
    for star in facts.stars:
        for _, name in wanted - found:
            if not view.package and read is None:
                read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
            if view.package or name in read:
                names(f"{star}.{name}")
    for node in ast.walk(tree):
        if found == wanted:
            break
        if isinstance(node, ast.Attribute):
            parts = []
            head: ast.expr = node
            while isinstance(head, ast.Attribute):
                parts.append(head.attr)
                head = head.value
            if isinstance(head, ast.Name) and head.id in imports:
                names(".".join([imports[head.id], *reversed(parts)]))
    return found
