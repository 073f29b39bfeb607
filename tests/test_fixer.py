"""The fix engine, exercised with small rules defined here (not registered with the tool)."""

from __future__ import annotations

import os
import stat

import libcst as cst

from pmap_migrate.files import write_atomic
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules.base import Rule
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec


class DoubleToTimesTwo(Rule):
    """Rewrites `double(x)` as `times_two(x)`, importing `times_two` from `mathlib`."""

    CODE = "PM990"
    NAME = "test-double"
    MESSAGE = "double"
    TRIGGERS = ("double",)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "double":
            self.report(node, fix=FixSpec(Applicability.SAFE, "use times_two",
                replacement=node.with_changes(func=cst.Name("times_two")),
                add_imports=(ImportSpec("mathlib", "times_two"),),
                remove_imports=(ImportSpec("oldlib", "double"),),
            ))


class WrapInList(Rule):
    """Unsafe: `wrap(x)` -> `[x]`."""

    CODE = "PM991"
    NAME = "test-wrap"
    MESSAGE = "wrap"
    TRIGGERS = ("wrap",)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "wrap" and node.args:
            self.report(node, fix=FixSpec(Applicability.UNSAFE, "assumes wrap builds a list",
                                          replacement=cst.List([cst.Element(node.args[0].value)])))


class BreaksSyntax(Rule):
    """Produces code that does not parse (a keyword where a name belongs)."""

    CODE = "PM992"
    NAME = "test-broken"
    MESSAGE = "broken"
    TRIGGERS = ("broken",)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "broken":
            self.report(node, fix=FixSpec(Applicability.SAFE, "breaks", replacement=cst.Name("class")))


class RemoveStatement(Rule):
    """Removes `del_me()` statements and inserts two statements instead of `split_me()`."""

    CODE = "PM993"
    NAME = "test-statements"
    MESSAGE = "statements"
    TRIGGERS = ("del_me", "split_me")

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        code = cst.Module([]).code_for_node(node).strip()
        if code == "del_me()":
            self.report(node, fix=FixSpec(Applicability.SAFE, "remove", replacement=cst.RemovalSentinel.REMOVE))
        elif code == "split_me()":
            self.report(node, fix=FixSpec(Applicability.SAFE, "split", edits=(Edit(node, cst.FlattenSentinel([
                cst.parse_statement("first()\n"), cst.parse_statement("second()\n")])),)))


def run(source: str, *rules, unsafe=False):
    return fix_bytes(source.encode(), "m.py", rules or (DoubleToTimesTwo,), unsafe=unsafe)


def test_nested_fixes_all_apply_and_imports_are_managed_once():
    source = "from oldlib import double\n\nx = double(double(1))  # keep me\ny = double(2)\n"
    outcome = run(source)
    assert outcome.error is None
    assert outcome.fixed.decode() == (
        "from mathlib import times_two\n\nx = times_two(times_two(1))  # keep me\ny = times_two(2)\n"
    )
    assert len(outcome.applied) == 3 and outcome.remaining == []
    assert outcome.rounds == 2  # the outer call waits for the inner one


def test_fixed_code_is_a_fixpoint():
    once = run("from oldlib import double\nx = double(double(1))\n").fixed
    again = fix_bytes(once, "m.py", (DoubleToTimesTwo,))
    assert again.fixed is None and again.applied == []


def test_unused_import_is_kept_when_still_used():
    outcome = run("from oldlib import double\nx = double(1)\nf = double\n")
    assert b"from oldlib import double" in outcome.fixed


def test_unsafe_fixes_need_the_flag():
    source = "v = wrap(3)\n"
    safe_only = run(source, WrapInList)
    assert safe_only.fixed is None and [d.code for d in safe_only.remaining] == ["PM991"]
    unsafe = run(source, WrapInList, unsafe=True)
    assert unsafe.fixed == b"v = [3]\n" and unsafe.remaining == []


def test_output_that_does_not_parse_is_refused():
    outcome = run("x = broken\n", BreaksSyntax)
    assert outcome.fixed is None
    assert outcome.error is not None and "does not parse" in outcome.error.message


def test_statement_removal_and_splitting():
    outcome = run("from steps import first, second\na()\ndel_me()\nsplit_me()\nb()\n", RemoveStatement)
    assert outcome.fixed == b"from steps import first, second\na()\nfirst()\nsecond()\nb()\n"


def test_noqa_blocks_the_fix():
    outcome = run("from oldlib import double\nx = double(1)  # noqa: PM990\n")
    assert outcome.fixed is None


