"""The one walk of a module that the analysis makes (``Indexer``), and the scope analysis built on it."""

from __future__ import annotations

from collections import defaultdict

import libcst as cst
from libcst.metadata import ExpressionContext, ExpressionContextProvider, MetadataWrapper, ScopeProvider

from pmap_migrate.rules.analysis.sites import FunctionLike


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
        # The return statements of each function, and the functions that yield (generators).
        self.returns: dict[FunctionLike | None, list[cst.Return]] = defaultdict(list)
        self.generators: set[FunctionLike | None] = set()
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

    def visit_Return(self, node: cst.Return) -> None:
        self.returns[self._owner].append(node)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.generators.add(self._owner)

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
