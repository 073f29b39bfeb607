"""codemod/fastwalk.py walks libcst's read-only visitors without copying the tree: every visitor must
see the callbacks libcst's own walk gives it, in the same order (all of them for a visitor that
overrides the generic callbacks; every method call for one that uses libcst's dispatch), and the
engine's findings and fixes must not change.
"""

from __future__ import annotations

import typing

import libcst as cst
import pytest

from pmap_migrate import fastwalk, libcst_patches
from pmap_migrate.engine import lint_bytes
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from tests.support.samples import FILES
from tests.support.samples import parsed_samples as _parsed

RULES = all_rules()


class _NodeCalls(cst.CSTVisitor):
    """Overrides the node callbacks, recording them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def on_visit(self, node):
        self.calls.append(("visit", node))
        return not isinstance(node, cst.Lambda)  # pruning below a node is respected

    def on_leave(self, node):
        self.calls.append(("leave", node))


class _Recorder(_NodeCalls):
    """Overrides every generic callback: it must get all of them."""

    def on_visit_attribute(self, node, attribute):
        self.calls.append(("visit_attribute", node, attribute))

    def on_leave_attribute(self, node, attribute):
        self.calls.append(("leave_attribute", node, attribute))


class _PastWhitespace(_NodeCalls):
    """Overrides the node callbacks (not the attribute ones) and opts out of whitespace leaves."""

    WALK_PAST_WHITESPACE = True


class _Dispatched(cst.CSTVisitor):
    """Uses libcst's dispatch: trivia without methods here may be skipped, nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def visit_Name(self, node):
        self.calls.append(("Name", node))

    def visit_Comma(self, node):
        self.calls.append(("Comma", node))

    def leave_Call(self, node):
        self.calls.append(("/Call", node))

    def visit_Call_func(self, node):
        self.calls.append(("Call.func", node))

    def leave_Arg_keyword(self, node):
        self.calls.append(("/Arg.keyword", node))

    def visit_FunctionDef(self, node):
        self.calls.append(("FunctionDef", node))
        return False

    def visit_Comment(self, node):
        self.calls.append(("Comment", node))


class _Batched(cst.BatchableCSTVisitor):
    def __init__(self, calls: list) -> None:
        super().__init__()
        self.calls = calls

    def visit_SimpleWhitespace(self, node):
        self.calls.append(("ws", node))

    def visit_Attribute(self, node):
        self.calls.append(("Attribute", node))

    def leave_ImportFrom_names(self, node):
        self.calls.append(("/ImportFrom.names", node))


def _both(module: cst.Module, make):
    with libcst_patches.libcst_walk():
        reference = make()
        module.visit(reference)
    fast = make()
    assert module.visit(fast) is module
    return reference.calls, fast.calls