def test_encoding_bom_and_crlf_survive():
    source = "\ufeff# caf\u00e9\r\nfrom oldlib import double\r\nx = double(1)\r\n"
    outcome = fix_bytes(source.encode("utf-8"), "m.py", (DoubleToTimesTwo,))
    assert outcome.fixed.startswith(b"\xef\xbb\xbf# caf\xc3\xa9\r\n")
    assert b"x = times_two(1)\r\n" in outcome.fixed and b"\n" not in outcome.fixed.replace(b"\r\n", b"")
    latin = "# -*- coding: latin-1 -*-\ns = '\u00e9'\nx = double(1)\n".encode("latin-1")
    fixed = fix_bytes(latin, "m.py", (DoubleToTimesTwo,)).fixed
    assert b"s = '\xe9'" in fixed and b"times_two(1)" in fixed


def test_write_atomic_keeps_mode_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "script.py"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o755)
    write_atomic(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["script.py"]


def test_removing_a_statement_keeps_the_comments_above_it():
    # found by tests/test_properties.py: the unused pmap alias went with the comment before it
    from pmap_migrate.rules import all_rules

    source = (b"import jax\n\ndef outer():\n    # note: jax.pmap is legacy\n    mapper = jax.pmap\n"
              b"    step = mapper(lambda x: x + 3)\n    return step\n")
    fixed = fix_bytes(source, "m.py", all_rules(), unsafe=True)
    assert fixed.error is None and fixed.changed
    assert b"    # note: jax.pmap is legacy\n" in fixed.fixed and b"mapper" not in fixed.fixed
    last = b"import jax\n\ndef outer():\n    x = 1\n    # the alias\n    mapper = jax.pmap\n"
    fixed = fix_bytes(last, "m.py", all_rules(), unsafe=True)
    assert fixed.fixed.endswith(b"    x = 1\n    # the alias\n    pass\n"), fixed.fixed


# --- the import steps: the same module as libcst's own visitors make, at a fraction of the walk ---

_IMPORT_MODULES = [
    "",
    "x = 1\n",
    '"""doc"""\n',
    '"""doc"""\nimport os\n',
    '"""doc"""\n\nimport os\nfrom mathlib import sqrt\n\n\ndef f():\n    return os.sep\n',
    "__strict__ = True\nimport os\nclass A:\n    def f(self):\n        return 1\n",
    "import os\n# a comment\nclass A:\n    x = 1\n\n\nclass B:\n    pass\n",
    "# header comment\n\nclass A:\n    import json\n\nimport os\n",
    "if TYPE_CHECKING:\n    import typing\nimport os\n",
    "from __future__ import annotations\nimport os; import sys\n\n@decorator\ndef f(x):\n    import mathlib\n    return x\n",
    "from mathlib import (\n    sqrt,  # keep\n    floor,\n)\nfrom jax.sharding import Mesh\n\ntry:\n    import numpy\nexcept ImportError:\n    numpy = None\n",
    '"""doc"""\nfrom mathlib import *\n\nasync def g():\n    pass\n',
    "\f\nimport os\ndef f():\n    pass\n",
    "def f():\n    pass\n",
    "@dataclass\nclass A:\n    x: int\n",
    "import os\nimport sys\n",
]

_ADDED = [
    [("runtime_shim", None, None)],
    [("mathlib", "times_two", None), ("jax.sharding", "NamedSharding", None), ("jax.sharding", "Mesh", None)],
    [("__future__", "annotations", None), ("numpy", None, "np")],
    [("mathlib", "sqrt", "square_root"), ("os", None, None)],
]


def _with_imports_added(module: cst.Module, added, own: bool) -> cst.Module:
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    from pmap_migrate.fixer import _add_imports
    context = CodemodContext()
    for spec in added:
        AddImportsVisitor.add_needed_import(context, *spec)
    return _add_imports(module, context) if own else AddImportsVisitor(context).transform_module(module)


def test_adding_imports_gives_libcsts_own_result():
    for source in _IMPORT_MODULES:
        for added in _ADDED:
            module = cst.parse_module(source)
            expected = _with_imports_added(module, added, own=False).code
            assert _with_imports_added(module, added, own=True).code == expected, (source, added)


def test_adding_imports_walks_only_the_head_of_the_module():
    from libcst.codemod.visitors import AddImportsVisitor

    body = "".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]\n\n\n" for i in range(200))
    module = cst.parse_module('"""doc"""\nimport os\n\n\n' + body)
    visited: list[cst.CSTNode] = []
    original = AddImportsVisitor.on_visit

    def counting(self, node):
        visited.append(node)
        return original(self, node)

    AddImportsVisitor.on_visit = counting
    try:
        added = _with_imports_added(module, [("runtime_shim", None, None)], own=True)
    finally:
        AddImportsVisitor.on_visit = original
    assert added.code.startswith('"""doc"""\nimport os\nimport runtime_shim\n\n\ndef f0(x):')
    assert 0 < len(visited) < 40  # the docstring, the two import lines and a stand-in for f0


