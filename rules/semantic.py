"""What a module does with pmap, computed once per file and shared by every rule.

Rules ask questions ("is this call a pmap?", "does this name hold a pmap output?") instead of
re-deriving them. Names resolve through libcst's QualifiedNameProvider and ScopeProvider,
never by text; module-local aliases (``p = jax.pmap``, ``pmap_i = partial(jax.pmap, ...)``) are
followed through scope assignments. The analysis is flow-insensitive: a name that is *ever*
assigned a pmap output in its scope counts as holding one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst._metadata_dependent import LazyValue
from libcst.metadata import (
    Assignment,
    BaseAssignment,
    MetadataWrapper,
    ParentNodeProvider,
    QualifiedNameProvider,
    Scope,
    ScopeProvider,
)

from rules import tables

PMAP = "pmap"
JIT = "jit"

# Value tags (what a name or call may hold).
PMAP_OUTPUT = "pmap-output"
REPLICATED = "replicated-stack"  # device_put_replicated / flax replicate
COMMITTED = "committed"  # device_put(x, device_or_sharding)
JIT_OUTPUT = "jit-output"

# pmap's signature: pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, ...)
PMAP_POSITIONAL = ("fun", "axis_name")

FunctionLike = cst.FunctionDef | cst.Lambda


@dataclass(frozen=True)
class Callee:
    """An expression that, when called with a function, applies a transform (pmap or jit)."""

    transform: str
    bound_args: tuple[cst.Arg, ...] = ()  # arguments fixed by functools.partial
    via: tuple[str, ...] = ()  # alias names followed to get here
    ambiguous: bool = False  # an alias that is also bound to something else


@dataclass
class TransformSite:
    """One application of pmap (or jit) to a function: a call or a decorator."""

    transform: str
    node: cst.Call | cst.Decorator
    callee: Callee
    args: tuple[cst.Arg, ...]  # every argument after the transform: partial's, then the call's
    decorated: cst.FunctionDef | None = None
    bound_names: list[BaseAssignment] = field(default_factory=list)
    bound_attribute: tuple[cst.ClassDef, str] | None = None

    @property
    def is_decorator(self) -> bool:
        return isinstance(self.node, cst.Decorator)

    def positional(self) -> list[cst.BaseExpression]:
        return [a.value for a in self.args if a.keyword is None and not a.star]

    @property
    def fun(self) -> cst.BaseExpression | None:
        """The mapped function's expression (call form only)."""
        if self.is_decorator:
            return None
        pos = self.positional()
        return pos[0] if pos else None

    def option(self, name: str) -> cst.BaseExpression | None:
        for arg in self.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg.value
        if name in PMAP_POSITIONAL:
            index = PMAP_POSITIONAL.index(name) - (1 if self.is_decorator else 0)
            pos = self.positional()
            if 0 <= index < len(pos) and not (self.is_decorator and index == 0 and name == "fun"):
                return pos[index]
        return None

    def keyword_arg(self, name: str) -> cst.Arg | None:
        for arg in self.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    @property
    def dynamic_options(self) -> bool:
        return any(a.star for a in self.args)


def force(value):
    return value() if isinstance(value, LazyValue) else value


