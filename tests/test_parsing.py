"""pmap_migrate.libcst_patches.parse_module: libcst's parse without its per-node validation, same trees."""

from __future__ import annotations

import libcst as cst
import pytest

from pmap_migrate.libcst_patches import parse_module
from tests.support.samples import samples


def test_the_same_tree_as_libcst_on_every_sample():
    compared = 0
    for name, text in samples():
        try:
            reference = cst.parse_module(text)
        except cst.ParserSyntaxError:
            with pytest.raises(cst.ParserSyntaxError):
                parse_module(text)
            continue
        ours = parse_module(text)
        assert ours.deep_equals(reference), name
        assert ours.code == reference.code, name
        compared += 1
    assert compared > 300


@pytest.mark.parametrize("source", ["x = (\n", b"\xff\xfe = 1\n", "def f(:\n"])
def test_nodes_made_otherwise_are_validated_again_also_after_a_failed_parse(source):
    with pytest.raises(Exception):
        parse_module(source)
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1 not a name")
    parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Integer("not a number")


def test_validation_is_restored_after_parses_that_overlap():
    # Another thread's parse in progress: the hook is the unchecked one when this parse starts.
    from pmap_migrate import libcst_patches

    cst.CSTNode.__post_init__ = libcst_patches._unchecked
    try:
        parse_module("x = 1\n")
        with pytest.raises(cst.CSTValidationError):
            cst.Name("1 not a name")
    finally:
        cst.CSTNode.__post_init__ = libcst_patches._VALIDATING
