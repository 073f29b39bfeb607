"""Node positions exactly as libcst's ``PositionProvider`` gives them, for less.

libcst's provider generates the module's code with a state that records a range for every node:
the syntactic one where a node's code generation marks it, otherwise the one that includes the
node's whitespace. Its bookkeeping (two ``CodePosition`` objects per node, a generator-based
context manager per syntactic mark, a regular-expression split of every token) was three quarters
of its time, and its time a sixth of checking a file. The same code generation drives the state
here, which keeps plain tuples, marks with a small class, splits only tokens holding a newline, and
builds a ``CodeRange`` only for the nodes asked about. The result is libcst's, node for node
(tests/test_positions.py compares every node of every fixture).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

import libcst as cst
from libcst.metadata import CodePosition, CodeRange
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")  # what libcst's provider counts as a line break

_Point = tuple[int, int]


class _State(CodegenState):
    """libcst's code generation state, tracking where each node's code starts and ends."""

    def __init__(self, module: cst.Module, needed: set[cst.CSTNode] | None) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = 1  # one-based
        self.column = 0  # zero-based
        self.starts: list[_Point] = []
        self.ranges: dict[cst.CSTNode, tuple[_Point, _Point]] = {}
        self.needed = needed  # None: every node

    def _advance(self, token: str) -> None:
        if "\n" in token or "\r" in token:
            segments = _NEWLINE.split(token)
            self.line += len(segments) - 1
            self.column = len(segments[-1])
        else:
            self.column += len(token)

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self._advance(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self._advance(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        if node not in self.ranges:  # a syntactic range, recorded within, stands
            self.ranges[node] = (start, (self.line, self.column))
        needed = self.needed
        if needed is not None and node in needed:  # its range is final: nothing later changes it
            needed.discard(node)
            if not needed:
                raise _Done

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> "_Syntactic":
        return _Syntactic(self, node, start_node, end_node)


class _Syntactic:
    """A node's syntactic range: where its code generation starts and ends, or where the given
    children's ranges start and end."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _State, node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, kind, error, trace) -> bool:
        if kind is not None:
            return False  # stopped early (or failed): a range ending here would be wrong
        state = self.state
        start = state.ranges[self.start_node][0] if self.start_node is not None else self.start
        end = state.ranges[self.end_node][1] if self.end_node is not None else (state.line, state.column)
        state.ranges[self.node] = (start, end)
        return False


class Positions(Mapping[cst.CSTNode, CodeRange]):
    """Every node's range, as ``CodeRange`` objects made on demand."""

    def __init__(self, ranges: dict[cst.CSTNode, tuple[_Point, _Point]]) -> None:
        self._ranges = ranges

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        start, end = self._ranges[node]
        return CodeRange(CodePosition(*start), CodePosition(*end))

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._ranges)

    def __len__(self) -> int:
        return len(self._ranges)

    def __contains__(self, node: object) -> bool:
        return node in self._ranges


class _Done(Exception):
    """Every node asked about has its range."""


def positions(module: cst.Module, needed: Iterable[cst.CSTNode] | None = None) -> Positions:
    """What ``MetadataWrapper(module).resolve(PositionProvider)`` gives, for every node of
    ``module``; with ``needed``, for those nodes (and whatever precedes the last of them: code
    generation stops there)."""
    state = _State(module, None if needed is None else set(needed))
    if state.needed is None or state.needed:
        try:
            module._codegen(state)
        except _Done:
            pass
    return Positions(state.ranges)
