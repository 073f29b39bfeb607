"""New imports where isort (and ruff's ``I001``) would put them, merged into the module's own.

A ``from m import name`` joins the module's ``from m import ...`` line of its leading import block
(at the place isort's order gives the name, in that line's own layout), except that ``from m import
a as b`` gets a line of its own as isort and ruff write it by default (``combine-as-imports``,
assumed where the block already combines them); any other import becomes a
line of the block at its sorted place: its section (``__future__``, standard library, third party,
first party, local) and, within the section, ``import m`` lines before ``from m import`` lines
(each by module name, case aside), or every line by module name where the project sorts that way
(``force-sort-within-sections``). The user's lines are never reordered: in a block that is not
sorted a new line goes before the first line of its section that sorts after it. A section the
block lacks gets a group of its own, one blank line around it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import libcst as cst
from libcst.helpers import get_full_name_for_node

FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL = range(5)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}


@dataclass(frozen=True)
class ImportOrder:
    """How the project sorts imports: which top-level packages are its own, and whether
    ``import m`` and ``from m import`` lines are sorted together."""

    first_party: Callable[[str], bool] = lambda name: False
    force_sort_within_sections: bool = False
    # `from m import a as b` shares a line with other names of m (isort's and ruff's default: no)
    combine_as_imports: bool = False
    force_single_line: bool = False  # one name per `from` line


def section(module: str, relative: bool, order: ImportOrder) -> int:
    if relative:
        return LOCAL
    top = module.split(".")[0]
    if top == "__future__":
        return FUTURE
    if order.first_party(top):
        return FIRST_PARTY
    if top in _STDLIB:
        return STDLIB
    return THIRD_PARTY


def line_key(module: str, straight: bool, order: ImportOrder) -> tuple:
    name = module.lower()
    return (name, module) if order.force_sort_within_sections else (not straight, name, module)


def member_key(name: str) -> tuple:
    """isort's order of the names of a ``from`` import (order-by-type): constants, classes, the rest."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name


@dataclass
class _Line:
    index: int  # in the module's body
    section: int
    key: tuple
    statement: cst.SimpleStatementLine


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], (cst.Import, cst.ImportFrom))


