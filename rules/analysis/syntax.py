"""Facts read off the syntax alone (no names resolved): where a statement runs at least once, what
a function returns, what a subscript indexes."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from pmap_migrate.rules.analysis.sites import FunctionLike

# What may lie between an assignment's target name and the construct that binds it.
TARGET_PARTS = (cst.AssignTarget, cst.Tuple, cst.List, cst.Element, cst.StarredElement, cst.AsName)


# Code that runs apart from the expression around it: later (a def, a lambda, a generator) or
# in a scope of its own, maybe repeatedly (a comprehension).
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


DEFERRED = (cst.FunctionDef, cst.Lambda, cst.ClassDef) + COMPREHENSIONS


# Attributes of an array itself: ``out.shape[0]`` is not an index into the output.
ARRAY_ATTRIBUTES = frozenset({
    "shape", "ndim", "dtype", "size", "nbytes", "itemsize", "T", "mT", "sharding", "aval",
    "addressable_shards", "global_shards", "device_buffers", "devices", "real", "imag", "at",
})


def _target_names(target: cst.BaseExpression) -> Iterator[cst.Name]:
    if isinstance(target, cst.Name):
        yield target
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _target_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)


def target_names_at(target: cst.BaseExpression) -> Iterator[tuple[cst.Name, int | None]]:
    """Names bound by an assignment target, with the position of the top-level element each
    unpacks (None when the name receives the whole value or the position is not fixed)."""
    if isinstance(target, cst.Name):
        yield target, None
        return
    if isinstance(target, (cst.Tuple, cst.List)):
        starred = any(isinstance(e, cst.StarredElement) for e in target.elements)
        for index, element in enumerate(target.elements):
            position = None if starred else index
            for name in _target_names(element.value if not isinstance(element, cst.StarredElement) else element):
                yield name, position


def stacked_output(out_axes: cst.BaseExpression | None, position: int | None) -> bool:
    """Whether a pmap output (the one at ``position`` of a tuple output, or any one when None)
    has the device axis leading: out_axes absent or 0. Unknown (computed) out_axes count as 0."""
    if out_axes is None:
        return True
    if isinstance(out_axes, (cst.Tuple, cst.List)):
        elements = [e for e in out_axes.elements if not isinstance(e, cst.StarredElement)]
        if len(elements) != len(out_axes.elements):
            return True
        if position is not None:
            return position < len(elements) and stacked_output(elements[position].value, None)
        return any(stacked_output(e.value, None) for e in elements)
    if isinstance(out_axes, cst.Name) and out_axes.value == "None":
        return False
    if isinstance(out_axes, cst.Integer):
        return out_axes.evaluated_value == 0
    if isinstance(out_axes, cst.UnaryOperation):  # out_axes=-1: not the leading axis
        return False
    return True


class ReturnFinder(cst.CSTVisitor):
    """Return statements of one function, not of functions nested in it."""

    def __init__(self) -> None:
        self.returns: list[cst.Return] = []

    @property
    def values(self) -> list[cst.BaseExpression | None]:
        return [node.value for node in self.returns]

    def visit_Return(self, node: cst.Return) -> None:
        self.returns.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


# What a Python list or tuple is visibly written as.
SEQUENCE_DISPLAYS = (cst.Tuple, cst.List, cst.ListComp)


def returns_sequence(func: FunctionLike, position: int | None = None,
                      kinds: tuple[type[cst.BaseExpression], ...] = (cst.Tuple, cst.List)) -> bool:
    """Every return of ``func`` is one of ``kinds`` (by default a tuple or list display); with
    ``position``: the element at ``position`` of every returned tuple or list display is."""
    if isinstance(func, cst.Lambda):
        values: list[cst.BaseExpression | None] = [func.body]
    else:
        finder = ReturnFinder()
        func.body.visit(finder)
        values = finder.values
    if not values:
        return False
    for value in values:
        if position is not None:
            if not isinstance(value, (cst.Tuple, cst.List)) or position >= len(value.elements) or any(
                    isinstance(e, cst.StarredElement) for e in value.elements):
                return False
            value = value.elements[position].value
        if not isinstance(value, kinds):
            return False
    return True


def is_key_subscript(node: cst.Subscript) -> bool:
    """``x['loss']`` (a dict key into an output pytree), not an integer index."""
    if len(node.slice) != 1:
        return False
    element = node.slice[0].slice
    return isinstance(element, cst.Index) and isinstance(element.value, (cst.SimpleString, cst.ConcatenatedString))


def integer_index(node: cst.Subscript) -> bool:
    """``x[0]``, ``x[-1]``, ``x[i]``, ``x[0, ...]``: an integer index on the leading axis."""
    if not node.slice:
        return False
    element = node.slice[0].slice
    if not isinstance(element, cst.Index):
        return False
    value = element.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, (cst.Integer, cst.Name)) and not (
        isinstance(value, cst.Name) and value.value in ("None", "Ellipsis", "True", "False")
    )


class IntegerIndexOf(cst.CSTVisitor):
    """Whether ``name[<int>]`` occurs (the name as the function's own parameter); with
    ``collect``, every such subscript."""

    def __init__(self, name: str, collect: bool = False) -> None:
        self.name = name
        self.found = False
        self.collect = collect
        self.subscripts: list[cst.Subscript] = []

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        if isinstance(node.value, cst.Name) and node.value.value == self.name and integer_index(node):
            self.found = True
            self.subscripts.append(node)
        return self.collect or not self.found

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return not any(p.name.value == self.name for p in node.params.params)  # shadowed

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return not any(p.name.value == self.name for p in node.params.params)
