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

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import Assignment

from pmap_migrate.rules.knowledge import tables
from pmap_migrate.rules.fixes.api import removal_spec
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.fixes.code import code_of, simple_params
from pmap_migrate.rules.fixes.pmap_options import Unsupported, int_tuple
from pmap_migrate.rules.fixes.placement import Placement
from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter
from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.analysis.syntax import ReturnFinder

ALL = "all"  # a device count meaning "every local device"
STATE, BATCH = "P()", "batch"
PRIORITY = 10  # chosen before the local fixes (PM201, PM301, PM303, ...) of the code it rewrites

_COLLECTIVES = frozenset(f"jax.lax.{n}" for n in ("pmean", "psum", "pmax", "pmin", "all_gather"))
_REDUCTIONS = frozenset(f"jax.lax.{n}" for n in ("pmean", "psum"))
_AUTODIFF = frozenset({"jax.grad", "jax.value_and_grad", "jax.vjp", "jax.jvp", "jax.linearize"})
_METADATA = frozenset({"shape", "dtype", "ndim"})
_HOST_CONVERSIONS = frozenset({"numpy.asarray", "numpy.array", "jax.device_get", "builtins.float", "builtins.str",
                               "builtins.repr"})
_LAYOUT = frozenset({"round", "ravel", "flatten", "tolist", "astype"})
_FLAX_SHARD = frozenset({"flax.training.common_utils.shard"})
_STACK = frozenset({"numpy.stack", "jax.numpy.stack", "numpy.array", "jax.numpy.array", "numpy.asarray",
                    "jax.numpy.asarray"})
_BROADCAST = frozenset({"numpy.broadcast_to", "jax.numpy.broadcast_to"})
_SHAPE = frozenset({"numpy.shape", "jax.numpy.shape"})
_RESHAPE = frozenset({"numpy.reshape", "jax.numpy.reshape"})
_ALL_DEVICES = frozenset({"jax.local_devices", "jax.devices"})
_DEVICE_COUNT = frozenset({"jax.local_device_count", "jax.device_count"})
_STEP_OPTIONS = {"fun", "axis_name", "donate_argnums", "in_axes", "out_axes"}
_TEMPLATE_NAMES = {"NamedSharding": {"jax.sharding.NamedSharding", "jax.NamedSharding"}}


class _Reject(Exception):
    """The module does not fit the pattern exactly; the message says where."""


@dataclass
class _Step:
    site: TransformSite
    func: cst.FunctionDef  # the mapped function (its body stays unchanged)
    name: str  # what the driver calls
    statement: cst.BaseStatement  # the decorated def, or `name = jax.pmap(...)`
    params: list[str]
    elements: list[cst.BaseExpression]  # the returned values (one when not a tuple)
    tuple_return: bool
    axis: str  # the axis name's literal, quotes included
    donate: tuple[int, ...]
    calls: list[cst.Call] = field(default_factory=list)
    kinds: dict[int, str] = field(default_factory=dict)  # argument position -> STATE / BATCH


