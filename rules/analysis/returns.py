"""Functions that return pmap outputs or per-device stacks, and the calls of them (a part of
``SemanticModel``; see its module).

`def run_step(x): return p_step(x)` hands its callers the pmap's output: `run_step(x)[0]` reads a
device's row as `p_step(x)[0]` does. The module's own such functions are found from the tags of
their return values (every return a stack on every path, or a tuple display of stacks and other
values); another module's come from the project index (``ReturnsFact``, analysis/facts.py). Their
calls are tagged as what they return, which ``ValueFlow`` then follows like any tagged call.
"""

from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.facts import ReturnsFact
from pmap_migrate.rules.analysis.sites import DEVICE_STACKED, JIT_OUTPUT, PMAP_OUTPUT, REPLICATED, SHARDED_STACK
from pmap_migrate.rules.analysis.syntax import target_names_at

# The kinds of stack a function returns (``ReturnsFact``), as value tags.
_KIND_TAGS = {"pmap": PMAP_OUTPUT, "replicated": REPLICATED, "sharded": SHARDED_STACK}
_TAG_KINDS = {tag: kind for kind, tag in _KIND_TAGS.items()}
# How many functions deep a function returning another's call is followed.
_RETURN_ROUNDS = 3


class Returns:
    """The calls of functions returning pmap outputs or stacks, tagged (a part of ``SemanticModel``)."""

    def _tag_returning_calls(self) -> None:
        """Tag the calls of functions whose every return is a pmap output or a per-device stack
        (`def run_step(x): return p_step(x)`, `return state, metrics` of a pmap's outputs): the
        module's own functions, found from the tags of their return values, and those another
        module of the project defines (the index's ``ReturnsFact``), a few functions deep."""
        found: dict[cst.FunctionDef, ReturnsFact] = {}
        imported = self.project is not None
        for _ in range(_RETURN_ROUNDS):
            if not self._tags and not self._call_tags and not imported:
                return  # most modules: nothing returned can be a stack
            names = set()
            if self._tags or self._call_tags:
                for function in self.index.functions:
                    if isinstance(function, cst.FunctionDef) and function not in found:
                        fact = self._local_returns(function)
                        if fact is not None:
                            found[function] = fact
                names = {function.name.value for function in found}
            tagged = False
            for call in self.index.calls:
                if call in self._returned or call in self._calls_to:
                    continue
                fact = None
                if isinstance(call.func, cst.Name) and call.func.value in names:
                    functions = self.resolve_functions(call.func)
                    fact = found.get(functions[0]) if len(functions) == 1 else None
                if fact is None and imported and isinstance(call.func, (cst.Name, cst.Attribute)):
                    fact = self._project_fact(self._project_names(call.func))
                    fact = fact if isinstance(fact, ReturnsFact) else None
                if fact is not None:
                    self._tag_returned(call, fact)
                    tagged = True
            imported = False
            if not tagged:
                return
            self._propagate_tags()

    def _local_returns(self, function: cst.FunctionDef) -> ReturnsFact | None:
        """What ``function`` (undecorated, not async, not a generator) returns, when every return
        is a pmap output or a stack on every path, or a tuple display of them and other values."""
        if function.decorators or function.asynchronous is not None:
            return None
        values = [r.value for r in self.index.returns.get(function, ())]
        if function in self.index.generators or not values or any(v is None for v in values):
            return None
        name = function.name.value
        displays = [v for v in values if isinstance(v, (cst.Tuple, cst.List))]
        if not displays:
            kinds = [self._stack_kinds(v) for v in values]
            if not all(kinds):
                return None
            return ReturnsFact("", name, tuple(sorted(set().union(*kinds))),
                               sequence=all(self._holds_sequence(v) for v in values))
        width = len(displays[0].elements)
        if len(displays) != len(values) or any(
                len(v.elements) != width or any(isinstance(e, cst.StarredElement) for e in v.elements)
                for v in displays):
            return None
        elements = []
        for k in range(width):
            kinds = [self._stack_kinds(v.elements[k].value) for v in displays]
            elements.append(tuple(sorted(set().union(*kinds))) if all(kinds) else ())
        if not any(elements):
            return None
        return ReturnsFact("", name, tuple(sorted({kind for e in elements for kind in e})), tuple(elements), True)

    def _stack_kinds(self, expr: cst.BaseExpression) -> set[str]:
        """The kinds of stack (``ReturnsFact``) that ``expr`` holds, when it holds one on every path."""
        if not self.always_tagged(expr, DEVICE_STACKED, besides=(JIT_OUTPUT,)):
            return set()
        return {_TAG_KINDS[tag] for tag in self.value_tags(expr) & DEVICE_STACKED}

    def _tag_returned(self, call: cst.Call, fact: ReturnsFact) -> None:
        """``call`` returns what ``fact`` says: tag it, and the names it is assigned to."""
        self._returned[call] = fact
        tags = {_KIND_TAGS[kind] for kind in fact.kinds}
        self._call_tags[call] = self._call_tags.get(call, set()) | tags
        parent = self.parents.get(call)
        if not isinstance(parent, (cst.Assign, cst.AnnAssign)) or parent.value is not call:
            return
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        for target in targets:
            for name, position in target_names_at(target):
                assignment = self.assignment_for_target(name)
                if assignment is None or (position is None and isinstance(target, (cst.Tuple, cst.List))):
                    continue  # (a starred target: which element is which is unknown)
                element = tags
                if fact.elements and position is not None:
                    element = {_KIND_TAGS[kind] for kind in fact.elements[position]} \
                        if position < len(fact.elements) else set()
                if not element:
                    continue
                self._tags[assignment] |= element
                self._assignment_calls[assignment].append((call, position))
                if position is None and fact.sequence:
                    self._whole_tuple_outputs.add(assignment)

    def returned_by(self, call: cst.Call) -> ReturnsFact | None:
        """What the function ``call`` calls returns, when it returns pmap outputs or stacks (a
        function of the module, or of another module of the project)."""
        return self._returned.get(call)
