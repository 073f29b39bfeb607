"""The project index: what other modules of the project export that the analysis of one module needs.

Real projects define their pmap once (``pmap = functools.partial(jax.pmap, axis_name="i")`` in a
``constants.py``) and apply it everywhere. A module's own analysis (``SemanticModel``) sees only the
import; this index answers, for a dotted name a module imports, whether it is

- an alias of ``jax.pmap`` (plain ``pmap = jax.pmap``, ``functools.partial(jax.pmap, ...)``, an
  alias of an alias, a re-export ``from .constants import pmap`` in a package's ``__init__.py``);
- a pmapped function (``@jax.pmap def f``, ``@functools.partial(jax.pmap, ...)``, ``f =
  jax.pmap(g)``, through an alias too).

The facts of a module (``ModuleFacts``) are read with Python's `ast`, module level only, from files
that mention `pmap` (any other module has none of these facts, only its imports matter for
re-exports, and a re-export of an alias names it); they are small and picklable, and cached per
file by the engine. Module names come from the package structure: a file's module is its path below
the first directory up that has no ``__init__.py`` (the file's base, where Python's import system
would find its top package). A module is looked up in the importer's base first, then in the
configuration's root (scripts of ``examples/`` importing the project's package).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import blake2b

from pmap_migrate.rules.knowledge import tables

# How many re-exports and aliases of aliases a lookup follows (cycles end there too).
MAX_HOPS = 8


@dataclass(frozen=True)
class AliasFact:
    """A module-level name bound to ``jax.pmap`` or to ``functools.partial(jax.pmap, ...)``."""

    module: str
    name: str
    options: str = ""  # the arguments `functools.partial` binds, as written ("axis_name='i'")
    # The names the options read, sorted; ``stable``: those of them that are module-level names of
    # ``module`` bound once, by an assignment or a definition (an importer can name them through
    # its own binding of the module: `constants.AXIS`).
    names: tuple[str, ...] = ()
    stable: tuple[str, ...] = ()


@dataclass(frozen=True)
class PmappedFact:
    """A module-level function that pmap transformed: calling it runs a pmap."""

    module: str
    name: str
    options: str = ""  # pmap's arguments after the function (and the alias's), as written
    returns_tuple: bool = False  # every return is a tuple/list display: `f(x)[0]` picks an output
    # The faithful rewrite of a pmap (`jax.jit(_shard_mapped(f, "i"))`, `_global_call(...)` of it):
    # no pmap any more, but its outputs are the same stacks, one row per device.
    rewritten: bool = False


@dataclass(frozen=True)
class ModuleFacts:
    name: str  # dotted module name below its base
    package: bool  # an `__init__.py`
    aliases: dict[str, AliasFact] = field(default_factory=dict)
    pmapped: dict[str, PmappedFact] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # module-level local name -> absolute dotted name

    @property
    def exports_pmap(self) -> bool:
        return bool(self.aliases or self.pmapped)

    def key(self) -> tuple:
        """What the facts are, comparable across runs (the cache compares it)."""
        return (self.name, self.package, tuple(sorted(self.aliases.items())),
                tuple(sorted(self.pmapped.items())), tuple(sorted(self.imports.items())))


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


def absolute_name(relative: str, module: str, package: bool) -> str | None:
    """``.constants.pmap`` (as imported by ``module``) as an absolute dotted name; None when it
    climbs above the top package."""
    level = len(relative) - len(relative.lstrip("."))
    if not level:
        return relative
    parts = module.split(".") if package else module.split(".")[:-1]
    if level - 1 > len(parts) or (level - 1 == len(parts) and not parts):
        return None
    base = parts[:len(parts) - (level - 1)]
    rest = relative[level:]
    return ".".join([*base, rest] if rest else base) or None


# ------------------------------------------------------------------ facts of one module
def module_facts(source: bytes | str, name: str, package: bool) -> ModuleFacts:
    """The facts of one module's source (empty when it does not parse or does not mention pmap)."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    facts = ModuleFacts(name, package)
    if "pmap" not in text:
        return facts
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return facts
    _FactReader(text, facts).read(tree)
    return facts