class _Indexer(cst.CSTVisitor):
    """Collects the nodes the model reasons about, in one traversal."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.decorators: list[cst.Decorator] = []
        self.assigned_value: dict[cst.CSTNode, cst.BaseExpression] = {}  # target Name -> value
        self.functions: list[FunctionLike] = []
        self.subscripts: list[cst.Subscript] = []
        self.names: dict[str, list[cst.Name]] = defaultdict(list)
        self.attributes: dict[str, list[cst.Attribute]] = defaultdict(list)
        self.import_aliases: set[str] = set()
        self._in_import = 0

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self.decorators.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.assigned_value[target.target] = node.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.assigned_value[node.target] = node.value

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.functions.append(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self.subscripts.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1

    def leave_Import(self, original_node: cst.Import) -> None:
        self._in_import -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self.import_aliases.add(alias.asname.name.value)

    def leave_ImportFrom(self, original_node: cst.ImportFrom) -> None:
        self._in_import -= 1

    def visit_Name(self, node: cst.Name) -> None:
        if not self._in_import:
            self.names[node.value].append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if not self._in_import:
            self.attributes[node.attr.value].append(node)


class SemanticModel:
    """Facts about one module's use of pmap, jit and the pmap-era helpers."""

    def __init__(self, wrapper: MetadataWrapper) -> None:
        self.module = wrapper.module
        self._qnames = wrapper.resolve(QualifiedNameProvider)
        self._scopes = wrapper.resolve(ScopeProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)
        index = _Indexer()
        self.module.visit(index)
        self._index = index
        self._qname_cache: dict[cst.CSTNode, frozenset[str]] = {}
        self._callee_cache: dict[cst.CSTNode, Callee | None] = {}
        self._resolving: set[cst.CSTNode] = set()

        self.sites: dict[cst.CSTNode, TransformSite] = {}  # Call/Decorator node -> site
        self.alias_definitions: dict[cst.BaseExpression, tuple[str, Callee]] = {}
        self._find_sites()
        self._calls_to: dict[cst.Call, TransformSite] = {}
        self._find_transformed_calls()
        self._tags: dict[BaseAssignment, set[str]] = defaultdict(set)
        self._call_tags: dict[cst.Call, set[str]] = {}
        self._tag_values()
        self._nested: dict[cst.CSTNode, TransformSite] | None = None

    # ------------------------------------------------------------------ names
    def qualified_names(self, node: cst.CSTNode) -> frozenset[str]:
        cached = self._qname_cache.get(node)
        if cached is None:
            raw = force(self._qnames.get(node)) or ()
            cached = frozenset(q.name for q in raw)
            self._qname_cache[node] = cached
        return cached

    def matches(self, node: cst.CSTNode, names: Iterable[str]) -> bool:
        return not self.qualified_names(node).isdisjoint(names)

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        return self._scopes.get(node)

    def assignments_of(self, name: cst.Name) -> list[BaseAssignment]:
        scope = self.scope_of(name)
        if scope is None:
            return []
        try:
            return list(scope[name.value])
        except Exception:  # names libcst cannot resolve (e.g. in comprehensions of class bodies)
            return []

    def assignment_for_target(self, target: cst.Name) -> BaseAssignment | None:
        scope = self.scope_of(target)
        if scope is None:
            return None
        for assignment in scope.assignments[target.value]:
            if isinstance(assignment, Assignment) and assignment.node is target:
                return assignment
        return None

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def is_within(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return node is container or any(a is container for a in self.ancestors(node))

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.ClassDef):
                return ancestor
        return None

    def references(self, names: Iterable[str], last_components: Iterable[str]) -> list[cst.CSTNode]:
        """Name/Attribute nodes (outside imports) that resolve to one of ``names``.

        ``last_components`` are the final identifiers to consider (``pmap`` for ``jax.pmap``);
        names imported under another name are added automatically."""
        names = frozenset(names)
        found: list[cst.CSTNode] = []
        for component in set(last_components):
            for attr in self._index.attributes.get(component, ()):
                if self.matches(attr, names):
                    found.append(attr)
        for local in set(last_components) | self._index.import_aliases:
            for name in self._index.names.get(local, ()):
                if self._is_attribute_tail(name):
                    continue
                if self.matches(name, names):
                    found.append(name)
        return found

    def _is_attribute_tail(self, name: cst.Name) -> bool:
        parent = self.parents.get(name)
        return isinstance(parent, cst.Attribute) and parent.attr is name

    # ---------------------------------------------------------------- callees
    def callee(self, expr: cst.BaseExpression) -> Callee | None:
        """If calling ``expr`` with a function applies pmap or jit, describe how."""
        if expr in self._callee_cache:
            return self._callee_cache[expr]
        if expr in self._resolving:  # alias cycles: p = q; q = p
            return None
        self._resolving.add(expr)
        try:
            result = self._compute_callee(expr)
        finally:
            self._resolving.discard(expr)
        self._callee_cache[expr] = result
        return result

    def _compute_callee(self, expr: cst.BaseExpression) -> Callee | None:
        if isinstance(expr, (cst.Name, cst.Attribute)):
            names = self.qualified_names(expr)
            if not names.isdisjoint(tables.PMAP):
                return Callee(PMAP)
            if not names.isdisjoint(tables.JIT):
                return Callee(JIT)
        if isinstance(expr, cst.Call) and self.matches(expr.func, tables.PARTIAL) and expr.args:
            first = expr.args[0]
            if first.keyword is None and not first.star:
                inner = self.callee(first.value)
                if inner is not None:
                    return Callee(inner.transform, inner.bound_args + tuple(expr.args[1:]), inner.via,
                                  inner.ambiguous)
        if isinstance(expr, cst.Name):
            return self._alias_callee(expr)
        return None

    def _alias_callee(self, name: cst.Name) -> Callee | None:
        found: list[Callee] = []
        other = False
        for assignment in self.assignments_of(name):
            value = self._index.assigned_value.get(assignment.node) if isinstance(assignment, Assignment) else None
            inner = self.callee(value) if value is not None else None
            if inner is None:
                other = True
            else:
                found.append(inner)
        if not found:
            return None
        first = found[0]
        ambiguous = other or any(c.transform != first.transform for c in found)
        return Callee(first.transform, first.bound_args, (name.value,) + first.via, ambiguous or first.ambiguous)

    # ------------------------------------------------------------------ sites
    def _find_sites(self) -> None:
        for call in self._index.calls:
            callee = self.callee(call.func)
            if callee is None or not call.args:
                continue
            site = TransformSite(callee.transform, call, callee, callee.bound_args + tuple(call.args))
            self._bind_result(site, call)
            self.sites[call] = site
        for decorator in self._index.decorators:
            callee = self.callee(decorator.decorator)
            if callee is None:
                continue
            func = self.parents.get(decorator)
            if not isinstance(func, cst.FunctionDef):
                continue
            site = TransformSite(callee.transform, decorator, callee, callee.bound_args, decorated=func)
            assignment = self._function_assignment(func)
            if assignment is not None:
                site.bound_names.append(assignment)
            self.sites[decorator] = site
        for target, value in self._index.assigned_value.items():
            if isinstance(target, cst.Name) and value not in self.sites:
                callee = self.callee(value)
                if callee is not None:
                    self.alias_definitions[value] = (target.value, callee)

    def _function_assignment(self, func: cst.FunctionDef) -> BaseAssignment | None:
        scope = self.scope_of(func)
        if scope is None:
            return None
        for assignment in scope.assignments[func.name.value]:
            if assignment.node is func:
                return assignment
        return None

    def _bind_result(self, site: TransformSite, call: cst.Call) -> None:
        parent = self.parents.get(call)
        if not isinstance(parent, (cst.Assign, cst.AnnAssign)):
            return
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        for target in targets:
            if isinstance(target, cst.Name):
                assignment = self.assignment_for_target(target)
                if assignment is not None:
                    site.bound_names.append(assignment)
            elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
                cls = self.enclosing_class(call)
                if cls is not None and target.value.value == "self":
                    site.bound_attribute = (cls, target.attr.value)

    def pmap_sites(self) -> list[TransformSite]:
        return [s for s in self.sites.values() if s.transform == PMAP]

    def site(self, node: cst.CSTNode) -> TransformSite | None:
        return self.sites.get(node)

    # ------------------------------------------------------- transformed calls
    def _find_transformed_calls(self) -> None:
        by_assignment: dict[BaseAssignment, TransformSite] = {}
        by_attribute: dict[tuple[int, str], TransformSite] = {}
        for site in self.sites.values():
            for assignment in site.bound_names:
                by_assignment[assignment] = site
            if site.bound_attribute is not None:
                cls, attr = site.bound_attribute
                by_attribute[(id(cls), attr)] = site
        for call in self._index.calls:
            func = call.func
            site = self.sites.get(func)
            if site is None and isinstance(func, cst.Name):
                for assignment in self.assignments_of(func):
                    if assignment in by_assignment:
                        site = by_assignment[assignment]
                        break
            elif site is None and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                if func.value.value == "self" and by_attribute:
                    cls = self.enclosing_class(call)
                    if cls is not None:
                        site = by_attribute.get((id(cls), func.attr.value))
            if site is not None:
                self._calls_to[call] = site

    def transformed_call(self, call: cst.Call) -> TransformSite | None:
        """The site whose transformed function ``call`` calls, if any."""
        return self._calls_to.get(call)

    def pmap_calls(self) -> dict[cst.Call, TransformSite]:
        return {c: s for c, s in self._calls_to.items() if s.transform == PMAP}

    # ------------------------------------------------------------ data flow
    def _classify_call(self, call: cst.Call) -> set[str]:
        tags: set[str] = set()
        site = self._calls_to.get(call)
        if site is not None:
            tags.add(PMAP_OUTPUT if site.transform == PMAP else JIT_OUTPUT)
        names = self.qualified_names(call.func)
        if not names.isdisjoint(tables.DEVICE_PUT_REPLICATED) or not names.isdisjoint(tables.FLAX_REPLICATE):
            tags.add(REPLICATED)
        if not names.isdisjoint(tables.DEVICE_PUT):
            positional = [a for a in call.args if a.keyword is None and not a.star]
            keyword = {a.keyword.value for a in call.args if a.keyword is not None}
            if len(positional) >= 2 or "device" in keyword:
                tags.add(COMMITTED)
        return tags

    def _tag_values(self) -> None:
        for call in self._index.calls:
            tags = self._classify_call(call)
            if not tags:
                continue
            self._call_tags[call] = tags
            parent = self.parents.get(call)
            if isinstance(parent, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
                for target in targets:
                    for name in _target_names(target):
                        assignment = self.assignment_for_target(name)
                        if assignment is not None:
                            self._tags[assignment] |= tags

    def value_tags(self, expr: cst.BaseExpression) -> set[str]:
        """What ``expr`` may hold: a pmap output, a replicated stack, a committed array, ..."""
        if isinstance(expr, cst.Call):
            return set(self._call_tags.get(expr, ()))
        if isinstance(expr, cst.Name):
            tags: set[str] = set()
            for assignment in self.assignments_of(expr):
                tags |= self._tags.get(assignment, set())
            return tags
        if isinstance(expr, cst.Subscript) and _is_key_subscript(expr):
            return self.value_tags(expr.value)  # a leaf of a pytree output is an output too
        if isinstance(expr, cst.Attribute) and expr.attr.value not in _ARRAY_ATTRIBUTES:
            return self.value_tags(expr.value)  # a field of an output dataclass/namedtuple
        return set()

    def pmap_devices_option(self, call: cst.Call) -> cst.BaseExpression | None:
        site = self._calls_to.get(call)
        return site.option("devices") if site is not None else None

    # --------------------------------------------------------------- nesting
    def nested_sites(self) -> dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]]:
        """Nodes (pmap sites or calls to pmapped functions) that run inside a pmapped function,
        mapped to (the outer pmap's node, the outer site)."""
        result: dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]] = {}
        for outer in self.pmap_sites():
            fun = outer.fun
            if fun is not None:
                inner = self.sites.get(fun)
                if inner is not None and inner.transform == PMAP:
                    result.setdefault(fun, (outer.node, outer))
            for body in self._mapped_functions(outer):
                for node in self._pmaps_reachable_from(body):
                    result.setdefault(node, (outer.node, outer))
        return result

    def _mapped_functions(self, site: TransformSite) -> list[FunctionLike]:
        if site.decorated is not None:
            return [site.decorated]
        fun = site.fun
        return self.resolve_functions(fun) if fun is not None else []

    def resolve_functions(self, expr: cst.BaseExpression) -> list[FunctionLike]:
        """Function definitions that ``expr`` may denote (Name, lambda, partial(f), self.method)."""
        if isinstance(expr, cst.Lambda):
            return [expr]
        if isinstance(expr, cst.Name):
            return [a.node for a in self.assignments_of(expr) if isinstance(a.node, cst.FunctionDef)]
        if isinstance(expr, cst.Call) and self.matches(expr.func, tables.PARTIAL) and expr.args:
            return self.resolve_functions(expr.args[0].value)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            cls = self.enclosing_class(expr)
            if cls is not None:
                return [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == expr.attr.value]
        return []

    def _pmaps_reachable_from(self, body: FunctionLike) -> list[cst.CSTNode]:
        found: list[cst.CSTNode] = []
        seen: set[int] = set()
        work = [body]
        while work:
            func = work.pop()
            if id(func) in seen:
                continue
            seen.add(id(func))
            collector = _CallCollector()
            func.body.visit(collector)
            for decorator in collector.decorators:
                site = self.sites.get(decorator)
                if site is not None and site.transform == PMAP:
                    found.append(decorator)
            for call in collector.calls:
                site = self.sites.get(call)
                if site is not None and site.transform == PMAP:
                    found.append(call)
                    continue
                called = self._calls_to.get(call)
                if called is not None and called.transform == PMAP and not isinstance(call.func, cst.Call):
                    found.append(call)
                    continue
                if called is None:
                    work.extend(self.resolve_functions(call.func))
        return found

    # ------------------------------------------------------------ module-wide
    def uses_any(self, names: Iterable[str], prefixes: tuple[str, ...] = ()) -> bool:
        names = frozenset(names)
        last = {n.rsplit(".", 1)[-1] for n in names} | {"process_index", "process_count", "initialize"}
        for component in last:
            for node in self._index.attributes.get(component, ()):
                qn = self.qualified_names(node)
                if not qn.isdisjoint(names) or any(q.startswith(prefixes) for q in qn if prefixes):
                    return True
            for node in self._index.names.get(component, ()):
                qn = self.qualified_names(node)
                if not qn.isdisjoint(names) or any(q.startswith(prefixes) for q in qn if prefixes):
                    return True
        return False

    @property
    def subscripts(self) -> list[cst.Subscript]:
        return self._index.subscripts


