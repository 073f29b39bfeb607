"""Every change pmap-migrate makes to libcst's own code, in one place.

Nothing is changed on import. The runner calls ``install()`` before it analyses a file (in each
worker process too, and the interactive review before it starts); code that uses the engine
without it gets the same findings and fixes, only slower. ``installed()`` says which patches took
effect, ``libcst_walk()`` undoes the walking patches inside a block (tests and comparisons), and
``PMAP_MIGRATE_LIBCST_WALK=1`` in the environment keeps libcst's walk for a whole run.

Each patch replaces one of libcst's per-node or per-visitor costs with a cheaper way to the same
answer. libcst is pinned to the minor release the tests run on (pyproject.toml); each patch also
checks, when it is installed, that what it replaces still has the shape it relies on, and is left
out otherwise (the analysis then runs on libcst's own code):

1. ``CSTNode.visit`` walks read-only visitors without copying the tree (``fastwalk.visit``).
   Why: libcst rebuilds (and validates) every node a visitor walks through, even when the result
   is thrown away; that was about a third of the analysis. Checked: tests/test_fastwalk.py compares
   the callbacks, in order, with libcst's walk on every sample and every node class.
2. ``BatchableMetadataProvider.get_visitors`` answers from a per-class table
   (``fastwalk.provider_visitors``). Why: libcst asks ``inspect.getmembers`` of two scope providers
   on every file. Checked: tests/test_fastwalk.py (same callbacks as libcst's answer).
3. ``scope_provider._ASSIGNMENT_LIKE_NODES`` becomes one class whose ``isinstance`` is a look-up by
   node class (``fastwalk.AssignmentLike``). Why: the scope analysis tests every node it leaves
   against 18 ABCs. Checked: tests/test_fastwalk.py (same answer for every node class).
4. libcst's matcher visitors (its import adder and remover, which `fix` runs every round) remember
   that a class has no decorated methods (``_remembered_when_none``). Why: each new instance lists
   them with three ``dir()`` scans of ~700 names. Checked: tests/test_fixer.py (the same methods
   found as libcst finds, for classes with and without them).
5. ``parse_module`` parses with ``CSTNode.__post_init__`` (each node's validation) switched off for
   the parse only. Why: a node the parser builds from source that parsed cannot fail it; it is a
   tenth of a parse. Every node made otherwise (fixes' ``with_changes``, nodes built by hand) is
   validated, also after a parse that failed. Checked: tests/test_parsing.py (the same tree as
   libcst's parse on every sample; validation back in force after failed and overlapping parses).

Not a patch, but libcst's internals all the same: the semantic model hands libcst's scope
analysis the names the code binds, in the wrapper's table of resolved providers
(``rules.analysis.index.resolve_scopes``; tests/test_semantic_scopes.py).
"""

from __future__ import annotations

import contextlib
import os

import libcst as cst
from libcst._nodes.base import CSTNode
from libcst.matchers import _visitors as matcher_visitors
from libcst.metadata import scope_provider
from libcst.metadata.base_provider import BatchableMetadataProvider

from pmap_migrate import fastwalk

# libcst's own, taken once at import (restored as they are, whatever ran in between).
_LIBCST_VISIT = CSTNode.visit
_LIBCST_GET_VISITORS = BatchableMetadataProvider.get_visitors
_VALIDATING = CSTNode.__dict__["__post_init__"]
_GATHERERS = ("_gather_constructed_visit_funcs", "_gather_constructed_leave_funcs", "_gather_matchers")

_installed: set[str] = set()


def installed() -> frozenset[str]:
    """The patches in effect: "walk", "provider visitors", "assignment-like", "matcher gatherers"."""
    return frozenset(_installed)


def install() -> frozenset[str]:
    """Apply the patches (idempotent) and return those in effect."""
    if os.environ.get("PMAP_MIGRATE_LIBCST_WALK") != "1":
        if "walk" not in _installed and CSTNode.visit is _LIBCST_VISIT and callable(_LIBCST_VISIT):
            CSTNode.visit = fastwalk.visit
            _installed.add("walk")
        if "provider visitors" not in _installed and callable(_LIBCST_GET_VISITORS):
            BatchableMetadataProvider.get_visitors = fastwalk.provider_visitors
            _installed.add("provider visitors")
        listed = scope_provider._ASSIGNMENT_LIKE_NODES
        if "assignment-like" not in _installed and isinstance(listed, tuple) and all(
                isinstance(c, type) and issubclass(c, CSTNode) for c in listed):
            fastwalk.AssignmentLike.classes = listed
            scope_provider._ASSIGNMENT_LIKE_NODES = (fastwalk.AssignmentLike,)
            _installed.add("assignment-like")
    if "matcher gatherers" not in _installed and all(callable(getattr(matcher_visitors, n, None)) for n in _GATHERERS):
        for name in _GATHERERS:
            gather = getattr(matcher_visitors, name)
            if not hasattr(gather, "__wrapped__"):
                setattr(matcher_visitors, name, _remembered_when_none(gather))
        _installed.add("matcher gatherers")
    return installed()


@contextlib.contextmanager
def libcst_walk():
    """Within the block, every visitor is walked by libcst's own ``visit`` and the scope analysis
    does its own look-ups."""
    previous = CSTNode.visit, scope_provider._ASSIGNMENT_LIKE_NODES, BatchableMetadataProvider.get_visitors
    CSTNode.visit = _LIBCST_VISIT
    if fastwalk.AssignmentLike.classes:
        scope_provider._ASSIGNMENT_LIKE_NODES = fastwalk.AssignmentLike.classes
    BatchableMetadataProvider.get_visitors = _LIBCST_GET_VISITORS
    try:
        yield
    finally:
        CSTNode.visit, scope_provider._ASSIGNMENT_LIKE_NODES, BatchableMetadataProvider.get_visitors = previous


def _remembered_when_none(gather):
    """libcst's matcher visitors list their decorated methods from ``dir()`` of every new instance:
    three scans of some 700 names, about 10 ms per visitor and several visitors per round. A class
    whose first instance has no decorated method has none: that answer is remembered per class; any
    other is asked each time."""
    without: set[type] = set()

    def gather_once(obj):
        if type(obj) in without:
            return {}
        found = gather(obj)
        if not found:
            without.add(type(obj))
        return found

    gather_once.__wrapped__ = gather
    return gather_once


def parse_module(source: str | bytes) -> cst.Module:
    """``cst.parse_module(source)`` without validating each node as the parser builds it (patch 5)."""
    CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = _VALIDATING  # type: ignore[method-assign]


def _unchecked(self: CSTNode) -> None:
    pass
