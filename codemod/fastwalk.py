"""A faster traversal for libcst's read-only visitors, with the same callbacks in the same order.

libcst walks a tree for a ``CSTVisitor`` the way it walks it for a transformer: every node's
``_visit_and_replace_children`` builds (and validates) a new copy of the node from its visited
children, and the visitor's result is thrown away. Checking a file walks its tree several times
(the scope and expression-context providers, the semantic index, the rules, local walks), so these
copies were about a third of the analysis. ``visit`` (which ``pmap_migrate.libcst_patches``
installs as ``CSTNode.visit``) walks read-only visitors without copying; transformers keep libcst's
own walk.

What a node's walk does is read from libcst's own source, once per node class: its
``_visit_and_replace_children`` is a single ``return Node(field=visit_required(self, "field",
self.field, visitor), ...)`` (or ``return self`` for a leaf), which gives the children's fields in
the order libcst visits them. A class whose method has any other shape (or whose source cannot be
read) is walked by libcst's own method, whose children come back here. The visitor sees exactly
libcst's sequence of ``on_visit`` / ``on_visit_attribute`` / ``on_leave_attribute`` / ``on_leave``
calls, except calls that provably do nothing:

- attribute callbacks, unless the visitor overrides them or has a ``visit_<Node>_<field>`` or
  ``leave_<Node>_<field>`` method for the node's class (libcst's defaults only look those up);
- whole subtrees of trivia (whitespace, comments, punctuation, operators and other nodes whose
  children can only be trivia, found from the node classes' field types) for visitors that use
  libcst's default dispatch (a plain ``CSTVisitor`` or a batch of rules) and have no method for any
  class such a subtree can hold.

A libcst matcher visitor (``MatcherDecoratableVisitor``, as libcst's import gatherers that `fix`
runs) whose instance has no matchers and no decorated methods calls exactly what a plain visitor
calls, and is walked as one; any other keeps its own callbacks, every one of them.

Two more replacements answer questions libcst's scope analysis asks per file and per node the
same way at less cost: which callbacks its providers have (remembered per class), and whether a
node is assignment-like (one look-up by class instead of one ``ABCMeta`` call per listed class).

One exception by design: whitespace and comment leaves are not shown to libcst's scope analysis
(whose metadata then has no scope for them; nothing asks) nor to visitors that opt out of them
(``WALK_PAST_WHITESPACE``, the semantic model's index), though they override ``on_visit``.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import re
import sys
import textwrap
import typing
import weakref

import libcst as cst
from libcst import CSTVisitor, MaybeSentinel
from libcst._batched_visitor import _BatchedCSTVisitor
from libcst._nodes.base import CSTNode
from libcst.metadata.base_provider import BatchableMetadataProvider
from libcst.metadata.scope_provider import ScopeVisitor

# libcst's helpers in _visit_and_replace_children, and whether each visits a sequence of children.
_HELPERS = {"visit_required": False, "visit_optional": False, "visit_sentinel": False,
            "visit_sequence": True, "visit_iterable": True,
            "visit_body_sequence": True, "visit_body_iterable": True}

# How a field's value is walked: one child (None and MaybeSentinel hold none), a sequence of
# children, a child or a sequence (by the value's type), or -- with no attribute callbacks when the
# value is None -- one child or a sequence.
ONE, MANY, ONE_OR_MANY, ONE_UNLESS_NONE, MANY_UNLESS_NONE = range(5)
_Plan = tuple[tuple[str, int, type | None], ...]  # field, how, ONE_OR_MANY's node class
_plans: dict[type, _Plan | None] = {}


def _helper_field(call: ast.expr, locals_: dict[str, str]) -> tuple[str, bool] | None:
    """``visit_x(self, "field", self.field, visitor)`` (or ``field`` for a local ``field =
    self.field``) → ("field", whether it visits a sequence)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _HELPERS
            and len(call.args) == 4 and not call.keywords):
        return None
    owner, name, value, visitor = call.args
    if not (isinstance(owner, ast.Name) and owner.id == "self" and isinstance(name, ast.Constant)
            and isinstance(visitor, ast.Name) and visitor.id == "visitor"):
        return None
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        read = value.attr
    elif isinstance(value, ast.Name):
        read = locals_.get(value.id)
    else:
        return None
    return (name.value, _HELPERS[call.func.id]) if read == name.value else None


