"""The fully qualified names an import statement imports, for rules that report imports.

An import statement is where a name is defined, so its dotted path is read from the statement itself;
every later use resolves through ``QualifiedNameProvider``.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
from libcst.helpers import get_full_name_for_node


def imported_names(node: cst.Import | cst.ImportFrom) -> Iterator[tuple[cst.ImportAlias | cst.ImportStar, str]]:
    """``(alias, "a.b.c")`` for each name the statement imports, ``(star, "a.b.*")`` for a star
    import (reported at the ``*``); relative imports yield nothing."""
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = get_full_name_for_node(alias.name)
            if full:
                yield alias, full
        return
    if node.relative or node.module is None:
        return
    module = get_full_name_for_node(node.module)
    if not module:
        return
    if isinstance(node.names, cst.ImportStar):
        yield node.names, f"{module}.*"
        return
    for alias in node.names:
        name = get_full_name_for_node(alias.name)
        if name:
            yield alias, f"{module}.{name}"


def is_within(full: str, module: str) -> bool:
    """``full`` is ``module`` or a name inside it."""
    return full == module or full.startswith(module + ".")
