"""Names the module already binds, reused by the code fixes write instead of a new import.

A fix that needs ``import functools`` for ``functools.partial`` in a module that has ``from
functools import partial`` writes ``partial``; one that needs ``from jax.sharding import
PartitionSpec as P`` in a module that has ``from jax.sharding import PartitionSpec`` writes
``PartitionSpec``. The engine calls this once, on the module with every fix applied and the
imports the fixes still need (after those the module already has are left out):

- ``import M``, when the module does not bind ``M``'s first name and every use of that name is
  ``M.attr`` with ``attr`` bound by one of the module's top-level imports (``from M import attr
  [as L]``): each ``M.attr`` becomes ``L``, and the import is not added;
- ``from M import N as A`` (or without ``as``), when the module does not bind ``A`` anywhere and a
  top-level import binds some ``L`` to ``M.N``: each ``A`` becomes ``L``, and the import is not
  added.

Only where it is certain to mean the same: ``L`` is bound nowhere else in the module (no
assignment, parameter, definition, other import of that name), and its import comes before
every top-level statement that uses it (code at module level runs in order).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst
from libcst.helpers import get_full_name_for_node


def _top_level_bindings(module: cst.Module) -> dict[str, tuple[str, int]]:
    """What the module's top-level import lines bind, by name: (target, the index of the first
    statement that binds it); a name bound to two things is left out."""
    found: dict[str, tuple[str, int] | None] = {}
    for index, statement in enumerate(module.body):
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            pairs = []
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = get_full_name_for_node(alias.name)
                    if alias.asname is not None:
                        pairs.append((get_full_name_for_node(alias.asname.name), full))
                    else:
                        pairs.append((full.split(".")[0], full if "." not in full else None))
            elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative \
                    and not isinstance(small.names, cst.ImportStar):
                source = get_full_name_for_node(small.module)
                for alias in small.names:
                    name = get_full_name_for_node(alias.name)
                    local = get_full_name_for_node(alias.asname.name) if alias.asname is not None else name
                    pairs.append((local, f"{source}.{name}"))
            for local, target in pairs:
                if local in found:
                    if found[local] is not None and (target is None or found[local][0] != target):
                        found[local] = None
                else:
                    found[local] = None if target is None else (target, index)
    return {name: entry for name, entry in found.items() if entry is not None}


class _Uses(cst.CSTVisitor):
    """Where ``name`` occurs as a name (not an attribute's, a keyword's or an import's), and the
    ``name.attr`` attributes (``prefix``: ``M`` for ``M.attr``, dotted) among them."""

    def __init__(self, name: str, prefix: str | None) -> None:
        self.name = name
        self.prefix = prefix
        self.names: list[cst.Name] = []
        self.attributes: list[cst.Attribute] = []
        self.other: set[int] = set()  # ids of Name nodes that are not references

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.other.add(id(node.attr))
        if self.prefix is not None and get_full_name_for_node(node.value) == self.prefix:
            self.attributes.append(node)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.other.add(id(node.keyword))

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self.other:
            self.names.append(node)


class _Replace(cst.CSTTransformer):
    def __init__(self, nodes: dict[int, str]) -> None:
        self.nodes = nodes

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        local = self.nodes.get(id(original_node))
        return updated_node if local is None else cst.Name(local)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        local = self.nodes.get(id(original_node))
        return updated_node if local is None else updated_node.with_changes(value=local)


def _bound_anywhere(tree: ast.Module) -> dict[str, int]:
    """How many times each name is bound in the module, all scopes (imports included)."""
    counts: dict[str, int] = {}

    def bind(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bind(node.id)
        elif isinstance(node, ast.arg):
            bind(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bind(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bind(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bind(node.rest)
    return counts


def _statement_of(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> list[int]:
    """The index of the top-level statement holding each node."""
    wanted = {id(node) for node in nodes}
    found: list[int] = []

    class _Find(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if id(node) in wanted:
                found.append(index)
            return True

    for index, statement in enumerate(module.body):
        statement.visit(_Find())
    return found


def reuse_bound_names(module: cst.Module, adds: Sequence) -> tuple[cst.Module, list]:
    """``module`` with the references that need an import of ``adds`` written with names its
    top-level imports already bind to the same thing, and the imports still needed."""
    bindings = _top_level_bindings(module)
    by_target: dict[str, list[str]] = {}
    for local, (target, _) in sorted(bindings.items()):
        by_target.setdefault(target, []).append(local)
    plans = []  # (spec, {id(node): local}, [nodes])
    for spec in adds:
        if spec.relative:
            continue
        if spec.name is None:
            if spec.asname is not None:
                continue
            top = spec.module.split(".")[0]
            if top in bindings or not any(t.startswith(spec.module + ".") for t in by_target):
                continue
            uses = _Uses(top, spec.module)
            module.visit(uses)
            if len(uses.attributes) != len(uses.names) or not uses.attributes:
                continue  # `M` used otherwise than as `M.attr`
            targets = [f"{spec.module}.{node.attr.value}" for node in uses.attributes]
            nodes: list[cst.CSTNode] = list(uses.attributes)
        else:
            local_name = spec.asname or spec.name
            target = f"{spec.module}.{spec.name}"
            if local_name in bindings or target not in by_target:
                continue
            uses = _Uses(local_name, None)
            module.visit(uses)
            if not uses.names:
                continue
            targets = [target] * len(uses.names)
            nodes = list(uses.names)
        if any(t not in by_target for t in targets):
            continue
        chosen = {}
        for node, target in zip(nodes, targets):
            candidates = by_target[target]
            short = target.rsplit(".", 1)[1]
            chosen[id(node)] = short if short in candidates else candidates[0]
        plans.append((spec, chosen, nodes))
    if not plans:
        return module, list(adds)
    try:
        counts = _bound_anywhere(ast.parse(module.code))
    except (SyntaxError, ValueError, RecursionError):
        return module, list(adds)
    replace: dict[int, str] = {}
    kept = list(adds)
    for spec, chosen, nodes in plans:
        if spec.name is not None and counts.get(spec.asname or spec.name):
            continue  # the name the fix uses is bound somewhere: its uses may not all be the fix's
        locals_ = set(chosen.values())
        if any(counts.get(local, 0) != _import_bindings(module, local) for local in locals_):
            continue  # rebound somewhere: a use could see another value
        first = min(bindings[local][1] for local in locals_)
        if any(index <= first for index in _statement_of(module, nodes)):
            continue  # used at module level before the import runs
        replace.update(chosen)
        kept.remove(spec)
    if not replace:
        return module, list(adds)
    return module.visit(_Replace(replace)), kept


def _import_bindings(module: cst.Module, name: str) -> int:
    """How many top-level import aliases bind ``name``."""
    count = 0
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    if alias.asname is not None:
                        bound = get_full_name_for_node(alias.asname.name)
                    else:
                        full = get_full_name_for_node(alias.name)
                        bound = full.split(".")[0] if isinstance(small, cst.Import) else full
                    count += bound == name
    return count
