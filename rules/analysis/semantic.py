"""What a module does with pmap, computed once per file and shared by every rule.

Rules ask questions ("is this call a pmap?", "does this name hold a pmap output?") instead of
re-deriving them. Names resolve through libcst's QualifiedNameProvider and ScopeProvider,
never by text; module-local aliases (``p = jax.pmap``, ``pmap_i = partial(jax.pmap, ...)``) are
followed through scope assignments. The data flow is flow-insensitive (a name that is *ever*
assigned a pmap output in its scope counts as holding one) with two cheap refinements: a
statement's own binding does not reach the reads of its value (``x = f(x)`` reads the previous
``x``) unless a loop may run it again, and an assignment that runs on every path to a read hides
the earlier ones (see ``reaching_assignments``). Module-wide facts come from one extra traversal
(``Indexer``); the only other walks are local (a pmapped function's own return statements). Rules
ask the model instead of walking the tree again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import (
    Assignment,
    BaseAssignment,
    ExpressionContext,
    ExpressionContextProvider,
    MetadataWrapper,
    Scope,
    ScopeProvider,
)

from pmap_migrate.rules.knowledge import tables

PMAP = "pmap"
JIT = "jit"

# Value tags (what a name or call may hold).
PMAP_OUTPUT = "pmap-output"  # output of a pmap whose leading axis is the device axis (out_axes=0)
# Output of a pmap with out_axes=None (or another axis): no leading device axis, so `out[0]` is
# ordinary indexing. Kept apart from PMAP_OUTPUT so device-axis rules do not fire on it.
PMAP_OUTPUT_UNSTACKED = "pmap-output-unstacked"
REPLICATED = "replicated-stack"  # device_put_replicated / flax replicate
SHARDED_STACK = "sharded-stack"  # device_put_sharded: one slice per device, stacked
COMMITTED = "committed"  # device_put(x, device_or_sharding)
JIT_OUTPUT = "jit-output"
# Values with a leading axis laid out one slice per device: indexing that axis is a gather.
DEVICE_STACKED = frozenset({PMAP_OUTPUT, REPLICATED, SHARDED_STACK})

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


class Indexer(cst.CSTVisitor):
    """Collects the nodes the model reasons about, in one traversal."""

    WALK_PAST_WHITESPACE = True  # codemod/fastwalk.py: blanks and comments have no parent recorded

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.decorators: list[cst.Decorator] = []
        self.assigned_value: dict[cst.CSTNode, cst.BaseExpression] = {}  # target Name -> value
        self.functions: list[FunctionLike] = []
        self.subscripts: list[cst.Subscript] = []
        self.names: dict[str, list[cst.Name]] = defaultdict(list)
        self.attributes: dict[str, list[cst.Attribute]] = defaultdict(list)
        self.import_aliases: set[str] = set()
        # Local name -> dotted names an import binds it to (`import a.b as c` -> c: {"a.b"}).
        self.imports: dict[str, set[str]] = defaultdict(set)
        # Calls and decorators by the innermost function whose *body* holds them (None: module
        # level). A def's decorators, defaults and annotations run in the enclosing function, so
        # ownership switches at the body, not at the def. Lets "what runs inside f" be answered
        # without re-visiting f's subtree for every question.
        self.owned_calls: dict[FunctionLike | None, list[cst.Call]] = defaultdict(list)
        self.owned_decorators: dict[FunctionLike | None, list[cst.Decorator]] = defaultdict(list)
        self.child_functions: dict[FunctionLike, list[FunctionLike]] = defaultdict(list)
        self._owners: list[FunctionLike] = []
        self._in_import = 0
        # Source order of Name nodes (a pre-order number), for "which assignment comes last".
        self.order: dict[cst.Name, int] = {}
        # Every node's parent, built in this traversal (cheaper than ParentNodeProvider's own).
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._path: list[cst.CSTNode] = []
        # The names the code binds, as libcst's ExpressionContextProvider marks them STORE: all that
        # its ScopeProvider asks of it (see `resolve_scopes`). That provider does not visit the type
        # parameters of a def or class (`def f[T]()`): nothing in them is marked.
        self.stores: dict[cst.Name, ExpressionContext] = {}
        self._in_type_parameters = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._path:
            self.parents[node] = self._path[-1]
        self._path.append(node)
        # libcst's dispatch (`visit_<class name>`), from a table: no name built and looked up per node
        visit = _INDEX_VISITS.get(node.__class__.__name__)
        return visit is None or visit(self, node) is not False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        leave = _INDEX_LEAVES.get(original_node.__class__.__name__)
        if leave is not None:
            leave(self, original_node)
        self._path.pop()

    @property
    def _owner(self) -> FunctionLike | None:
        return self._owners[-1] if self._owners else None

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)
        self.owned_calls[self._owner].append(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self.decorators.append(node)
        self.owned_decorators[self._owner].append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.assigned_value[target.target] = node.value
            self._store(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.assigned_value[node.target] = node.value
        self._store(node.target)

    def _store(self, target: cst.CSTNode) -> None:
        """Mark the names ``target`` binds: through tuples, lists and starred elements, not into an
        attribute's or a subscript's value (read, not bound)."""
        if self._in_type_parameters:
            return
        stack = [target]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name):
                self.stores[node] = ExpressionContext.STORE
            elif isinstance(node, (cst.Tuple, cst.List)):
                stack.extend(element.value for element in node.elements)
            elif isinstance(node, cst.StarredElement):
                stack.append(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._store(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._store(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._store(node.name)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._store(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._store(node.target)

    def visit_Param(self, node: cst.Param) -> None:
        self._store(node.name)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._store(node.name)

    def visit_ClassDef_type_parameters(self, node: cst.ClassDef) -> None:
        self._in_type_parameters += 1

    def leave_ClassDef_type_parameters(self, node: cst.ClassDef) -> None:
        self._in_type_parameters -= 1

    def visit_FunctionDef_type_parameters(self, node: cst.FunctionDef) -> None:
        self._in_type_parameters += 1

    def leave_FunctionDef_type_parameters(self, node: cst.FunctionDef) -> None:
        self._in_type_parameters -= 1

    def _enter_function(self, node: FunctionLike) -> None:
        self.functions.append(node)
        if self._owners:
            self.child_functions[self._owners[-1]].append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enter_function(node)
        self._store(node.name)

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._owners.append(node)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._owners.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._enter_function(node)

    def visit_Lambda_body(self, node: cst.Lambda) -> None:
        self._owners.append(node)

    def leave_Lambda_body(self, node: cst.Lambda) -> None:
        self._owners.pop()

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self.subscripts.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1
        for alias in node.names:
            full = _dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.imports[alias.asname.name.value].add(full)
            else:
                self.imports[full.split(".", 1)[0]].add(full.split(".", 1)[0])

    def leave_Import(self, original_node: cst.Import) -> None:
        self._in_import -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1
        if isinstance(node.names, cst.ImportStar):
            return
        module = _dotted(node.module) if node.module is not None and not node.relative else None
        for alias in node.names:
            local = alias.name.value if isinstance(alias.name, cst.Name) else None
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
                self.import_aliases.add(local)
            if local is not None and module is not None and isinstance(alias.name, cst.Name):
                self.imports[local].add(f"{module}.{alias.name.value}")

    def leave_ImportFrom(self, original_node: cst.ImportFrom) -> None:
        self._in_import -= 1

    def visit_Name(self, node: cst.Name) -> None:
        self.order[node] = len(self.order)
        if not self._in_import:
            self.names[node.value].append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if not self._in_import:
            self.attributes[node.attr.value].append(node)


# The indexer's node callbacks by node class name (attribute callbacks, `visit_<Node>_<field>`, have
# an underscore after the class name; node class names have none).
_INDEX_VISITS = {name[len("visit_"):]: f for name, f in vars(Indexer).items()
                 if name.startswith("visit_") and "_" not in name[len("visit_"):]}
_INDEX_LEAVES = {name[len("leave_"):]: f for name, f in vars(Indexer).items()
                 if name.startswith("leave_") and "_" not in name[len("leave_"):]}


def _dotted(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head is not None else None
    return None


def indent_unit(module: cst.Module) -> str:
    """One level of ``module``'s indentation, for generated code: libcst infers it from the first
    indented line, form feeds included (legal there, but not in a unit of indentation)."""
    return "".join(c for c in module.default_indent if c in " \t") or "    "


def resolve_scopes(wrapper: MetadataWrapper, stores: dict[cst.Name, ExpressionContext]):
    """``wrapper.resolve(ScopeProvider)``, the names the code binds taken from ``stores`` (the
    index's) instead of libcst's ExpressionContextProvider, a walk of every node of its own whose
    only use to the scope analysis is which names are STORE (a read, LOAD or DEL or none, is an
    access alike). The wrapper keeps ``stores`` as that provider's result: none of the rules asks
    for it (tests/test_semantic_scopes.py compares both on real code)."""
    metadata = getattr(wrapper, "_metadata", None)  # libcst's private table of resolved providers
    if isinstance(metadata, dict) and ExpressionContextProvider not in metadata:
        metadata[ExpressionContextProvider] = stores
    return wrapper.resolve(ScopeProvider)


class SemanticModel:
    """Facts about one module's use of pmap, jit and the pmap-era helpers."""

    def __init__(self, wrapper: MetadataWrapper) -> None:
        self.module = wrapper.module
        index = Indexer()
        self.module.visit(index)
        # Qualified names are asked of the scopes directly, for the few nodes that need them:
        # what QualifiedNameProvider answers, without its traversal of every node.
        self._scopes = resolve_scopes(wrapper, index.stores)
        self.index = index  # the one walk's facts (``Indexer``): read by the fix builders too
        self.parents = index.parents
        self._qname_cache: dict[cst.CSTNode, frozenset[str]] = {}
        self._callee_cache: dict[cst.CSTNode, Callee | None] = {}
        self._resolving: set[cst.CSTNode] = set()
        self._resolves_cache: dict[tuple[int, frozenset[str]], bool] = {}
        self._assigned_names = frozenset(t.value for t in index.assigned_value if isinstance(t, cst.Name))
        self._value_uses: dict[str, list[cst.BaseExpression]] = {}

        self.sites: dict[cst.CSTNode, TransformSite] = {}  # Call/Decorator node -> site
        self.alias_definitions: dict[cst.BaseExpression, tuple[str, Callee]] = {}
        self._find_sites()
        self._calls_to: dict[cst.Call, TransformSite] = {}
        # Names/attributes bound to a transformed callable (`p = jax.pmap(f)`, `@jax.pmap def f`,
        # `self.p = jax.pmap(...)`), to find what a call or an argument refers to.
        self._callable_by_assignment: dict[BaseAssignment, TransformSite] = {}
        self._callable_by_attribute: dict[tuple[int, str], TransformSite] = {}
        self._find_transformed_calls()
        self._tags: dict[BaseAssignment, set[str]] = defaultdict(set)
        self._call_tags: dict[cst.Call, set[str]] = {}
        # Which transform sites produced a value (PM304 compares the producer's `devices=`).
        self._assignment_producers: dict[BaseAssignment, list[TransformSite]] = defaultdict(list)
        # Which tagged calls (helpers such as device_put_replicated included) produced a value, with
        # the position of the call's tuple output the name received (None: the whole output).
        self._assignment_calls: dict[BaseAssignment, list[tuple[cst.Call, int | None]]] = defaultdict(list)
        # Names bound to a whole tuple-returning output (`out = step(x)` with `return a, b`):
        # `out[0]` on them selects an output, it does not index the device axis.
        self._whole_tuple_outputs: set[BaseAssignment] = set()
        # Names bound to a stacked value that is visibly a Python list or tuple of the pytree (a
        # pmapped function returning `[w * 2 for w in ws]` there, `device_put_replicated([w, b])`):
        # tags describe its leaves; `x[0]` on it picks an element, as it does on a tuple output.
        self._sequence_values: set[BaseAssignment] = set()
        self._tuple_sites: dict[int, bool] = {}
        self._sequence_sites: dict[tuple[int, int | None], bool] = {}
        self._tag_values()
        self._propagate_tags()
        self._nested: dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]] | None = None
        self._nested_nodes: set[int] | None = None
        self._multi_process: bool | None = None

    # ------------------------------------------------------------------ names
    def qualified_names(self, node: cst.CSTNode) -> frozenset[str]:
        cached = self._qname_cache.get(node)
        if cached is None:
            scope = self._scopes.get(node)
            raw = scope.get_qualified_names_for(node) if scope is not None else ()
            cached = frozenset(q.name for q in raw)
            self._qname_cache[node] = cached
        return cached

    def matches(self, node: cst.CSTNode, names: Iterable[str]) -> bool:
        return not self.qualified_names(node).isdisjoint(names)

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        return self._scopes.get(node)

    def scopes(self) -> list[Scope]:
        """Every scope of the module, once each."""
        return list({id(s): s for s in self._scopes.values() if s is not None}.values())

    def assignments_of(self, name: cst.Name) -> list[BaseAssignment]:
        scope = self.scope_of(name)
        if scope is None:
            return []
        try:
            return list(scope[name.value])
        except Exception:  # names libcst cannot resolve (e.g. in comprehensions of class bodies)
            return []

    def assigned_value(self, target: cst.CSTNode | None) -> cst.BaseExpression | None:
        """The value an assignment statement binds to ``target`` (a name it assigns), if any."""
        return self.index.assigned_value.get(target)

    def assignment_for_target(self, target: cst.Name) -> BaseAssignment | None:
        scope = self.scope_of(target)
        if scope is None:
            return None
        for assignment in scope.assignments[target.value]:
            if isinstance(assignment, Assignment) and assignment.node is target:
                return assignment
        return None

    def reaching_assignments(self, name: cst.Name) -> list[BaseAssignment]:
        """The assignments of ``name`` that may reach this read. Flow-insensitive (every assignment
        in scope) except for two cheap, safe refinements. A statement's own binding comes after the
        reads of its value (``state = unreplicate(state)`` reads the previous ``state``): it does not
        reach them, unless a loop around the statement may run it again (then the previous
        iteration's binding does, as an assignment after the read would). And when an assignment in
        the same scope comes before the read in a block that encloses it (so it runs on every path
        to the read), the assignments before it are dead here: ``out = step(x); out =
        jax.device_get(out); out[0]`` reads the host copy. Assignments after the read inside a loop
        that does not also hold that dominating assignment stay (they reach it on the next
        iteration)."""
        assignments = self.assignments_of(name)
        position = self.index.order.get(name)
        if not assignments or position is None:
            return assignments
        enclosing = self._enclosing_expressions(name)
        own = [a for a in assignments if self._bound_after(a, enclosing)]
        if own and not self._repeats(name):
            assignments = [a for a in assignments if not any(a is o for o in own)]
            own = []
        if len(assignments) < 2:
            return assignments
        scope = self.scope_of(name)
        placed: list[tuple[float, BaseAssignment]] = []
        for assignment in assignments:
            node = assignment.node
            if not isinstance(node, cst.Name) or assignment.scope is not scope or node not in self.index.order:
                return assignments  # parameters, defs, imports, outer scopes: keep it simple
            # the statement's own binding (in a loop): after the read, as the next iteration sees it
            order = position + 0.5 if any(assignment is o for o in own) else self.index.order[node]
            placed.append((order, assignment))
        placed.sort(key=lambda item: item[0])
        before = [(order, a) for order, a in placed if order < position]
        dominating = next((i for i in range(len(before) - 1, -1, -1) if self._dominates(before[i][1].node, name)), None)
        if dominating is None:
            return assignments
        reaching = [a for _, a in before[dominating:]]
        loop = None
        for ancestor in self.ancestors(name):
            if isinstance(ancestor, (cst.For, cst.While)) and not self.is_within(before[dominating][1].node, ancestor):
                loop = ancestor  # the outermost loop around the read that the killing assignment is outside of
        if loop is not None:
            reaching += [a for order, a in placed if order > position and self.is_within(a.node, loop)]
        return reaching

    def _enclosing_expressions(self, read: cst.Name) -> set[int]:
        """Ids of the nodes around ``read`` that evaluate it as part of their own evaluation: its
        ancestors up to the nearest function, lambda, class or comprehension (code that may run
        later than the expression around it, or apart from it)."""
        found = {id(read)}
        for ancestor in self.ancestors(read):
            if isinstance(ancestor, _DEFERRED):
                break
            found.add(id(ancestor))
        return found

    def _bound_after(self, assignment: BaseAssignment, enclosing: set[int]) -> bool:
        """``assignment`` is made by the statement that evaluates the read, after it: the read
        (``enclosing``: see ``_enclosing_expressions``) is in the value of ``x = ...`` (``x +=
        ...``, ``x: T = ...``, ``(x := ...)``), in the iterable of ``for x in ...`` or in the context
        expression of ``with ... as x``, and not in a function, lambda or comprehension there."""
        target = getattr(assignment, "node", None)
        if not isinstance(target, cst.Name):
            return False
        for ancestor in self.ancestors(target):
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
                part = ancestor.value
            elif isinstance(ancestor, cst.For):
                part = ancestor.iter
            elif isinstance(ancestor, cst.WithItem):
                part = ancestor.item
            elif isinstance(ancestor, _TARGET_PARTS):
                continue
            else:
                return False
            return part is not None and id(part) in enclosing
        return False

    def _repeats(self, read: cst.Name) -> bool:
        """Whether a loop of the read's own scope may evaluate ``read`` again (a ``for`` body, a
        ``while`` test or body), so that a binding made after it reaches it on the next pass."""
        child: cst.CSTNode = read
        for ancestor in self.ancestors(read):
            if isinstance(ancestor, cst.For) and child is ancestor.body:
                return True
            if isinstance(ancestor, cst.While) and (child is ancestor.body or child is ancestor.test):
                return True
            if isinstance(ancestor, _DEFERRED):
                return isinstance(ancestor, _COMPREHENSIONS)  # a comprehension repeats; a def is another scope
            child = ancestor
        return False

    def _dominates(self, target: cst.Name, read: cst.Name) -> bool:
        """Whether the statement binding ``target`` runs on every path to ``read``: it is an
        ordinary statement of a block that encloses ``read`` (or a ``for``/``with`` header whose body
        holds it). Conservative: anything else answers False."""
        statement: cst.CSTNode | None = target
        for ancestor in self.ancestors(target):
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                statement = ancestor
                break
        else:
            return False
        if isinstance(statement, (cst.For, cst.With)):
            return self.is_within(read, statement.body)
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        return self._runs_before(statement, read)

    def _runs_before(self, statement: cst.BaseStatement, read: cst.CSTNode) -> bool:
        """``statement`` is an ordinary statement of a block that encloses ``read``; or of the body
        of a loop that surely runs at least once (``for _ in range(3)`` without break/continue) and
        that itself runs before ``read`` (a read after the loop sees the last iteration's value)."""
        block = self.parents.get(statement)
        if isinstance(block, (cst.IndentedBlock, cst.Module)) and self.is_within(read, block):
            return True
        loop = self.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        if isinstance(loop, cst.For) and loop.body is block and not self.is_within(read, loop) \
                and _runs_at_least_once(self, loop):
            return self._runs_before(loop, read)
        return False

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

    def references(self, names: Iterable[str], last_components: Iterable[str],
                   follow_aliases: bool = False) -> list[cst.CSTNode]:
        """Name/Attribute nodes (outside imports) that resolve to one of ``names``.

        ``last_components`` are the final identifiers to consider (``pmap`` for ``jax.pmap``);
        names imported under another name are added automatically. With ``follow_aliases``, reads
        of module-local aliases (``dpr = jax.device_put_replicated``) are included too."""
        names = frozenset(names)
        last_components = tuple(last_components)
        found: list[cst.CSTNode] = []
        for component in set(last_components):
            for attr in self.index.attributes.get(component, ()):
                if self.matches(attr, names):
                    found.append(attr)
        for local in set(last_components) | self.index.import_aliases:
            for name in self.index.names.get(local, ()):
                if self._is_attribute_tail(name):
                    continue
                if self.matches(name, names):
                    found.append(name)
        if follow_aliases:
            found.extend(self.alias_references(names, last_components))
        return found

    def _is_attribute_tail(self, name: cst.Name) -> bool:
        parent = self.parents.get(name)
        return isinstance(parent, cst.Attribute) and parent.attr is name

    def is_binding(self, name: cst.Name) -> bool:
        """True where ``name`` is being bound (assignment target, parameter, loop variable, def
        name), not read."""
        scope = self.scope_of(name)
        if scope is None:
            return False
        return any(a.node is name for a in scope.assignments[name.value])

    def resolves_to(self, expr: cst.BaseExpression, names: frozenset[str]) -> bool:
        """Whether ``expr`` denotes one of ``names``: by qualified name, or as a module-local alias
        (``dpr = jax.device_put_replicated``) of one, followed through its assignments."""
        if self.matches(expr, names):
            return True
        if not isinstance(expr, cst.Name) or expr.value not in self._assigned_names:
            return False  # cheap exit for the common case: not a name any `x = ...` binds
        key = (id(expr), names)
        cached = self._resolves_cache.get(key)
        if cached is not None:
            return cached
        self._resolves_cache[key] = False  # cycle guard: p = q; q = p
        result = False
        for assignment in self.assignments_of(expr):
            value = self.index.assigned_value.get(assignment.node) if isinstance(assignment, Assignment) else None
            if isinstance(value, (cst.Name, cst.Attribute)) and self.resolves_to(value, names):
                result = True
                break
        self._resolves_cache[key] = result
        return result

    def alias_references(self, names: Iterable[str], last_components: Iterable[str]) -> list[cst.Name]:
        """Reads of module-local aliases of ``names`` (``dpr`` after ``dpr = jax.device_put_replicated``),
        chains of aliases included; the alias definitions' values are found by ``references``."""
        names = frozenset(names)
        seeds = set(last_components) | self.index.import_aliases
        aliases: set[str] = set()
        changed = True
        while changed:  # one round per link of the longest alias chain
            changed = False
            for target, value in self.index.assigned_value.items():
                if not isinstance(target, cst.Name) or target.value in aliases:
                    continue
                if isinstance(value, cst.Attribute):
                    candidate = value.attr.value in seeds
                elif isinstance(value, cst.Name):
                    candidate = value.value in seeds or value.value in aliases
                else:
                    candidate = False
                if candidate and self.resolves_to(value, names):
                    aliases.add(target.value)
                    changed = True
        found: list[cst.Name] = []
        for alias in aliases:
            for name in self.index.names.get(alias, ()):
                if not self._is_attribute_tail(name) and not self.is_binding(name) and self.resolves_to(name, names):
                    found.append(name)
        return found

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
            value = self.index.assigned_value.get(assignment.node) if isinstance(assignment, Assignment) else None
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
        for call in self.index.calls:
            callee = self.callee(call.func)
            if callee is None or not call.args:
                continue
            site = TransformSite(callee.transform, call, callee, callee.bound_args + tuple(call.args))
            self._bind_result(site, call)
            self.sites[call] = site
        for decorator in self.index.decorators:
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
        for target, value in self.index.assigned_value.items():
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

    def transform_references(self, transform: str) -> list[cst.BaseExpression]:
        """Every read of the transform (``jax.pmap``, ``from jax import pmap as p``) or of a
        module-local alias of it (``p = jax.pmap``; ``pmap_i = partial(jax.pmap, ...)``)."""
        names, last = (tables.PMAP, ("pmap",)) if transform == PMAP else (tables.JIT, ("jit", "pjit"))
        found: list[cst.BaseExpression] = list(self.references(names, last))
        aliases = {name for name, callee in self.alias_definitions.values() if callee.transform == transform}
        for alias in aliases:
            for node in self.index.names.get(alias, ()):
                if self._is_attribute_tail(node) or self.is_binding(node):
                    continue
                callee = self.callee(node)
                if callee is not None and callee.transform == transform:
                    found.append(node)
        return found

    def value_uses(self, transform: str = PMAP) -> list[cst.BaseExpression]:
        """References to the transform that neither apply it to a function (a site: call or
        decorator, through ``functools.partial`` too) nor define an alias of it: the transform
        handled as a value (``[jax.pmap, jax.vmap]``, ``apply(jax.pmap, f)``, ``return jax.pmap``).
        Together with the sites and alias definitions these cover every reference."""
        cached = self._value_uses.get(transform)
        if cached is not None:
            return cached
        uses = []
        for reference in self.transform_references(transform):
            if not self._applied_or_aliased(reference):
                uses.append(reference)
        self._value_uses[transform] = uses
        return uses

    def _applied_or_aliased(self, reference: cst.BaseExpression) -> bool:
        node: cst.CSTNode = reference
        while True:
            parent = self.parents.get(node)
            if isinstance(parent, cst.Call) and parent.func is node:
                return parent in self.sites  # `jax.pmap()` with no function applies nothing
            if isinstance(parent, cst.Decorator):
                return parent in self.sites
            if node in self.alias_definitions:
                return True
            # partial(jax.pmap, ...) is applied or aliased if the partial is.
            if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
                call = self.parents.get(parent)
                if isinstance(call, cst.Call) and call.args and call.args[0] is parent and self.matches(
                        call.func, tables.PARTIAL):
                    node = call
                    continue
            return False

    def pmap_sites(self) -> list[TransformSite]:
        return [s for s in self.sites.values() if s.transform == PMAP]

    def site(self, node: cst.CSTNode) -> TransformSite | None:
        return self.sites.get(node)

    # ------------------------------------------------------- transformed calls
    def _find_transformed_calls(self) -> None:
        for site in self.sites.values():
            for assignment in site.bound_names:
                _prefer_pmap(self._callable_by_assignment, assignment, site)
            if site.bound_attribute is not None:
                cls, attr = site.bound_attribute
                _prefer_pmap(self._callable_by_attribute, (id(cls), attr), site)
        for call in self.index.calls:
            site = self.sites.get(call.func) or self.callable_site(call.func)
            if site is not None:
                self._calls_to[call] = site

    def callable_site(self, expr: cst.BaseExpression) -> TransformSite | None:
        """The site whose transformed function ``expr`` names: ``p`` after ``p = jax.pmap(f)`` or
        ``@jax.pmap def p``, ``self.p`` after ``self.p = jax.pmap(...)`` in the same class. When a
        function is both jitted and pmapped (stacked decorators), the pmap site wins: the pmap is
        what runs on the devices and what needs migrating."""
        if isinstance(expr, cst.Name):
            if not self._callable_by_assignment:
                return None
            assignments = self.assignments_of(expr)
            if not any(a in self._callable_by_assignment for a in assignments):
                return None
            # Only the bindings that reach the read: in `f = jax.pmap(f)` the argument is the plain
            # function (the statement's own binding comes after it, unless a loop runs it again).
            found = None
            for assignment in self.reaching_assignments(expr):
                site = self._callable_by_assignment.get(assignment)
                if site is not None and (found is None or site.transform == PMAP):
                    found = site
            return found
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            if not self._callable_by_attribute:
                return None
            cls = self.enclosing_class(expr)
            if cls is not None:
                site = self._callable_by_attribute.get((id(cls), expr.attr.value))
                if site is not None and self._before_own_binding(expr, site):
                    return None
                return site
        return None

    def _before_own_binding(self, expr: cst.Attribute, site: TransformSite) -> bool:
        """``self.f`` read in the arguments of the very site that ``self.f = jax.pmap(self.f)`` binds
        in a method, outside loops: the read sees the plain method (or what an earlier statement
        stored), not this pmap. Only a second run of the method on the same object (an `__init__`
        runs once; `_train_init`-style set-up methods once in practice) would see it: not taken
        for a nested pmap, which legacy could hardly have run either (its inner pmap would have
        needed a second device axis in every per-device slice)."""
        if not self.is_within(expr, site.node) or self._repeats(expr):
            return False
        function = next((a for a in self.ancestors(expr) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        return isinstance(function, cst.FunctionDef) \
            and self.parent(self.parent(function)) is self.enclosing_class(expr)  # a method of the class

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
            if site.transform == JIT:
                tags.add(JIT_OUTPUT)
            else:
                tags.add(PMAP_OUTPUT if _stacked_output(site.option("out_axes"), None) else PMAP_OUTPUT_UNSTACKED)
        names = self.qualified_names(call.func)
        if not names.isdisjoint(tables.DEVICE_PUT_REPLICATED) or not names.isdisjoint(tables.FLAX_REPLICATE):
            tags.add(REPLICATED)
        if not names.isdisjoint(tables.DEVICE_PUT_SHARDED):
            tags.add(SHARDED_STACK)
        if not names.isdisjoint(tables.DEVICE_PUT):
            # device_put(x) and device_put(x, None) leave x uncommitted; a device or sharding commits it.
            positional = [a for a in call.args if a.keyword is None and not a.star]
            placement = positional[1].value if len(positional) >= 2 else None
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "device":
                    placement = arg.value
            if placement is not None and not (isinstance(placement, cst.Name) and placement.value == "None"):
                tags.add(COMMITTED)
        return tags

    def _tag_values(self) -> None:
        for call in self.index.calls:
            tags = self._classify_call(call)
            site = self._calls_to.get(call)
            if not tags and site is None:
                continue
            if tags:
                self._call_tags[call] = tags
            parent = self.parents.get(call)
            if not isinstance(parent, (cst.Assign, cst.AnnAssign)):
                continue
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            for target in targets:
                for name, position in _target_names_at(target):
                    assignment = self.assignment_for_target(name)
                    if assignment is None:
                        continue
                    element_tags = tags
                    if site is not None and site.transform == PMAP and position is not None:
                        # `loss, aux = step(x)` with out_axes=(0, None): tag each output as its axis says.
                        stacked = _stacked_output(site.option("out_axes"), position)
                        element_tags = (tags - {PMAP_OUTPUT, PMAP_OUTPUT_UNSTACKED}) | {
                            PMAP_OUTPUT if stacked else PMAP_OUTPUT_UNSTACKED}
                    self._tags[assignment] |= element_tags
                    if tags:
                        self._assignment_calls[assignment].append((call, position))
                    if site is not None:
                        self._assignment_producers[assignment].append(site)
                        if position is None and self.returns_tuple(site):
                            self._whole_tuple_outputs.add(assignment)
                    # (a starred target's name gets no position, and only part of the value)
                    if tags and (position is not None or isinstance(target, cst.Name)) \
                            and self._produces_sequence(call, position):
                        self._sequence_values.add(assignment)

    def _propagate_tags(self) -> None:
        """Carry tags through plain copies: ``m = metrics``, ``params = state.params``,
        ``loss, aux = out`` (``out`` a whole tuple output), ``m = metrics["train"]``. A few rounds
        cover chains of copies; modules without tagged values skip this entirely."""
        if not self._tags:
            return
        copies = [(target, value) for target, value in self.index.assigned_value.items()
                  if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript))]
        for _ in range(3):
            changed = False
            for target, value in copies:
                calls, assignments = self._sources(value)
                if not assignments:
                    continue
                tags: set[str] = set()
                producers: list[TransformSite] = []
                sources: list[tuple[cst.Call, int | None]] = []
                for assignment in assignments:
                    tags |= self._tags.get(assignment, set())
                    producers.extend(self._assignment_producers.get(assignment, ()))
                    sources.extend(self._assignment_calls.get(assignment, ()))
                if not tags:
                    continue
                whole_tuple = isinstance(value, cst.Name) and all(a in self._whole_tuple_outputs for a in assignments
                                                                   if self._tags.get(a))
                sequence = isinstance(value, cst.Name) and isinstance(target, cst.Name) and all(
                    a in self._sequence_values for a in assignments if self._tags.get(a))
                for name, position in _target_names_at(target):
                    if position is None and isinstance(target, (cst.Tuple, cst.List)):
                        continue  # starred unpacking: which element is which is unknown
                    if isinstance(target, (cst.Tuple, cst.List)) and not whole_tuple:
                        continue  # unpacking an array: the device axis itself, not outputs
                    assignment = self.assignment_for_target(name)
                    if assignment is None or tags <= self._tags.get(assignment, set()):
                        continue
                    self._tags[assignment] |= tags
                    self._assignment_producers[assignment].extend(producers)
                    # `ys, aux = out` (a whole tuple output): each name receives one output
                    self._assignment_calls[assignment].extend(
                        (call, position if whole_tuple and at is None else at) for call, at in sources)
                    if position is None and whole_tuple:
                        self._whole_tuple_outputs.add(assignment)
                    if sequence:
                        self._sequence_values.add(assignment)
                    changed = True
            if not changed:
                break

    def returns_tuple(self, site: TransformSite) -> bool:
        """Whether every function ``site`` may transform returns a tuple/list display, so its
        output is a Python sequence of arrays (``step(x)[0]`` picks an output, not a device)."""
        cached = self._tuple_sites.get(id(site))
        if cached is None:
            functions = self.mapped_functions(site)
            cached = bool(functions) and all(_returns_sequence(f) for f in functions)
            self._tuple_sites[id(site)] = cached
        return cached

    def _sources(self, expr: cst.BaseExpression) -> tuple[list[cst.Call], list[BaseAssignment]]:
        """Calls and assignments whose value ``expr`` may be (a leaf, a field or a named output of)."""
        calls: list[cst.Call] = []
        assignments: list[BaseAssignment] = []
        while True:
            if isinstance(expr, cst.Call):
                calls.append(expr)
            elif isinstance(expr, cst.Name):
                assignments.extend(self.reaching_assignments(expr))
            elif isinstance(expr, cst.Subscript) and (_is_key_subscript(expr) or self.selects_output(expr)):
                expr = expr.value  # a leaf of a pytree output, or one output of a tuple, is an output too
                continue
            elif isinstance(expr, cst.Attribute) and expr.attr.value not in _ARRAY_ATTRIBUTES:
                expr = expr.value  # a field of an output dataclass/namedtuple
                continue
            return calls, assignments

    def value_tags(self, expr: cst.BaseExpression) -> set[str]:
        """What ``expr`` may hold: a pmap output, a replicated stack, a committed array, ..."""
        calls, assignments = self._sources(expr)
        tags: set[str] = set()
        for call in calls:
            tags |= self._call_tags.get(call, set())
        for assignment in assignments:
            tags |= self._tags.get(assignment, set())
        return tags

    def always_tagged(self, expr: cst.BaseExpression, allowed: Iterable[str]) -> bool:
        """Whether every value ``expr`` may hold is known to carry tags from ``allowed`` only: it
        has at least one source, and each source call and each reaching assignment is tagged,
        with nothing outside ``allowed``. The "must" counterpart of ``value_tags`` (which answers
        "may"): fixes that are exact only for, say, pmap outputs ask this."""
        allowed = frozenset(allowed)
        calls, assignments = self._sources(expr)
        if not calls and not assignments:
            return False
        found = [self._call_tags.get(call) for call in calls] + [self._tags.get(a) for a in assignments]
        return all(tags and tags <= allowed for tags in found)

    def tagged_sources(self, expr: cst.BaseExpression) -> list[tuple[cst.Call, int | None]]:
        """The tagged calls (pmap and jit calls, `device_put_replicated`, flax `replicate`, ...)
        whose value ``expr`` may be, followed through assignments and plain copies, each with the
        position of the call's tuple output that reaches ``expr`` (None: the whole output, or not
        known)."""
        calls, assignments = self._sources(expr)
        found: list[tuple[cst.Call, int | None]] = [(call, None) for call in calls if call in self._call_tags]
        for assignment in assignments:
            found.extend(self._assignment_calls.get(assignment, ()))
        return found

    def producers(self, expr: cst.BaseExpression) -> list[TransformSite]:
        """The pmap/jit sites whose output ``expr`` may be."""
        calls, assignments = self._sources(expr)
        found = [self._calls_to[c] for c in calls if c in self._calls_to]
        for assignment in assignments:
            found.extend(self._assignment_producers.get(assignment, ()))
        return found

    def selects_output(self, node: cst.Subscript) -> bool:
        """``out[0]`` picking an element of a Python sequence, not indexing the device axis: ``out``
        is the whole (tuple) output of a function returning ``a, b``; or a list or tuple of the
        pytree, as its producer shows (a pmapped function returning a list there, a replicated
        list) or as the element's use shows (``params[0]["w"]``: a string key, which no array
        takes). The element is part of the same output: its leaves keep the device axis."""
        if not integer_index(node):
            return False
        parent = self.parents.get(node)
        if isinstance(parent, cst.Subscript) and parent.value is node and _is_key_subscript(parent):
            return True
        value = node.value
        if isinstance(value, cst.Call):
            site = self._calls_to.get(value)
            return (site is not None and self.returns_tuple(site)) or self._produces_sequence(value, None)
        if isinstance(value, cst.Name):
            assignments = [a for a in self.reaching_assignments(value) if self._tags.get(a)]
            return bool(assignments) and (all(a in self._whole_tuple_outputs for a in assignments)
                                          or all(a in self._sequence_values for a in assignments))
        return False

    def _produces_sequence(self, call: cst.Call, position: int | None) -> bool:
        """What ``call`` returns (its element at ``position`` of a returned tuple; None: all of it) is
        visibly a Python list or tuple: a pmapped function returning a list or tuple display (or a
        list comprehension) there, or `device_put_replicated` / flax `replicate` of one (a stack
        keeps the structure of what it stacks)."""
        site = self._calls_to.get(call)
        if site is not None:
            key = (id(site), position)
            if key not in self._sequence_sites:
                functions = self.mapped_functions(site) if site.transform == PMAP else []
                self._sequence_sites[key] = bool(functions) and all(
                    _returns_sequence(f, position, _SEQUENCE_DISPLAYS) for f in functions)
            return self._sequence_sites[key]
        names = self.qualified_names(call.func)
        if position is not None or (names.isdisjoint(tables.DEVICE_PUT_REPLICATED)
                                    and names.isdisjoint(tables.FLAX_REPLICATE)):
            return False
        first = call.args[0] if call.args else None
        if first is None or first.star or (first.keyword is not None and first.keyword.value not in ("x", "tree")):
            return False
        return self._is_sequence(first.value)

    def _is_sequence(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """``expr`` is a list or tuple on every path: a display, a list comprehension, a call of a
        module function that only returns those, or a name bound only to one of these."""
        if isinstance(expr, _SEQUENCE_DISPLAYS):
            return True
        if depth > 4:
            return False
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
            definitions = self.assignments_of(expr.func)
            return bool(definitions) and all(
                isinstance(getattr(d, "node", None), cst.FunctionDef) and not d.node.decorators
                and _returns_sequence(d.node, None, _SEQUENCE_DISPLAYS) for d in definitions)
        if isinstance(expr, cst.Name):
            assignments = self.reaching_assignments(expr)
            values = [self.index.assigned_value.get(getattr(a, "node", None)) for a in assignments]
            return bool(values) and all(v is not None and self._is_sequence(v, depth + 1) for v in values)
        return False

    def indexes_device_axis(self, node: cst.Subscript) -> bool:
        """``out[0]`` / ``out[i]`` on a value whose leading axis is laid out across devices."""
        return (integer_index(node) and not self.selects_output(node)
                and not self.value_tags(node.value).isdisjoint(DEVICE_STACKED))

    def pmap_devices_option(self, call: cst.Call) -> cst.BaseExpression | None:
        site = self._calls_to.get(call)
        return site.option("devices") if site is not None else None

    # --------------------------------------------------------------- nesting
    def nested_sites(self) -> dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]]:
        """Nodes that run a pmap inside a pmapped function, mapped to (the outer pmap's node, the
        outer site). A node is an inner pmap site (``pmap(pmap(f))``, ``@pmap`` stacked or defined
        in the body), a call of a pmapped callable, or a pmapped callable (Name/Attribute; see
        ``callable_site``) handed to the outer pmap or to a function-taking call in the body
        (``jax.vmap(p_inner)``). Bodies are followed through the helpers they call (plain and
        jitted functions of this module), transitively.

        One walk for the whole module: each function is visited once, attributed to the first
        outer pmap found to run it, so the cost is linear in the code, not sites x call depth."""
        if self._nested is not None:
            return self._nested
        nested: dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]] = {}
        work: list[tuple[FunctionLike, TransformSite]] = []
        expanded: set[int] = set()  # jit sites already looked through
        for outer in self.pmap_sites():
            found: list[cst.CSTNode] = []
            bodies: list[FunctionLike] = []
            if outer.decorated is not None:
                # Decorators apply bottom-up: a pmap decorator below this one is mapped by it.
                decorators = list(outer.decorated.decorators)
                below = decorators[next(i for i, d in enumerate(decorators) if d is outer.node) + 1:]
                for decorator in below:
                    inner = self.sites.get(decorator)
                    if inner is not None and inner.transform == PMAP:
                        found.append(decorator)
                bodies.append(outer.decorated)
            elif outer.fun is not None:
                self._expand_callable(outer.fun, found, bodies, expanded)
            for node in found:
                nested.setdefault(node, (outer.node, outer))
            work.extend((body, outer) for body in reversed(bodies))
        work.reverse()  # outers in source order: a function is attributed to the first that runs it
        walked: set[int] = set()
        while work:
            func, outer = work.pop()
            if id(func) in walked:
                continue
            found = []
            bodies = []
            for owner in self._lexical_functions(func):
                if id(owner) in walked:
                    continue
                walked.add(id(owner))
                self._scan_body(owner, found, bodies, expanded)
            for node in found:
                nested.setdefault(node, (outer.node, outer))
            work.extend((body, outer) for body in bodies)
        self._nested = nested
        return nested

    def _scan_body(self, owner: FunctionLike, found: list[cst.CSTNode], bodies: list[FunctionLike],
                   expanded: set[int]) -> None:
        """What the code directly in ``owner``'s body runs: pmaps to ``found``, functions to ``bodies``."""
        for decorator in self.index.owned_decorators.get(owner, ()):
            site = self.sites.get(decorator)
            if site is not None and site.transform == PMAP:
                found.append(decorator)
        for call in self.index.owned_calls.get(owner, ()):
            site = self.sites.get(call)
            if site is not None:
                if site.transform == PMAP:
                    found.append(call)
                elif site.fun is not None:
                    self._expand_callable(site.fun, found, bodies, expanded)
                continue
            if call.func not in self.sites:  # `jax.pmap(f)(x)`: the inner site is the finding
                self._expand_callable(call.func, found, bodies, expanded)
            # Functions handed to another function run too: vmap(g), lax.scan(body, ...).
            for arg in call.args:
                if isinstance(arg.value, (cst.Name, cst.Attribute)) and not arg.star:
                    self._expand_callable(arg.value, found, bodies, expanded)

    def mapped_functions(self, site: TransformSite) -> list[FunctionLike]:
        if site.decorated is not None:
            return [site.decorated]
        fun = site.fun
        return self.resolve_functions(fun) if fun is not None else []

    def resolve_functions(self, expr: cst.BaseExpression) -> list[FunctionLike]:
        """Function definitions that ``expr`` may denote (Name, lambda, partial(f), self.method)."""
        if isinstance(expr, cst.Lambda):
            return [expr]
        if isinstance(expr, cst.Name):
            return [a.node for a in self.assignments_of(expr) if isinstance(getattr(a, "node", None), cst.FunctionDef)]
        if isinstance(expr, cst.Call) and self.matches(expr.func, tables.PARTIAL) and expr.args:
            return self.resolve_functions(expr.args[0].value) if not expr.args[0].star else []
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            cls = self.enclosing_class(expr)
            if cls is not None:
                return [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == expr.attr.value]
        return []

    def _expand_callable(self, expr: cst.BaseExpression, found: list[cst.CSTNode],
                         bodies: list[FunctionLike], expanded: set[int]) -> None:
        """What running ``expr`` (a function value) runs: a pmapped callable goes to ``found`` (every
        time: each call is a finding), the bodies of plain and jitted functions go to ``bodies``."""
        site = self.sites.get(expr) or self.callable_site(expr)
        if site is not None:
            if site.transform == PMAP:
                found.append(expr)
                return
            if id(site) not in expanded:  # jit: look through it once (`f = jax.jit(f)` cycles)
                expanded.add(id(site))
                if site.decorated is not None:
                    bodies.append(site.decorated)
                elif site.fun is not None:
                    self._expand_callable(site.fun, found, bodies, expanded)
            if site.node is expr:
                return
        bodies.extend(self.resolve_functions(expr))

    def _lexical_functions(self, func: FunctionLike) -> Iterator[FunctionLike]:
        """``func`` and every def/lambda nested in it: code that may run when ``func`` runs."""
        stack = [func]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(self.index.child_functions.get(current, ()))

    def nested_nodes(self) -> set[int]:
        """The ids of the nodes of every nesting (``nested_sites``): the inner node, the outer pmap,
        and the site that built an inner pmapped callable (a call of it, or a reference to it)."""
        if self._nested_nodes is None:
            nodes: set[int] = set()
            for inner, (outer, _) in self.nested_sites().items():
                nodes.add(id(inner))
                nodes.add(id(outer))
                if isinstance(inner, cst.Call):
                    site = self.transformed_call(inner)
                elif isinstance(inner, (cst.Name, cst.Attribute)):
                    site = self.callable_site(inner)
                else:
                    site = None
                if site is not None:
                    nodes.add(id(site.node))
            self._nested_nodes = nodes
        return self._nested_nodes

    # ------------------------------------------------------------ module-wide
    def multi_process(self) -> bool:
        """The module uses the multi-process API (`jax.process_index()`, ...): a program whose pmaps
        took host-local inputs (PM501)."""
        if self._multi_process is None:
            self._multi_process = self.uses_any(tables.MULTI_PROCESS, tables.MULTI_PROCESS_PREFIXES)
        return self._multi_process

    @property
    def indent(self) -> str:
        """One level of the module's indentation, for generated code (``indent_unit``)."""
        return indent_unit(self.module)

    @property
    def is_script(self) -> bool:
        """The module has an ``if __name__ == "__main__":`` block (a program, not a library)."""
        for statement in self.module.body:
            if isinstance(statement, cst.If) and "__main__" in cst.Module([]).code_for_node(statement.test) \
                    and "__name__" in cst.Module([]).code_for_node(statement.test):
                return True
        return False

    def uses_any(self, names: Iterable[str], prefixes: tuple[str, ...] = ()) -> bool:
        """Whether the module refers to one of ``names`` or to anything in a module named by
        ``prefixes`` (``"jax.distributed."``), however it was imported."""
        names = frozenset(names)
        modules = frozenset(p.rstrip(".") for p in prefixes)

        def hit(qualified: frozenset[str]) -> bool:
            return not qualified.isdisjoint(names) or any(q in modules or q.startswith(prefixes) for q in qualified)

        components = {n.rsplit(".", 1)[-1] for n in names | modules}
        # Local names an import bound to one of them (`import jax.distributed as jd`, `from
        # jax.experimental.multihost_utils import process_allgather`), checked through scopes.
        imported = {local for local, fulls in self.index.imports.items()
                    if any(f in names or f in modules or f.startswith(prefixes) for f in fulls)}
        for component in components:
            for node in self.index.attributes.get(component, ()):
                if hit(self.qualified_names(node)):
                    return True
        for local in components | imported:
            for node in self.index.names.get(local, ()):
                if not self._is_attribute_tail(node) and hit(self.qualified_names(node)):
                    return True
        return False

    @property
    def subscripts(self) -> list[cst.Subscript]:
        return self.index.subscripts


