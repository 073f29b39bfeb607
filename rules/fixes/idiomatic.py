"""The idiomatic pmap rewrite (unsafe, opt-in): a whole data-parallel loop in one module becomes
what a JAX expert writes today, without the stacked device axis.

Recognised (every piece must fit exactly, otherwise PM101 offers the faithful rewrite):

* the steps: pmap sites (`@partial(jax.pmap, axis_name=..)` or `step = jax.pmap(f, axis_name=..)`)
  with a literal axis name, only `donate_argnums` / `in_axes=0` / `out_axes=0` besides, whose body
  ends in one `return` and runs a `lax.pmean`/`psum`/... over that axis (the gradients), called
  only as ``outs = step(args)`` inside one driver function (or the module body);
* the replicated values ("state"): an argument bound once, at the top level of the driver, to
  `jax.device_put_replicated(x, jax.local_devices())`, flax `replicate(x)` or a stack of copies
  (`tree_map(lambda p: np.stack([p] * n), x)`, `np.broadcast_to(p, (n, *p.shape))`), and after that
  only to the step's outputs;
* the batches: an argument bound to `b.reshape(n, -1, ...)` or flax `shard(b)`, or created with its
  device axis (one definition, used by the steps only): its two leading axes merge into one global
  batch axis;
* the reads: `out[0]`, `unreplicate(out)`, `tree_map(lambda x: x[0], out)` (dropped; a statement
  `out = unreplicate(out)` goes), and `print`s of a replicated value that only change how many
  copies are shown (`print(loss)`, `np.asarray(params["b"]).round(6)`, `.shape`); any other use of a
  stacked value (passed to a function, indexed, reduced) means the loop does not fit.

Emitted (verified by running fixtures/programs_idiomatic and fixtures/programs/training_loop on
jax 0.7.2, 0.10.2 and 0.12; see tests/test_idiomatic.py):

    @functools.cache
    def batch_mesh():  # the program's one mesh, built on first use: importing queries no device
        return Mesh(jax.local_devices(), ("batch",))

    def _train_step(params, batch):       # the pmapped body, unchanged
        ...

    @functools.partial(jax.jit, donate_argnums=(0,))
    def train_step(params, batch):
        return jax.shard_map(_train_step, mesh=batch_mesh(), in_specs=(P(), P("batch")),
                             out_specs=(P(), P()), check_vma=False)(params, batch)

    params = jax.device_put(params, NamedSharding(batch_mesh(), P()))        # was replicate(params)
    batch = jax.device_put(batch, NamedSharding(batch_mesh(), P("batch")))  # was shard(batch)
    params, loss = train_step(params, batch)
    print(loss)                                                             # was loss[0]

`check_vma=False` keeps the legacy numbers with the body unchanged: with `check_vma=True` the
gradients of the `P()` params arrive already summed over the axis, and the body's `pmean` would
multiply them by the device count (JAX_FACTS.md). It also makes `out_specs=P()` hand back device
0's value, which is exactly what the dropped `[0]` read.

Why unsafe: the rewrite assumes the replicated values really are identical copies (the step
pmeans its gradients), and code that printed a stacked value now prints one copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.metadata import Assignment

from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of, simple_params
from pmap_migrate.rules.fixes.idiomatic_build import IdiomaticBuild
from pmap_migrate.rules.fixes.idiomatic_match import (
    AUTODIFF,
    BATCH,
    COLLECTIVES,
    PLACEHOLDER,
    REDUCTIONS,
    STATE,
    STEP_OPTIONS,
    CallFinder,
    LoopReads,
    Reject,
    Step,
    display_names,
    mentions,
    single_return,
)
from pmap_migrate.rules.fixes.placement import Placement
from pmap_migrate.rules.fixes.pmap_options import Unsupported, int_tuple
from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import tables


class Idiomatic(LoopReads, IdiomaticBuild):
    """Recognises the module's data-parallel loop once and builds the one fix that rewrites it."""

    def __init__(self, rewriter: Rewriter, placement: Placement) -> None:
        self.model = rewriter.model
        self.rewriter = rewriter
        self.placement = placement
        # Why the module's loop was not recognised (None when it was).
        self.reason: str | None = None
        self.steps: list[Step] = []
        self.fix: FixSpec | None = None
        try:
            self._recognise()
        except (Reject, Unsupported) as why:
            self.reason = str(why)
            self.steps, self.fix = [], None

    def fix_for(self, site: TransformSite) -> FixSpec | None:
        if self.fix is None:
            return None
        if site is self.steps[0].site:
            return self.fix
        if any(site is step.site for step in self.steps):
            return FixSpec(Applicability.UNSAFE, f"rewritten together with `{self.steps[0].name}` by its idiomatic fix")
        return None

    # ------------------------------------------------------------------------------ recognition
    def _recognise(self) -> None:
        if self.model.multi_process():
            raise Reject("the module runs several processes")
        steps = [step for step in map(self._step, self.model.pmap_sites()) if step is not None]
        if not any(self._differentiates(step.func) for step in steps):
            raise Reject("no pmapped training step (one that reduces its gradients over its axis) called as "
                          "`outs = step(...)`")
        drivers = {id(self._driver(call)): self._driver(call) for step in steps for call in step.calls}
        if len(drivers) != 1:
            raise Reject("the steps are called from more than one function")
        self.driver = next(iter(drivers.values()))
        if any(isinstance(d, cst.Lambda) for d in drivers.values()):
            raise Reject("a step is called inside a lambda")
        axes = {step.axis.strip("\"'") for step in steps}
        if len(axes) != 1:
            raise Reject("the steps map over different axis names")
        self.axis = steps[0].axis
        self.steps = sorted(steps, key=lambda s: self._order(s.statement))
        if isinstance(self.driver, cst.FunctionDef) and not isinstance(self.driver.body, cst.IndentedBlock):
            raise Reject("the driver is a one-line function")
        self.block = self.driver.body if isinstance(self.driver, cst.Module) else self.driver.body.body
        self.scope = self.model.scope_of(self.block[0]) if self.block else None
        if self.scope is None:
            raise Reject("the driver's names cannot be resolved")
        self.mesh = PLACEHOLDER  # the mesh helper's name is chosen once the loop is recognised
        self.edits: list[Edit] = []
        self.imports: list[ImportSpec] = []
        self.removes: list[ImportSpec] = []
        self.counts: set = set()
        self.state_names: set[str] = set()
        self.printed: set[str] = set()
        self.calls = {id(call): (step, call) for step in self.steps for call in step.calls}
        self._outputs: dict[int, list[tuple[Step, cst.Call, int]]] = {}  # id(target Name) -> producers
        self._check_call_statements()
        names = sorted({name.value for step in self.steps for call in step.calls for arg in call.args
                        for name in display_names(arg.value) or ()})
        for name in names:
            self._argument(name)
        for step in self.steps:
            for call in step.calls:
                for position, arg in enumerate(call.args):
                    if display_names(arg.value) is None:
                        self._inline_batch(step, position, arg.value)
        outputs = sorted({t.value for step in self.steps for call in step.calls for t in self._targets(call)}
                         - set(names))
        for name in outputs:
            self._output(name)
        self._build()

    def _step(self, site: TransformSite) -> Step | None:
        """``site`` as a data-parallel step, or None when it is not one (it keeps its own fix)."""
        if site.transform != PMAP or site.callee.ambiguous or site.dynamic_options:
            return None
        if id(site.node) in self.model.nested_nodes():
            return None
        if any(a.keyword is not None and a.keyword.value not in STEP_OPTIONS for a in site.args):
            return None
        if len(site.positional()) > (1 if site.is_decorator else 2):
            return None
        axis = site.option("axis_name")
        if not isinstance(axis, cst.SimpleString):
            return None
        for option in ("in_axes", "out_axes"):
            value = site.option(option)
            if value is not None and not (isinstance(value, cst.Integer) and value.value == "0"):
                return None
        try:
            donate = int_tuple(site.option("donate_argnums"), "donate_argnums")
        except Unsupported:
            return None
        if site.is_decorator:
            func = site.decorated
            if func is None or len(func.decorators) != 1 or not isinstance(self.model.parent(func), cst.Module):
                return None
            statement, name = func, func.name.value
        else:
            statement, name = self.rewriter.assignment_statement(site.node)
            fun = site.fun
            if statement is None or not isinstance(fun, cst.Name) or fun.value == name:
                return None
            defs = [f for f in self.model.resolve_functions(fun) if isinstance(f, cst.FunctionDef)]
            if len(defs) != 1 or defs[0].decorators:
                return None
            func = defs[0]
        if func.asynchronous is not None:
            return None
        params = simple_params(func.params)
        returned = single_return(func)
        if params is None or returned is None or any(i >= len(params) for i in donate):
            return None
        if self._differentiates(func) and not self._reduces_gradients(func, axis.evaluated_value):
            return None  # per-device gradients: the copies of the params would drift apart
        if isinstance(returned, cst.Tuple):
            if not returned.elements or any(isinstance(e, cst.StarredElement) for e in returned.elements):
                return None
            elements, tuple_return = [e.value for e in returned.elements], True
        else:
            elements, tuple_return = [returned], False
        calls = [call for call, called in self.model.pmap_calls().items() if called is site]
        if not calls:
            return None
        for assignment in site.bound_names:
            scope = assignment.scope
            if len(scope.assignments[name]) != 1:
                return None  # the step's name is rebound somewhere
            for access in assignment.references:
                parent = self.model.parent(access.node)
                if not (isinstance(parent, cst.Call) and parent.func is access.node and parent in calls):
                    return None  # the step is used as a value (or called another way)
        return Step(site, func, name, statement, params, elements, tuple_return, code_of(axis), donate, calls)

    def _reduces_gradients(self, func: cst.FunctionDef, axis: str) -> bool:
        """A `pmean`/`psum` over ``axis`` takes the gradients: ``lax.pmean(grads, axis)``, or
        ``tree_map(lambda g: lax.psum(g, axis) / n, grads)``, with ``grads`` bound to
        ``jax.grad(f)(...)`` (or the second element of ``jax.value_and_grad(f)(...)``)."""
        finder = CallFinder()
        func.body.visit(finder)
        gradients: set[str] = set()
        for call in finder.calls:
            if not isinstance(call.func, cst.Call):
                continue
            grad = self.model.matches(call.func.func, {"jax.grad"})
            if not grad and not self.model.matches(call.func.func, {"jax.value_and_grad"}):
                continue
            assign = self.model.parent(call)
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
                continue
            target = assign.targets[0].target
            if grad and isinstance(target, cst.Name):
                gradients.add(target.value)
            elif grad and isinstance(target, cst.Tuple) and target.elements:  # has_aux: (grads, aux)
                gradients.update(n.value for n in [target.elements[0].value] if isinstance(n, cst.Name))
            elif not grad and isinstance(target, cst.Tuple) and len(target.elements) == 2:
                gradients.update(n.value for n in [target.elements[1].value] if isinstance(n, cst.Name))
        for call in finder.calls:
            if not self._collective_over(call, axis, REDUCTIONS):
                continue
            if mentions(call, gradients):
                return True
            lam = self.model.parent(self.model.parent(call))
            tree_map = self.model.parent(self.model.parent(lam)) if isinstance(lam, cst.Lambda) else None
            if (isinstance(tree_map, cst.Call) and self.model.matches(tree_map.func, tables.TREE_MAP)
                    and tree_map.args and tree_map.args[0].value is lam
                    and any(mentions(a.value, gradients) for a in tree_map.args[1:])):
                return True
        return False

    def _differentiates(self, func: cst.FunctionDef) -> bool:
        finder = CallFinder()
        func.body.visit(finder)
        return any(self.model.matches(call.func, AUTODIFF) for call in finder.calls)

    def _collective_over(self, call: cst.Call, axis: str, names: frozenset[str] = COLLECTIVES) -> bool:
        if not self.model.matches(call.func, names):
            return False
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        named = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "axis_name"), None)
        value = named if named is not None else (positional[1] if len(positional) > 1 else None)
        return isinstance(value, cst.SimpleString) and value.evaluated_value == axis

    def _driver(self, call: cst.Call) -> cst.FunctionDef | cst.Lambda | cst.Module:
        for ancestor in self.model.ancestors(call):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return ancestor
        return self.model.module

    def _check_call_statements(self) -> None:
        for step in self.steps:
            for call in step.calls:
                assign = self.model.parent(call)
                line = self.model.parent(assign)
                if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                        and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
                    raise Reject(f"`{code_of(call)}` is not of the form `outputs = {step.name}(...)`")
                target = assign.targets[0].target
                if step.tuple_return:
                    if not (isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(step.elements)
                            and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name)
                                    for e in target.elements)):
                        raise Reject(f"the outputs of `{step.name}` are not unpacked into one name each")
                elif not isinstance(target, cst.Name):
                    raise Reject(f"the output of `{step.name}` is not bound to a name")
                if len(call.args) != len(step.params) or any(a.keyword is not None or a.star for a in call.args):
                    raise Reject(f"`{step.name}` is not called with one positional argument per parameter")
                if self._driver(call) is not self.driver:
                    raise Reject("the steps are called from more than one function")
                for position, target_name in enumerate(self._targets(call)):
                    self._outputs.setdefault(id(target_name), []).append((step, call, position))

    def _targets(self, call: cst.Call) -> list[cst.Name]:
        target = self.model.parent(call).targets[0].target
        if isinstance(target, cst.Name):
            return [target]
        return [e.value for e in target.elements]

    # ------------------------------------------------------------------------- the arguments
    def _assignments(self, name: str) -> list[Assignment]:
        return list(self.scope.assignments[name])

    def _accesses(self, name: str) -> list[cst.Name]:
        nodes: dict[int, cst.Name] = {}
        for assignment in self._assignments(name):
            for access in assignment.references:
                nodes[id(access.node)] = access.node
        for access in self.scope.accesses[name]:
            nodes[id(access.node)] = access.node
        for node in nodes.values():
            if self.model.scope_of(node) is not self.scope:
                raise Reject(f"`{name}` is also read by a nested function or comprehension")
        return sorted(nodes.values(), key=lambda n: self.model.index.order.get(n, 0))

    def _argument(self, name: str) -> None:
        """Classify an argument variable (replicated state, or batch) and check every use of it."""
        assignments = self._assignments(name)
        replicates = []
        for assignment in assignments:
            value = self._assigned(assignment)
            if value is not None and self._replicated(value) is not None:
                replicates.append(assignment)
        if replicates:
            if len(replicates) != 1:
                raise Reject(f"`{name}` is replicated more than once")
            self._state(name, replicates[0], assignments)
            self.state_names.add(name)
        elif any(self._output_position(a) is not None for a in assignments):
            raise Reject(f"`{name}` is fed back to a step but not replicated by a recognised helper")
        else:
            self._batch(name, assignments)

    def _assigned(self, assignment) -> cst.BaseExpression | None:
        """The value of ``name = value`` (a plain one-target assignment statement), else None."""
        node = getattr(assignment, "node", None)
        assign = self.model.parent(self.model.parent(node)) if isinstance(node, cst.Name) else None
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.targets[0].target is node:
            line = self.model.parent(assign)
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
                return assign.value
        return None

    def _output_position(self, assignment) -> tuple[Step, cst.Call, int] | None:
        node = getattr(assignment, "node", None)
        producers = self._outputs.get(id(node))
        return producers[0] if producers else None

    def _state(self, name: str, replicate: Assignment, assignments: list) -> None:
        value = self._assigned(replicate)
        source, count = self._replicated(value)
        statement = self._statement_of(value)
        start = self._index(self.block, statement)
        if start is None or self.block[start] is not statement:
            raise Reject(f"`{name}` is replicated inside a block, not at the top level of the driver")
        self.counts.add(count)
        unstacks = self._unstacks(name)
        for assignment in assignments:
            if assignment is replicate or self._before(assignment.node, start):
                continue  # the value before replication
            if self._output_position(assignment) is None and id(self._statement_of(assignment.node)) not in unstacks:
                raise Reject(f"`{name}` is rebound after its replication to something other than a step output")
        for access in self._accesses(name):
            index = self._index(self.block, access)
            if index is None:
                raise Reject(f"`{name}` is read outside the driver's body")
            if index < start or (index == start and self.model.is_within(access, value)):
                continue  # reads the value before replication
            self._read(name, access, unstacks, STATE)
        placed = self._put(source, STATE)
        self.edits.append(Edit(value, placed))
        self._remove_import_of(value.func)

    def _batch(self, name: str, assignments: list) -> None:
        stacked = [(a, self._assigned(a)) for a in assignments]
        forms = [(a, v) for a, v in stacked if v is not None and self._unstacked(v) is not None]
        if forms:
            if len(forms) != 1:
                raise Reject(f"`{name}` is reshaped to (devices, ...) more than once")
            self._reshaped_batch(name, *forms[0], assignments)
        else:
            self._opaque_batch(name, assignments)

    def _reshaped_batch(self, name: str, assignment, value: cst.BaseExpression, assignments: list) -> None:
        """``x = b.reshape(n, -1, ...)`` / ``x = shard(b)``: that line places the global batch."""
        statement = self._statement_of(value)
        block = self.model.parent(statement)
        siblings = block.body
        start = self._index(siblings, statement)
        for other in assignments:
            if other is not assignment:
                index = self._index(siblings, other.node)
                if index is not None and index > start:
                    raise Reject(f"`{name}` is rebound after it is reshaped for the devices")
        for access in self._accesses(name):
            if self.model.is_within(access, value):
                continue
            index = self._index(siblings, access)
            if index is None or index <= start or self._step_argument(access) is None:
                raise Reject(f"the per-device batch `{name}` is read by something other than a step")
            self._argument_kind(access, BATCH)
        new, count = self._unstacked(value)
        self.counts.add(count)
        self.edits.append(Edit(value, self._put(new, BATCH)))
        self._remove_import_of(value.func)

    def _opaque_batch(self, name: str, assignments: list) -> None:
        """A value created with its device axis (``x = rng.normal(size=(8, 16, 3))``): its two
        leading axes merge into the global batch right before the statement that first passes it
        to a step. Exact for any mapped input of rank >= 2 (np.concatenate raises on rank 1)."""
        if len(assignments) != 1:
            raise Reject(f"the per-device value `{name}` is bound more than once (or is a parameter)")
        node = assignments[0].node
        loop = self._loop_binding(node)
        if loop is not None:
            siblings, start = loop.body.body, -1
        elif isinstance(node, cst.Param) and self._is_driver_parameter(node):
            siblings, start = self.block, -1
        elif self._assigned(assignments[0]) is not None:
            statement = self._statement_of(node)
            siblings = self.model.parent(statement).body
            start = self._index(siblings, statement)
        else:
            raise Reject(f"`{name}` is bound by something other than `{name} = ...` or a for loop")
        accesses = self._accesses(name)
        uses = [a for a in accesses if self._step_argument(a) is not None]
        indexes = [self._index(siblings, a) for a in uses]
        if not uses or any(i is None or i <= start for i in indexes):
            raise Reject(f"`{name}` is passed to a step outside the block that defines it")
        anchor = min(indexes)
        for access in accesses:
            index = self._index(siblings, access)
            if index is not None and start < index < anchor:
                continue  # derived from the stacked value before it is merged
            if index is None or index < anchor or self._step_argument(access) is None:
                raise Reject(f"the per-device value `{name}` is read by something other than a step")
            self._argument_kind(access, BATCH)
        value = self.model.assigned_value(node)
        merged = f"np.concatenate({name})" if value is not None and self.placement.is_array(value) \
            else f"jax.tree.map(np.concatenate, {name})"
        statement = cst.parse_statement(f"{name} = jax.device_put({merged}, {self._sharding(BATCH)})")
        if not any(self.model.is_within(siblings[anchor], e.target) or e.target is siblings[anchor]
                   for e in self.edits if e.before):
            comment = cst.EmptyLine(comment=cst.Comment("# the global batch: the devices' rows, concatenated"))
            statement = statement.with_changes(leading_lines=[comment])
        self.edits.append(Edit(siblings[anchor], before=(statement,)))
        self.imports.append(ImportSpec("numpy", None, "np"))

    def _loop_binding(self, node: cst.CSTNode) -> cst.For | None:
        """The `for` loop whose target binds ``node`` (``for x in ...``, ``for x, y in ...``)."""
        current, parent = node, self.model.parent(node)
        while isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
            current, parent = parent, self.model.parent(parent)
        if isinstance(parent, cst.For) and parent.target is current and isinstance(parent.body, cst.IndentedBlock):
            return parent
        return None

    def _inline_batch(self, step: Step, position: int, value: cst.BaseExpression) -> None:
        found = self._unstacked(value)
        if found is None:
            raise Reject(f"`{step.name}` gets `{code_of(value)}`, which is neither a name nor a reshaped batch")
        new, count = found
        self.counts.add(count)
        self._kind(step, position, BATCH)
        self.edits.append(Edit(value, self._put(new, BATCH)))
        self._remove_import_of(value.func)

    def _step_argument(self, access: cst.Name) -> tuple[Step, int] | None:
        """(step, position) when ``access`` is a step's argument, or a name in a tuple/list/dict
        display passed as one (`step(params, (x, y))`)."""
        node: cst.CSTNode = access
        parent = self.model.parent(node)
        while isinstance(parent, (cst.Element, cst.DictElement, cst.Tuple, cst.List, cst.Dict)):
            if isinstance(parent, cst.DictElement) and parent.value is not node:
                return None  # a key, not a leaf
            node, parent = parent, self.model.parent(parent)
        call = self.model.parent(parent)
        if isinstance(parent, cst.Arg) and parent.value is node and id(call) in self.calls:
            if node is not access and display_names(node) is None:
                return None
            step, _ = self.calls[id(call)]
            return step, list(call.args).index(parent)
        return None

    def _argument_kind(self, access: cst.Name, kind: str) -> None:
        step, position = self._step_argument(access)
        self._kind(step, position, kind)

    def _kind(self, step: Step, position: int, kind: str) -> None:
        if step.kinds.setdefault(position, kind) != kind:
            raise Reject(f"`{step.name}` gets a replicated value and a batch at the same position")

    # --------------------------------------------------------------------------- positions
    def _statement_of(self, node: cst.CSTNode) -> cst.BaseStatement:
        for ancestor in [node, *self.model.ancestors(node)]:
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return ancestor
        raise Reject("an expression outside any statement")

    def _index(self, statements: Sequence[cst.CSTNode], node: cst.CSTNode) -> int | None:
        """The index of the statement in ``statements`` that holds ``node`` (None: none does)."""
        positions = {id(s): i for i, s in enumerate(statements)}
        for ancestor in [node, *self.model.ancestors(node)]:
            if id(ancestor) in positions:
                return positions[id(ancestor)]
        return None

    def _before(self, node: cst.CSTNode, start: int) -> bool:
        """``node`` (an assignment) runs before the driver's statement ``start``: in an earlier
        statement, or as a parameter of the driver."""
        if isinstance(node, cst.Param):
            return self._is_driver_parameter(node)
        index = self._index(self.block, node)
        if index is None:
            raise Reject(f"`{code_of(node)}` is bound outside the driver's body")
        return index < start

    def _is_driver_parameter(self, node: cst.CSTNode) -> bool:
        return isinstance(self.driver, cst.FunctionDef) and self.model.is_within(node, self.driver.params)

    def _order(self, node: cst.CSTNode) -> int:
        return self._index(self.model.module.body, node) or 0
