"""The facts of one module that the project index keeps (project.py): its module-level aliases of
`jax.pmap`, its pmapped functions, its functions returning pmap outputs or per-device stacks, its
imports and star imports, read with Python's `ast`.

The facts are read from files that mention `pmap` or a helper stacking values on the devices,
and from a package's `__init__.py` or a module with a star import (which may re-export what other
modules define); of any other module only its module-level imports matter (``from .steps import
p_double`` re-exports what another module pmaps). They are small and picklable, and cached per
file by the engine.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field, replace

from pmap_migrate.rules.analysis.fact_returns import STACKING_WORDS, ReturnsFact, ReturnsReader
from pmap_migrate.rules.knowledge import tables

# The last words of the multi-process API's names (``tables.MULTI_PROCESS``, and the modules of
# ``tables.MULTI_PROCESS_PREFIXES``): a module that spells none has no use of it.
_MULTI_PROCESS_LAST = frozenset(name.rstrip(".").rsplit(".", 1)[-1]
                                for name in (*tables.MULTI_PROCESS, *tables.MULTI_PROCESS_PREFIXES))
_MULTI_PROCESS_WORDS = re.compile(r"\b(?:" + "|".join(sorted(_MULTI_PROCESS_LAST)) + r")\b")
_MULTI_PROCESS_MODULES = frozenset(p.rstrip(".") for p in tables.MULTI_PROCESS_PREFIXES)


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
    processes: bool = False  # that rewrite over every process's devices (`_global_call`, `processes=True`)
    # The module uses the multi-process API (`jax.process_index()`, ...): its own fix writes the pmap
    # for every process (PM501), as its callers in other modules need.
    multi_process: bool = False


@dataclass(frozen=True)
class ModuleFacts:
    name: str  # dotted module name below its base
    package: bool  # an `__init__.py`
    aliases: dict[str, AliasFact] = field(default_factory=dict)
    pmapped: dict[str, PmappedFact] = field(default_factory=dict)
    returning: dict[str, ReturnsFact] = field(default_factory=dict)  # functions returning pmap outputs
    imports: dict[str, str] = field(default_factory=dict)  # module-level local name -> absolute dotted name
    stars: list[str] = field(default_factory=list)  # modules imported with `from m import *`, absolute
    public: list[str] = field(default_factory=list)  # `__all__`, where it is a literal (else empty)

    @property
    def exports_pmap(self) -> bool:
        return bool(self.aliases or self.pmapped or self.returning)

    def star_exports(self, name: str) -> bool:
        """Whether `from <this module> import *` binds ``name``, as far as its text says."""
        return name in self.public if self.public else not name.startswith("_")

    def key(self) -> tuple:
        """What the facts are, comparable across runs (the cache compares it)."""
        return (self.name, self.package, tuple(sorted(self.aliases.items())),
                tuple(sorted(self.pmapped.items())), tuple(sorted(self.returning.items())),
                tuple(sorted(self.imports.items())), tuple(self.stars),
                tuple(self.public))


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
    if "pmap" not in text and not (package and "import" in text) and "import *" not in text \
            and not STACKING_WORDS.search(text):
        # (a package's `__init__.py` may re-export what its modules define)
        if "import" in text and not _read_imports(text, facts):
            _read(text, facts)
        return facts
    _read(text, facts)
    return facts


def _read(text: str, facts: ModuleFacts) -> None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    FactReader(text, facts).read(tree)


# A module-level statement that binds names (it starts at column 0; or text at column 0 in a
# string): an import (group 1); a definition (its name: group 2); an assignment (what stands before
# its first `=`: `x = `, `x: T = `, `x += `, `a, b = `: group 3).
_STATEMENT = re.compile(r"(?m)^(?:(from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*(?:\\\r?\n[^\n]*)*)"
                        r"|import[ \t][^\n]*(?:\\\r?\n[^\n]*)*)"
                        r"|(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)"
                        r"|([^\s#=@][^=\n]*?)(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=))")
# What stands before an `=` that binds nothing: a call's keyword argument (`setup(name=...`), a
# comparison (`if x <= 1`, `!=`), a statement of a keyword (`assert`, `for`, `with`).
_CALL = re.compile(r"[\w.]+[ \t]*\(")
# The name an annotated assignment binds; a name of the targets (not an attribute's: `m.x = `).
_ANNOTATED = re.compile(r"[ \t]*(\w+)[ \t]*:")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_STRING = re.compile(r"\"[^\"]*\"|'[^']*'")


def _read_imports(text: str, facts: ModuleFacts) -> bool:
    """The facts of a module without pmap (not a package, no star import): its module-level
    imports, read from those statements alone, but for the names other module-level lines bind
    again; False when the whole module must be read instead (it binds `__all__`)."""
    statements = []
    bound = set()
    for imported, defined, target in _STATEMENT.findall(text):
        if imported:
            statements.append(imported)
        elif defined:
            bound.add(defined)
        elif not (_CALL.match(target) or target.endswith(("<", ">", "!"))
                  or keyword.iskeyword(target.split(None, 1)[0])):
            annotated = _ANNOTATED.match(target)
            bound.update(annotated.groups() if annotated else _NAME.findall(_STRING.sub("", target)))
    if not statements:
        return True
    if "__all__" in bound:
        return False
    try:
        tree = ast.parse("\n".join(statements))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    names = {alias.asname or alias.name.split(".", 1)[0] for node in tree.body
             if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    FactReader("", facts).read(tree)
    for name in bound & names:
        facts.imports.pop(name, None)
    return True


def multi_process_module(text: str, tree: ast.Module, name: str, package: bool) -> bool:
    """Whether the module ``name`` (its ``text``, parsed as ``tree``) uses the multi-process API
    (``tables.MULTI_PROCESS``: `jax.process_index()`, `jax.distributed`, ...) through its
    module-level imports."""
    if not _MULTI_PROCESS_WORDS.search(text):
        return False
    reader = FactReader(text, ModuleFacts(name, package))
    reader.read(ast.Module(body=[s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))], type_ignores=[]))
    return reader.multi_process(tree)


class FactReader(ReturnsReader):
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
                    elif base not in facts.stars:
                        facts.stars.append(base)
            elif isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                           for t in statement.targets) \
                    and isinstance(statement.value, (ast.List, ast.Tuple)):
                facts.public[:] = [e.value for e in statement.value.elts
                                   if isinstance(e, ast.Constant) and isinstance(e.value, str)]
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
        if self.functions and (facts.pmapped or facts.aliases or "pmap" in self.text
                               or STACKING_WORDS.search(self.text)):
            self._returning(tree)
        if facts.pmapped and _MULTI_PROCESS_WORDS.search(self.text) and self.multi_process(tree):
            facts.pmapped.update((k, replace(v, multi_process=True)) for k, v in facts.pmapped.items())

    def bindings(self, tree: ast.Module) -> dict[str, int]:
        return _module_bindings(tree)

    def multi_process(self, tree: ast.Module) -> bool:
        """Whether the module refers to the multi-process API (``tables.MULTI_PROCESS``) through
        its module-level imports (the model's ``multi_process``, by names)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in _MULTI_PROCESS_LAST or \
                    isinstance(node, ast.Name) and node.id in self.facts.imports:
                dotted = self._dotted(node)
                if dotted is not None and (dotted in tables.MULTI_PROCESS or dotted in _MULTI_PROCESS_MODULES
                                           or dotted.startswith(tables.MULTI_PROCESS_PREFIXES)):
                    return True
        return False

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
            returns = self._returns_tuple(rewritten.args[0] if rewritten.args else None)
            processes = self._helper(value.func, "_global_call") or self._helper(value.func, "_global_pmap") or any(
                k.arg == "processes" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in rewritten.keywords)
            self._rebound_to(name)
            self.facts.pmapped[name] = PmappedFact(self.facts.name, name, returns_tuple=returns, rewritten=True,
                                                   processes=processes)
            return
        if isinstance(value, ast.Call) and value.args and not isinstance(value.args[0], ast.Starred):
            options = self._transform(value.func)
            if options is not None:
                rest = _join(options, *(self._segment(a) for a in value.args[1:]),
                             *(self._segment(k) for k in value.keywords))
                self._rebound_to(name)
                self.facts.pmapped[name] = PmappedFact(self.facts.name, name, rest, self._returns_tuple(value.args[0]))
                return
        self._rebound(name)

    def _returns_tuple(self, function: ast.expr | None) -> bool:
        """``function`` (what pmap maps) names a def of the module whose every return is a tuple or
        list display, or is a lambda returning one."""
        if isinstance(function, ast.Lambda):
            return isinstance(function.body, (ast.Tuple, ast.List))
        return isinstance(function, ast.Name) and function.id in self.functions \
            and _returns_tuple(self.functions[function.id])

    def _rebound_to(self, name: str) -> None:
        """``name`` bound to a pmap fact: an earlier plain binding makes it ambiguous."""
        self.facts.imports.pop(name, None)

    def _rewritten(self, value: ast.expr) -> ast.Call | None:
        """``value`` is what `fix` writes for a pmap, whose outputs are its stacks: `jax.jit(
        _shard_mapped(f, ...))` without `out_axes`, or `_global_call(...)` of that (the
        `_shard_mapped(...)` call, whose first argument is the function), or `_global_pmap(f, ...)`
        without `out_axes` (that call)."""
        if not isinstance(value, ast.Call) or not value.args:
            return None
        if self._helper(value.func, "_global_pmap"):  # pmap's signature: the function first
            return value if not any(k.arg == "out_axes" for k in value.keywords) else None
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
        keywords = []
        if isinstance(top, ast.Call) and top.args and self._dotted(top.func) in tables.PARTIAL:
            top, keywords = top.args[0], top.keywords  # `@functools.partial(jax.jit, donate_argnums=...)`
        if top is not None and self._helper(top, "_global_pmap") and not any(k.arg == "out_axes" for k in keywords):
            # `@functools.partial(_global_pmap, axis_name=...)`: a rewritten pmap, its stacks
            self.facts.pmapped[node.name] = PmappedFact(self.facts.name, node.name,
                                                        returns_tuple=_returns_tuple(node), rewritten=True)
            return
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
Facts = AliasFact | PmappedFact | ReturnsFact