_REMOVED = [
    [("os", None, None)],
    [("mathlib", "sqrt", None), ("mathlib", "floor", None)],
    [("numpy", None, None), ("typing", None, None), ("json", None, None), ("mathlib", None, None)],
    [("mathlib", "*", None), ("sys", None, None), ("jax.sharding", "Mesh", None)],
]


def _with_imports_removed(module: cst.Module, removed, own: bool) -> cst.Module:
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    from pmap_migrate.fixer import _RemoveImports
    context = CodemodContext()
    for spec in removed:
        RemoveImportsVisitor.remove_unused_import(context, *spec)
    return (_RemoveImports if own else RemoveImportsVisitor)(context).transform_module(module)


def test_removing_imports_gives_libcsts_own_result():
    # (sources with no comment or blank line above a removed import: see the next test)
    sources = [*_IMPORT_MODULES,
               "import os\n\ndef f():\n    import os\n    return 1\n",
               "def f():\n    if x:\n        import json\n        from mathlib import sqrt, floor\n    return sqrt(2)\n",
               "import os, sys\nprint(sys.argv)\n__all__ = ['os']\n"]
    changed = 0
    for source in sources:
        for removed in _REMOVED:
            module = cst.parse_module(source)
            expected = _with_imports_removed(module, removed, own=False).code
            assert _with_imports_removed(module, removed, own=True).code == expected, (source, removed)
            changed += expected != source
    assert changed >= 10  # the cases do remove imports


def test_removing_imports_keeps_the_comments_and_blank_lines_above_them():
    # libcst drops them with the import line; here they stay, where the next statement starts.
    cases = {
        '"""Doc."""\n\n# the tools\nimport functools\nimport os\n\n# helpers\nimport jax.numpy as jnp\n\n'
        "def f():\n    import json\n    return os.getcwd()\n":
            '"""Doc."""\n\n# the tools\nimport os\n\n# helpers\n\ndef f():\n    return os.getcwd()\n',
        "import os\n\nimport functools\n\nx = os.sep\n": "import os\n\nx = os.sep\n",
        "import os\nx = os.sep\n# last\nimport functools\n": "import os\nx = os.sep\n# last\n",
        "import os\nif x:\n    y = 1\n    # why\n    import json\nz = 2\n": "import os\nif x:\n    y = 1\n    # why\nz = 2\n",
        "# a\nimport functools\n# b\nimport json\nimport os\n": "# a\n# b\nimport os\n",
    }
    removed = [("functools",), ("jax.numpy", None, "jnp"), ("json",)]
    for source, expected in cases.items():
        module = cst.parse_module(source)
        assert _with_imports_removed(module, removed, own=True).code == expected, source
        if "#" in source:  # the comments libcst loses
            assert _with_imports_removed(module, removed, own=False).code != expected, source


def test_a_fix_rebuilds_only_the_path_to_its_target():
    from pmap_migrate.engine import analyse
    from pmap_migrate.fixer import applicable, apply
    from pmap_migrate.rules.fixes.edits import EditApplier

    source = "".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]\n\n\n" for i in range(100))
    module = cst.parse_module(source + "y = double(3)\n")
    analysis = analyse(module, "m.py", [DoubleToTimesTwo])
    chosen = [f for f in analysis.findings if applicable(f, False)]
    assert len(chosen) == 1
    left: list[cst.CSTNode] = []
    original = EditApplier.on_leave

    def counting(self, original_node, updated_node):
        left.append(original_node)
        return original(self, original_node, updated_node)

    EditApplier.on_leave = counting
    try:
        pruned = apply(analysis.module, chosen, analysis.parents).code
        assert len(left) < 120  # the module, 101 statements at its level, and the way down to the call
        left.clear()
        whole = apply(analysis.module, chosen).code
        assert len(left) > 1000
    finally:
        EditApplier.on_leave = original
    assert pruned == whole
    assert pruned.endswith("y = times_two(3)\n") and pruned.startswith("from mathlib import times_two\n")


# --- the last round: the findings left are read from the new code's relevant slice ---

_PADDING = "".join(f"def helper{i}(x):\n    return [x + {i} for _ in range(3)]\n\n\n" for i in range(30))