def _field_walk(value: ast.expr, locals_: dict[str, str], module) -> tuple[str, int, type | None] | None:
    field = _helper_field(value, locals_)
    if field is not None:
        return field[0], MANY if field[1] else ONE, None
    if not isinstance(value, ast.IfExp):
        return None
    body, orelse = _helper_field(value.body, locals_), _helper_field(value.orelse, locals_)
    test = value.test
    # `one(f) if isinstance(f, Node) else many(f)`
    if (body is not None and orelse is not None and body[0] == orelse[0] and not body[1] and orelse[1]
            and isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
            and len(test.args) == 2 and isinstance(test.args[0], ast.Name)
            and locals_.get(test.args[0].id) == body[0] and isinstance(test.args[1], ast.Name)):
        node_class = getattr(module, test.args[1].id, None)
        if isinstance(node_class, type) and issubclass(node_class, CSTNode):
            return body[0], ONE_OR_MANY, node_class
    # `visit(f) if f is not None else None`
    if (body is not None and isinstance(value.orelse, ast.Constant) and value.orelse.value is None
            and isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.left, ast.Name) and locals_.get(test.left.id) == body[0]
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return body[0], MANY_UNLESS_NONE if body[1] else ONE_UNLESS_NONE, None
    return None


def _method_source(method) -> str:
    """A function's source, dedented: the lines from its ``def`` to the last one its code spans
    (``inspect.getsource`` tokenizes to find the end of the block, most of the cost of reading
    libcst's 345 node classes once per process)."""
    code = getattr(method, "__code__", None)
    positions = getattr(code, "co_positions", None)
    lines = linecache.getlines(code.co_filename) if positions is not None else []
    ends = [end for _, end, _, _ in positions() if end is not None] if lines else []
    if not ends or getattr(method, "__wrapped__", None) is not None:
        return textwrap.dedent(inspect.getsource(method))
    first = code.co_firstlineno  # the `def` line (or its first decorator's)
    return textwrap.dedent("".join(lines[first - 1:max(ends)]))


def plan_of(cls: type) -> _Plan | None:
    """The fields (in visiting order) whose children libcst visits for a node of ``cls``, and how;
    None when its ``_visit_and_replace_children`` is not of the simple shapes read here."""
    try:
        return _plans[cls]
    except KeyError:
        pass
    plan: _Plan | None = None
    try:
        function = ast.parse(_method_source(cls._visit_and_replace_children)).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        function = None
    if isinstance(function, ast.FunctionDef):
        body = function.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring
        locals_: dict[str, str] = {}  # `name = self.field` before the return
        while (body and isinstance(body[0], ast.Assign) and len(body[0].targets) == 1
               and isinstance(body[0].targets[0], ast.Name) and isinstance(body[0].value, ast.Attribute)
               and isinstance(body[0].value.value, ast.Name) and body[0].value.value.id == "self"):
            locals_[body[0].targets[0].id] = body[0].value.attr
            body = body[1:]
        value = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
        if isinstance(value, ast.Name) and value.id == "self":
            plan = ()
        elif isinstance(value, ast.Call) and not value.args:
            fields = []
            for keyword in value.keywords:
                field = _field_walk(keyword.value, locals_, sys.modules.get(cls.__module__))
                if field is not None:
                    fields.append(field)
                elif any(isinstance(n, ast.Name) and (n.id == "visitor" or n.id in locals_)
                         for n in ast.walk(keyword.value)):
                    break  # the visitor (or a field read before) used some other way
            else:
                plan = tuple(fields)
    _plans[cls] = plan
    return plan


def _concrete_nodes() -> list[type]:
    seen: list[type] = []
    stack = [CSTNode]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return [c for c in seen if not inspect.isabstract(c)]


def _flat(hint) -> list:
    if typing.get_origin(hint) is None:
        return [hint]
    return [leaf for arg in typing.get_args(hint) for leaf in _flat(arg)]


_trivia: dict[type, frozenset[type]] | None = None