def _is_docstring(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def leading_block(module: cst.Module) -> tuple[int, int]:
    """The module's leading import lines (after a docstring): body[start:end]."""
    body = module.body
    start = 1 if body and _is_docstring(body[0]) else 0
    end = start
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    return start, end


def _describe(statement: cst.SimpleStatementLine, index: int, order: ImportOrder) -> _Line:
    small = statement.body[0]
    if isinstance(small, cst.Import):
        module = get_full_name_for_node(small.names[0].name) or ""
        return _Line(index, section(module, False, order), line_key(module, True, order), statement)
    module = get_full_name_for_node(small.module) if small.module is not None else ""
    relative = bool(small.relative)
    dotted = "." * len(small.relative) + (module or "")
    first = "*" if isinstance(small.names, cst.ImportStar) else get_full_name_for_node(small.names[0].name) or ""
    return _Line(index, section(module or "", relative, order), (*line_key(dotted, False, order), member_key(first)),
                 statement)


def _split(lines: Sequence[cst.EmptyLine]) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """Leading lines as (those up to the last blank line, the comments right above the statement)."""
    last_blank = max((k for k, line in enumerate(lines) if line.comment is None), default=-1)
    return list(lines[: last_blank + 1]), list(lines[last_blank + 1:])


def add_import(module: cst.Module, spec, order: ImportOrder, block: tuple[int, int] | None = None
               ) -> cst.Module | None:
    """``module`` with the import ``spec`` (module, name, asname) added to the import lines
    ``body[start:end]`` of ``block`` (default: its leading block); None: there are none (the
    caller's placement applies)."""
    if getattr(spec, "relative", 0):
        return None  # a relative import (the package's shared module): the caller's placement
    start, end = block if block is not None else leading_block(module)
    markers = [k for k in range(start, end) if _is_cell_marker(module.body[k])]
    if markers:  # a notebook (pmap_migrate.notebooks): the imports of the block's last cell
        start = markers[-1] + 1
    if start == end:
        return None
    body = list(module.body)
    if not order.combine_as_imports and any(_combines_as(body[k]) for k in range(start, end)):
        order = replace(order, combine_as_imports=True)  # the file's own style
    if spec.name is not None and not order.force_single_line:
        for k in range(start, end):
            merged = _merged(body[k], spec, order.combine_as_imports)
            if merged is not None:
                body[k] = merged
                return module.with_changes(body=body)
    lines = [_describe(body[k], k, order) for k in range(start, end)]
    if not order.force_sort_within_sections and _force_sorted(lines):
        order = replace(order, force_sort_within_sections=True)  # the file's own order
        lines = [_describe(body[k], k, order) for k in range(start, end)]
    if spec.name is None:
        alias = cst.ImportAlias(cst.parse_expression(spec.module),
                                asname=cst.AsName(cst.Name(spec.asname)) if spec.asname else None)
        new = cst.SimpleStatementLine([cst.Import([alias])])
        place = (section(spec.module, False, order), line_key(spec.module, True, order))
    else:
        new = cst.parse_statement(f"from {spec.module} import {_alias_text(spec)}\n")
        place = (section(spec.module, False, order), (*line_key(spec.module, False, order), member_key(spec.name)))
    same = [line for line in lines if line.section == place[0]]
    if same:  # before the first line of its section that sorts after it, else after the last
        after = next((line for line in same if line.key > place[1]), None)
        if after is None:
            body.insert(same[-1].index + 1, new)
            return module.with_changes(body=body)
        head, attached = _split(after.statement.leading_lines)
        body[after.index] = after.statement.with_changes(leading_lines=attached)
        body.insert(after.index, new.with_changes(leading_lines=head))
        return module.with_changes(body=body)
    # A section of its own: a group before the first line of a later section, else at the end.
    after = next((line for line in lines if line.section > place[0]), None)
    if after is None:
        body.insert(end, new.with_changes(leading_lines=[cst.EmptyLine(indent=False)]))
        return module.with_changes(body=body)
    head, attached = _split(after.statement.leading_lines)
    body[after.index] = after.statement.with_changes(leading_lines=[cst.EmptyLine(indent=False), *attached])
    body.insert(after.index, new.with_changes(leading_lines=head))
    return module.with_changes(body=body)


def _force_sorted(lines: list[_Line]) -> bool:
    """Whether a block mixes ``import m`` and ``from m import`` lines in one order by module within
    its sections (isort's ``force_sort_within_sections``, Google's style): a ``from`` line before an
    ``import`` line of its section, and each section sorted by module alone."""
    mixed = False
    for kind in (STDLIB, THIRD_PARTY):  # the sections told apart without the project's settings
        same = [line for line in lines if line.section == kind]
        for a, b in zip(same, same[1:]):
            if a.key[0] and not b.key[0]:
                mixed = True
            if a.key[1:] > b.key[1:]:
                return False
    return mixed


# The import statement pmap_migrate.notebooks puts before each cell of a notebook's leading imports.
CELL_MARKER_PREFIX = "__pmap_migrate_cell_"


def _is_cell_marker(statement: cst.SimpleStatementLine) -> bool:
    small = statement.body[0]
    return isinstance(small, cst.Import) and (get_full_name_for_node(small.names[0].name) or "").startswith(
        CELL_MARKER_PREFIX)


def _combines_as(statement: cst.SimpleStatementLine) -> bool:
    small = statement.body[0]
    return isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar) and len(
        small.names) > 1 and any(n.asname is not None for n in small.names)


def _alias_text(spec) -> str:
    return spec.name if spec.asname is None else f"{spec.name} as {spec.asname}"


def _merged(statement: cst.SimpleStatementLine, spec, combine_as: bool) -> cst.SimpleStatementLine | None:
    small = statement.body[0]
    if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None:
        return None
    if isinstance(small.names, cst.ImportStar) or get_full_name_for_node(small.module) != spec.module:
        return None
    names = list(small.names)
    if not combine_as and (spec.asname is not None or any(n.asname is not None for n in names)):
        return None  # `from m import a as b` on a line of its own
    alias = cst.ImportAlias(cst.Name(spec.name), asname=cst.AsName(cst.Name(spec.asname)) if spec.asname else None)
    at = next((k for k, existing in enumerate(names)
               if member_key(get_full_name_for_node(existing.name) or "") > member_key(spec.name)), len(names))
    comma = next((n.comma for n in names if isinstance(n.comma, cst.Comma)), cst.Comma(
        whitespace_after=cst.SimpleWhitespace(" ")))
    if at < len(names):
        names.insert(at, alias.with_changes(comma=comma))
    else:
        last = names[-1]
        names[-1] = last.with_changes(comma=comma)
        names.append(alias.with_changes(comma=last.comma))
    return statement.with_changes(body=[small.with_changes(names=names)])