class Idiomatic:
    """Recognises the module's data-parallel loop once and builds the one fix that rewrites it."""

    def __init__(self, rewriter: Rewriter, placement: Placement) -> None:
        self.model = rewriter.model
        self.rewriter = rewriter
        self.placement = placement
        # Why the module's loop was not recognised (None when it was).
        self.reason: str | None = None
        self.steps: list[_Step] = []
        self.fix: FixSpec | None = None
        try:
            self._recognise()
        except (_Reject, Unsupported) as why:
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
            raise _Reject("the module runs several processes")
        steps = [step for step in map(self._step, self.model.pmap_sites()) if step is not None]
        if not any(self._differentiates(step.func) for step in steps):
            raise _Reject("no pmapped training step (one that reduces its gradients over its axis) called as "
                          "`outs = step(...)`")
        drivers = {id(self._driver(call)): self._driver(call) for step in steps for call in step.calls}
        if len(drivers) != 1:
            raise _Reject("the steps are called from more than one function")
        self.driver = next(iter(drivers.values()))
        if any(isinstance(d, cst.Lambda) for d in drivers.values()):
            raise _Reject("a step is called inside a lambda")
        axes = {step.axis.strip("\"'") for step in steps}
        if len(axes) != 1:
            raise _Reject("the steps map over different axis names")
        self.axis = steps[0].axis
        self.steps = sorted(steps, key=lambda s: self._order(s.statement))
        if isinstance(self.driver, cst.FunctionDef) and not isinstance(self.driver.body, cst.IndentedBlock):
            raise _Reject("the driver is a one-line function")
        self.block = self.driver.body if isinstance(self.driver, cst.Module) else self.driver.body.body
        self.scope = self.model.scope_of(self.block[0]) if self.block else None
        if self.scope is None:
            raise _Reject("the driver's names cannot be resolved")
        self.mesh = _PLACEHOLDER  # the mesh helper's name is chosen once the loop is recognised
        self.edits: list[Edit] = []
        self.imports: list[ImportSpec] = []
        self.removes: list[ImportSpec] = []
        self.counts: set = set()
        self.state_names: set[str] = set()
        self.printed: set[str] = set()
        self.calls = {id(call): (step, call) for step in self.steps for call in step.calls}
        self._outputs: dict[int, list[tuple[_Step, cst.Call, int]]] = {}  # id(target Name) -> producers
        self._check_call_statements()
        names = sorted({name.value for step in self.steps for call in step.calls for arg in call.args
                        for name in _display_names(arg.value) or ()})
        for name in names:
            self._argument(name)
        for step in self.steps:
            for call in step.calls:
                for position, arg in enumerate(call.args):
                    if _display_names(arg.value) is None:
                        self._inline_batch(step, position, arg.value)
        outputs = sorted({t.value for step in self.steps for call in step.calls for t in self._targets(call)}
                         - set(names))
        for name in outputs:
            self._output(name)
        self._build()

    def _step(self, site: TransformSite) -> _Step | None:
        """``site`` as a data-parallel step, or None when it is not one (it keeps its own fix)."""
        if site.transform != PMAP or site.callee.ambiguous or site.dynamic_options:
            return None
        if id(site.node) in self.model.nested_nodes():
            return None
        if any(a.keyword is not None and a.keyword.value not in _STEP_OPTIONS for a in site.args):
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
            statement, name = self.rewriter._assignment_statement(site.node)
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
        returned = _single_return(func)
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
        return _Step(site, func, name, statement, params, elements, tuple_return, code_of(axis), donate, calls)

    def _reduces_gradients(self, func: cst.FunctionDef, axis: str) -> bool:
        """A `pmean`/`psum` over ``axis`` takes the gradients: ``lax.pmean(grads, axis)``, or
        ``tree_map(lambda g: lax.psum(g, axis) / n, grads)``, with ``grads`` bound to
        ``jax.grad(f)(...)`` (or the second element of ``jax.value_and_grad(f)(...)``)."""
        finder = _CallFinder()
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
            if not self._collective_over(call, axis, _REDUCTIONS):
                continue
            if _mentions(call, gradients):
                return True
            lam = self.model.parent(self.model.parent(call))
            tree_map = self.model.parent(self.model.parent(lam)) if isinstance(lam, cst.Lambda) else None
            if (isinstance(tree_map, cst.Call) and self.model.matches(tree_map.func, tables.TREE_MAP)
                    and tree_map.args and tree_map.args[0].value is lam
                    and any(_mentions(a.value, gradients) for a in tree_map.args[1:])):
                return True
        return False

    def _differentiates(self, func: cst.FunctionDef) -> bool:
        finder = _CallFinder()
        func.body.visit(finder)
        return any(self.model.matches(call.func, _AUTODIFF) for call in finder.calls)

    def _collective_over(self, call: cst.Call, axis: str, names: frozenset[str] = _COLLECTIVES) -> bool:
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
                    raise _Reject(f"`{code_of(call)}` is not of the form `outputs = {step.name}(...)`")
                target = assign.targets[0].target
                if step.tuple_return:
                    if not (isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(step.elements)
                            and all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name)
                                    for e in target.elements)):
                        raise _Reject(f"the outputs of `{step.name}` are not unpacked into one name each")
                elif not isinstance(target, cst.Name):
                    raise _Reject(f"the output of `{step.name}` is not bound to a name")
                if len(call.args) != len(step.params) or any(a.keyword is not None or a.star for a in call.args):
                    raise _Reject(f"`{step.name}` is not called with one positional argument per parameter")
                if self._driver(call) is not self.driver:
                    raise _Reject("the steps are called from more than one function")
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
                raise _Reject(f"`{name}` is also read by a nested function or comprehension")
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
                raise _Reject(f"`{name}` is replicated more than once")
            self._state(name, replicates[0], assignments)
            self.state_names.add(name)
        elif any(self._output_position(a) is not None for a in assignments):
            raise _Reject(f"`{name}` is fed back to a step but not replicated by a recognised helper")
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

    def _output_position(self, assignment) -> tuple[_Step, cst.Call, int] | None:
        node = getattr(assignment, "node", None)
        producers = self._outputs.get(id(node))
        return producers[0] if producers else None

    def _state(self, name: str, replicate: Assignment, assignments: list) -> None:
        value = self._assigned(replicate)
        source, count = self._replicated(value)
        statement = self._statement_of(value)
        start = self._index(self.block, statement)
        if start is None or self.block[start] is not statement:
            raise _Reject(f"`{name}` is replicated inside a block, not at the top level of the driver")
        self.counts.add(count)
        unstacks = self._unstacks(name)
        for assignment in assignments:
            if assignment is replicate or self._before(assignment.node, start):
                continue  # the value before replication
            if self._output_position(assignment) is None and id(self._statement_of(assignment.node)) not in unstacks:
                raise _Reject(f"`{name}` is rebound after its replication to something other than a step output")
        for access in self._accesses(name):
            index = self._index(self.block, access)
            if index is None:
                raise _Reject(f"`{name}` is read outside the driver's body")
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
                raise _Reject(f"`{name}` is reshaped to (devices, ...) more than once")
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
                    raise _Reject(f"`{name}` is rebound after it is reshaped for the devices")
        for access in self._accesses(name):
            if self.model.is_within(access, value):
                continue
            index = self._index(siblings, access)
            if index is None or index <= start or self._step_argument(access) is None:
                raise _Reject(f"the per-device batch `{name}` is read by something other than a step")
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
            raise _Reject(f"the per-device value `{name}` is bound more than once (or is a parameter)")
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
            raise _Reject(f"`{name}` is bound by something other than `{name} = ...` or a for loop")
        accesses = self._accesses(name)
        uses = [a for a in accesses if self._step_argument(a) is not None]
        indexes = [self._index(siblings, a) for a in uses]
        if not uses or any(i is None or i <= start for i in indexes):
            raise _Reject(f"`{name}` is passed to a step outside the block that defines it")
        anchor = min(indexes)
        for access in accesses:
            index = self._index(siblings, access)
            if index is not None and start < index < anchor:
                continue  # derived from the stacked value before it is merged
            if index is None or index < anchor or self._step_argument(access) is None:
                raise _Reject(f"the per-device value `{name}` is read by something other than a step")
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

    def _inline_batch(self, step: _Step, position: int, value: cst.BaseExpression) -> None:
        found = self._unstacked(value)
        if found is None:
            raise _Reject(f"`{step.name}` gets `{code_of(value)}`, which is neither a name nor a reshaped batch")
        new, count = found
        self.counts.add(count)
        self._kind(step, position, BATCH)
        self.edits.append(Edit(value, self._put(new, BATCH)))
        self._remove_import_of(value.func)

    def _step_argument(self, access: cst.Name) -> tuple[_Step, int] | None:
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
            if node is not access and _display_names(node) is None:
                return None
            step, _ = self.calls[id(call)]
            return step, list(call.args).index(parent)
        return None

    def _argument_kind(self, access: cst.Name, kind: str) -> None:
        step, position = self._step_argument(access)
        self._kind(step, position, kind)

    def _kind(self, step: _Step, position: int, kind: str) -> None:
        if step.kinds.setdefault(position, kind) != kind:
            raise _Reject(f"`{step.name}` gets a replicated value and a batch at the same position")

    # ------------------------------------------------------------------------------ the reads
    def _output(self, name: str) -> None:
        """A step output that is not fed back: it may only be read with `[0]` / `unreplicate`
        (dropped), or printed when the step returns it reduced over the axis."""
        unstacks = self._unstacks(name)
        for assignment in self._assignments(name):
            if self._output_position(assignment) is None and id(self._statement_of(assignment.node)) not in unstacks:
                raise _Reject(f"`{name}` holds a step output and something else")
        for access in self._accesses(name):
            self._read(name, access, unstacks, None)

    def _read(self, name: str, access: cst.Name, unstacks: dict[int, cst.SimpleStatementLine], kind) -> None:
        if self._step_argument(access) is not None:
            if kind is None:
                raise _Reject(f"the step output `{name}` is passed to a step")
            if self._after_unstack(access, unstacks):
                raise _Reject(f"`{name}` is passed to a step after it was unreplicated")
            self._argument_kind(access, kind)
            return
        if self._after_unstack(access, unstacks):
            return  # legacy read an unstacked value here too
        read = self._row_read(access)
        if read is not None:
            statement = self._statement_of(read)
            if id(statement) in unstacks:
                if len(self.model.parent(statement).body) == 1:
                    raise _Reject(f"cannot remove `{code_of(statement).strip()}`: it is alone in its block")
                self.edits.append(Edit(statement, cst.RemovalSentinel.REMOVE))
                return
            if isinstance(read, cst.Subscript) and not self._array_output(name):
                raise _Reject(f"`{code_of(read)}` may pick an element of a tuple output, not a device's row")
            plain = cst.Name(name, lpar=getattr(read, "lpar", ()), rpar=getattr(read, "rpar", ()))
            self.edits.append(Edit(read, plain))
            self._remove_import_of(read.func if isinstance(read, cst.Call) else None)
            return
        if self._printed(access) and (kind == STATE or self._replicated_output(name)):
            self.printed.add(name)
            return
        raise _Reject(f"`{code_of(self._statement_of(access)).strip()}` reads the device axis of `{name}`")

    def _row_read(self, access: cst.Name) -> cst.BaseExpression | None:
        """``v[0]``, ``unreplicate(v)`` or ``tree_map(lambda x: x[0], v)`` around ``access``."""
        parent = self.model.parent(access)
        if isinstance(parent, cst.Subscript) and parent.value is access and _zero_index(parent):
            return parent
        call = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
        if not isinstance(call, cst.Call) or parent.keyword is not None or parent.star:
            return None
        args = list(call.args)
        if self.model.matches(call.func, tables.FLAX_UNREPLICATE) and args == [parent]:
            return call
        if (self.model.matches(call.func, tables.TREE_MAP) and len(args) == 2 and args[1] is parent
                and args[0].keyword is None and _row_zero_lambda(args[0].value)):
            return call
        return None

    def _unstacks(self, name: str) -> dict[int, cst.SimpleStatementLine]:
        """Statements ``name = unreplicate(name)`` (or ``name[0]``...): removed by the rewrite, and
        reads after them in the same block saw an unstacked value in legacy code too."""
        found = {}
        for assignment in self._assignments(name):
            value = self._assigned(assignment)
            if value is None:
                continue
            inner = _row_read_of(self.model, value)
            if isinstance(inner, cst.Name) and inner.value == name:
                statement = self._statement_of(value)
                found[id(statement)] = statement
        return found

    def _after_unstack(self, access: cst.Name, unstacks: dict[int, cst.SimpleStatementLine]) -> bool:
        """Whether an unstacking statement runs before ``access`` in a block enclosing it, with no
        step output bound to the name in between."""
        for statement in unstacks.values():
            block = self.model.parent(statement).body
            start, index = self._index(block, statement), self._index(block, access)
            if index is None or index <= start:
                continue
            between = block[start + 1:index + 1]
            if not any(self.model.is_within(call, s) for s in between for _, call in self.calls.values()):
                return True
        return False

    def _printed(self, access: cst.Name) -> bool:
        """``access`` is printed whole (its copies shown once instead of once per device): a
        `print` argument, possibly through string keys (``params["b"]``), ``.shape`` / ``.dtype`` /
        ``.ndim``, or a host conversion (``np.asarray(x)``, ``float(x)``) and a layout-only method
        (``.round(6)``, ``.ravel()``). Anything that indexes, reduces or computes is refused: it
        would see a different value without the device axis."""
        node: cst.CSTNode = access
        parent = self.model.parent(node)
        while isinstance(parent, cst.Subscript) and parent.value is node and _string_index(parent):
            node, parent = parent, self.model.parent(parent)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _METADATA:
            node, parent = parent, self.model.parent(parent)
        else:
            arg = parent
            call = self.model.parent(arg) if isinstance(arg, cst.Arg) else None
            if (isinstance(call, cst.Call) and arg.value is node and arg.keyword is None and not arg.star
                    and self.model.matches(call.func, _HOST_CONVERSIONS)):
                node, parent = call, self.model.parent(call)
                while isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _LAYOUT:
                    call = self.model.parent(parent)
                    if not (isinstance(call, cst.Call) and call.func is parent):
                        return False
                    node, parent = call, self.model.parent(call)
        if isinstance(parent, cst.FormattedStringExpression):
            node, parent = self.model.parent(parent), self.model.parent(self.model.parent(parent))
        call = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
        return (isinstance(call, cst.Call) and parent.value is node and not parent.star
                and self.model.matches(call.func, {"builtins.print"}))

    def _producers(self, name: str) -> list[tuple[_Step, cst.Call, int]]:
        found = []
        for assignment in self._assignments(name):
            found.extend(self._outputs.get(id(getattr(assignment, "node", None)), ()))
        return found

    def _array_output(self, name: str) -> bool:
        """Every step output ``name`` holds is evidently an array, so ``name[0]`` indexes its
        device axis (not an element of a tuple)."""
        return all(self._array_like(step.elements[k]) for step, _, k in self._producers(name))

    def _array_like(self, value: cst.BaseExpression, depth: int = 0) -> bool:
        if depth > 4:
            return False
        if self.placement.is_array(value):
            return True
        if isinstance(value, cst.Call) and self.model.matches(value.func, _COLLECTIVES) and value.args:
            return self._array_like(value.args[0].value, depth + 1)
        if not isinstance(value, cst.Name):
            return False
        assignments = self._reaching(value)
        for assignment in assignments:
            node = getattr(assignment, "node", None)
            assigned = self.model.assigned_value(node)
            if assigned is not None:
                if not self._array_like(assigned, depth + 1):
                    return False
            elif not self._loss_of_value_and_grad(node):
                return False
        return bool(assignments)

    def _reaching(self, name: cst.Name) -> list:
        """The assignments that may reach the read ``name``, without the one of its own statement
        (``loss = lax.pmean(loss, ...)`` reads the previous ``loss``)."""
        own = self._statement_of(name)

        def others(assignments):
            return [a for a in assignments
                    if not (isinstance(getattr(a, "node", None), cst.CSTNode) and self.model.is_within(a.node, own))]

        return others(self.model.reaching_assignments(name)) or others(self.model.assignments_of(name))

    def _loss_of_value_and_grad(self, node) -> bool:
        """``node`` is ``loss`` in ``loss, grads = jax.value_and_grad(f)(...)``."""
        target = self.model.parent(self.model.parent(node)) if isinstance(node, cst.Name) else None
        assign = self.model.parent(self.model.parent(target)) if isinstance(target, cst.Tuple) else None
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.targets[0].target is target
                and target.elements and target.elements[0].value is node):
            return False
        value = assign.value
        return (isinstance(value, cst.Call) and isinstance(value.func, cst.Call)
                and self.model.matches(value.func.func, {"jax.value_and_grad"}))

    def _replicated_output(self, name: str) -> bool:
        """Every step output ``name`` holds is a reduction over the axis (the same on every device)."""
        return all(self._reduced(step, step.elements[k]) for step, _, k in self._producers(name))

    def _reduced(self, step: _Step, value: cst.BaseExpression) -> bool:
        axis = step.axis.strip("\"'")
        if isinstance(value, cst.Call):
            return self._collective_over(value, axis)
        if isinstance(value, cst.Name):
            assignments = self._reaching(value)
            values = [self.model.assigned_value(getattr(a, "node", None)) for a in assignments]
            return bool(values) and all(isinstance(v, cst.Call) and self._collective_over(v, axis) for v in values)
        return False

    # -------------------------------------------------------------------------- helper forms
    def _count(self, node: cst.BaseExpression | None, depth: int = 0):
        """A device count: an int literal, or ALL for `jax.local_device_count()` and the like."""
        if node is None or depth > 3:
            return None
        if isinstance(node, cst.Integer):
            return int(node.value, 0)
        if isinstance(node, cst.Call):
            if self.model.matches(node.func, _DEVICE_COUNT) and not node.args:
                return ALL
            if self.model.matches(node.func, {"builtins.len"}) and len(node.args) == 1 \
                    and self._all_devices(node.args[0].value):
                return ALL
        if isinstance(node, cst.Name):
            assignments = self.model.assignments_of(node)
            if len(assignments) == 1:
                value = self.model.assigned_value(getattr(assignments[0], "node", None))
                return self._count(value, depth + 1)
        return None

    def _all_devices(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and not node.args and self.model.matches(node.func, _ALL_DEVICES)

    def _replicated(self, value: cst.BaseExpression):
        """(the unreplicated expression, the device count) of a replication, or None."""
        if not isinstance(value, cst.Call) or any(a.star for a in value.args):
            return None
        args = list(value.args)
        if self.model.matches(value.func, tables.DEVICE_PUT_REPLICATED):
            named = {a.keyword.value: a.value for a in args if a.keyword is not None}
            positional = [a.value for a in args if a.keyword is None]
            source = positional[0] if positional else named.get("x")
            devices = positional[1] if len(positional) > 1 else named.get("devices")
            if source is not None and devices is not None and len(args) == 2 and self._all_devices(devices):
                return source, ALL
            return None
        if self.model.matches(value.func, tables.FLAX_REPLICATE):
            if len(args) == 1 and args[0].keyword is None:
                return args[0].value, ALL
            return None
        if self.model.matches(value.func, tables.TREE_MAP) and len(args) == 2 and all(a.keyword is None for a in args):
            function = args[0].value
            if isinstance(function, cst.Lambda):
                params = simple_params(function.params)
                if params is not None and len(params) == 1:
                    count = self._copies(function.body, params[0])
                    if count is not None:
                        return args[1].value, count
            return None
        if len(args) >= 1 and isinstance(args[0].value, (cst.List, cst.BinaryOperation, cst.Name)):
            source = self._copied(value)
            if source is not None:
                return source
        return None

    def _copied(self, value: cst.Call):
        """``np.stack([w] * n)`` / ``np.broadcast_to(w, (n, *w.shape))`` of a plain name ``w``."""
        args = list(value.args)
        if self.model.matches(value.func, _BROADCAST) and len(args) == 2 and isinstance(args[0].value, cst.Name):
            name = args[0].value.value
            count = self._copies(value, name)
            return (args[0].value, count) if count is not None else None
        if self.model.matches(value.func, _STACK) and len(args) == 1:
            repeated = _repeated(args[0].value)
            if repeated is not None and isinstance(repeated[0], cst.Name):
                count = self._count(repeated[1])
                return (repeated[0], count) if count is not None else None
        return None

    def _copies(self, body: cst.BaseExpression, name: str):
        """The count n when ``body`` stacks n copies of the name ``name``, else None."""
        if not isinstance(body, cst.Call) or any(a.star or a.keyword for a in body.args):
            return None
        args = [a.value for a in body.args]
        if self.model.matches(body.func, _STACK) and len(args) == 1:
            repeated = _repeated(args[0])
            if repeated is not None and _is_name(repeated[0], name):
                return self._count(repeated[1])
        if self.model.matches(body.func, _BROADCAST) and len(args) == 2 and _is_name(args[0], name):
            return self._count(self._leading_of_shape(args[1], name))
        return None

    def _leading_of_shape(self, shape: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
        """n in ``(n, *p.shape)``, ``(n,) + p.shape`` or ``(n,) + np.shape(p)``."""
        if isinstance(shape, cst.Tuple) and len(shape.elements) == 2:
            first, rest = shape.elements
            if isinstance(rest, cst.StarredElement) and self._shape_of(rest.value, name):
                return first.value
        if isinstance(shape, cst.BinaryOperation) and isinstance(shape.operator, cst.Add) \
                and isinstance(shape.left, cst.Tuple) and len(shape.left.elements) == 1 \
                and self._shape_of(shape.right, name):
            return shape.left.elements[0].value
        return None

    def _shape_of(self, node: cst.BaseExpression, name: str) -> bool:
        if isinstance(node, cst.Attribute) and node.attr.value == "shape" and _is_name(node.value, name):
            return True
        return (isinstance(node, cst.Call) and self.model.matches(node.func, _SHAPE) and len(node.args) == 1
                and _is_name(node.args[0].value, name))

    def _unstacked(self, value: cst.BaseExpression):
        """(the global batch expression, the device count) of ``b.reshape(n, -1, ...)`` or
        ``shard(b)``, or None."""
        if not isinstance(value, cst.Call) or any(a.keyword is not None for a in value.args):
            return None
        if self.model.matches(value.func, _FLAX_SHARD):
            return (value.args[0].value, ALL) if len(value.args) == 1 and not value.args[0].star else None
        function = self.model.matches(value.func, _RESHAPE)
        if function and len(value.args) == 2:
            receiver, shape_args = value.args[0].value, [value.args[1]]
        elif not function and isinstance(value.func, cst.Attribute) and value.func.attr.value == "reshape":
            receiver, shape_args = value.func.value, list(value.args)
        else:
            return None
        if len(shape_args) == 1 and not shape_args[0].star:
            shape = shape_args[0].value
            extra = None
            if isinstance(shape, cst.BinaryOperation) and isinstance(shape.operator, cst.Add) \
                    and isinstance(shape.left, cst.Tuple):
                shape, extra = shape.left, shape.right
            if not isinstance(shape, cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in shape.elements):
                return None
            items = [e.value for e in shape.elements]
            if len(items) < 2 or self._count(items[0]) is None:
                return None
            count = self._count(items[0])
            rest = [code_of(i) for i in items[2:]]
            if not rest and extra is not None and self._tail_shape(extra, receiver):
                return receiver, count
            text = "(" + ", ".join(["-1", *rest]) + ("," if not rest else "") + ")"
            if extra is not None:
                text += f" + {code_of(extra)}"
        else:
            if len(shape_args) < 2 or shape_args[0].star or shape_args[1].star:
                return None
            if self._count(shape_args[0].value) is None:
                return None
            count = self._count(shape_args[0].value)
            rest = shape_args[2:]
            if len(rest) == 1 and rest[0].star == "*" and self._tail_shape(rest[0].value, receiver):
                return receiver, count
            text = ", ".join(["-1", *(("*" if a.star else "") + code_of(a.value) for a in rest)])
        if function:
            new = f"{code_of(value.func)}({code_of(receiver)}, {text})"
        else:
            new = f"{code_of(receiver)}.reshape({text})"
        return cst.parse_expression(new), count

    def _tail_shape(self, node: cst.BaseExpression, receiver: cst.BaseExpression) -> bool:
        """``node`` is ``receiver.shape[1:]``."""
        return (isinstance(node, cst.Subscript) and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Slice)
                and isinstance(node.slice[0].slice.lower, cst.Integer) and node.slice[0].slice.lower.value == "1"
                and node.slice[0].slice.upper is None and node.slice[0].slice.step is None
                and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
                and code_of(node.value.value) == code_of(receiver))

    # --------------------------------------------------------------------------- positions
    def _statement_of(self, node: cst.CSTNode) -> cst.BaseStatement:
        for ancestor in [node, *self.model.ancestors(node)]:
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return ancestor
        raise _Reject("an expression outside any statement")

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
            raise _Reject(f"`{code_of(node)}` is bound outside the driver's body")
        return index < start

    def _is_driver_parameter(self, node: cst.CSTNode) -> bool:
        return isinstance(self.driver, cst.FunctionDef) and self.model.is_within(node, self.driver.params)

    def _order(self, node: cst.CSTNode) -> int:
        return self._index(self.model.module.body, node) or 0

    # ------------------------------------------------------------------------------- the fix
    def _sharding(self, kind: str) -> str:
        return f"NamedSharding({self.mesh}(), {'P()' if kind == STATE else f'P({self.axis})'})"

    def _put(self, value: cst.BaseExpression, kind: str) -> cst.BaseExpression:
        return cst.parse_expression(f"jax.device_put({code_of(value)}, {self._sharding(kind)})")

    def _remove_import_of(self, func: cst.BaseExpression | None) -> None:
        if isinstance(func, cst.Name):
            spec = removal_spec(self.model, func)
            if spec is not None:
                self.removes.append(spec)

    def _build(self) -> None:
        counts = {c for c in self.counts if c is not None}
        if not counts:
            raise _Reject("the device count is not visible (no replicate/reshape names it)")
        if len(counts) != 1:
            raise _Reject("the replicated values and the batches name different device counts")
        count = counts.pop()
        devices = "jax.local_devices()" if count == ALL else f"jax.local_devices()[:{count}]"
        for step in self.steps:
            fed_back = {t.value for call in step.calls for t in self._targets(call)} & self.state_names
            if fed_back and not self._differentiates(step.func):
                raise _Reject(f"`{step.name}` updates {', '.join(sorted(fed_back))} without gradients reduced over "
                              f"{self.axis}: the copies may differ per device")
            missing = [step.params[i] for i in range(len(step.params)) if i not in step.kinds]
            if missing:
                raise _Reject(f"cannot tell how `{step.name}` gets `{missing[0]}`")
        self.rewriter._check_names_free()
        scope = self.model.scope_of(self.model.module)
        for name, meanings in _TEMPLATE_NAMES.items():
            if scope is not None and name in scope.assignments:
                if not {q.name for q in scope.get_qualified_names_for(name)} <= meanings:
                    raise _Reject(f"the module binds `{name}` to something else")
        axis_word = self.axis.strip("\"'")
        literal = self.axis[:1] in "\"'"  # a constant's name (`_PMAP_AXIS_NAME`) makes no mesh name
        self.mesh = self.rewriter.names.fresh(f"{axis_word}_mesh" if literal and re.fullmatch(r"[A-Za-z_]\w*", axis_word)
                                               else "data_mesh")
        self._rename_mesh_in_edits()  # the placements above were built before the name was chosen
        indent = self.model.indent
        helper = cst.parse_statement(
            f"@functools.cache\ndef {self.mesh}():  # the program's one mesh, built on first use: "
            f"importing the module queries no device\n{indent}return Mesh({devices}, ({self.axis},))\n")
        helper = helper.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        first = self.steps[0]
        anchor = first.statement if isinstance(self.model.parent(first.statement), cst.Module) \
            else self._top_level(first.statement)
        self.edits.append(Edit(anchor, before=(helper,)))
        for step in self.steps:
            self.edits.append(self._step_edit(step))
            expr = step.site.node.func if isinstance(step.site.node, cst.Call) else step.site.node.decorator
            self.removes.extend(self.rewriter.pmap_imports(expr))
        names = ", ".join(f"`{s.name}`" for s in self.steps)
        state = sorted({a.value.value for s in self.steps for c in s.calls for k, a in enumerate(c.args)
                        if s.kinds.get(k) == STATE and isinstance(a.value, cst.Name)})
        assumptions = [f"{', '.join(f'`{n}`' for n in state) or 'the replicated values'} hold identical copies "
                       f"on every device (the step reduces its gradients over {self.axis})",
                       "the batch's two leading axes (devices, per device) merge into one global batch axis"]
        if self.printed:
            assumptions.append(f"printing {', '.join(f'`{n}`' for n in sorted(self.printed))} may show one copy "
                               "instead of one per device")
        summary = (f"idiomatic rewrite of {names}: one mesh, replicated values `NamedSharding(mesh, P())`, the "
                   f"batch `P({self.axis})`, `jax.jit(jax.shard_map(...))` with the body unchanged, no stacking "
                   f"and no `[0]`; assumes " + "; ".join(assumptions))
        self.imports += [ImportSpec("jax"), ImportSpec("functools"), ImportSpec("jax.sharding", "Mesh"),
                         ImportSpec("jax.sharding", "NamedSharding"), ImportSpec("jax.sharding", "PartitionSpec", "P")]
        imports = tuple(spec for spec in dict.fromkeys(self.imports) if not self._bound(spec))
        self.fix = FixSpec(Applicability.UNSAFE, summary, edits=tuple(self.edits), add_imports=imports,
                           remove_imports=tuple(dict.fromkeys(self.removes)), priority=PRIORITY)

    def _bound(self, spec: ImportSpec) -> bool:
        """The module already binds the name ``spec`` would import, to that very thing (an import
        below other statements is not seen by the import adder, which would add a second one)."""
        local = spec.asname or spec.name or spec.module
        scope = self.model.scope_of(self.model.module)
        if scope is None or "." in local or local not in scope.assignments:
            return False
        wanted = f"{spec.module}.{spec.name}" if spec.name else spec.module
        return {q.name for q in scope.get_qualified_names_for(local)} == {wanted}

    def _rename_mesh_in_edits(self) -> None:
        """Placements were rendered with the placeholder mesh name; give them the chosen one."""
        renamer = _Rename(_PLACEHOLDER, self.mesh)
        fixed = []
        for edit in self.edits:
            replacement = edit.replacement
            if isinstance(replacement, cst.CSTNode):
                replacement = replacement.visit(renamer)
            before = tuple(s.visit(renamer) for s in edit.before)
            fixed.append(Edit(edit.target, replacement, before))
        self.edits = fixed

    def _top_level(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in [node, *self.model.ancestors(node)]:
            if isinstance(self.model.parent(ancestor), cst.Module):
                return ancestor
        raise _Reject("a step outside the module body")

    def _step_edit(self, step: _Step) -> Edit:
        indent = self.model.indent
        in_specs = [("P()" if step.kinds[k] == STATE else f"P({self.axis})") for k in range(len(step.params))]
        in_text = "(" + ", ".join(in_specs) + ("," if len(in_specs) == 1 else "") + ")"
        if step.tuple_return:
            out_text = "(" + ", ".join("P()" for _ in step.elements) + ("," if len(step.elements) == 1 else "") + ")"
        else:
            out_text = "P()"
        decorator = (f"@functools.partial(jax.jit, donate_argnums={_tuple(step.donate)})" if step.donate
                     else "@jax.jit")
        params = ", ".join(step.params)
        if step.site.is_decorator:
            body_name = self.rewriter.names.fresh("_" + step.name)
        else:
            body_name = step.site.fun.value
        if self._differentiates(step.func):
            why = [f"{indent}# check_vma=False keeps legacy autodiff: with True, grads of the P() values would arrive",
                   f"{indent}# already summed over {self.axis}, and the body's pmean would scale them by the device "
                   "count."]
        else:
            why = [f"{indent}# check_vma=False, as legacy pmap: a P() output is device 0's value, unchecked."]
        text = "\n".join([
            decorator,
            f"def {step.name}({params}):",
            *why,
            f"{indent}return jax.shard_map({body_name}, mesh={self.mesh}(), in_specs={in_text},",
            f"{indent}{' ' * len('return jax.shard_map(')}out_specs={out_text}, check_vma=False)({params})",
        ]) + "\n"
        wrapper = cst.parse_statement(text)
        if step.site.is_decorator:
            body = step.func.with_changes(name=cst.Name(body_name), decorators=[])
            wrapper = wrapper.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
            return Edit(step.func, cst.FlattenSentinel([body, wrapper]))
        leading = list(step.statement.leading_lines)
        first = self.model.parent(step.statement).body[0] is step.statement
        if not first and (not leading or leading[0].comment is not None):
            leading.insert(0, cst.EmptyLine(indent=False))
        return Edit(step.statement, wrapper.with_changes(leading_lines=leading))


_PLACEHOLDER = "__pmap_migrate_mesh__"


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.new) if updated_node.value == self.old else updated_node


class _CallFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _single_return(func: cst.FunctionDef) -> cst.BaseExpression | None:
    """The returned expression when ``func`` has exactly one `return`, its last statement."""
    finder = ReturnFinder()
    for statement in func.body.body:
        statement.visit(finder)
    last = func.body.body[-1] if func.body.body else None
    if len(finder.returns) != 1 or not isinstance(last, cst.SimpleStatementLine) or len(last.body) != 1:
        return None
    if last.body[0] is not finder.returns[0]:
        return None
    return finder.returns[0].value


def _zero_index(node: cst.Subscript) -> bool:
    return (len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.Integer) and node.slice[0].slice.value.value == "0")


