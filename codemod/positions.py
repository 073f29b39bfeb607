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
from collections.abc import Iterable, Iterator, Mapping, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

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


def statement_positions(module: cst.Module, needed: Iterable[cst.CSTNode], starts: Sequence[int], text: str,
                        parents: Mapping[cst.CSTNode, cst.CSTNode]) -> Positions | None:
    """``positions(module, needed)`` for the ``needed`` nodes, generating only the code of the
    module-level statements that hold them, each from its own first line, instead of all the code
    before the last of them. ``text``: the module's code; ``starts``: the line where each of its
    module-level statements starts as `ast` sees them (``a; b`` is two statements there, one
    libcst line; a decorated definition starts at its first decorator); ``parents``: each node's
    parent. None when that cannot be trusted: a node outside every statement, statements that do
    not match up, or code generated that is not ``text``'s at that line (the caller then generates
    the module's code from its start)."""
    body = module.body
    offsets: list[int] = []  # the first `ast` statement of each libcst statement
    count = 0
    for statement in body:
        offsets.append(count)
        count += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    if count != len(starts):
        return None
    index = {id(statement): k for k, statement in enumerate(body)}
    groups: dict[int, set[cst.CSTNode]] = {}
    for node in needed:
        current = node
        while id(current) not in index:
            current = parents.get(current)
            if current is None:
                return None
        groups.setdefault(index[id(current)], set()).add(node)
    line_starts = [0, *(match.end() for match in _NEWLINE.finditer(text))]
    ranges: dict[cst.CSTNode, tuple[_Point, _Point]] = {}
    for k in sorted(groups):
        statement = body[k]
        first = starts[offsets[k]] - len(statement.leading_lines)
        decorators = getattr(statement, "decorators", ())
        if decorators:
            first -= len(decorators[0].leading_lines)
        if not 1 <= first <= len(line_starts):
            return None
        state = _State(module, groups[k])
        state.line = first
        try:
            statement._codegen(state)
        except _Done:
            pass
        code = "".join(state.tokens)
        start = line_starts[first - 1]
        if text[start:start + len(code)] != code and not _last_line_unended(module, k, state.tokens, text[start:]):
            return None
        ranges.update(state.ranges)
    return Positions(ranges)


def _last_line_unended(module: cst.Module, k: int, tokens: list[str], rest: str) -> bool:
    """The code of the module's last statement is ``rest`` but for the line break libcst takes off
    the end of a module without one (the module's code generation drops its last token)."""
    return (k == len(module.body) - 1 and not module.has_trailing_newline and not module.footer
            and bool(tokens) and _NEWLINE.fullmatch(tokens[-1]) is not None and "".join(tokens[:-1]) == rest)