class _FactReader:
    def __init__(self, text: str, facts: ModuleFacts) -> None:
        self.text = text
        self.facts = facts
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.other: set[str] = set()  # names also bound to something that is neither

    def read(self, tree: ast.Module) -> None:
        facts = self.facts
        for statement in tree.body:
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.asname:
                        facts.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".", 1)[0]
                        facts.imports[top] = top
            elif isinstance(statement, ast.ImportFrom):
                base = absolute_name("." * statement.level + (statement.module or ""), facts.name, facts.package)
                if base is None:
                    continue
                for alias in statement.names:
                    if alias.name != "*":
                        facts.imports[alias.asname or alias.name] = f"{base}.{alias.name}"
        for statement in tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[statement.name] = statement
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name):
                self._assign(statement.targets[0].id, statement.value)
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                    and statement.value is not None:
                self._assign(statement.target.id, statement.value)
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(statement)
            elif isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.ClassDef)):
                for target in _bound_names(statement):
                    self._rebound(target)
        for name in self.other:
            facts.aliases.pop(name, None)
            facts.pmapped.pop(name, None)
        bindings: dict[str, int] | None = None
        for name, alias in list(facts.aliases.items()):
            read = _names_read(alias.options)
            if read:
                bindings = _module_bindings(tree) if bindings is None else bindings
                stable = tuple(n for n in read if bindings.get(n) == 1 and n not in facts.imports)
                facts.aliases[name] = AliasFact(alias.module, alias.name, alias.options, read, stable)

    def _rebound(self, name: str) -> None:
        if name in self.facts.aliases or name in self.facts.pmapped:
            self.other.add(name)
        self.facts.imports.pop(name, None)

    def _assign(self, name: str, value: ast.expr) -> None:
        alias = self._transform(value)
        if alias is not None:
            self._rebound_to(name)
            self.facts.aliases[name] = AliasFact(self.facts.name, name, alias)
            return
        rewritten = self._rewritten(value)
        if rewritten is not None:
            function = rewritten.args[0] if rewritten.args else None
            returns = isinstance(function, ast.Name) and function.id in self.functions \
                and _returns_tuple(self.functions[function.id])
            self._rebound_to(name)
            self.facts.pmapped[name] = PmappedFact(self.facts.name, name, returns_tuple=returns, rewritten=True)
            return
        if isinstance(value, ast.Call) and value.args and not isinstance(value.args[0], ast.Starred):
            options = self._transform(value.func)
            if options is not None:
                rest = _join(options, *(self._segment(a) for a in value.args[1:]),
                             *(self._segment(k) for k in value.keywords))
                function = value.args[0]
                returns = isinstance(function, ast.Name) and function.id in self.functions \
                    and _returns_tuple(self.functions[function.id])
                self._rebound_to(name)
                self.facts.pmapped[name] = PmappedFact(self.facts.name, name, rest, returns)
                return
        self._rebound(name)

    def _rebound_to(self, name: str) -> None:
        """``name`` bound to a pmap fact: an earlier plain binding makes it ambiguous."""
        self.facts.imports.pop(name, None)

    def _rewritten(self, value: ast.expr) -> ast.Call | None:
        """``value`` is what `fix` writes for a pmap, whose outputs are its stacks: `jax.jit(
        _shard_mapped(f, ...))` without `out_axes`, or `_global_call(...)` of that (the
        `_shard_mapped(...)` call, whose first argument is the function)."""
        if not isinstance(value, ast.Call) or not value.args:
            return None
        if self._helper(value.func, "_global_call"):
            value = value.args[0]
            if not isinstance(value, ast.Call) or not value.args:
                return None
        if self._dotted(value.func) not in tables.JIT:
            return None
        inner = value.args[0]
        return inner if isinstance(inner, ast.Call) and self._stacks(inner.func, inner.keywords) else None

    def _stacks(self, helper: ast.expr, keywords: list[ast.keyword]) -> bool:
        """``helper`` is `_shard_mapped`, given ``keywords`` that leave every output stacked on
        axis 0 (no `out_axes`)."""
        return self._helper(helper, "_shard_mapped") and not any(k.arg == "out_axes" for k in keywords)

    def _helper(self, expr: ast.expr, name: str) -> bool:
        """``expr`` names the helper ``name`` that `fix` writes: imported from a `_pmap_compat`
        module, or defined in this one."""
        if not isinstance(expr, ast.Name):
            return False
        if expr.id in self.functions:
            return expr.id == name
        imported = self.facts.imports.get(expr.id, "")
        return imported.endswith(f"_pmap_compat.{name}")

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        decorators = node.decorator_list
        top = decorators[0] if decorators else None
        if isinstance(top, ast.Call) and top.args and self._dotted(top.func) in tables.PARTIAL:
            top = top.args[0]  # `@functools.partial(jax.jit, donate_argnums=...)`
        if len(decorators) >= 2 and self._dotted(top) in tables.JIT:
            below = decorators[1]  # `@jax.jit` over `@functools.partial(_shard_mapped, ...)` or `@_shard_mapped`
            partial = isinstance(below, ast.Call) and below.args and self._dotted(below.func) in tables.PARTIAL
            if self._stacks(below.args[0], below.keywords) if partial else self._stacks(below, []):
                self.facts.pmapped[node.name] = PmappedFact(self.facts.name, node.name,
                                                            returns_tuple=_returns_tuple(node), rewritten=True)
                return
        for decorator in node.decorator_list:
            options = self._transform(decorator)
            if options is not None:
                self.facts.pmapped[node.name] = PmappedFact(self.facts.name, node.name, options,
                                                            _returns_tuple(node))
                return
        self._rebound(node.name)

    def _transform(self, expr: ast.expr) -> str | None:
        """The bound options when ``expr`` denotes ``jax.pmap`` ("") or a partial of it."""
        if isinstance(expr, ast.Call) and expr.args and self._dotted(expr.func) in tables.PARTIAL:
            inner = self._transform(expr.args[0])
            if inner is None:
                return None
            return _join(inner, *(self._segment(a) for a in expr.args[1:]),
                         *(self._segment(k) for k in expr.keywords))
        if isinstance(expr, ast.Name) and expr.id in self.facts.aliases:
            return self.facts.aliases[expr.id].options
        if self._dotted(expr) in tables.PMAP:
            return ""
        return None

    def _dotted(self, expr: ast.expr) -> str | None:
        parts = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        head = self.facts.imports.get(expr.id)
        if head is None:
            return None
        return ".".join([head, *reversed(parts)])

    def _segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""


