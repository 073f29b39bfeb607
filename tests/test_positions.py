"""codemod/positions.py must give every node the range libcst's PositionProvider gives it."""

from __future__ import annotations

import ast

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from pmap_migrate.positions import positions, statement_positions
from tests.support.samples import parsed_samples, samples


def test_every_node_has_libcst_position():
    modules = nodes = 0
    for name, module in parsed_samples():
        reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        ours = positions(module)
        assert len(ours) == len(reference), name
        for node, where in reference.items():
            assert node in ours and ours[node] == where, (name, type(node).__name__, where, ours.get(node))
        assert set(ours) == set(reference), name
        modules += 1
        nodes += len(reference)
    assert modules > 300 and nodes > 100_000, (modules, nodes)


def test_a_module_without_a_trailing_newline_and_an_empty_one():
    for code in ("x = 1", "", "\n\n", "x = (\n  1)\r\ny = 2\r"):
        module = cst.parse_module(code)
        reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        assert dict(positions(module)) == dict(reference), repr(code)


def test_positions_of_some_nodes_stop_after_the_last_of_them():
    checked = 0
    for name, module in list(parsed_samples())[::5]:
        reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        nodes = list(reference)
        needed = nodes[::7][:5]
        ours = positions(module, needed)
        for node in needed:
            assert ours[node] == reference[node], (name, type(node).__name__)
        checked += len(needed)
        if len(nodes) > 50 and needed and all(reference[n].end.line < reference[module].end.line for n in needed):
            assert len(ours) < len(reference), name  # it did stop early
    assert checked > 200
    module = cst.parse_module("x = 1\n")
    assert len(positions(module, [cst.Name("elsewhere")])) == len(positions(module))  # never found: to the end
    assert len(positions(module, [])) == 0


def _starts(text: str) -> tuple[int, ...]:
    tree = ast.parse(text)
    return tuple((s.decorator_list[0].lineno if getattr(s, "decorator_list", None) else s.lineno) for s in tree.body)


def _parents(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
    parents, todo = {}, [module]
    while todo:
        node = todo.pop()
        for child in node.children:
            parents[child] = node
            todo.append(child)
    return parents


def _subtree(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _subtree(child)


def test_positions_statement_by_statement_are_those_of_the_whole_module():
    checked = 0
    for name, text in samples():
        try:
            module = cst.parse_module(text)
            starts = _starts(text)
        except (cst.ParserSyntaxError, SyntaxError, ValueError):
            continue
        reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        parents = _parents(module)
        in_statements = {id(n) for statement in module.body for n in _subtree(statement)}
        nodes = [n for n in reference if id(n) in in_statements]
        for needed in (nodes[::11][:6], nodes[-3:], nodes[::97]):
            ours = statement_positions(module, needed, starts, module.code, parents)
            assert ours is not None, name
            for node in needed:
                assert ours[node] == reference[node], (name, type(node).__name__, reference[node], ours[node])
            checked += len(needed)
    assert checked > 2000


def test_statement_positions_decline_what_does_not_add_up():
    text = "import jax\n\n# a comment\n@dec\n@other(\n    1)\ndef f(x):\n    return jax.pmap(x)\ny = 1; z = f(2)\n"
    module = cst.parse_module(text)
    parents = _parents(module)
    call = module.body[1].body.body[0].body[0].value
    assert isinstance(call, cst.Call)
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    starts = _starts(text)
    assert starts == (1, 4, 9, 9)  # the decorated definition starts at its first decorator
    assert statement_positions(module, [call], starts, text, parents)[call] == reference[call]
    assert statement_positions(module, [call], starts[:-1], text, parents) is None  # statements do not match up
    assert statement_positions(module, [call], (1, 5, 9, 9), text, parents) is None  # code not at that line
    assert statement_positions(module, [call], starts, text.replace("pmap", "xmap"), parents) is None
    assert statement_positions(module, [cst.Name("elsewhere")], starts, text, parents) is None  # in no statement
    trailing = cst.parse_module(text + "# the end\n")
    assert statement_positions(trailing, [trailing.footer[0].comment], starts, trailing.code, _parents(trailing)) is None