def _large(body: str) -> str:
    return "from oldlib import double\n\n" + _PADDING + body


def test_a_large_module_s_last_round_is_the_analysis_of_its_slice(monkeypatch):
    import pmap_migrate.fixer as fixer

    analysed: list[int] = []
    whole = fixer.analyse

    def counting(module, *args, **kwargs):
        analysed.append(len(module.code.splitlines()))
        return whole(module, *args, **kwargs)

    source = _large("x = double(double(1))  # keep me\ny = double(2)  # noqa: PM990\nz = wrap(3)\n")
    rules = (DoubleToTimesTwo, WrapInList)
    monkeypatch.setattr(fixer, "analyse", counting)
    outcome = fix_bytes(source.encode(), "m.py", rules)
    # Round 1 fixes the inner call, round 2 the outer one; the code it makes is analysed through
    # its slice: the whole module is analysed twice, not three times.
    assert outcome.rounds == 2 and len(analysed) == 2 and min(analysed) > 120
    assert outcome.fixed.decode().endswith("x = times_two(times_two(1))  # keep me\n"
                                           "y = double(2)  # noqa: PM990\nz = wrap(3)\n")
    assert [(d.code, d.line) for d in outcome.remaining] == [("PM991", 126)]  # unsafe: not applied

    # The same outcome, field for field, as with whole-module analyses in every round.
    monkeypatch.setattr(fixer, "_last_round", lambda *args: None)
    analysed.clear()
    reference = fix_bytes(source.encode(), "m.py", rules)
    assert len(analysed) == 3
    assert (reference.fixed, reference.applied, reference.remaining, reference.rounds, reference.error) == (
        outcome.fixed, outcome.applied, outcome.remaining, outcome.rounds, outcome.error)


def test_the_last_round_s_slice_with_a_fix_left_sends_it_to_the_next_round():
    from pmap_migrate.fixer import _last_round

    fixed = _large("x = times_two(double(1))\n").encode()
    assert _last_round(fixed, "m.py", (DoubleToTimesTwo,), None, False) is None
    left = _last_round(fixed, "m.py", (DoubleToTimesTwo, WrapInList), None, False)
    assert left is None
    unsafe_only = _large("x = wrap(1)\n").encode()
    found = _last_round(unsafe_only, "m.py", (DoubleToTimesTwo, WrapInList), None, False)
    assert [(d.code, d.line) for d in found] == [("PM991", 123)]
    assert _last_round(unsafe_only, "m.py", (DoubleToTimesTwo, WrapInList), None, True) is None
    assert _last_round(b"x = double(1)\n", "m.py", (DoubleToTimesTwo,), None, False) is None  # small: whole


def test_matcher_visitors_find_their_decorated_methods_as_libcst_does():
    import libcst.matchers as m
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
    from libcst.matchers import _visitors

    from pmap_migrate import libcst_patches

    assert "matcher gatherers" in libcst_patches.install()

    class Decorated(m.MatcherDecoratableTransformer):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        @m.call_if_inside(m.FunctionDef())
        @m.visit(m.Name())
        def name_in_function(self, node: cst.Name) -> None:
            self.seen.append(node.value)

        @m.leave(m.Integer())
        def bump(self, original: cst.Integer, updated: cst.Integer) -> cst.Integer:
            return updated.with_changes(value=str(int(updated.value) + 1))

    gathers = ("_gather_constructed_visit_funcs", "_gather_constructed_leave_funcs", "_gather_matchers")
    assert all(hasattr(getattr(_visitors, name), "__wrapped__") for name in gathers)
    for _ in range(2):  # a second instance of each class is answered from what the first had
        for visitor in (Decorated(), AddImportsVisitor(CodemodContext()), RemoveImportsVisitor(CodemodContext())):
            for name in gathers:
                ours, libcsts = getattr(_visitors, name)(visitor), getattr(_visitors, name).__wrapped__(visitor)
                assert ours.keys() == libcsts.keys(), (type(visitor).__name__, name)
                assert [[f.__func__ for f in fs] for fs in ours.values() if isinstance(fs, tuple)] == \
                    [[f.__func__ for f in fs] for fs in libcsts.values() if isinstance(fs, tuple)]
    for _ in range(2):
        decorated = Decorated()
        out = cst.parse_module("x = 1\ndef f(y):\n    return y + 2\n").visit(decorated)
        assert out.code == "x = 2\ndef f(y):\n    return y + 3\n" and decorated.seen == ["f", "y", "y"]