def _join(*parts: str) -> str:
    return ", ".join(p for p in parts if p)


def _bound_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.ClassDef):
        return [statement.name]
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _names_read(options: str) -> tuple[str, ...]:
    """The names the options text ``axis_name=AXIS, donate_argnums=(0,)`` reads, sorted."""
    if not options:
        return ()
    try:
        call = ast.parse(f"f({options})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ("?",)  # not readable here: no importer can name it
    nodes = [*call.args, *(k.value for k in call.keywords)]
    return tuple(sorted({n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}))


def _module_bindings(tree: ast.Module) -> dict[str, int]:
    """How many statements of the module bind each name at module level (an import counts as
    many; statements in module-level blocks count too)."""
    counts: dict[str, int] = {}
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[node.name] = counts.get(node.name, 0) + 1
            for inner in ast.walk(node):
                if isinstance(inner, ast.Global):  # a function rebinds it
                    for name in inner.names:
                        counts[name] = counts.get(name, 0) + 2
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                local = alias.asname or alias.name.split(".", 1)[0]
                counts[local] = counts.get(local, 0) + 2
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            counts[node.id] = counts.get(node.id, 0) + 1
        stack.extend(ast.iter_child_nodes(node))
    return counts


def _returns_tuple(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Every return statement of ``function`` (not of nested functions) returns a tuple or list display."""
    values = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            values.append(node.value)
        stack.extend(ast.iter_child_nodes(node))
    return bool(values) and all(isinstance(v, (ast.Tuple, ast.List)) for v in values)


# ------------------------------------------------------------------ the index
Facts = AliasFact | PmappedFact


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
        return facts.exports_pmap or (facts.package and any(
            self.lookup(target, where[0], used) is not None for target in facts.imports.values()))

    def lookup(self, dotted: str, base: str | tuple[str, ...], used: set[str] | None = None) -> Facts | None:
        """What the absolute ``dotted`` name (``pkg.constants.pmap``) is, seen from a module whose
        base is ``base``: an alias of pmap, a pmapped function, or nothing the index knows.
        ``used`` receives the paths of the modules the answer was read from."""
        for _ in range(MAX_HOPS):
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
                fact = facts.aliases.get(head) or facts.pmapped.get(head)
                if fact is not None:
                    self._defined_at[(fact.module, fact.name)] = path
                    return fact
            target = facts.imports.get(head)
            if target is None:
                return None
            dotted = ".".join([target, *rest[1:]])  # a re-export, or a submodule bound by `from . import x`
        return None


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
                names = [f"{module}.{alias.name}" for alias in statement.names if alias.name != "*"]
            else:
                continue
            if any(self.index.exports(name, self.bases, self.used) for name in names):
                return True
        return False


def refers_to_alias(tree: ast.Module, view: ModuleView, alias: AliasFact) -> bool:
    """Whether the module ``tree`` (seen as ``view``) names the alias ``alias`` anywhere: an import
    of it (``from .constants import pmap as p``, through re-exports too) or an attribute of a
    module it imports (``constants.pmap``, ``pkg.constants.pmap``)."""
    facts = ModuleFacts(view.name, view.package)
    reader = _FactReader("", facts)
    reader.read(ast.Module(body=[s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))],
                           type_ignores=[]))
    imports = facts.imports
    # imports in functions and blocks count too (the module binds the name there)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
            inner = ModuleFacts(view.name, view.package)
            _FactReader("", inner).read(ast.Module(body=[node], type_ignores=[]))
            imports = {**inner.imports, **imports}
    wanted = (alias.module, alias.name)
    asked: set[str] = set()

    def names(dotted: str) -> bool:
        if dotted in asked:
            return False
        asked.add(dotted)
        fact = view.index.lookup(dotted, view.bases)
        return isinstance(fact, AliasFact) and (fact.module, fact.name) == wanted

    if any(names(target) for target in imports.values()):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = []
            head: ast.expr = node
            while isinstance(head, ast.Attribute):
                parts.append(head.attr)
                head = head.value
            if isinstance(head, ast.Name) and head.id in imports \
                    and names(".".join([imports[head.id], *reversed(parts)])):
                return True
    return False
