"""codemod/positions.py must give every node the range libcst's PositionProvider gives it."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemod.positions import positions
from tests.support.samples import parsed_samples


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