def test_walk_is_installed_by_the_runner_not_on_import():
    import subprocess
    import sys

    program = ("import libcst as cst, pmap_migrate.engine, pmap_migrate.fixer, pmap_migrate.runner\n"
               "from pmap_migrate import fastwalk, libcst_patches\n"
               "before = cst.CSTNode.visit is fastwalk.visit\n"
               "pmap_migrate.runner.lint_file(b'import jax\\nf = jax.pmap(g)\\n', 'm.py', ())\n"
               "print(before, cst.CSTNode.visit is fastwalk.visit, sorted(libcst_patches.installed()))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.split(" ", 2)[:2] == ["False", "True"], done.stdout + done.stderr
    assert cst.CSTNode.visit is fastwalk.visit  # and in this process (tests/conftest.py)


def test_a_visitor_overriding_the_callbacks_gets_every_one_in_order():
    checked = 0
    for name, module in _parsed():
        reference, fast = _both(module, _Recorder)
        assert [c[0] for c in fast] == [c[0] for c in reference], name
        assert all(a[1:] == b[1:] and a[1] is b[1] for a, b in zip(fast, reference)), name
        checked += 1
    assert checked > 100


def test_a_visitor_walking_past_whitespace_gets_every_other_callback_in_order():
    skipped = 0
    for name, module in _parsed():
        reference, fast = _both(module, _PastWhitespace)
        expected = [c for c in reference if type(c[1]) not in fastwalk.WHITESPACE_LEAVES]
        assert [(c[0], id(c[1]), c[2:]) for c in fast] == [(c[0], id(c[1]), c[2:]) for c in expected], name
        skipped += len(reference) - len(expected)
    assert skipped > 10_000


def test_the_scope_analysis_sees_all_but_whitespace_leaves():
    from libcst.metadata import MetadataWrapper, ScopeProvider

    for name, module in list(_parsed())[:60]:
        with libcst_patches.libcst_walk():
            reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
        scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
        tree = _nodes(module)  # (the analysis also parses string annotations into nodes of its own)
        assert {n for n in reference if n in tree and type(n) not in fastwalk.WHITESPACE_LEAVES} \
            == {n for n in scopes if n in tree}, name
        for node, scope in scopes.items():
            if node not in tree:
                continue
            old = reference[node]
            assert type(scope) is type(old) and getattr(scope, "node", None) is getattr(old, "node", None), name
            assert _summary(scope) == _summary(old), name


def _nodes(module: cst.Module) -> set[cst.CSTNode]:
    found, stack = set(), [module]
    while stack:
        node = stack.pop()
        found.add(node)
        stack.extend(node.children)
    return found


def _summary(scope):
    return scope._assignment_count, sorted((a.name, type(a.node).__name__, len(a.references)) for a in scope.assignments)


def test_the_assignment_like_test_answers_as_libcst_s_list():
    from libcst.metadata import scope_provider

    listed = fastwalk.AssignmentLike.classes
    assert scope_provider._ASSIGNMENT_LIKE_NODES == (fastwalk.AssignmentLike,) and cst.Assign in listed
    for cls in fastwalk._concrete_nodes():
        node = object.__new__(cls)  # the test reads the class only
        assert isinstance(node, fastwalk.AssignmentLike) == isinstance(node, listed), cls
    with libcst_patches.libcst_walk():
        assert scope_provider._ASSIGNMENT_LIKE_NODES == listed


def test_providers_get_libcst_s_callbacks():
    from libcst.metadata import ExpressionContextProvider, ScopeProvider
    from libcst.metadata.base_provider import BatchableMetadataProvider

    for provider in (ScopeProvider, ExpressionContextProvider):
        for _ in range(2):  # the first answer is libcst's own; the second comes from the table
            fast = provider().get_visitors()
            with libcst_patches.libcst_walk():
                reference = provider().get_visitors()
            assert {n: m.__func__ for n, m in fast.items()} == {n: m.__func__ for n, m in reference.items()}
            assert fast and all(m.__self__ is not None for m in fast.values())
    assert BatchableMetadataProvider.get_visitors is fastwalk.provider_visitors


def test_a_dispatching_visitor_gets_every_method_call_in_order():
    total = 0
    for name, module in _parsed():
        reference, fast = _both(module, _Dispatched)
        assert len(fast) == len(reference), name
        assert all(a[0] == b[0] and a[1] is b[1] for a, b in zip(fast, reference)), name
        total += len(reference)
    assert total > 1000


_SEEN: list = []


class _OddCallbacks(cst.CSTVisitor):
    """Callbacks that are not plain methods (asked of the instance, as libcst does) next to ones that
    are, one of them pruning: the per-class tables must call exactly what libcst calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = _SEEN

    @staticmethod
    def visit_Name(node):
        _SEEN.append(("Name", node))

    @classmethod
    def leave_Attribute(cls, node):
        _SEEN.append(("/Attribute", node))

    def visit_Lambda(self, node):
        self.calls.append(("Lambda", node))
        return False  # not its body

    def leave_Call(self, node):
        self.calls.append(("/Call", node))


def test_per_class_callback_tables_call_what_libcst_calls():
    total = 0
    for name, module in _parsed():
        _SEEN.clear()
        with libcst_patches.libcst_walk():
            module.visit(_OddCallbacks())
        reference = list(_SEEN)
        _SEEN.clear()
        module.visit(_OddCallbacks())
        assert [(c[0], id(c[1])) for c in _SEEN] == [(c[0], id(c[1])) for c in reference], name
        total += len(reference)
    assert total > 1000
    assert fastwalk._class_callback(_OddCallbacks, "visit_Name") is fastwalk._DYNAMIC
    assert fastwalk._class_callback(_OddCallbacks, "visit_Call") is None  # libcst's no-op stub


import libcst.matchers as m  # noqa: E402


class _PlainMatcherVisitor(m.MatcherDecoratableVisitor):
    """A matcher visitor without matchers (as libcst's import gatherers are): called as a plain
    visitor, trivia skipped; every method call must be libcst's."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def visit_Name(self, node):
        self.calls.append(("Name", node))

    def visit_Comma(self, node):
        self.calls.append(("Comma", node))

    def leave_Call(self, node):
        self.calls.append(("/Call", node))

    def visit_Call_func(self, node):
        self.calls.append(("Call.func", node))

    def visit_Lambda(self, node):
        self.calls.append(("Lambda", node))
        return False


class _DecoratedMatcherVisitor(_PlainMatcherVisitor):
    """The same with decorated methods and a gating matcher: every callback, as libcst makes them."""

    @m.call_if_inside(m.FunctionDef())
    def visit_Integer(self, node):
        self.calls.append(("Integer in a function", node))

    @m.visit(m.Attribute(attr=m.Name("shape")))
    def shape(self, node):
        self.calls.append(("shape", node))

    @m.leave(m.Arg())
    def left_arg(self, node):
        self.calls.append(("/Arg", node))


def test_matcher_visitors_get_every_method_call_in_order():
    kinds = set()
    for make in (_PlainMatcherVisitor, _DecoratedMatcherVisitor):
        total = 0
        for name, module in _parsed():
            reference, fast = _both(module, make)
            assert [(c[0], id(c[1])) for c in fast] == [(c[0], id(c[1])) for c in reference], (make, name)
            total += len(reference)
            kinds.update(c[0] for c in fast)
        assert total > 1000, make
    assert kinds >= {"Integer in a function", "shape", "/Arg", "Name", "Comma", "/Call", "Call.func", "Lambda"}
    plain, decorated = _PlainMatcherVisitor(), _DecoratedMatcherVisitor()
    assert fastwalk._matcher_callbacks(type(plain)) and fastwalk._plain_matcher_visitor(plain)
    assert not fastwalk._plain_matcher_visitor(decorated)


def test_libcsts_import_gatherers_find_what_they_find_with_libcsts_walk():
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import GatherExportsVisitor, GatherImportsVisitor

    for name, module in _parsed():
        found = []
        for walk in (libcst_patches.libcst_walk, _no_change):
            with walk():
                imports, exports = GatherImportsVisitor(CodemodContext()), GatherExportsVisitor(CodemodContext())
                module.visit(imports)
                module.visit(exports)
            found.append((imports.module_imports, imports.object_mapping, imports.module_aliases,
                          imports.alias_mapping, [cst.Module([]).code_for_node(n) for n in imports.all_imports],
                          exports.explicit_exported_objects))
        assert found[0] == found[1], name


def _no_change():
    import contextlib

    return contextlib.nullcontext()


def test_a_batch_gets_every_method_call_in_order():
    total = 0
    for name, module in _parsed():
        reference, fast = [], []
        with libcst_patches.libcst_walk():
            cst.visit_batched(module, [_Batched(reference)])
        cst.visit_batched(module, [_Batched(fast)])
        assert [(c[0], id(c[1])) for c in fast] == [(c[0], id(c[1])) for c in reference], name
        total += len(reference)
    assert total > 1000


class _ModuleOnly(cst.BatchableCSTVisitor):
    """Like libcst's metadata providers: callbacks for the module node only."""

    def __init__(self, calls: list) -> None:
        super().__init__()
        self.calls = calls

    def visit_Module(self, node):
        self.calls.append(("Module", node))

    def leave_Module(self, node):
        self.calls.append(("/Module", node))


def test_a_batch_for_the_module_only_is_not_walked_below_it(monkeypatch):
    from libcst._batched_visitor import _BatchedCSTVisitor

    visited = []
    libcst_on_visit = _BatchedCSTVisitor.on_visit

    def counting(self, node):
        visited.append(node)
        return libcst_on_visit(self, node)

    monkeypatch.setattr(_BatchedCSTVisitor, "on_visit", counting)
    for name, module in list(_parsed())[:40]:
        reference, fast = [], []
        with libcst_patches.libcst_walk():
            cst.visit_batched(module, [_ModuleOnly(reference)])
        assert len(visited) > 10, name  # libcst visits every node
        visited.clear()
        cst.visit_batched(module, [_ModuleOnly(fast)])
        assert visited == [module], name  # here, the module alone
        visited.clear()
        assert [(c[0], id(c[1])) for c in fast] == [(c[0], id(c[1])) for c in reference] \
            == [("Module", id(module)), ("/Module", id(module))], name


def test_every_node_class_is_read_but_the_few_walked_by_libcst():
    classes = fastwalk._concrete_nodes()
    fallback = {c.__name__ for c in classes if fastwalk.plan_of(c) is None}
    assert fallback <= {"TypeParam"}, fallback
    assert fastwalk.plan_of(cst.ImportFrom)[6] == ("names", fastwalk.ONE_OR_MANY, cst.ImportStar)
    assert ("format_spec", fastwalk.MANY_UNLESS_NONE, None) in fastwalk.plan_of(cst.FormattedStringExpression)


def test_a_methods_source_is_what_inspect_reads():
    import inspect
    import textwrap

    classes = fastwalk._concrete_nodes()
    assert len(classes) > 200
    for cls in classes:
        method = cls._visit_and_replace_children
        assert fastwalk._method_source(method) == textwrap.dedent(inspect.getsource(method)), cls.__name__


def test_trivia_hold_only_trivia():
    trivia = fastwalk.trivia()
    assert {cst.SimpleWhitespace, cst.Comma, cst.EmptyLine, cst.Name, cst.Integer} <= set(trivia)
    assert not {cst.Call, cst.Attribute, cst.FunctionDef, cst.Arg, cst.Subscript} & set(trivia)
    for cls, holds in trivia.items():
        assert cls in holds and holds <= set(trivia)
        for name, _, _ in fastwalk.plan_of(cls):
            hint = typing.get_type_hints(cls)[name]
            for leaf in fastwalk._flat(hint):
                if isinstance(leaf, type) and issubclass(leaf, cst.CSTNode):
                    assert any(issubclass(h, leaf) for h in holds), (cls, name)


@pytest.mark.parametrize("path", [p for p in FILES if "fixtures" in p.parts], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_findings_and_fixes_are_those_of_libcst_walk(path):
    data = path.read_bytes()
    with libcst_patches.libcst_walk():
        lint_reference = lint_bytes(data, path.name, RULES, whole=True)
        fix_reference = fix_bytes(data, path.name, RULES, unsafe=True)
    lint = lint_bytes(data, path.name, RULES, whole=True)
    fixed = fix_bytes(data, path.name, RULES, unsafe=True)
    assert lint.diagnostics == lint_reference.diagnostics and lint.error == lint_reference.error
    assert fixed == fix_reference