class _CallCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.decorators: list[cst.Decorator] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self.decorators.append(node)


# Attributes of an array itself: ``out.shape[0]`` is not an index into the output.
_ARRAY_ATTRIBUTES = frozenset({
    "shape", "ndim", "dtype", "size", "nbytes", "itemsize", "T", "mT", "sharding", "aval",
    "addressable_shards", "global_shards", "device_buffers", "devices", "real", "imag", "at",
})


def _target_names(target: cst.BaseExpression) -> Iterator[cst.Name]:
    if isinstance(target, cst.Name):
        yield target
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _target_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)


def _is_key_subscript(node: cst.Subscript) -> bool:
    """``x['loss']`` (a dict key into an output pytree), not an integer index."""
    if len(node.slice) != 1:
        return False
    element = node.slice[0].slice
    return isinstance(element, cst.Index) and isinstance(element.value, (cst.SimpleString, cst.ConcatenatedString))


def integer_index(node: cst.Subscript) -> bool:
    """``x[0]``, ``x[-1]``, ``x[i]``, ``x[0, ...]``: an integer index on the leading axis."""
    if not node.slice:
        return False
    element = node.slice[0].slice
    if not isinstance(element, cst.Index):
        return False
    value = element.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, (cst.Integer, cst.Name)) and not (
        isinstance(value, cst.Name) and value.value in ("None", "Ellipsis", "True", "False")
    )