def _string_index(node: cst.Subscript) -> bool:
    return (len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.SimpleString))


def _row_zero_lambda(node: cst.BaseExpression) -> bool:
    if not isinstance(node, cst.Lambda):
        return False
    params = simple_params(node.params)
    return (params is not None and len(params) == 1 and isinstance(node.body, cst.Subscript)
            and _is_name(node.body.value, params[0]) and _zero_index(node.body))


def _row_read_of(model, value: cst.BaseExpression) -> cst.BaseExpression | None:
    """The x of ``x[0]`` / ``unreplicate(x)`` / ``tree_map(lambda v: v[0], x)``, else None."""
    if isinstance(value, cst.Subscript) and _zero_index(value):
        return value.value
    if isinstance(value, cst.Call) and all(a.keyword is None and not a.star for a in value.args):
        args = [a.value for a in value.args]
        if model.matches(value.func, tables.FLAX_UNREPLICATE) and len(args) == 1:
            return args[0]
        if model.matches(value.func, tables.TREE_MAP) and len(args) == 2 and _row_zero_lambda(args[0]):
            return args[1]
    return None


def _repeated(node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(x, n) for ``[x] * n`` or ``n * [x]``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        for seq, count in ((node.left, node.right), (node.right, node.left)):
            if isinstance(seq, cst.List) and len(seq.elements) == 1 and isinstance(seq.elements[0], cst.Element):
                return seq.elements[0].value, count
    return None


def _mentions(node: cst.CSTNode, names: set[str]) -> bool:
    finder = _NameFinder()
    node.visit(finder)
    return not finder.names.isdisjoint(names)


class _NameFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _display_names(node: cst.BaseExpression) -> list[cst.Name] | None:
    """The names of a name, or of a tuple/list/dict display of names (None: anything else)."""
    if isinstance(node, cst.Name):
        return [node]
    if isinstance(node, (cst.Tuple, cst.List)) and node.elements:
        found = []
        for element in node.elements:
            inner = _display_names(element.value) if isinstance(element, cst.Element) else None
            if inner is None:
                return None
            found += inner
        return found
    if isinstance(node, cst.Dict) and node.elements:
        found = []
        for element in node.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            inner = _display_names(element.value)
            if inner is None:
                return None
            found += inner
        return found
    return None


def _is_name(node: cst.BaseExpression | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _tuple(values: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"