class MarkerEditsLater(Rule):
    """Reports `marker()` and, as its fix, replaces the later `target()` call."""

    CODE = "PM994"
    NAME = "test-later-edit"
    MESSAGE = "marker"
    TRIGGERS = ("marker",)

    def visit_Module(self, node: cst.Module) -> None:
        calls = [s.body[0].value for s in node.body if isinstance(s, cst.SimpleStatementLine)
                 and isinstance(s.body[0], cst.Expr) and isinstance(s.body[0].value, cst.Call)]
        marker = next((c for c in calls if c.func.value == "marker"), None)
        target = next((c for c in calls if c.func.value == "target"), None)
        if marker is not None and target is not None:
            self.report(marker, fix=FixSpec(Applicability.SAFE, "edit the target",
                                            edits=(Edit(target, cst.parse_expression("hit()")),)))


def test_a_fix_analysis_has_the_positions_of_the_reported_nodes_and_of_their_edit_targets():
    from pmap_migrate.engine import analyse

    module = cst.parse_module("marker()\nx = 1\ntarget()\ny = 2\nz = 3\n")
    analysis = analyse(module, "m.py", [MarkerEditsLater], all_positions=False)
    target = module.body[2].body[0].value
    assert analysis.positions[target].start.line == 3
    last = module.body[4]
    assert analysis.positions.get(last) is None  # code generation stopped after the target
    assert run("hit = print\nmarker()\nx = 1\ntarget()\ny = 2\nz = 3\n", MarkerEditsLater).fixed == \
        b"hit = print\nmarker()\nx = 1\nhit()\ny = 2\nz = 3\n"


class HoistsOutOfLambda(Rule):
    """`mapped(f)` inside a lambda becomes a module-level wrapper calling `f`, which only the lambda
    binds (the rewrite that left dm-haiku's tests with NameErrors); or, shadowing a builtin, a
    module-level `len`; or a second import of `np` under another spelling."""

    CODE = "PM994"
    NAME = "test-hoists"
    MESSAGE = "hoists"
    TRIGGERS = ("mapped", "shadow", "again")

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, cst.Name):
            return
        if node.func.value == "mapped":
            statement = self.model.ancestors(node)
            top = [a for a in statement if isinstance(a, cst.SimpleStatementLine)][-1]
            wrapper = cst.parse_statement(f"def wrapper(x):\n    return {cst.Module([]).code_for_node(node.args[0].value)}(x)\n")
            self.report(node, fix=FixSpec(Applicability.SAFE, "hoist", edits=(
                Edit(top, before=(wrapper,)), Edit(node, cst.Name("wrapper")))))
        elif node.func.value == "shadow":
            top = [a for a in self.model.ancestors(node) if isinstance(a, cst.SimpleStatementLine)][-1]
            self.report(node, fix=FixSpec(Applicability.SAFE, "shadow", edits=(
                Edit(top, before=(cst.parse_statement("def len(x):\n    return 0\n"),)), Edit(node, cst.Name("len")))))
        elif node.func.value == "again":
            self.report(node, fix=FixSpec(Applicability.SAFE, "again", replacement=cst.Name("np"),
                                          add_imports=(ImportSpec("numpy", None, "np"),)))


def test_a_fix_that_would_leave_an_undefined_name_is_refused_and_the_others_written():
    source = "g = lambda f: mapped(f)\ny = double(3)\n"
    outcome = run(source, HoistsOutOfLambda, DoubleToTimesTwo)
    assert outcome.fixed is not None
    fixed = outcome.fixed.decode()
    assert "wrapper" not in fixed and "lambda f: mapped(f)" in fixed  # refused, left as it was
    assert "times_two(3)" in fixed  # the other fix of the round is written
    [(diagnostic, why)] = outcome.refused
    assert diagnostic.code == "PM994" and "`f` undefined" in why
    [left] = [d for d in outcome.remaining if d.code == "PM994"]
    assert left.fix is None and "not fixed: the rewrite would leave `f` undefined" in left.message


def test_a_fix_that_shadows_a_builtin_or_imports_over_a_binding_is_refused():
    outcome = run("n = len([1])\nz = shadow(2)\n", HoistsOutOfLambda)
    assert outcome.fixed is None and "the builtin `len` shadowed" in outcome.refused[0][1]
    outcome = run("import numpy as numpy_\nnp = 3\nz = again(2)\n", HoistsOutOfLambda)
    assert outcome.fixed is None and "`np` imported over its existing binding" in outcome.refused[0][1]
    # where nothing is bound yet, the same fix is written
    assert b"import numpy as np" in run("z = again(2)\n", HoistsOutOfLambda).fixed
