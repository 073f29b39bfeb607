"""The values the analysis follows: pmap outputs, replicated and sharded stacks, committed arrays."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.metadata import BaseAssignment

from pmap_migrate.rules.analysis.sites import (
    COMMITTED,
    DEVICE_STACKED,
    JIT,
    JIT_OUTPUT,
    PMAP,
    PMAP_OUTPUT,
    PMAP_OUTPUT_UNSTACKED,
    REPLICATED,
    SHARDED_STACK,
    TransformSite,
)
from pmap_migrate.rules.analysis.syntax import (
    ARRAY_ATTRIBUTES,
    SEQUENCE_DISPLAYS,
    integer_index,
    is_key_subscript,
    returns_sequence,
    stacked_output,
    target_names_at,
)
from pmap_migrate.rules.knowledge import tables


class ValueFlow:
    """Which names and calls hold pmap outputs or device-stacked values, flow-insensitively (a part of
    ``SemanticModel``; see its module)."""

    # ------------------------------------------------------------ data flow
    def _classify_call(self, call: cst.Call) -> set[str]:
        tags: set[str] = set()
        site = self._calls_to.get(call)
        if site is not None:
            if site.transform == JIT:
                tags.add(JIT_OUTPUT)
                if self._rows_per_local_device(site):
                    tags.add(PMAP_OUTPUT)  # a faithful rewrite of a pmap: its output's layout too
            else:
                tags.add(PMAP_OUTPUT if stacked_output(site.option("out_axes"), None) else PMAP_OUTPUT_UNSTACKED)
        elif self._returns_rows(call.func):
            tags |= {JIT_OUTPUT, PMAP_OUTPUT}  # a multi-process rewrite's wrapper: its pmap's stacks
        elif isinstance(call.func, cst.Call) and call.func.args and not call.func.args[0].star \
                and self.matches(call.func.func, tables.PARTIAL):
            # `partial(g_pmapped, g)(x)`: the rewrite that takes the function as a static argument
            function = call.func.args[0].value
            if self._rows_jit(self.sites.get(function) or self.callable_site(function)):
                tags |= {JIT_OUTPUT, PMAP_OUTPUT}
        names = self.qualified_names(call.func)
        stacking = self._stacking_helper(call.func, names)
        if not names.isdisjoint(tables.DEVICE_PUT_REPLICATED) or not names.isdisjoint(tables.FLAX_REPLICATE) \
                or stacking == "replicated":
            tags.add(REPLICATED)
        if not names.isdisjoint(tables.DEVICE_PUT_SHARDED) or stacking == "sharded":
            tags.add(SHARDED_STACK)
        if not names.isdisjoint(tables.DEVICE_PUT):
            # device_put(x) and device_put(x, None) leave x uncommitted; a device or sharding commits it.
            positional = [a for a in call.args if a.keyword is None and not a.star]
            placement = positional[1].value if len(positional) >= 2 else None
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "device":
                    placement = arg.value
            if placement is not None and not (isinstance(placement, cst.Name) and placement.value == "None"):
                tags.add(COMMITTED)
        return tags

    def is_host_local_view(self, call: cst.Call) -> bool:
        """``call`` is `_host_local(x)`, the host-local view the multi-process rewrite reads its
        global outputs through (the package's shared helper, or the module's copy, by its
        docstring): this process's rows of ``x``, a stack as ``x`` is."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return False
        return self._is_helper(call.func, "_host_local", tables.SHARED_HOST_LOCAL, tables.HOST_LOCAL_DOC)

    def _is_helper(self, func: cst.BaseExpression, name: str, shared: tuple[str, ...], doc: str) -> bool:
        """``func`` is the helper ``name`` that `fix` writes: imported from the package's shared
        module (a qualified name ending in one of ``shared``), or the module's own copy, by its
        docstring ``doc``."""
        if any(qualified.endswith(shared) for qualified in self.qualified_names(func)):
            return True
        if not isinstance(func, cst.Name) or func.value != name:
            return False
        functions = self.resolve_functions(func)
        return len(functions) == 1 and isinstance(functions[0], cst.FunctionDef) \
            and functions[0].get_docstring() == doc

    def _rows_jit(self, site: TransformSite | None) -> bool:
        """``site`` is a jit of the faithful rewrite of a pmap: its outputs are the pmap's stacks."""
        return site is not None and site.transform == JIT and self._rows_per_local_device(site)

    def _returns_rows(self, func: cst.BaseExpression) -> bool:
        """``func`` is a wrapper the multi-process rewrite writes for a pmap (called by the name it
        is bound to, as the attribute `self.x` a method binds to it, or where it is made): every
        value it returns is the output of a faithful rewrite of a pmap (rows per device), or its
        `_host_local` view."""
        if self._row_wrappers is None:  # the candidates, found once: defs returning a jit's output
            self._row_wrappers = {}
            for function in self.index.functions:
                value = _returned_call(function)
                if value is not None and self.is_host_local_view(value) and isinstance(value.args[0].value, cst.Call):
                    value = value.args[0].value
                site = self._calls_to.get(value) if value is not None else None
                if site is not None and site.transform == JIT:
                    self._row_wrappers.setdefault(function.name.value, []).append((function, value))
        # `step = _global_pmap(f, "i")`, `step = _global_call(jax.jit(...), "i")`
        global_calls = bool(self.index.names.get("_global_pmap") or self.index.names.get("_global_call"))
        if not global_calls and not self._row_wrappers:
            return False  # most modules: no wrapper to look for (every call of the module asks)
        if isinstance(func, cst.Call):  # `_global_pmap(f, "i")(x)`, applied where it is made
            return global_calls and self._is_global_call(func)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            cls = self.enclosing_class(func)
            bound = [value for target, value in self.index.assigned_value.items()
                     if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                     and target.value.value == "self" and target.attr.value == func.attr.value
                     and cls is not None and self.enclosing_class(target) is cls]
            if len(bound) != 1 or not isinstance(bound[0], cst.Name):
                return False
            func = bound[0]
        if not isinstance(func, cst.Name):
            return False
        if global_calls:
            nodes = [getattr(a, "node", None) for a in self.assignments_of(func)]
            if nodes and all(self._global_decorated(n) if isinstance(n, cst.FunctionDef)
                             else isinstance(v := self.assigned_value(n), cst.Call) and self._is_global_call(v)
                             for n in nodes):
                return True
        candidates = self._row_wrappers.get(func.value)
        if not candidates:
            return False
        functions = self.resolve_functions(func)
        if len(functions) != 1:
            return False
        value = next((v for f, v in candidates if f is functions[0]), None)
        return value is not None and self._rows_jit(self._calls_to.get(value))

    def _global_decorated(self, function: cst.FunctionDef) -> bool:
        """``function``'s top decorator is `_global_pmap` or a partial of it without out_axes (the
        multi-process rewrite of a decorator pmap)."""
        if not function.decorators:
            return False
        top = function.decorators[0].decorator
        if isinstance(top, cst.Call) and top.args and self.matches(top.func, tables.PARTIAL):
            if any(arg.keyword is not None and arg.keyword.value == "out_axes" for arg in top.args):
                return False
            top = top.args[0].value
        return self._is_helper(top, "_global_pmap", tables.SHARED_GLOBAL_PMAP, tables.GLOBAL_PMAP_DOC)

    def _global_mapped(self, func: cst.BaseExpression) -> list:
        """The functions that ``func``, called, maps as the multi-process rewrite of a pmap: a name
        bound only to `_global_pmap(f, ...)` (f's definitions) or only to defs decorated by it (those
        defs), or `_global_pmap(f, ...)` applied where it is made; [] otherwise."""
        if not self.index.names.get("_global_pmap"):
            return []
        if isinstance(func, cst.Call):
            made = [func]
        elif isinstance(func, cst.Name):
            nodes = [getattr(a, "node", None) for a in self.assignments_of(func)]
            if nodes and all(isinstance(n, cst.FunctionDef) for n in nodes):
                return nodes if all(self._global_decorated(n) for n in nodes) else []
            made = [self.assigned_value(n) for n in nodes]
        else:
            return []
        functions = []
        for value in made:
            if not (isinstance(value, cst.Call) and self._is_global_pmap_call(value)):
                return []
            found = self.resolve_functions(value.args[0].value)
            if not found:
                return []
            functions.extend(found)
        return functions

    def _is_global_call(self, call: cst.Call) -> bool:
        """``call`` is `_global_pmap(f, axis, ...)` (no out_axes) or `_global_call(<a faithful
        rewrite's jit>, axis, ...)`, the multi-process rewrite's call (the package's shared helper,
        or the module's copy, by its docstring)."""
        if self._is_global_pmap_call(call):
            return True
        if not call.args or call.args[0].keyword is not None or not self._is_helper(
                call.func, "_global_call", tables.SHARED_GLOBAL_CALL, tables.GLOBAL_CALL_DOC):
            return False
        jitted = call.args[0].value
        return self._rows_jit(self.sites.get(jitted) or self.callable_site(jitted))

    def _is_global_pmap_call(self, call: cst.Call) -> bool:
        """``call`` is `_global_pmap(f, axis, ...)`, the function by position, without out_axes
        (pmap's signature: rows per device unless out_axes says otherwise)."""
        return bool(call.args) and call.args[0].keyword is None and self._is_helper(
            call.func, "_global_pmap", tables.SHARED_GLOBAL_PMAP, tables.GLOBAL_PMAP_DOC) and not any(
            arg.keyword is not None and arg.keyword.value == "out_axes" for arg in call.args)

    def _stacking_helper(self, func: cst.BaseExpression, names) -> str | None:
        """"replicated" / "sharded" when ``func`` is the helper `fix` writes for
        `jax.device_put_replicated` / `device_put_sharded` (its outputs are the same stacks)."""
        for kind, (shared, _) in tables.STACKING_HELPERS.items():
            if any(name.endswith(shared) for name in names):
                return kind
        if not isinstance(func, cst.Name):
            return None
        if self._stacking_defs is None:  # the module's own copies, by name: the module's defs read once
            docstrings = {docstring: kind for kind, (_, docstring) in tables.STACKING_HELPERS.items()}
            self._stacking_defs = {
                statement.name.value: docstrings[statement.get_docstring()] for statement in self.module.body
                if isinstance(statement, cst.FunctionDef) and statement.get_docstring() in docstrings}
        kind = self._stacking_defs.get(func.value)
        if kind is None:
            return None
        functions = self.resolve_functions(func)  # that definition, not a local name that shadows it
        return kind if len(functions) == 1 and isinstance(functions[0], cst.FunctionDef) \
            and functions[0].get_docstring() == tables.STACKING_HELPERS[kind][1] else None

    def _rows_per_local_device(self, site: TransformSite) -> bool:
        """The jitted function returns a shard_map over a mesh of the first local devices, one axis,
        with its output stacked along it (`out_specs=P(axis)`): what the faithful rewrite of a pmap
        makes (one row per device, in local device order), and a row read from it is a gather."""
        if site.rows:
            return True  # another module's rewritten pmap (the project index)
        cached = self._rows_per_device.get(id(site))
        if cached is None:
            function = site.decorated
            if function is None and site.fun is not None:
                functions = self.resolve_functions(site.fun)
                function = functions[0] if len(functions) == 1 else None
            cached = isinstance(function, cst.FunctionDef) and self._returns_local_rows(function)
            # The compact form: `jax.jit(_shard_mapped(f, axis))`, or `@jax.jit` over
            # `@functools.partial(_shard_mapped, axis_name=...)`: a helper making such a function.
            if not cached and site.decorated is not None:
                below = list(site.decorated.decorators)
                below = below[next(i for i, d in enumerate(below) if d is site.node) + 1:]
                cached = bool(below) and self._makes_local_rows(below[0].decorator) \
                    and _rows_on_axis_0(below[0].decorator)
            elif not cached and site.fun is not None:
                cached = isinstance(site.fun, cst.Call) and self._makes_local_rows(site.fun.func) \
                    and _rows_on_axis_0(site.fun)
            self._rows_per_device[id(site)] = cached
        return cached

    def _makes_local_rows(self, expr: cst.BaseExpression) -> bool:
        """``expr`` (a name, or `functools.partial` of one) is a module's function that returns a
        nested function of the kind ``_returns_local_rows`` recognises."""
        if isinstance(expr, cst.Call) and expr.args and self.matches(expr.func, tables.PARTIAL):
            expr = expr.args[0].value
        if any(name.endswith(tables.SHARED_LOCAL_ROWS) for name in self.qualified_names(expr)):
            return True  # the same helper, imported from the package's module of shared helpers
        functions = self.resolve_functions(expr) if isinstance(expr, cst.Name) else []
        if len(functions) != 1 or not isinstance(functions[0], cst.FunctionDef):
            return False
        helper = functions[0]
        if helper.get_docstring() == tables.SHARD_MAPPED_DOC:
            return True
        returned = [s.body[0].value for s in helper.body.body if isinstance(s, cst.SimpleStatementLine)
                    and len(s.body) == 1 and isinstance(s.body[0], cst.Return)]
        nested = {s.name.value: s for s in helper.body.body if isinstance(s, cst.FunctionDef)}
        return (len(returned) == 1 and isinstance(returned[0], cst.Name) and returned[0].value in nested
                and self._returns_local_rows(nested[returned[0].value]))

    def _returns_local_rows(self, function: cst.FunctionDef) -> bool:
        meshes: dict[str, cst.BaseExpression] = {}
        returned = None
        for statement in function.body.body:
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                continue
            small = statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                meshes[small.targets[0].target.value] = small.value
            elif isinstance(small, cst.Return):
                returned = small.value
        if not (isinstance(returned, cst.Call) and isinstance(returned.func, cst.Call)
                and self.matches(returned.func.func, tables.SHARD_MAP)):
            return False
        options = {a.keyword.value: a.value for a in returned.func.args if a.keyword is not None}
        mesh, out_specs = options.get("mesh"), options.get("out_specs")
        mesh = meshes.get(mesh.value) if isinstance(mesh, cst.Name) else mesh
        if not (isinstance(mesh, cst.Call) and self.matches(mesh.func, tables.MESH) and len(mesh.args) == 2):
            return False
        devices, names = (a.value for a in mesh.args)
        if not (isinstance(devices, cst.Subscript) and isinstance(devices.value, cst.Call)
                and self.matches(devices.value.func, tables.LOCAL_DEVICES)
                and isinstance(names, cst.Tuple) and len(names.elements) == 1):
            return False
        return (isinstance(out_specs, cst.Call) and self.matches(out_specs.func, tables.PARTITION_SPEC)
                and len(out_specs.args) == 1 and not (isinstance(out_specs.args[0].value, cst.Name)
                                                      and out_specs.args[0].value.value == "None"))

    def _tag_values(self) -> None:
        for call in self.index.calls:
            tags = self._classify_call(call)
            site = self._calls_to.get(call)
            if not tags and site is None:
                continue
            if tags:
                self._call_tags[call] = tags
            parent = self.parents.get(call)
            if not isinstance(parent, (cst.Assign, cst.AnnAssign)):
                continue
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            for target in targets:
                for name, position in target_names_at(target):
                    assignment = self.assignment_for_target(name)
                    if assignment is None:
                        continue
                    element_tags = tags
                    if site is not None and site.transform == PMAP and position is not None:
                        # `loss, aux = step(x)` with out_axes=(0, None): tag each output as its axis says.
                        stacked = stacked_output(site.option("out_axes"), position)
                        element_tags = (tags - {PMAP_OUTPUT, PMAP_OUTPUT_UNSTACKED}) | {
                            PMAP_OUTPUT if stacked else PMAP_OUTPUT_UNSTACKED}
                    self._tags[assignment] |= element_tags
                    if tags:
                        self._assignment_calls[assignment].append((call, position))
                    if site is not None:
                        self._assignment_producers[assignment].append(site)
                        if position is None and self.returns_tuple(site):
                            self._whole_tuple_outputs.add(assignment)
                    # (a starred target's name gets no position, and only part of the value)
                    if tags and (position is not None or isinstance(target, cst.Name)) \
                            and self._produces_sequence(call, position):
                        self._sequence_values.add(assignment)

    def _propagate_tags(self) -> None:
        """Carry tags through plain copies: ``m = metrics``, ``params = state.params``,
        ``loss, aux = out`` (``out`` a whole tuple output), ``m = metrics["train"]``. A few rounds
        cover chains of copies; modules without tagged values skip this entirely."""
        if not self._tags:
            return
        copies = [(target, value) for target, value in self.index.assigned_value.items()
                  if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript))]
        for _ in range(3):
            changed = False
            for target, value in copies:
                calls, assignments = self._sources(value)
                if not assignments:
                    continue
                tags: set[str] = set()
                producers: list[TransformSite] = []
                sources: list[tuple[cst.Call, int | None]] = []
                for assignment in assignments:
                    tags |= self._tags.get(assignment, set())
                    producers.extend(self._assignment_producers.get(assignment, ()))
                    sources.extend(self._assignment_calls.get(assignment, ()))
                if not tags:
                    continue
                whole_tuple = isinstance(value, cst.Name) and all(a in self._whole_tuple_outputs for a in assignments
                                                                   if self._tags.get(a))
                sequence = isinstance(value, cst.Name) and isinstance(target, cst.Name) and all(
                    a in self._sequence_values for a in assignments if self._tags.get(a))
                for name, position in target_names_at(target):
                    if position is None and isinstance(target, (cst.Tuple, cst.List)):
                        continue  # starred unpacking: which element is which is unknown
                    if isinstance(target, (cst.Tuple, cst.List)) and not whole_tuple:
                        continue  # unpacking an array: the device axis itself, not outputs
                    assignment = self.assignment_for_target(name)
                    if assignment is None or tags <= self._tags.get(assignment, set()):
                        continue
                    self._tags[assignment] |= tags
                    self._assignment_producers[assignment].extend(producers)
                    # `ys, aux = out` (a whole tuple output): each name receives one output
                    self._assignment_calls[assignment].extend(
                        (call, position if whole_tuple and at is None else at) for call, at in sources)
                    if position is None and whole_tuple:
                        self._whole_tuple_outputs.add(assignment)
                    if sequence:
                        self._sequence_values.add(assignment)
                    changed = True
            if not changed:
                break

    def returns_tuple(self, site: TransformSite) -> bool:
        """Whether every function ``site`` may transform returns a tuple/list display, so its
        output is a Python sequence of arrays (``step(x)[0]`` picks an output, not a device)."""
        if site.origin is not None:
            return site.tuple_output  # pmapped in another module: the index read its returns
        cached = self._tuple_sites.get(id(site))
        if cached is None:
            functions = self.mapped_functions(site)
            cached = bool(functions) and all(returns_sequence(f) for f in functions)
            self._tuple_sites[id(site)] = cached
        return cached

    def _sources(self, expr: cst.BaseExpression) -> tuple[list[cst.Call], list[BaseAssignment]]:
        """Calls and assignments whose value ``expr`` may be (a leaf, a field or a named output of)."""
        calls: list[cst.Call] = []
        assignments: list[BaseAssignment] = []
        while True:
            if isinstance(expr, cst.Call) and self.is_host_local_view(expr):
                expr = expr.args[0].value  # this process's rows of a stack: the same stack
                continue
            if isinstance(expr, cst.Call):
                calls.append(expr)
            elif isinstance(expr, cst.Name):
                assignments.extend(self.reaching_assignments(expr))
            elif isinstance(expr, cst.Subscript) and (is_key_subscript(expr) or self.selects_output(expr)):
                expr = expr.value  # a leaf of a pytree output, or one output of a tuple, is an output too
                continue
            elif isinstance(expr, cst.Attribute) and expr.attr.value not in ARRAY_ATTRIBUTES:
                expr = expr.value  # a field of an output dataclass/namedtuple
                continue
            return calls, assignments

    def value_tags(self, expr: cst.BaseExpression) -> set[str]:
        """What ``expr`` may hold: a pmap output, a replicated stack, a committed array, ..."""
        calls, assignments = self._sources(expr)
        tags: set[str] = set()
        for call in calls:
            tags |= self._call_tags.get(call, set())
        for assignment in assignments:
            tags |= self._tags.get(assignment, set())
        return tags

    def always_tagged(self, expr: cst.BaseExpression, allowed: Iterable[str], besides: Iterable[str] = ()) -> bool:
        """Whether every value ``expr`` may hold is known to carry tags from ``allowed`` only: it
        has at least one source, and each source call and each reaching assignment is tagged,
        with nothing outside ``allowed`` (tags in ``besides`` may come along with them). The "must"
        counterpart of ``value_tags`` (which answers "may"): fixes that are exact only for, say,
        pmap outputs ask this."""
        allowed, besides = frozenset(allowed), frozenset(besides)
        calls, assignments = self._sources(expr)
        if not calls and not assignments:
            return False
        found = [self._call_tags.get(call) for call in calls] + [self._tags.get(a) for a in assignments]
        return all(tags and (tags - besides) and tags - besides <= allowed for tags in found)

    def tagged_sources(self, expr: cst.BaseExpression) -> list[tuple[cst.Call, int | None]]:
        """The tagged calls (pmap and jit calls, `device_put_replicated`, flax `replicate`, ...)
        whose value ``expr`` may be, followed through assignments and plain copies, each with the
        position of the call's tuple output that reaches ``expr`` (None: the whole output, or not
        known)."""
        calls, assignments = self._sources(expr)
        found: list[tuple[cst.Call, int | None]] = [(call, None) for call in calls if call in self._call_tags]
        for assignment in assignments:
            found.extend(self._assignment_calls.get(assignment, ()))
        return found

    def producers(self, expr: cst.BaseExpression) -> list[TransformSite]:
        """The pmap/jit sites whose output ``expr`` may be."""
        calls, assignments = self._sources(expr)
        found = [self._calls_to[c] for c in calls if c in self._calls_to]
        for assignment in assignments:
            found.extend(self._assignment_producers.get(assignment, ()))
        return found

    def selects_output(self, node: cst.Subscript) -> bool:
        """``out[0]`` picking an element of a Python sequence, not indexing the device axis: ``out``
        is the whole (tuple) output of a function returning ``a, b``; or a list or tuple of the
        pytree, as its producer shows (a pmapped function returning a list there, a replicated
        list) or as the element's use shows (``params[0]["w"]``: a string key, which no array
        takes). The element is part of the same output: its leaves keep the device axis."""
        if not integer_index(node):
            return False
        parent = self.parents.get(node)
        if isinstance(parent, cst.Subscript) and parent.value is node and is_key_subscript(parent):
            return True
        return self._holds_sequence(node.value)

    def _holds_sequence(self, value: cst.BaseExpression) -> bool:
        """``value`` (a tagged call or name) is a Python list or tuple of stacks, as its producer
        or the names it is bound to show (``selects_output``)."""
        if isinstance(value, cst.Call):
            site = self._calls_to.get(value)
            returned = self._returned.get(value)
            return (site is not None and self.returns_tuple(site)) or self._produces_sequence(value, None) \
                or (returned is not None and returned.sequence)
        if isinstance(value, cst.Name):
            assignments = [a for a in self.reaching_assignments(value) if self._tags.get(a)]
            return bool(assignments) and (all(a in self._whole_tuple_outputs for a in assignments)
                                          or all(a in self._sequence_values for a in assignments))
        return False

    def _produces_sequence(self, call: cst.Call, position: int | None) -> bool:
        """What ``call`` returns (its element at ``position`` of a returned tuple; None: all of it) is
        visibly a Python list or tuple: a pmapped function returning a list or tuple display (or a
        list comprehension) there, or `device_put_replicated` / flax `replicate` of one (a stack
        keeps the structure of what it stacks)."""
        site = self._calls_to.get(call)
        if site is not None:
            key = (id(site), position)
            if key not in self._sequence_sites:
                functions = self.mapped_functions(site) if site.transform == PMAP else []
                self._sequence_sites[key] = bool(functions) and all(
                    returns_sequence(f, position, SEQUENCE_DISPLAYS) for f in functions)
            return self._sequence_sites[key]
        mapped = self._global_mapped(call.func)
        if mapped:  # the multi-process rewrite of a pmap: what its function returns
            return all(returns_sequence(f, position, SEQUENCE_DISPLAYS) for f in mapped)
        names = self.qualified_names(call.func)
        if position is not None or (names.isdisjoint(tables.DEVICE_PUT_REPLICATED)
                                    and names.isdisjoint(tables.FLAX_REPLICATE)):
            return False
        first = call.args[0] if call.args else None
        if first is None or first.star or (first.keyword is not None and first.keyword.value not in ("x", "tree")):
            return False
        return self._is_sequence(first.value)

    def _is_sequence(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """``expr`` is a list or tuple on every path: a display, a list comprehension, a call of a
        module function that only returns those, or a name bound only to one of these."""
        if isinstance(expr, SEQUENCE_DISPLAYS):
            return True
        if depth > 4:
            return False
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
            definitions = self.assignments_of(expr.func)
            return bool(definitions) and all(
                isinstance(getattr(d, "node", None), cst.FunctionDef) and not d.node.decorators
                and returns_sequence(d.node, None, SEQUENCE_DISPLAYS) for d in definitions)
        if isinstance(expr, cst.Name):
            assignments = self.reaching_assignments(expr)
            values = [self.index.assigned_value.get(getattr(a, "node", None)) for a in assignments]
            return bool(values) and all(v is not None and self._is_sequence(v, depth + 1) for v in values)
        return False

    def indexes_device_axis(self, node: cst.Subscript) -> bool:
        """``out[0]`` / ``out[i]`` on a value whose leading axis is laid out across devices."""
        return (integer_index(node) and not self.selects_output(node)
                and not self.value_tags(node.value).isdisjoint(DEVICE_STACKED))

    def pmap_devices_option(self, call: cst.Call) -> cst.BaseExpression | None:
        site = self._calls_to.get(call)
        return site.option("devices") if site is not None else None


def _returned_call(function) -> cst.Call | None:
    """The call an undecorated def returns as the last statement of its body, its only return."""
    if not isinstance(function, cst.FunctionDef) or function.decorators:
        return None
    body = function.body.body
    last = body[-1] if body else None
    if not (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 and isinstance(last.body[0], cst.Return)
            and isinstance(last.body[0].value, cst.Call)):
        return None
    if any(isinstance(s, cst.SimpleStatementLine) and any(isinstance(small, cst.Return) for small in s.body)
           for s in body[:-1]):
        return None
    return last.body[0].value


def _rows_on_axis_0(made: cst.BaseExpression) -> bool:
    """The compact form's helper call (`_shard_mapped(f, axis, ...)` or its `functools.partial`)
    stacks every output on axis 0: no `out_axes`, or `out_axes=0`."""
    if not isinstance(made, cst.Call):
        return True
    out_axes = next((a.value for a in made.args if a.keyword is not None and a.keyword.value == "out_axes"), None)
    return out_axes is None or (isinstance(out_axes, cst.Integer) and out_axes.value == "0")