def trivia() -> dict[type, frozenset[type]]:
    """Node classes whose subtrees hold only trivia, each with every class its subtree can hold
    (itself included): the whitespace and comment leaves, and by their fields' declared types every
    class whose children can only be such classes (punctuation, operators, names, numbers, ...)."""
    global _trivia
    if _trivia is not None:
        return _trivia
    concrete = _concrete_nodes()
    hints = {}
    for cls in concrete:
        try:
            hints[cls] = typing.get_type_hints(cls)
        except Exception:  # a hint that does not resolve: the class is not trivia
            pass
    found: dict[type, frozenset[type]] = {
        cls: frozenset({cls}) for cls in (cst.SimpleWhitespace, cst.Newline, cst.Comment)
        if plan_of(cls) == ()}
    kinds_of: dict[type, list[type]] = {}  # a field's declared class -> the concrete classes it admits
    changed = True
    while changed:
        changed = False
        for cls in concrete:
            plan = plan_of(cls)
            if cls in found or plan is None or cls not in hints:
                continue
            holds: set[type] = {cls}
            for name, _, _ in plan:
                for hint in _flat(hints[cls].get(name)):
                    if hint is type(None) or hint is MaybeSentinel:
                        continue
                    kinds = kinds_of.get(hint) if isinstance(hint, type) else []
                    if kinds is None:
                        kinds = kinds_of[hint] = [c for c in concrete if hint in c.__mro__]  # (no virtual subclasses)
                    if not kinds or any(c not in found for c in kinds):
                        break
                    for kind in kinds:
                        holds |= found[kind]
                else:
                    continue
                break
            else:
                found[cls] = frozenset(holds)
                changed = True
    _trivia = found
    return found


_ATTRIBUTE_METHOD = re.compile(r"(?:visit|leave)_([A-Za-z0-9]+)_\w+$")
_NODE_METHOD = re.compile(r"(?:visit|leave)_([A-Za-z0-9]+)$")


def _real(function) -> bool:
    return callable(function) and not getattr(function, "_is_no_op", False)


# Whitespace and comment leaves: no children, no scope, nothing any analysis here asks about.
WHITESPACE_LEAVES = frozenset({cst.SimpleWhitespace, cst.Newline, cst.Comment})


def _past_whitespace(cls: type) -> bool:
    """Visitors that override the node callbacks but are not to be called for whitespace leaves:
    libcst's scope analysis (it would record the scope of every blank, which nothing asks), and
    visitor classes that say so with ``WALK_PAST_WHITESPACE = True``."""
    return cls is ScopeVisitor or getattr(cls, "WALK_PAST_WHITESPACE", False) is True


class _Dispatch:
    """How to call one visitor class (or one batch of rules) for each node class."""

    def __init__(self, names: set[str], attribute_classes: set[str], default_nodes: bool,
                 past_whitespace: bool = False, *, by_class: bool = False, matcher: bool = False) -> None:
        # names: node class names with a visit_/leave_ method; attribute_classes: node class names
        # with an attribute method; default_nodes: on_visit/on_leave are libcst's dispatch (or a
        # matcher visitor's, which are libcst's for an instance without matchers). by_class: the
        # visitor class's own callbacks may be replaced by `_default_callbacks` (per-class tables);
        # matcher: a matcher visitor's class, for which that holds only per instance.
        self.attribute_classes = attribute_classes
        self.by_class = by_class
        self.matcher = matcher
        self.skip: set[type] = set(WHITESPACE_LEAVES) if past_whitespace else set()
        # Callbacks for the module node only (libcst's metadata providers, which walk the tree
        # themselves from there): below the module nothing is called.
        self.module_only = default_nodes and names <= {"Module"} and not attribute_classes
        if default_nodes:
            for cls, holds in trivia().items():
                if not any(c.__name__ in names or c.__name__ in attribute_classes for c in holds):
                    self.skip.add(cls)


_dispatch_by_class: dict[type, _Dispatch | None] = {}
_dispatch_by_batch: dict[tuple[frozenset[str], bool], _Dispatch] = {}
# The batch being walked (its children may come back through libcst's walk of a node).
_batched: weakref.WeakKeyDictionary[CSTVisitor, _Dispatch] = weakref.WeakKeyDictionary()


def _methods(names) -> tuple[set[str], set[str]]:
    nodes, attributes = set(), set()
    for name in names:
        match = _ATTRIBUTE_METHOD.match(name)
        if match:
            attributes.add(match.group(1))
            continue
        match = _NODE_METHOD.match(name)
        if match:
            nodes.add(match.group(1))
    return nodes, attributes


