"""Whether code may run under a jax transformation, where values are tracers (no
`addressable_shards`, no host conversions): the placement and multi-process fixes must not read a
device's row there."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ClassScope

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.knowledge import tables


class Tracing:
    """Code that may be traced: inside a lambda or a decorated function, or a function used other
    than by direct calls, or called from such code (answers remembered per function)."""

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._traced: dict[int, bool] = {}

    # ------------------------------------------------------------------ traced code
    def may_be_traced(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``node`` may run under a jax transformation (its values are then tracers, with
        no `addressable_shards`): inside a lambda or a decorated function, or a function that is
        used other than by direct calls, or called from such code."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.Lambda):
                return True
            if isinstance(ancestor, cst.FunctionDef) and self._function_may_be_traced(ancestor, depth):
                return True
        return False

    def _function_may_be_traced(self, func: cst.FunctionDef, depth: int) -> bool:
        key = id(func)
        if key in self._traced:
            return self._traced[key]
        self._traced[key] = True  # recursion guard (and the answer when in doubt)
        answer = True
        if not func.decorators and depth < 8:
            calls = self.direct_calls(func)
            if calls is not None:
                answer = any(self.may_be_traced(call, depth + 1) for call in calls)
        self._traced[key] = answer
        return answer

    def direct_calls(self, func: cst.FunctionDef) -> list[cst.Call] | None:
        """The calls of ``func`` in this module; None when it is also used as a value."""
        name = func.name.value
        calls: list[cst.Call] = []
        scope = self.model.scope_of(func)
        if isinstance(scope, ClassScope):
            # a method: every `<x>.name` in the module might be it
            for attribute in self.model.index.attributes.get(name, ()):
                parent = self.model.parent(attribute)
                if not (isinstance(parent, cst.Call) and parent.func is attribute):
                    return None
                calls.append(parent)
            return calls
        if scope is None:
            return None
        for assignment in scope.assignments[name]:
            if getattr(assignment, "node", None) is not func:
                continue
            for access in assignment.references:
                parent = self.model.parent(access.node)
                if not (isinstance(parent, cst.Call) and parent.func is access.node):
                    return None
                calls.append(parent)
        return calls


class ProgramTracing(Tracing):
    """The same for a multi-process program's pmaps, where a function handed to `absl.app.run` (the
    program's `main`) is an entry point, not traced; and code seen to be traced for sure."""

    def may_be_traced(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` may run under a jax transformation: inside a lambda or a decorated
        function, or a function used other than by direct calls (or called from such code). As
        `Tracing.may_be_traced`, except that a function handed to `absl.app.run` (a program's
        `main`) is an entry point, not traced."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.Lambda):
                return True
            if isinstance(ancestor, cst.FunctionDef) and self._function_may_be_traced(ancestor, 0):
                return True
        return False

    def surely_traced(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``node`` is seen to run under a jax transformation: inside a lambda or function
        handed to a `jax.*` callable, a function decorated by one, or called from such code."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.Lambda) and self._handed_to_jax(ancestor):
                return True
            if isinstance(ancestor, cst.FunctionDef) and self._function_surely_traced(ancestor, depth):
                return True
        return False

    def _function_surely_traced(self, func: cst.FunctionDef, depth: int) -> bool:
        if any(self._jax_callable(d.decorator) for d in func.decorators):
            return True
        if depth >= 8:
            return False
        name = func.name.value
        scope = self.model.scope_of(func)
        if isinstance(scope, ClassScope):  # a method: `jax.jit(self.step)`, `self.step` handed on
            return any(self._handed_to_jax(node) for node in self.model.index.attributes.get(name, ()))
        if scope is None:
            return False
        for assignment in scope.assignments[name]:
            if getattr(assignment, "node", None) is not func:
                continue
            for access in assignment.references:
                parent = self.model.parent(access.node)
                if isinstance(parent, cst.Call) and parent.func is access.node:
                    if self.surely_traced(parent, depth + 1):
                        return True
                elif self._handed_to_jax(access.node):
                    return True
        return False

    def _handed_to_jax(self, node: cst.CSTNode) -> bool:
        """``node`` is an argument of a call of a `jax.*` callable (`jax.jit(f)`, `lax.scan(body, ...)`)."""
        arg = self.model.parent(node)
        call = self.model.parent(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(call, cst.Call) and self._jax_callable(call.func)

    def _jax_callable(self, node: cst.BaseExpression) -> bool:
        """A `jax.*` or `flax.*` callable, also through `functools.partial(jax.jit, ...)`."""
        if isinstance(node, cst.Call):
            if self.model.matches(node.func, tables.PARTIAL) and node.args:
                return self._jax_callable(node.args[0].value)
            return self._jax_callable(node.func)
        return any(n.startswith(("jax.", "flax.")) for n in self.model.qualified_names(node))

    def _function_may_be_traced(self, func: cst.FunctionDef, depth: int) -> bool:
        cached = self._traced.get(id(func))
        if cached is not None:
            return cached
        self._traced[id(func)] = True  # recursion guard, and the answer when in doubt
        answer = True
        if not func.decorators and depth < 8:
            calls = self.direct_calls(func)
            if calls is not None:
                answer = any(self.may_be_traced(call) for call in calls)
        self._traced[id(func)] = answer
        return answer

    def direct_calls(self, func: cst.FunctionDef) -> list[cst.Call] | None:
        """The calls of ``func`` in this module (a handing to `absl.app.run` counts as none); None
        when it is also used as a value."""
        scope = self.model.scope_of(func)
        if scope is None or isinstance(scope, ClassScope):
            return super().direct_calls(func)
        calls: list[cst.Call] = []
        for assignment in scope.assignments[func.name.value]:
            if getattr(assignment, "node", None) is not func:
                continue
            for access in assignment.references:
                parent = self.model.parent(access.node)
                if isinstance(parent, cst.Call) and parent.func is access.node:
                    calls.append(parent)
                    continue
                runner = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
                if isinstance(runner, cst.Call) and runner.args and runner.args[0] is parent \
                        and self.model.matches(runner.func, {"absl.app.run"}):
                    continue  # the program's entry point
                return None
        return calls
