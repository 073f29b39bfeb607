"""What a fix must not do to a module's names, checked on the code before and after it.

libcst's scope analysis of both trees: a fix must not leave a name that no scope binds (a wrapper
hoisted out of the lambda whose parameter it calls), import a name over an existing binding of it
(a second `import jax.numpy as jnp` beside `from jax import numpy as jnp`), nor bind at module
level a name the module reads as a builtin. The fixer refuses such a fix (pmap_migrate.fixer).
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    BuiltinAssignment,
    GlobalScope,
    ImportAssignment,
    MetadataWrapper,
    Scope,
)

from pmap_migrate.rules.analysis.index import Indexer, resolve_scopes

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
                                       "__builtins__", "__path__", "__annotations__", "__dict__", "__module__",
                                       "__qualname__", "__class__"}


@dataclass(frozen=True)
class NameFacts:
    undefined: Counter  # names read where no scope binds them, and how often (a name undefined before
    # may be read more often after: an example's free names, globals injected at run time)
    module_bindings: Counter  # module-level bindings by name (an `import a.b` aside)
    module_imports: Counter  # of those, imports (not ``import a.b``, which may sit beside ``import a``)
    builtin_reads: frozenset[str]  # names read as builtins


def name_facts(module: cst.Module, scopes: Iterable[Scope] | None = None) -> NameFacts:
    """The facts of ``module``, from its ``scopes`` when an analysis has them already."""
    if scopes is None:  # libcst's scope analysis, with the names bound taken from the index's walk
        index = Indexer()
        module.visit(index)
        mapping = resolve_scopes(MetadataWrapper(module, unsafe_skip_copy=True), index.stores)
        scopes = {id(s): s for s in mapping.values() if s is not None}.values()
    undefined: Counter = Counter()
    builtin_reads: set[str] = set()
    module_scope = None
    for scope in scopes:
        if isinstance(scope, GlobalScope):
            module_scope = scope
        for access in scope.accesses:
            node = access.node
            if not isinstance(node, cst.Name):
                continue
            if not access.referents:
                if node.value not in _BUILTINS:
                    undefined[node.value] += 1
            elif all(isinstance(a, BuiltinAssignment) for a in access.referents):
                builtin_reads.add(node.value)
    bindings: Counter = Counter()
    imports: Counter = Counter()
    if module_scope is not None:
        for assignment in module_scope.assignments:
            if isinstance(assignment, BuiltinAssignment):
                continue
            if "." in assignment.name:
                continue  # libcst's record of `import a.b` as binding `a.b` too: `a` stands for it
            if isinstance(assignment, ImportAssignment) and _submodule_import(assignment.node, assignment.name):
                continue  # `import a.b` beside `import a` redefines nothing
            bindings[assignment.name] += 1
            if isinstance(assignment, ImportAssignment):
                imports[assignment.name] += 1
    return NameFacts(undefined, bindings, imports, frozenset(builtin_reads))


def _submodule_import(statement: cst.CSTNode, name: str) -> bool:
    """``import a.b`` binds ``a`` as ``import a`` does, and loads ``a.b``: importing both is no
    redefinition (an ``as`` or ``from`` import of the same name is)."""
    if not isinstance(statement, cst.Import):
        return False
    binding = [alias for alias in statement.names if (alias.evaluated_alias or alias.evaluated_name.split(".")[0]) == name]
    return bool(binding) and all(alias.asname is None and "." in alias.evaluated_name for alias in binding)


def name_problems(before: NameFacts, after: NameFacts) -> list[str]:
    """What a change from ``before`` to ``after`` breaks, one phrase each (empty: nothing)."""
    problems = [f"`{name}` undefined" for name in sorted(after.undefined) if not before.undefined[name]]
    problems += [f"`{name}` imported over its existing binding" for name, count in sorted(after.module_imports.items())
                 if count > before.module_imports[name] and before.module_bindings[name] > 0]
    problems += [f"the builtin `{name}` shadowed" for name in sorted(after.module_bindings)
                 if not before.module_bindings[name] and name in before.builtin_reads]
    return problems
