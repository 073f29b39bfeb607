"""Functions whose every return is a pmap output or a per-device stack, as the project index keeps
them (``ReturnsFact``): read with `ast` from a module's module-level functions, bound once and
undecorated, by ``FactReader`` (analysis/facts.py), whose part ``ReturnsReader`` is."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from pmap_migrate.rules.knowledge import tables

# Words of the helpers that stack a value on the devices (a function returning such a stack
# is a fact, ``ReturnsFact``), and of the module of helpers `fix` writes (`_replicate`, ...).
STACKING_WORDS = re.compile(r"\b(?:device_put_replicated|device_put_sharded|jax_utils|_pmap_compat)\b")
_STACKING = (("replicated", tables.DEVICE_PUT_REPLICATED | tables.FLAX_REPLICATE),
             ("sharded", tables.DEVICE_PUT_SHARDED))
_STACKING_TARGETS = tables.PMAP | frozenset().union(*(names for _, names in _STACKING))
_STACKING_HELPERS = tuple((kind, shared.rsplit(".", 1)[1]) for kind, (shared, _) in tables.STACKING_HELPERS.items())
# How many functions deep a function returning another's call is followed.
_RETURN_ROUNDS = 3


@dataclass(frozen=True)
class ReturnsFact:
    """A module-level function whose every return is a pmap output or a per-device stack (`def
    run_step(x): return p_step(x)`, `return state, metrics` of a pmap's outputs, `return
    jax.device_put_replicated(...)`): what its callers receive. Kinds: "pmap" (a pmap output, one
    row per device), "replicated", "sharded" (`device_put_replicated`/flax `replicate`,
    `device_put_sharded`)."""

    module: str
    name: str
    kinds: tuple[str, ...] = ()  # what the whole returned value may be (of every element, for a tuple)
    # Every return is a tuple display of this many elements, each of these kinds (none: not a stack).
    elements: tuple[tuple[str, ...], ...] = ()
    sequence: bool = False  # the value is a Python tuple or list of stacks: `run_step(x)[0]` picks one


class ReturnsReader:
    """The part of ``FactReader`` that finds the module's ``ReturnsFact`` (it reads ``self.facts``,
    ``self.functions``, ``self.text`` and the reader's name resolution)."""

    def _returning(self, tree: ast.Module) -> None:
        """The module's functions (bound once, undecorated) whose every return is a pmap output or
        a per-device stack (``ReturnsFact``), functions returning another's call included."""
        candidates = [f for name, f in self.functions.items() if not f.decorator_list
                      and name not in self.facts.pmapped and name not in self.facts.aliases]
        lines = self.text.splitlines()
        # What a function returning a stack spells: a pmap, a stacking helper (or a name an import
        # binds to one), or such a function.
        words = {"pmap", "device_put_", "replicate", "_put_sharded", *self.facts.pmapped, *self.facts.aliases,
                 *(local for local, target in self.facts.imports.items() if target in _STACKING_TARGETS)}
        bindings = None
        for _ in range(_RETURN_ROUNDS):
            found = False
            for function in candidates:
                text = "\n".join(lines[function.lineno - 1:function.end_lineno])
                if function.name in self.facts.returning or not any(word in text for word in words):
                    continue
                bindings = self.bindings(tree) if bindings is None else bindings
                if bindings.get(function.name) == 1:
                    fact = self._returns_stacks(function)
                    if fact is not None:
                        self.facts.returning[function.name] = fact
                        found = True
            if not found:
                break
            words.update(self.facts.returning)

    def _returns_stacks(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> ReturnsFact | None:
        if isinstance(function, ast.AsyncFunctionDef):
            return None
        local = _local_bindings(function)
        if local is None:  # a generator
            return None
        values = local.pop(None)
        if not values or any(v is None for v in values):
            return None
        module, name = self.facts.name, function.name
        displays = [v for v in values if isinstance(v, (ast.Tuple, ast.List))]
        if not displays:
            found = [self._kinds(v, local) for v in values]
            if any(k is None for k in found):
                return None
            return ReturnsFact(module, name, tuple(sorted({kind for kinds, _ in found for kind in kinds})),
                               sequence=all(sequence for _, sequence in found))
        width = len(displays[0].elts)
        if len(displays) != len(values) or any(len(v.elts) != width or any(isinstance(e, ast.Starred) for e in v.elts)
                                               for v in displays):
            return None
        elements = []
        for k in range(width):
            found = [self._kinds(v.elts[k], local) for v in displays]
            elements.append(tuple(sorted({kind for f in found for kind in f[0]})) if all(found) else ())
        if not any(elements):
            return None
        return ReturnsFact(module, name, tuple(sorted({kind for e in elements for kind in e})), tuple(elements), True)

    def _kinds(self, expr: ast.expr, local: dict, depth: int = 0) -> tuple[frozenset[str], bool] | None:
        """What ``expr`` (in a function whose names ``local`` binds) is on every path: the kinds of
        stack, and whether it is a Python tuple of them; None when not a stack on some path."""
        if isinstance(expr, ast.Name):
            bindings = local.get(expr.id)
            if not bindings or depth > 4 or any(b is None for b in bindings):
                return None
            found = []
            for value, position in bindings:
                kinds = self._kinds(value, local, depth + 1)
                if kinds is None:
                    return None
                if position is not None:
                    kinds = (kinds[0], False)
                found.append(kinds)
            return frozenset().union(*(k for k, _ in found)), all(s for _, s in found)
        if not isinstance(expr, ast.Call):
            return None
        func = expr.func
        dotted = self._dotted(func)
        for kind, names in _STACKING:
            if dotted in names:
                return frozenset({kind}), False
        for kind, helper in _STACKING_HELPERS:
            if self._helper(func, helper):  # what `fix` writes for them
                return frozenset({kind}), False
        if isinstance(func, ast.Name) and func.id not in local:
            pmapped = self.facts.pmapped.get(func.id)
            if pmapped is not None:
                return None if "out_axes" in pmapped.options else (frozenset({"pmap"}), pmapped.returns_tuple)
            returning = self.facts.returning.get(func.id)
            if returning is not None:
                return frozenset(returning.kinds), returning.sequence
            return None
        if isinstance(func, ast.Call) and func.args and not isinstance(func.args[0], ast.Starred):
            options = self._transform(func.func)  # `jax.pmap(f, ...)(x)`, `alias(f)(x)`
            if options is None or "out_axes" in options or any(k.arg == "out_axes" for k in func.keywords):
                return None
            return frozenset({"pmap"}), self._returns_tuple(func.args[0])
        return None


def _local_bindings(function: ast.FunctionDef) -> dict | None:
    """The names ``function``'s body binds (not its nested functions'): each binding ``(value,
    position)`` for an assignment (``position``: the element a tuple target unpacks), None for any
    other (a parameter, a loop variable, ...); under the key None, its return values. None for a
    generator."""
    local: dict = {}
    arguments = function.args
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
        if argument is not None:
            local.setdefault(argument.arg, []).append(None)
    returns: list = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            local.setdefault(node.name, []).append(None)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                local.setdefault(name, []).append(None)
        elif isinstance(node, ast.Return):
            returns.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    local.setdefault(target.id, []).append((node.value, None))
                elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
                    for position, element in enumerate(target.elts):
                        local.setdefault(element.id, []).append((node.value, position))
                else:
                    stack.append(target)
            stack.append(node.value)
            continue
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.setdefault(node.id, []).append(None)
        stack.extend(ast.iter_child_nodes(node))
    local[None] = returns
    return local
