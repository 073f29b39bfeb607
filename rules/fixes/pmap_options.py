"""A pmap site's options as the faithful rewrite reads them: literal axes, argnums, and why a site
cannot be rewritten (``Unsupported``)."""

from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.fixes.code import code_of, int_literal, is_none




KNOWN_OPTIONS = {"fun", "axis_name", "in_axes", "out_axes", "static_broadcasted_argnums", "donate_argnums",
                 "devices", "backend", "axis_size"}


DEFAULT_AXIS = '"i"'  # legacy pmap without axis_name: no collective can name the axis


class Unsupported(Exception):
    """The site cannot be rewritten to plain JAX faithfully; the message says why."""


class NotConstant(Exception):
    """An option expression that is not computed from literals alone."""


def axis_value(node: cst.BaseExpression) -> int | None:
    """An in_axes/out_axes leaf: an int literal or None; anything else is not supported."""
    if is_none(node):
        return None
    value = int_literal(node)
    if value is None:
        raise Unsupported(f"`{code_of(node)}` is not a literal axis")
    return value


# An in_axes entry for one argument: an axis (int or None), or a one-level pytree prefix of axes
# for a dict argument ({"key": axis}) or a tuple argument ((axis, axis)).
AxisEntry = int | None | dict[str, int | None] | tuple[int | None, ...]


def axis_entry(node: cst.BaseExpression) -> AxisEntry:
    if isinstance(node, cst.Dict):
        entries: dict[str, int | None] = {}
        for element in node.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                raise Unsupported(f"`{code_of(node)}` is not a literal in_axes prefix")
            entries[code_of(element.key)] = axis_value(element.value)
        return entries
    if isinstance(node, cst.Tuple):
        return tuple(axis_value(e.value) for e in node.elements)
    return axis_value(node)


def leaf_axes(entry: AxisEntry) -> list[int | None]:
    if isinstance(entry, dict):
        return list(entry.values())
    if isinstance(entry, tuple):
        return list(entry)
    return [entry]


def int_tuple(node: cst.BaseExpression | None, option: str) -> tuple[int, ...]:
    if node is None:
        return ()
    value = int_literal(node)
    if value is not None:
        return (value,)
    if isinstance(node, (cst.Tuple, cst.List)):
        values = tuple(int_literal(e.value) for e in node.elements)
        if all(v is not None for v in values):
            return values  # type: ignore[return-value]
    raise Unsupported(f"`{option}` is not a literal")
