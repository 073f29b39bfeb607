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