def _dispatch(visitor: CSTVisitor) -> _Dispatch | None:
    """None: call every attribute callback and skip nothing (the visitor overrides the callbacks)."""
    cls = type(visitor)
    if cls is _BatchedCSTVisitor:
        if (cls.on_visit_attribute is not _BatchedCSTVisitor.on_visit_attribute
                or cls.on_leave_attribute is not _BatchedCSTVisitor.on_leave_attribute):
            return None
        dispatch = _batched.get(visitor)
        if dispatch is None:
            default = visitor.before_visit is None and visitor.after_leave is None
            key = (frozenset(visitor.visitor_methods), default)  # the same batch on every file
            dispatch = _dispatch_by_batch.get(key)
            if dispatch is None:
                nodes, attributes = _methods(visitor.visitor_methods)
                dispatch = _dispatch_by_batch[key] = _Dispatch(nodes, attributes, default)
            _batched[visitor] = dispatch
        return dispatch
    if any(n.startswith(("visit_", "leave_")) and (_NODE_METHOD.match(n) or _ATTRIBUTE_METHOD.match(n))
           for n in vars(visitor)):
        return None  # methods set on the instance: leave it to libcst's defaults, call everything
    try:
        return _dispatch_by_class[cls]
    except KeyError:
        pass
    dispatch = None
    matcher = _matcher_callbacks(cls)
    if matcher or (cls.on_visit_attribute is CSTVisitor.on_visit_attribute
                   and cls.on_leave_attribute is CSTVisitor.on_leave_attribute):
        real = [n for n in dir(cls) if n.startswith(("visit_", "leave_")) and _real(getattr(cls, n, None))]
        nodes, attributes = _methods(real)
        default = matcher or (cls.on_visit is CSTVisitor.on_visit and cls.on_leave is CSTVisitor.on_leave)
        dispatch = _Dispatch(nodes, attributes, default, _past_whitespace(cls),
                             by_class=default and not hasattr(cls, "__getattr__"), matcher=matcher)
    _dispatch_by_class[cls] = dispatch
    return dispatch


def _matcher_callbacks(cls: type) -> bool:
    """Whether ``cls`` is one of libcst's matcher visitors (``MatcherDecoratableVisitor``: its import
    gatherers, say) with that class's own four callbacks. Those callbacks first test the visitor's
    matchers and decorated methods; an instance that has none (`_plain_matcher_visitor`) is called
    exactly as a plain ``CSTVisitor``."""
    matchers = sys.modules.get("libcst.matchers._visitors")  # not loaded: no such visitor exists
    base = getattr(matchers, "MatcherDecoratableVisitor", None)
    return base is not None and issubclass(cls, base) and all(
        getattr(cls, name) is getattr(base, name)
        for name in ("on_visit", "on_leave", "on_visit_attribute", "on_leave_attribute"))


def _plain_matcher_visitor(visitor: CSTVisitor) -> bool:
    return not visitor._matchers and not visitor._extra_visit_funcs and not visitor._extra_leave_funcs


_DYNAMIC = object()  # a callback that is not a plain function of the class: asked of the instance
_node_callbacks: dict[tuple[type, str], dict[type, object]] = {}


def _class_callback(cls: type, name: str):
    """What ``getattr(instance, name, None)`` finds in ``cls``: its plain function (None for none,
    or for one of libcst's no-op stubs, whose call changes nothing), or ``_DYNAMIC``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = vars(klass)[name]
            if inspect.isfunction(value):
                return None if getattr(value, "_is_no_op", False) else value
            return _DYNAMIC
    return None


def _default_callbacks(visitor: CSTVisitor):
    """libcst's ``CSTVisitor.on_visit`` / ``on_leave`` for ``visitor`` (``visit_<class name>``
    looked up per node), with each node class's callback looked up once per visitor class."""
    cls = type(visitor)
    visits = _node_callbacks.setdefault((cls, "visit_"), {})
    leaves = _node_callbacks.setdefault((cls, "leave_"), {})

    def on_visit(node: CSTNode) -> bool:
        kind = node.__class__
        try:
            callback = visits[kind]
        except KeyError:
            callback = visits[kind] = _class_callback(cls, "visit_" + kind.__name__)
        if callback is None:
            return True
        if callback is _DYNAMIC:
            return CSTVisitor.on_visit(visitor, node)
        return callback(visitor, node) is not False

    def on_leave(node: CSTNode) -> None:
        kind = node.__class__
        try:
            callback = leaves[kind]
        except KeyError:
            callback = leaves[kind] = _class_callback(cls, "leave_" + kind.__name__)
        if callback is _DYNAMIC:
            CSTVisitor.on_leave(visitor, node)
        elif callback is not None:
            callback(visitor, node)

    return on_visit, on_leave


