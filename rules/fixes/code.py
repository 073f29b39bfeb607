"""Nodes as text and generated text as nodes: the small helpers every fix builder uses."""

from __future__ import annotations

import re
from functools import lru_cache

import libcst as cst

# A line of generated text that holds only whitespace: parsed, it is an empty line that carries the
# indentation of its block (see `Rewriter.parse_generated`).
WHITESPACE_LINE = re.compile(r"^[ \t\f]+\r?$", re.MULTILINE)


def own_blank_lines_unindented(statement: cst.BaseStatement) -> cst.BaseStatement:
    """A module-level statement whose own empty lines without a comment (in front of it, of its
    decorators, after them) carry no indentation: at module level the same text, in a block no
    trailing whitespace."""

    def plain(lines):
        return [line.with_changes(indent=False) if line.indent and line.comment is None else line for line in lines]

    def indented(lines) -> bool:
        return any(line.indent and line.comment is None for line in lines)

    changes = {}
    if indented(statement.leading_lines):
        changes["leading_lines"] = plain(statement.leading_lines)
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        if indented(statement.lines_after_decorators):
            changes["lines_after_decorators"] = plain(statement.lines_after_decorators)
        if any(indented(d.leading_lines) for d in statement.decorators):
            changes["decorators"] = [d.with_changes(leading_lines=plain(d.leading_lines)) for d in statement.decorators]
    return statement.with_changes(**changes) if changes else statement


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value``, spaced as PEP 8 spaces keyword arguments."""
    return cst.Arg(value, keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.value, 0)
    return None


def is_none(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def simple_params(params: cst.Parameters) -> list[str] | None:
    """Parameter names when every parameter is plain positional (no defaults, no *args/**kwargs,
    no keyword-only): then the wrapper can repeat the signature exactly."""
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.star_kwarg is not None or params.kwonly_params:
        return None
    plain = list(params.posonly_params) + list(params.params)
    if any(p.default is not None for p in plain):
        return None
    return [p.name.value for p in plain]


def assigns(statement: cst.CSTNode, call: cst.Call) -> bool:
    """``statement`` assigns ``call``'s value and does nothing else (`self.step = jax.pmap(f)`)."""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        and isinstance(statement.body[0], cst.Assign) and statement.body[0].value is call


def assigned(statements: list[cst.BaseStatement], name: str) -> cst.BaseExpression | None:
    """The value of ``statements`` when they are the one assignment `name = value`."""
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine) \
            or len(statements[0].body) != 1 or not isinstance(statements[0].body[0], cst.Assign):
        return None
    assign = statements[0].body[0]
    targets = assign.targets
    if len(targets) != 1 or not isinstance(targets[0].target, cst.Name) or targets[0].target.value != name:
        return None
    return assign.value


@lru_cache(maxsize=64)
def helper_statements(text: str) -> tuple[cst.BaseStatement, ...]:
    """The statements of a helper's text, parsed once per process. The texts are few (one per
    helper, name and indentation) and every module that gets a fix needs one: on the 18-repository
    corpus `check` parsed `_shard_mapped`'s 165 times, a tenth of the analysis of the files that
    mention pmap. libcst's nodes are immutable, and a module holds a helper's statements once (the
    engine writes a helper once per module), so modules may share them."""
    return tuple(cst.parse_module(text).body)


class _OneLine(cst.CSTTransformer):
    """Every line break inside brackets as a space (after a comma or an operator) or nothing (after
    an opening bracket, before a closing one, around a dot); ``commented``: a break carries a
    comment."""

    def __init__(self) -> None:
        super().__init__()
        self.commented = False

    def leave_ParenthesizedWhitespace(self, original_node, updated_node):
        if updated_node.first_line.comment is not None or any(line.comment for line in updated_node.empty_lines):
            self.commented = True
        return cst.SimpleWhitespace(" ")

    def leave_LeftParen(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_after=_TIGHT)

    def leave_RightParen(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_before=_TIGHT)

    def leave_LeftSquareBracket(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_after=_TIGHT)

    def leave_RightSquareBracket(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_before=_TIGHT)

    def leave_LeftCurlyBrace(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_after=_TIGHT)

    def leave_RightCurlyBrace(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_before=_TIGHT)

    def leave_Dot(self, original_node, updated_node):
        return updated_node.with_changes(whitespace_before=_TIGHT, whitespace_after=_TIGHT)

    def leave_Call(self, original_node, updated_node):
        args = list(updated_node.args)
        if args:
            args[-1] = _last(args[-1]).with_changes(whitespace_after_arg=_TIGHT)
        return updated_node.with_changes(whitespace_before_args=_TIGHT, args=args)

    def _last_element(self, updated_node, field):
        items = list(getattr(updated_node, field))
        if items:
            items[-1] = _last(items[-1])
        return updated_node.with_changes(**{field: items})

    def leave_List(self, original_node, updated_node):
        return self._last_element(updated_node, "elements")

    def leave_Tuple(self, original_node, updated_node):
        return self._last_element(updated_node, "elements")

    def leave_Set(self, original_node, updated_node):
        return self._last_element(updated_node, "elements")

    def leave_Dict(self, original_node, updated_node):
        return self._last_element(updated_node, "elements")

    def leave_Subscript(self, original_node, updated_node):
        return self._last_element(updated_node, "slice")


_TIGHT = cst.SimpleWhitespace("")


def _last(item):
    """The last element of a bracket: its trailing comma, if any, right before the bracket."""
    comma = getattr(item, "comma", None)
    if isinstance(comma, cst.Comma):
        return item.with_changes(comma=comma.with_changes(whitespace_after=_TIGHT))
    return item


def one_line_code(node: cst.CSTNode) -> str:
    """``node``'s code on one line when it spans several without a comment or a string across
    lines (its line breaks inside brackets dropped, continuation indentation with them), for a
    statement of its own that the layout then wraps as the file wraps code (continuation lines
    aligned with where it stood would no longer be); else as written."""
    text = code_of(node)
    if "\n" not in text:
        return text
    collapse = _OneLine()
    flat = code_of(node.visit(collapse))
    return text if collapse.commented or "\n" in flat else flat