def _runs_at_least_once(model: SemanticModel, loop: cst.For) -> bool:
    """``for _ in range(<literals>)`` with a non-empty range and no break/continue in its body."""
    call = loop.iter
    if loop.asynchronous is not None or not isinstance(call, cst.Call) or not call.args:
        return False
    if not model.matches(call.func, {"builtins.range"}):
        return False
    bounds = []
    for arg in call.args:
        value = arg.value
        sign = 1
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            value, sign = value.expression, -1
        if arg.keyword is not None or arg.star or not isinstance(value, cst.Integer):
            return False
        bounds.append(sign * int(value.value, 0))
    try:
        if len(range(*bounds)) == 0:
            return False
    except (TypeError, ValueError):
        return False
    finder = _LoopExit()
    loop.body.visit(finder)
    return not finder.found


class _LoopExit(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Break(self, node: cst.Break) -> None:
        self.found = True

    def visit_Continue(self, node: cst.Continue) -> None:
        self.found = True

    def visit_Return(self, node: cst.Return) -> None:
        self.found = True

    def visit_Raise(self, node: cst.Raise) -> None:
        self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


# What may lie between an assignment's target name and the construct that binds it.
_TARGET_PARTS = (cst.AssignTarget, cst.Tuple, cst.List, cst.Element, cst.StarredElement, cst.AsName)
# Code that runs apart from the expression around it: later (a def, a lambda, a generator) or
# in a scope of its own, maybe repeatedly (a comprehension).
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_DEFERRED = (cst.FunctionDef, cst.Lambda, cst.ClassDef) + _COMPREHENSIONS


def _prefer_pmap(table: dict, key, site: TransformSite) -> None:
    current = table.get(key)
    if current is None or (current.transform != PMAP and site.transform == PMAP):
        table[key] = site


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


def _target_names_at(target: cst.BaseExpression) -> Iterator[tuple[cst.Name, int | None]]:
    """Names bound by an assignment target, with the position of the top-level element each
    unpacks (None when the name receives the whole value or the position is not fixed)."""
    if isinstance(target, cst.Name):
        yield target, None
        return
    if isinstance(target, (cst.Tuple, cst.List)):
        starred = any(isinstance(e, cst.StarredElement) for e in target.elements)
        for index, element in enumerate(target.elements):
            position = None if starred else index
            for name in _target_names(element.value if not isinstance(element, cst.StarredElement) else element):
                yield name, position


def _stacked_output(out_axes: cst.BaseExpression | None, position: int | None) -> bool:
    """Whether a pmap output (the one at ``position`` of a tuple output, or any one when None)
    has the device axis leading: out_axes absent or 0. Unknown (computed) out_axes count as 0."""
    if out_axes is None:
        return True
    if isinstance(out_axes, (cst.Tuple, cst.List)):
        elements = [e for e in out_axes.elements if not isinstance(e, cst.StarredElement)]
        if len(elements) != len(out_axes.elements):
            return True
        if position is not None:
            return position < len(elements) and _stacked_output(elements[position].value, None)
        return any(_stacked_output(e.value, None) for e in elements)
    if isinstance(out_axes, cst.Name) and out_axes.value == "None":
        return False
    if isinstance(out_axes, cst.Integer):
        return out_axes.evaluated_value == 0
    if isinstance(out_axes, cst.UnaryOperation):  # out_axes=-1: not the leading axis
        return False
    return True


class _ReturnFinder(cst.CSTVisitor):
    """Return statements of one function, not of functions nested in it."""

    def __init__(self) -> None:
        self.values: list[cst.BaseExpression | None] = []

    def visit_Return(self, node: cst.Return) -> None:
        self.values.append(node.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


# What a Python list or tuple is visibly written as.
_SEQUENCE_DISPLAYS = (cst.Tuple, cst.List, cst.ListComp)


def _returns_sequence(func: FunctionLike, position: int | None = None,
                      kinds: tuple[type[cst.BaseExpression], ...] = (cst.Tuple, cst.List)) -> bool:
    """Every return of ``func`` is one of ``kinds`` (by default a tuple or list display); with
    ``position``: the element at ``position`` of every returned tuple or list display is."""
    if isinstance(func, cst.Lambda):
        values: list[cst.BaseExpression | None] = [func.body]
    else:
        finder = _ReturnFinder()
        func.body.visit(finder)
        values = finder.values
    if not values:
        return False
    for value in values:
        if position is not None:
            if not isinstance(value, (cst.Tuple, cst.List)) or position >= len(value.elements) or any(
                    isinstance(e, cst.StarredElement) for e in value.elements):
                return False
            value = value.elements[position].value
        if not isinstance(value, kinds):
            return False
    return True


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