def walk(node: CSTNode, visitor: CSTVisitor) -> None:
    """Visit ``node``'s subtree with the read-only ``visitor`` as libcst would (see the module)."""
    dispatch = _dispatch(visitor)
    if dispatch is not None and dispatch.matcher and not _plain_matcher_visitor(visitor):
        dispatch = None  # a matcher visitor with matchers: its own callbacks, every one of them
    on_visit, on_leave = visitor.on_visit, visitor.on_leave
    if dispatch is not None and dispatch.by_class:
        on_visit, on_leave = _default_callbacks(visitor)
    if dispatch is not None and dispatch.module_only and node.__class__ is cst.Module:
        on_visit(node)  # (what it returns only decides whether to walk children that call nothing)
        on_leave(node)
        return
    visit_attribute, leave_attribute = visitor.on_visit_attribute, visitor.on_leave_attribute
    skip = dispatch.skip if dispatch is not None else ()
    attributes = dispatch.attribute_classes if dispatch is not None else None
    plans = _plans

    def walk_node(node: CSTNode) -> None:
        cls = node.__class__
        if cls in skip:
            return
        if on_visit(node):
            try:
                plan = plans[cls]
            except KeyError:
                plan = plan_of(cls)
            if plan is None:
                node._visit_and_replace_children(visitor)  # libcst's walk; children come back here
            else:
                callbacks = attributes is None or cls.__name__ in attributes
                for name, how, node_class in plan:
                    value = getattr(node, name)
                    if how >= ONE_UNLESS_NONE:
                        if value is None:
                            continue
                        how = MANY if how == MANY_UNLESS_NONE else ONE
                    elif how == ONE_OR_MANY:
                        how = ONE if isinstance(value, node_class) else MANY
                    if callbacks:
                        visit_attribute(node, name)
                    if how == MANY:
                        for child in value:
                            walk_node(child)
                    elif value is not None and value.__class__ is not MaybeSentinel:
                        walk_node(value)
                    if callbacks:
                        leave_attribute(node, name)
        on_leave(node)

    try:
        walk_node(node)
    finally:
        walk_node = None  # the closure refers to itself: left to the collector, each walk would leak a cycle


_libcst_visit = CSTNode.visit


def visit(self, visitor):
    """``CSTNode.visit`` with read-only visitors walked by ``walk`` (pmap_migrate.libcst_patches)."""
    if isinstance(visitor, CSTVisitor):
        walk(self, visitor)
        return self
    return _libcst_visit(self, visitor)


# Two more of libcst's per-node costs in the scope analysis, made cheaper with the same answers.
_libcst_get_visitors = BatchableMetadataProvider.get_visitors


_provider_visitor_names: dict[type, tuple[str, ...]] = {}


def provider_visitors(self) -> dict:
    """``get_visitors`` of libcst's batchable metadata providers (the scope analysis asks it of
    two on every file): libcst's own answer (`inspect.getmembers` of the instance) for the first
    instance of a class, its names remembered for the next ones, unless an instance holds
    callbacks of its own."""
    if any(name.startswith(("visit_", "leave_")) for name in getattr(self, "__dict__", ())):
        return _libcst_get_visitors(self)
    cls = type(self)
    names = _provider_visitor_names.get(cls)
    if names is None:
        methods = _libcst_get_visitors(self)
        _provider_visitor_names[cls] = tuple(methods)
        return methods
    return {name: getattr(self, name) for name in names}


class AssignmentLikeMeta(type):
    """``isinstance(node, (cst.Assign, cst.FunctionDef, ...))`` as the scope analysis asks it when it
    leaves each node: one look-up by the node's class instead of one ``ABCMeta.__instancecheck__``
    call per listed class (18 Python calls for most nodes)."""

    classes: tuple[type, ...] = ()
    answers: dict[type, bool] = {}

    def __instancecheck__(cls, instance) -> bool:
        kind = instance.__class__
        try:
            return cls.answers[kind]
        except KeyError:
            answer = cls.answers[kind] = issubclass(kind, cls.classes)
            return answer


class AssignmentLike(metaclass=AssignmentLikeMeta):
    pass
