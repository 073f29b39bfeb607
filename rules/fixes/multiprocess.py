"""The global-mesh rewrite of the pmaps of a multi-process program (PM501), in plain JAX.

In a program that runs several processes (`jax.distributed.initialize()`, `jax.process_index()`
...), legacy pmap took each process's own rows (host-local arrays with a leading axis of
`jax.local_device_count()`; anything else was a ValueError), ran them on every process's devices
together (collectives span all of them; devices, and `axis_index`, ordered process by process, each
process's local devices in order) and returned each process's own rows: `out[0]` was this
process's first device's row, `out_axes=None` this process's first device's value, an
`in_axes=None` argument reached each process's devices with that process's value. Verified on 2
processes x 4 CPU devices with jax 0.7.2 (`fixtures/programs_multiprocess/README.md`).

The rewrite, once per module: one fix for all the pmaps it covers, so that the helpers are written
once and every call site agrees on which values are global arrays.

    @functools.cache
    def batch_mesh(rows):  # legacy pmap's devices: the first `rows` of each process, process by process
        devices = [d for p in range(jax.process_count()) for d in jax.local_devices(p)[:rows]]
        return Mesh(np.array(devices), ("batch",))

    def batch_global(tree, rows, spec=P("batch")):  # this process's rows -> global arrays
        ...  # global arrays (outputs fed back) pass; host data: jax.make_array_from_process_local_data

    def host_local(tree):  # once per module, when a read needs it
        ...  # a global array -> this process's rows (global_array_to_host_local_array); the rest as it is

    def _step(x, w): ...                           # the pmapped body, unchanged

    @jax.jit
    def _step_sharded(x, w):                       # the faithful jit(shard_map), on the global mesh
        def per_device(x, w): ...
        mesh = batch_mesh(jax.tree.leaves(x)[0].shape[0] // jax.process_count())
        return jax.shard_map(per_device, mesh=mesh, ...)(x, w)

    def step(x, w):                                # this process's rows in, global arrays out
        rows = jax.local_device_count() if jax.process_count() > 1 else jax.tree.leaves(x)[0].shape[0]
        x, w = batch_global((x, w), rows)
        return _step_sharded(x, w)

The outputs stay global; every place the program reads one is rewritten to what legacy returned
there: `out[k]` on an array output -> `out.addressable_shards[k].data.squeeze(0)` (this process's
row k, from the device that holds it), the same inside `tree_map(lambda v: v[0], out)` and for
flax `unreplicate(out)`; an output passed straight to a rewritten pmap (at an in_axes-0 position)
is left global; any other read becomes `host_local(out)` (the host-local view, no copy).
On one process the same code computes what the single-process legacy pmap did: `batch_mesh(n)`
is the first n devices and the conversions do nothing to arrays already there.

`host_local` converts only arrays that span other processes and takes their mesh and spec from
the array itself, so a read of a name that may also hold host data (a NumPy stack before the first
step) is exact too. Where the data flow is not visible -- the pmapped function used as a value,
stored on `self`, a public module-level pmap of a library module (importers would get global
arrays), a name bound more than once, an output updated in place, a call or read in code that may
be traced (a method, a decorated function, a callback) -- the site gets the boundary form: the same
definition, whose wrapper returns `host_local(...)` of the result (this process's rows, as legacy
returned them) and raises on traced inputs, so no caller or read needs rewriting; an output fed back goes in without a copy (`batch_global` hands arrays whose rows
already sit on this process's devices to `host_local_array_to_global_array`). A call seen to be
traced (in a lambda or function handed to a `jax.*` callable or decorated by one), options the mesh
cannot express, or an `in_axes=None` argument from callers not seen keep the shim (`Unsupported`
says why); the module's other pmaps are still rewritten.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import BaseAssignment, ClassScope

from pmap_migrate.rules.knowledge import tables
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.fixes.code import code_of, int_literal, is_none
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan, jitted_parts, spec_for
from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter
from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.placement import Placement
from pmap_migrate.rules.analysis.syntax import IntegerIndexOf

_UNSUPPORTED_OPTIONS = ("devices", "backend", "axis_size")
_MULTIHOST = ImportSpec("jax.experimental", "multihost_utils")

# An output's layout as out_axes gave it: an axis (int) or None (out_axes=None, one device's value),
# or a tuple of those for a function returning a tuple with per-output out_axes.
Layout = int | None | tuple


@dataclass
class _Helpers:
    """The module-level helpers of one mesh axis."""

    axis: str  # the axis literal, with its quotes
    mesh: str
    to_global: str


@dataclass
class _Site:
    site: TransformSite
    plan: Plan | None = None  # filled by the renderer
    fix: FixSpec | None = None  # the definition edits (faithful machinery, global renderer)
    calls: list[cst.Call] = field(default_factory=list)
    layout: Layout = 0
    in_axes: list | int | None = 0
    wrapper_name: str = ""
    inline_call: cst.Call | None = None  # `jax.pmap(f)(x)`: the call whose func is the site
    # Why the site takes the boundary form (None: the global form): its wrapper takes and returns
    # this process's rows, as legacy pmap did, and no call or read of its outputs is rewritten.
    boundary: str | None = None
    unseen: bool = False  # some callers are not seen (their in_axes=None arguments are not checked)
    names: set[str] = field(default_factory=set)  # the names its definition took (kept when rendered again)


class GlobalRewrite:
    """The module's global-mesh plan: which pmap sites are rewritten (and how), which keep the shim."""

    def __init__(self, rewriter: Rewriter, placement: Placement) -> None:
        self.rewriter = rewriter
        self.placement = placement
        self.model = rewriter.model
        self._reasons: dict[int, str] = {}
        self._sites: list[_Site] = []
        self._fix: FixSpec | None = None
        self._planned = False
        self._helper_names: dict[str, _Helpers] = {}  # axis literal -> its helpers
        self._host_local: str | None = None
        self._host_local_used = False
        self._accesses: dict[str, list[cst.Name]] | None = None
        self._traced: dict[int, bool] = {}

    # ------------------------------------------------------------------ public
    def fix_for(self, site: TransformSite) -> FixSpec:
        self._plan()
        why = self._reasons.get(id(site))
        if why is not None:
            raise Unsupported(why)
        leader = self._sites[0]
        assert self._fix is not None
        if leader.site is site:
            return self._fix
        return FixSpec(self._fix.applicability, f"rewritten together with `{leader.wrapper_name}` "
                       "(one global-mesh rewrite for every pmap of this multi-process module)")

    # ------------------------------------------------------------------ planning
    def _plan(self) -> None:
        if self._planned:
            return
        self._planned = True
        candidates: list[_Site] = []
        for site in sorted(self.model.pmap_sites(), key=self._position):
            try:
                candidates.append(self._candidate(site))
            except Unsupported as why:
                self._reasons[id(site)] = str(why)
        # A site whose reads cannot be rewritten drops out; the reads of the others then see one
        # pmap fewer that takes global arrays: recompute until nothing changes.
        while candidates:
            self._sites = candidates
            try:
                self._fix = self._combined_fix()
                return
            except _SiteFailure as failure:
                entry = failure.site
                if entry.boundary is None and self._boundary_admits(entry):
                    # Its outputs' reads cannot be rewritten: it returns host-local rows instead,
                    # which every read takes as it took legacy's.
                    entry.boundary = failure.why
                    try:
                        self._define(entry)
                        continue
                    except Unsupported:
                        pass
                self._reasons[id(entry.site)] = failure.why
                candidates = [c for c in candidates if c is not entry]
            except Unsupported as why:  # about the module, not one site (a name the helpers need is taken)
                for candidate in candidates:
                    self._reasons[id(candidate.site)] = str(why)
                break
        self._sites = []

    def _position(self, site: TransformSite) -> int:
        """Source order (the first Name node under the site's node)."""
        order = self.model.index.order
        for node in _walk(site.node):
            if isinstance(node, cst.Name) and node in order:
                return order[node]
        return 0

    def _candidate(self, site: TransformSite) -> _Site:
        """The checks that depend on the site alone; raises Unsupported."""
        rewriter = self.rewriter
        rewriter.check_rewritable(site)
        for option in _UNSUPPORTED_OPTIONS:
            node = site.option(option)
            if node is not None and not is_none(node):
                raise Unsupported(f"`{option}=` in a multi-process program")
        entry = _Site(site)
        entry.layout = self._layout(site)
        if site.is_decorator:
            func = site.decorated
            assert func is not None
            index = next(i for i, d in enumerate(func.decorators) if d is site.node)
            if index > 0:
                raise Unsupported("decorators above the pmap: the rewritten function is not traceable")
        try:
            if site.is_decorator:
                self._callable_only_called(site, site.decorated.name.value)
            elif site.bound_attribute is not None:
                raise Unsupported("the pmapped function is stored on an object: its callers are not visible here")
            else:
                statement, target = rewriter._assignment_statement(site.node)
                if statement is not None:
                    self._callable_only_called(site, target)
                else:
                    parent = self.model.parent(site.node)
                    if not (isinstance(parent, cst.Call) and parent.func is site.node):
                        raise Unsupported("the pmapped function is used as a value: its callers are not visible here")
                    entry.inline_call = parent
        except Unsupported as why:
            # Callers not all seen: the wrapper converts at its boundary instead (host-local rows in
            # and out), exact for any caller outside jax transformations (a traced one is refused at run time).
            entry.boundary = str(why)
            entry.unseen = True
        entry.calls = [call for call, called in self.model.pmap_calls().items() if called is site]
        for call in entry.calls:
            if any(arg.star for arg in call.args):
                raise Unsupported("called with *args/**kwargs")
            if self.may_be_traced(call):
                if self._surely_traced(call):
                    raise Unsupported("called in code that may be traced (jit, vmap, a lambda): the global arrays "
                                      "are built outside traced code")
                # Likely not traced (a method, a function with a decorator of its own, a callback): the
                # boundary form is exact there, and raises if it is traced after all.
                entry.boundary = entry.boundary or "called in code that may be traced"
        # The definition, as the faithful rewrite builds it, with the global renderer.
        self._define(entry)
        plan = entry.plan
        assert plan is not None
        if plan.params is None and entry.boundary is None and \
                any(arg.keyword is not None for call in entry.calls for arg in call.args):
            # Keywords of a signature not seen: the boundary form takes *args and **kwargs.
            entry.boundary = "called with keyword arguments, and the function's signature is not visible"
            self._define(entry)
            plan = entry.plan
            assert plan is not None
        entry.in_axes = plan.in_axes
        self._check_in_axes(entry)
        if entry.boundary is not None and not self._boundary_admits(entry):
            raise Unsupported(f"{entry.boundary}, and an in_axes=None argument from a caller not seen may be a "
                              "committed jax.Array (jit refuses those with global arrays)")
        return entry

    def _define(self, entry: _Site) -> None:
        """The definition edits of ``entry`` (the faithful machinery with the global renderer); when
        rendered again (as a boundary), with the same names."""
        taken = self.rewriter.names.taken()
        earlier = entry.names
        taken.difference_update(earlier)
        before = set(taken)
        entry.fix = self.rewriter.definition_fix(entry.site, lambda plan, indent: self._render(entry, plan, indent))
        entry.names = (taken - before) | earlier
        taken.update(earlier)  # names taken once stay taken (the helpers', made on the first rendering only)

    @staticmethod
    def _boundary_admits(entry: _Site) -> bool:
        """Whether the site may take the boundary form: every caller is seen (their in_axes=None
        arguments were checked: Python or NumPy values), or there is no in_axes=None argument (which
        jit takes as it is, and refuses as a jax.Array committed to this process)."""
        in_axes = entry.in_axes
        return not entry.unseen or (in_axes is not None and not (isinstance(in_axes, list) and None in in_axes))

    def _layout(self, site: TransformSite) -> Layout:
        node = site.option("out_axes")
        if node is None:
            return 0
        if isinstance(node, (cst.Tuple, cst.List)):
            values = []
            for element in node.elements:
                if isinstance(element, cst.StarredElement):
                    raise Unsupported("out_axes with *")
                values.append(self._axis(element.value))
            if not self.model.returns_tuple(site):
                raise Unsupported("a tuple out_axes for a function not seen to return a tuple")
            return tuple(values)
        return self._axis(node)

    @staticmethod
    def _axis(node: cst.BaseExpression) -> int | None:
        if is_none(node):
            return None
        value = int_literal(node)
        if value is None or value < 0:
            raise Unsupported(f"out_axes `{code_of(node)}` is not a literal non-negative axis")
        return value

    def _callable_only_called(self, site: TransformSite, name: str) -> None:
        """Every use of the pmapped function's name is a call (so every output is seen), the name is
        bound once, and, at module level of a library module, private (importers could call it)."""
        if len(site.bound_names) != 1:
            raise Unsupported("the pmapped function's name is bound more than once")
        assignment = site.bound_names[0]
        scope = assignment.scope
        if isinstance(scope, ClassScope):
            raise Unsupported("a pmapped method: its callers are not visible here")
        if len(scope.assignments[name]) != 1:
            raise Unsupported(f"`{name}` is bound more than once")
        if scope is self.model.scope_of(self.model.module) and not name.startswith("_") and not self._is_program():
            raise Unsupported(f"`{name}` is a public module-level pmap of a library module: code importing it "
                              "would get global arrays")
        for read in self._reads_of(name):
            if assignment not in self.model.reaching_assignments(read):
                continue
            parent = self.model.parent(read)
            if not (isinstance(parent, cst.Call) and parent.func is read):
                raise Unsupported("the pmapped function is used as a value: its callers are not visible here")

    def _is_program(self) -> bool:
        """A script (`if __name__ == "__main__":`) or a module that starts the distributed runtime when
        it runs (`jax.distributed.initialize()` at module level): not imported for its functions."""
        if self.model.is_script:
            return True
        for statement in self.model.module.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
                    if isinstance(value, cst.Call) and self.model.matches(value.func, {"jax.distributed.initialize"}):
                        return True
        return False

    def _check_in_axes(self, entry: _Site) -> None:
        in_axes = entry.in_axes
        entries = in_axes if isinstance(in_axes, list) else [in_axes]
        if any(isinstance(value, (dict, tuple)) for value in entries):
            raise Unsupported("an in_axes pytree prefix in a multi-process program")
        if not isinstance(in_axes, list) and in_axes is None:
            raise Unsupported("in_axes=None for every argument")
        # in_axes=None arguments go to jit as they are (each process's own value, as legacy): a
        # jax.Array committed to this process's devices would be refused there.
        for call in entry.calls:
            for arg, axis in self._argument_axes(entry, call):
                if axis is None and not self._host_value(arg.value):
                    raise Unsupported(f"`{code_of(arg.value)}` is passed for an in_axes=None parameter and may be a "
                                      "committed jax.Array (jit refuses those with global arrays)")

    def _host_value(self, node: cst.BaseExpression, depth: int = 0) -> bool:
        """A Python number or string, a NumPy array or scalar, or a name bound only to those."""
        if depth > 4:
            return False
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)):
            return True
        if isinstance(node, cst.UnaryOperation):
            return self._host_value(node.expression, depth + 1)
        if isinstance(node, cst.BinaryOperation):
            return self._host_value(node.left, depth + 1) and self._host_value(node.right, depth + 1)
        if isinstance(node, cst.Call):
            names = self.model.qualified_names(node.func)
            return any(n.startswith("numpy.") for n in names) or not names.isdisjoint({"builtins.float", "builtins.int"})
        if isinstance(node, cst.Name):
            if node.value in ("True", "False", "None"):
                return True
            assignments = self.model.reaching_assignments(node)
            if not assignments:
                return False
            for assignment in assignments:
                value = self.model.assigned_value(getattr(assignment, "node", None))
                if value is None or not self._host_value(value, depth + 1):
                    return False
            return True
        return False

    # ------------------------------------------------------------------ rendering
    def _helpers(self, axis: str) -> _Helpers:
        helpers = self._helper_names
        if axis not in helpers:
            stem = axis.strip("\"'")
            stem = stem if axis[:1] in "\"'" and stem.isidentifier() else "pmap"  # a literal's word only
            helpers[axis] = _Helpers(axis, self.rewriter.names.fresh(f"{stem}_mesh"),
                                     self.rewriter.names.fresh(f"{stem}_global"))
        return helpers[axis]

    def _render(self, entry: _Site, plan: Plan, indent: str) -> str:
        if plan.params is None and plan.static:
            raise Unsupported("static_broadcasted_argnums with an unknown signature in a multi-process program")
        if plan.axis_hoisted:  # the global helpers are module-level, one set per axis name
            raise Unsupported("`axis_name` is not a string literal (in a multi-process program)")
        if entry.boundary is not None and plan.params is None and not plan.keywords:
            # Callers not seen may pass keywords: take them (mapped on axis 0, as legacy did).
            plan = dataclasses.replace(plan, keywords=True, body_call=plan.body_call.removesuffix("(*args)")
                                       + "(*args, **kwargs)")
        entry.plan = plan
        entry.wrapper_name = plan.name
        helpers = self._helpers(plan.axis)
        jit_name = self.rewriter.names.fresh(f"_{plan.name.lstrip('_')}_sharded")
        i1 = indent
        head, body, size, call = jitted_parts(plan, indent, name=jit_name)
        lines = list(plan.hoisted)
        lines += [*head, *body, "",
                  f"{i1}mesh = {helpers.mesh}({size} // jax.process_count())  # rows per process",
                  call, "", ""]
        default = f"P({plan.axis})"
        if plan.params is None and plan.keywords:
            params, converted, forward = ["*args", "**kwargs"], [("args, kwargs", default)], "*args, **kwargs"
        elif plan.params is None:
            params, converted, forward = ["*args"], [("args", default)], "*args"
        else:
            params = list(plan.params)
            mapped = [p for i, p in enumerate(plan.params) if i not in plan.static]
            axes = plan.in_axes if isinstance(plan.in_axes, list) else [plan.in_axes] * len(mapped)
            converted = [(p, spec_for(a, plan.axis)) for p, a in zip(mapped, axes) if a is not None]
            forward = ", ".join(plan.params)
        lines.append(f"def {plan.name}({', '.join(params)}):")
        if entry.boundary is None:
            lines += [
                f"{i1}# a pmap of a multi-process program (PM501): this process's rows in, global arrays over every",
                f"{i1}# process's devices out (fed back as they are; reads take this process's rows)",
            ]
        else:
            if plan.params is None:
                checked = "(args, kwargs)" if plan.keywords else "args"
            else:
                checked = f"({', '.join(plan.params)}{',' if len(plan.params) == 1 else ''})"
            lines += [
                f"{i1}# a pmap of a multi-process program (PM501) whose callers or reads are not all followed here:",
                f"{i1}# this process's rows in and out, as legacy pmap (global arrays over every process's devices inside)",
                f"{i1}if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves({checked})):",
                f"{i1}{i1}raise NotImplementedError(\"a multi-process pmap called in traced code: use runtime_shim.pmap\")",
            ]
        lines.append(f"{i1}rows = jax.local_device_count() if jax.process_count() > 1 else {size}")
        if converted == [("args, kwargs", default)]:
            lines.append(f"{i1}args, kwargs = {helpers.to_global}((args, kwargs), rows)")
        elif all(spec == default for _, spec in converted) and len(converted) > 1:
            names = ", ".join(name for name, _ in converted)
            lines.append(f"{i1}{names} = {helpers.to_global}(({names}), rows)")
        else:
            for name, spec in converted:
                extra = "" if spec == default else f", {spec}"
                lines.append(f"{i1}{name} = {helpers.to_global}({name}, rows{extra})")
        result = f"{jit_name}({forward})"
        if entry.boundary is not None:
            result = f"{self.host_local_name()}({result})"
        lines.append(f"{i1}return {result}")
        return "\n".join(lines) + "\n"

    def _helper_statements(self, helpers: _Helpers, indent: str) -> list[cst.BaseStatement]:
        i1, i2, i3 = indent, indent * 2, indent * 3
        text = (
            "@functools.cache\n"
            f"def {helpers.mesh}(rows):  # legacy pmap's devices: the first `rows` of each process, process by "
            "process\n"
            f"{i1}devices = [d for p in range(jax.process_count()) for d in jax.local_devices(p)[:rows]]\n"
            f"{i1}return Mesh(np.array(devices), ({helpers.axis},))\n"
            "\n\n"
            f"def {helpers.to_global}(tree, rows, spec=P({helpers.axis})):  # this process's rows -> global arrays\n"
            f"{i1}sharding = NamedSharding({helpers.mesh}(rows), spec)\n"
            f"{i1}local = NamedSharding(sharding.mesh.local_mesh, spec)  # where this process's rows already are\n"
            "\n"
            f"{i1}def place(x):\n"
            f"{i2}if isinstance(x, jax.Array) and (x.sharding == sharding or not x.is_fully_addressable):\n"
            f"{i3}return x  # already global: an output fed back\n"
            f"{i2}if jax.process_count() == 1 and not isinstance(x, jax.Array):\n"
            f"{i3}return x  # one process: jit puts host data where it goes\n"
            f"{i2}if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(local, x.ndim) and "
            "not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):\n"
            f"{i3}return multihost_utils.host_local_array_to_global_array(x, sharding.mesh, spec)  # no copy\n"
            f"{i2}return jax.make_array_from_process_local_data(sharding, x)\n"
            "\n"
            f"{i1}return jax.tree.map(place, tree)\n"
        )
        return self.rewriter.parse_generated(text)

    def host_local_name(self) -> str:
        """The module's one host-local view helper (written only if a read uses it)."""
        if self._host_local is None:
            self._host_local = self.rewriter.names.fresh("host_local")
        self._host_local_used = True
        return self._host_local

    def _host_local_statements(self, indent: str) -> list[cst.BaseStatement]:
        i1, i2 = indent, indent * 2
        text = (
            f"def {self._host_local}(tree):  # global arrays -> this process's rows, as legacy pmap returned them\n"
            f"{i1}def local(x):\n"
            f"{i2}if isinstance(x, jax.Array) and not x.is_fully_addressable and isinstance(x.sharding, NamedSharding):\n"
            f"{i2}{i1}return multihost_utils.global_array_to_host_local_array(x, x.sharding.mesh, x.sharding.spec)\n"
            f"{i2}return x  # host data, and arrays of this process only, as they are\n"
            "\n"
            f"{i1}return jax.tree.map(local, tree)\n"
        )
        return self.rewriter.parse_generated(text)

    # ------------------------------------------------------------------ the fix
    def _combined_fix(self) -> FixSpec:
        self._host_local_used = False
        edits: list[Edit] = []
        imports: list[ImportSpec] = []
        removes: list[ImportSpec] = []
        by_site = {id(entry.site): entry for entry in self._sites}
        outputs = self._output_assignments(by_site)
        reads = _Reads(self, by_site, outputs)
        for entry in self._sites:
            assert entry.fix is not None
            site_edits = list(entry.fix.edits)
            if entry.boundary is not None:
                self.host_local_name()  # its wrapper returns host-local rows; its outputs are read as they are
            try:
                if entry.boundary is None:
                    site_edits += reads.for_calls(entry)
                for assignment in outputs.assignments():
                    if outputs.owner(assignment) is entry:
                        site_edits += reads.for_assignment(assignment)
            except Unsupported as why:
                raise _SiteFailure(entry, str(why)) from None
            edits += site_edits
            imports += entry.fix.add_imports
            removes += entry.fix.remove_imports
        removes += reads.removes
        edits = reads.merge_inline(edits)
        # Helpers once, before the first module-level statement that defines a rewritten pmap.
        anchor = min((self._top_statement(e.site.node) for e in self._sites), key=self._statement_index)
        indent = self.model.indent
        helper_statements: list[cst.BaseStatement] = []
        for axis in dict.fromkeys(e.plan.axis for e in self._sites if e.plan is not None):
            group = self._helper_statements(self._helpers(axis), indent)
            if helper_statements:
                group[0] = _blank(group[0], 2)
            helper_statements += group
        if self._host_local_used:
            group = self._host_local_statements(indent)
            group[0] = _blank(group[0], 2)
            helper_statements += group
        edits.insert(0, Edit(anchor, before=tuple(helper_statements)))
        try:
            edits = _compose(self.model, _spaced(self.model, edits, self.rewriter.plain_generated))
        except _Lost as lost:
            raise _SiteFailure(_owner_of(lost.edit.target, self._sites), "its rewrite overlaps the rewrite of "
                               "another part of the program") from None
        self.rewriter._check_names_free()
        self.rewriter._check_names_free(self.rewriter.GLOBAL_TEMPLATE_NAMES)
        imports += [ImportSpec("functools"), ImportSpec("numpy", None, "np"), ImportSpec("jax.sharding", "NamedSharding")]
        imports.append(_MULTIHOST)  # the helpers use it
        # each name once (functions of different scopes may share one)
        inside = ", ".join(dict.fromkeys(f"`{e.wrapper_name}`" for e in self._sites if e.boundary is None))
        boundary = ", ".join(dict.fromkeys(f"`{e.wrapper_name}`" for e in self._sites if e.boundary is not None))
        mesh = "as `jax.jit(jax.shard_map(...))` over a global mesh of every process's devices (legacy pmap's order)"
        at_boundary = ("taking and returning this process's rows as legacy pmap did (their callers or reads are not "
                       "all seen here; called in traced code, they raise)")
        if not inside:
            summary = f"rewrite {boundary} {mesh}, {at_boundary} (same values as legacy pmap)"
        else:
            summary = (f"rewrite {inside} {mesh}: host-local inputs become global arrays, outputs fed back stay "
                       "global, reads take this process's rows (same values as legacy pmap)")
            if boundary:
                summary += f"; and {boundary} the same way, {at_boundary}"
        return FixSpec(Applicability.SAFE, summary, edits=tuple(edits), add_imports=tuple(dict.fromkeys(imports)),
                       remove_imports=tuple(dict.fromkeys(removes)), priority=1)

    def _top_statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        current = node
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.Module):
                break
            current = ancestor
        assert isinstance(current, cst.BaseStatement)
        return current

    def _statement_index(self, statement: cst.BaseStatement) -> int:
        return next(i for i, s in enumerate(self.model.module.body) if s is statement)

    def bound_targets(self, entry: _Site, call: cst.Call) -> list[cst.BaseExpression] | None:
        """The targets a call's output is bound to when they keep it global: names, or a tuple of
        names for a function seen to return a tuple; None otherwise (the output is then made
        host-local at the call: unpacking an array, or a tuple of unknown arity, stays exact)."""
        parent = self.model.parent(call)
        if isinstance(parent, cst.Assign) and parent.value is call:
            targets = [t.target for t in parent.targets]
        elif isinstance(parent, cst.AnnAssign) and parent.value is call:
            targets = [parent.target]
        else:
            return None
        for target in targets:
            if isinstance(target, cst.Name):
                continue
            if not isinstance(target, (cst.Tuple, cst.List)) or not self.model.returns_tuple(entry.site):
                return None
            if any(isinstance(e, cst.StarredElement) or not isinstance(e.value, cst.Name) for e in target.elements):
                return None
        return targets

    def _output_assignments(self, by_site: dict[int, _Site]) -> _Outputs:
        """Every name a call of a rewritten pmap binds, with the layout of what it receives."""
        outputs = _Outputs()
        for entry in self._sites:
            if entry.boundary is not None:
                continue  # host-local outputs: read as legacy's were
            for call in entry.calls:
                for target in self.bound_targets(entry, call) or ():
                    if isinstance(target, cst.Name):
                        self._bind(outputs, entry, target, entry.layout)
                        continue
                    for k, element in enumerate(target.elements):
                        layout = entry.layout[k] if isinstance(entry.layout, tuple) else entry.layout
                        self._bind(outputs, entry, element.value, layout)
        return outputs

    def _bind(self, outputs: _Outputs, entry: _Site, target: cst.Name, layout: Layout) -> None:
        assignment = self.model.assignment_for_target(target)
        if assignment is None:
            raise _SiteFailure(entry, f"`{target.value}` is bound where its reads cannot be followed")
        if isinstance(assignment.scope, ClassScope):
            raise _SiteFailure(entry, f"`{target.value}` is a class attribute: its reads are not visible here")
        if assignment.scope is self.model.scope_of(self.model.module) and not self._is_program() \
                and not target.value.startswith("_"):
            raise _SiteFailure(entry, f"`{target.value}` is a public module-level output of a library module")
        outputs.add(assignment, entry, layout)

    def _reads_of(self, name: str) -> list[cst.Name]:
        """Every read of ``name`` anywhere in the module (the scopes' accesses: not def names,
        parameters, keywords or attribute tails), in source order."""
        if self._accesses is None:
            accesses: dict[str, list[cst.Name]] = {}
            for scope in self.model.scopes():
                for access in scope.accesses:
                    if isinstance(access.node, cst.Name):
                        accesses.setdefault(access.node.value, []).append(access.node)
            order = self.model.index.order
            for nodes in accesses.values():
                nodes.sort(key=lambda n: order.get(n, 0))
            self._accesses = accesses
        return self._accesses.get(name, [])

    def _argument_axes(self, entry: _Site, call: cst.Call):
        """(argument, its in_axes entry or "static") for the arguments of ``call``."""
        plan = entry.plan
        assert plan is not None
        if plan.params is None:
            return [(arg, 0) for arg in call.args]
        mapped = [i for i in range(len(plan.params)) if i not in plan.static]
        axes = plan.in_axes if isinstance(plan.in_axes, list) else [plan.in_axes] * len(mapped)
        axis_of = {plan.params[i]: axes[k] for k, i in enumerate(mapped)}
        out = []
        position = 0
        for arg in call.args:
            if arg.keyword is None:
                name = plan.params[position] if position < len(plan.params) else None
                position += 1
            else:
                name = arg.keyword.value
            out.append((arg, axis_of.get(name, "static") if name is not None else "static"))
        return out

    def may_be_traced(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` may run under a jax transformation: inside a lambda or a decorated
        function, or a function used other than by direct calls (or called from such code). As
        `Placement.may_be_traced`, except that a function handed to `absl.app.run` (a program's
        `main`) is an entry point, not traced."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.Lambda):
                return True
            if isinstance(ancestor, cst.FunctionDef) and self._function_may_be_traced(ancestor, 0):
                return True
        return False

    def _surely_traced(self, node: cst.CSTNode, depth: int = 0) -> bool:
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
                    if self._surely_traced(parent, depth + 1):
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
            calls = self._direct_calls(func)
            if calls is not None:
                answer = any(self.may_be_traced(call) for call in calls)
        self._traced[id(func)] = answer
        return answer

    def _direct_calls(self, func: cst.FunctionDef) -> list[cst.Call] | None:
        """The calls of ``func`` in this module (a handing to `absl.app.run` counts as none); None
        when it is also used as a value."""
        scope = self.model.scope_of(func)
        if scope is None or isinstance(scope, ClassScope):
            return self.placement._direct_calls(func)
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


class _SiteFailure(Exception):
    def __init__(self, site: _Site, why: str) -> None:
        super().__init__(why)
        self.site = site
        self.why = why


class _Outputs:
    """Assignments that receive (part of) the output of a rewritten pmap, with its layout."""

    def __init__(self) -> None:
        self._layouts: dict[BaseAssignment, Layout] = {}
        self._owners: dict[BaseAssignment, _Site] = {}

    def add(self, assignment: BaseAssignment, entry: _Site, layout: Layout) -> None:
        self._layouts[assignment] = layout
        self._owners[assignment] = entry

    def assignments(self):
        return list(self._layouts)

    def owner(self, assignment: BaseAssignment) -> _Site:
        return self._owners[assignment]

    def layout(self, assignment: BaseAssignment) -> Layout:
        return self._layouts[assignment]

    def __contains__(self, assignment: object) -> bool:
        return assignment in self._layouts


class _Reads:
    """The edits at the places the program reads a global output."""

    def __init__(self, plan: GlobalRewrite, by_site: dict[int, _Site], outputs: _Outputs) -> None:
        self.plan = plan
        self.model = plan.model
        self.by_site = by_site
        self.outputs = outputs
        self.seen: set[int] = set()
        self.wrapped_calls: dict[cst.Call, _Site] = {}
        self.removes: list[ImportSpec] = []  # imports a rewritten read may leave unused (flax's unreplicate)

    # ------------------------------------------------------------------ calls
    def for_calls(self, entry: _Site) -> list[Edit]:
        """A call whose output is not bound to names nor passed straight to a rewritten pmap: its
        result is converted to the host-local arrays legacy returned, right there."""
        edits: list[Edit] = []
        for call in entry.calls:
            parent = self.model.parent(call)
            if self.plan.bound_targets(entry, call) is not None:
                continue
            if isinstance(parent, cst.Expr):
                continue  # the value is dropped
            if self._passed_through(call, entry.layout):
                continue
            self.wrapped_calls[call] = entry
            edits.append(Edit(call, _host_local_call(self.plan.host_local_name(), call)))
        return edits

    def merge_inline(self, edits: list[Edit]) -> list[Edit]:
        """`jax.pmap(f)(x)` wrapped whole: the wrap names the hoisted wrapper itself (one edit, not
        two nested ones)."""
        inline = {entry.inline_call: entry for entry in self.plan._sites if entry.inline_call is not None}
        merged: list[Edit] = []
        replaced_sites = set()
        for edit in edits:
            call = edit.target
            if isinstance(call, cst.Call) and call in self.wrapped_calls and call in inline:
                entry = self.wrapped_calls[call]
                inner = call.with_changes(func=cst.Name(entry.wrapper_name))
                merged.append(Edit(call, _host_local_call(self.plan.host_local_name(), inner)))
                replaced_sites.add(id(entry.site.node))
                continue
            merged.append(edit)
        return [e for e in merged if not (id(e.target) in replaced_sites and e.replacement is not None)]

    def _passed_through(self, value: cst.BaseExpression, layout: Layout) -> bool:
        """``value`` is an argument of a call of a rewritten pmap that maps it on axis 0, and every
        global array it may hold has its rows on axis 0: it goes in as it is."""
        if layout != 0 and not (isinstance(layout, tuple) and all(a == 0 for a in layout)):
            return False
        arg = self.model.parent(value)
        if not isinstance(arg, cst.Arg) or arg.value is not value or arg.star:
            return False
        call = self.model.parent(arg)
        if not isinstance(call, cst.Call):
            return False
        site = self.model.transformed_call(call)
        target = self.by_site.get(id(site)) if site is not None else None
        if target is None:
            return False
        return any(a is arg and axis == 0 for a, axis in self.plan._argument_axes(target, call))

    # ------------------------------------------------------------------ names
    def for_assignment(self, assignment: BaseAssignment) -> list[Edit]:
        name = assignment.name
        edits: list[Edit] = []
        for node in self.model.index.names.get(name, ()):
            # `out += x`, `del out`: targets, not reads (the scopes do not list them as accesses)
            parent = self.model.parent(node)
            in_place = (isinstance(parent, cst.AugAssign) and parent.target is node) or isinstance(parent, cst.Del)
            if in_place and assignment in self.model.reaching_assignments(node):
                raise Unsupported(f"`{name}` is updated in place")
        for read in self.plan._reads_of(name):
            if id(read) in self.seen:
                continue
            reaching = self.model.reaching_assignments(read)
            if assignment not in reaching:
                continue
            self.seen.add(id(read))
            edit = self._read(read, reaching)
            if edit is not None:
                edits.extend(edit)
        return edits

    def _read(self, read: cst.Name, reaching: list[BaseAssignment]) -> list[Edit] | None:
        model = self.model
        layouts = {repr(self.outputs.layout(a)): self.outputs.layout(a) for a in reaching if a in self.outputs}
        # outputs laid out differently: neither a pass-through nor a row read, the host-local view is exact
        layout = next(iter(layouts.values())) if len(layouts) == 1 else "mixed"
        placement = self.plan.placement
        if self.plan.may_be_traced(read):
            raise Unsupported(f"`{read.value}` is read in code that may be traced")
        if self._passed_through(read, layout):
            return None
        parent = model.parent(read)
        if isinstance(parent, (cst.AugAssign, cst.Del)) or _is_target(model, read):
            raise Unsupported(f"`{read.value}` is updated in place")
        if layout == 0:
            row = self._row_read(read, parent, placement)
            if row is not None:
                return row
        # Any other read: the host-local view (it leaves host data and this process's arrays as they are).
        return [Edit(read, cst.Call(cst.Name(self.plan.host_local_name()), [cst.Arg(cst.Name(read.value))]))]

    def _row_read(self, read: cst.Name, parent: cst.CSTNode | None, placement) -> list[Edit] | None:
        """`out[k]`, `tree_map(lambda v: v[k], out)`, `unreplicate(out)` on a stack with one row per
        device: this process's row k, from the device that holds it."""
        from pmap_migrate.rules.fixes.placement import literal_index, row_of, single_index

        model = self.model
        if not placement.one_row_per_device(read):
            return None
        if isinstance(parent, cst.Subscript) and parent.value is read:
            index = single_index(parent)
            if index is not None and literal_index(index) and placement.array_valued(read) \
                    and not model.selects_output(parent):
                return [Edit(parent, row_of(cst.Name(read.value), index).with_changes(
                    lpar=parent.lpar, rpar=parent.rpar))]
            return None
        arg = parent
        call = model.parent(arg) if isinstance(arg, cst.Arg) else None
        if not isinstance(call, cst.Call) or arg.value is not read or arg.keyword is not None or arg.star:
            return None
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) != len(call.args):
            return None
        if model.resolves_to(call.func, tables.FLAX_UNREPLICATE) and len(positional) == 1:
            from pmap_migrate.rules.fixes.api import removal_spec

            text = (f"jax.tree.map(lambda leaf: {code_of(row_of(cst.Name('leaf'), cst.Integer('0')))}, "
                    f"{read.value})")
            removal = removal_spec(model, call.func)
            if removal is not None:
                self.removes.append(removal)
            return [Edit(call, cst.parse_expression(text).with_changes(lpar=call.lpar, rpar=call.rpar))]
        if model.resolves_to(call.func, tables.TREE_MAP) and len(positional) == 2 and positional[1] is arg:
            function = positional[0].value
            if not isinstance(function, cst.Lambda) or len(function.params.params) != 1 or \
                    function.params.star_arg is not cst.MaybeSentinel.DEFAULT:
                return None
            finder = IntegerIndexOf(function.params.params[0].name.value, collect=True)
            function.body.visit(finder)
            edits = []
            for subscript in finder.subscripts:
                index = single_index(subscript)
                if index is None or not literal_index(index):
                    return None
                edits.append(Edit(subscript, row_of(subscript.value, index).with_changes(
                    lpar=subscript.lpar, rpar=subscript.rpar)))
            return edits or None
        return None


def _host_local_call(helper: str, call: cst.Call) -> cst.Call:
    return cst.Call(cst.Name(helper), [cst.Arg(call.with_changes(lpar=(), rpar=()))], lpar=call.lpar, rpar=call.rpar)


def _is_target(model, node: cst.CSTNode) -> bool:
    from pmap_migrate.rules.fixes.placement import is_assignment_target

    return is_assignment_target(model, node)


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


class _Lost(Exception):
    def __init__(self, edit: Edit) -> None:
        super().__init__()
        self.edit = edit


class _Apply(cst.CSTTransformer):
    """Applies edits (by node identity) inside a replacement built from original nodes. Of the
    original nodes in it, only those on the way to a target are walked into (libcst's transformer
    copies every node it walks): the others come back as they are."""

    def __init__(self, edits: list[Edit], model) -> None:
        super().__init__()
        self.model = model
        self.toward = {id(node) for e in edits for node in (e.target, *model.ancestors(e.target))}
        self.replacements = {id(e.target): e for e in edits if e.replacement is not None}
        self.insertions: dict[int, list] = {}
        for e in edits:
            if e.before:
                self.insertions.setdefault(id(e.target), []).extend(e.before)
        self.done: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.toward or node not in self.model.parents

    def on_leave(self, original_node, updated_node):
        key = id(original_node)
        edit = self.replacements.get(key)
        result = edit.replacement if edit is not None else updated_node
        before = self.insertions.get(key)
        if edit is not None or before:
            self.done.add(key)
        if before:
            nodes = result.nodes if isinstance(result, cst.FlattenSentinel) else [result]
            return cst.FlattenSentinel([*before, *nodes])
        return result


def _compose(model, edits: list[Edit]) -> list[Edit]:
    """Edits inside another edit's replacement are applied to that replacement (the engine would
    drop them: it replaces the outer node whole). Fails when the outer replacement no longer holds
    the inner target."""
    replaced = {id(e.target): e for e in edits if e.replacement is not None}
    inner: dict[int, list[Edit]] = {}
    roots: list[Edit] = []
    for edit in edits:
        outer = next((replaced[id(a)] for a in model.ancestors(edit.target) if id(a) in replaced), None)
        if outer is None:
            roots.append(edit)
        else:
            inner.setdefault(id(outer.target), []).append(edit)

    def build(edit: Edit) -> Edit:
        nested = inner.get(id(edit.target))
        if not nested or edit.replacement is None:
            return edit
        nested = [build(e) for e in nested]
        apply = _Apply(nested, model)
        replacement = edit.replacement
        if isinstance(replacement, cst.FlattenSentinel):
            replacement = cst.FlattenSentinel([node.visit(apply) for node in replacement.nodes])
        else:
            replacement = replacement.visit(apply)
        for e in nested:
            if id(e.target) not in apply.done:
                raise _Lost(e)
        return Edit(edit.target, replacement, edit.before)

    return [build(e) for e in roots]


class _Unindented(cst.CSTTransformer):
    """Empty lines of generated code carry no indentation (parsed at module level, they would print
    the indentation of the block they land in); code of the original module is left as it is."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node not in self.model.parents

    def leave_EmptyLine(self, original_node: cst.EmptyLine, updated_node: cst.EmptyLine) -> cst.EmptyLine:
        return updated_node.with_changes(indent=False) if updated_node.comment is None else updated_node


class _IndentedEmptyLine(cst.CSTVisitor):
    """Whether ``_Unindented`` would change anything: an empty line without a comment that carries
    indentation, reached as it reaches them. Most generated code holds none, and then the copy of
    every generated node that a transformer's walk makes is not needed. Generated code parsed from
    text without whitespace-only lines (``plain``: ids, `Rewriter.parse_generated`) holds none."""

    def __init__(self, model, plain: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.model = model
        self.plain = plain
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found or node in self.model.parents or id(node) in self.plain:
            return False
        if isinstance(node, cst.EmptyLine) and node.indent and node.comment is None:
            self.found = True
        return not self.found


def _unindented(model, node, plain: dict[int, cst.CSTNode]):
    if isinstance(node, cst.FlattenSentinel):
        return cst.FlattenSentinel([_unindented(model, n, plain) for n in node.nodes])
    if isinstance(node, cst.CSTNode):
        if id(node) in plain:
            return node
        finder = _IndentedEmptyLine(model, plain)
        node.visit(finder)
        return node.visit(_Unindented(model)) if finder.found else node
    return node


def _spaced(model, edits: list[Edit], plain: dict[int, cst.CSTNode]) -> list[Edit]:
    """Blank lines around generated definitions: before the first one, and before the statement that
    follows them (two at module level, one in a function)."""
    out = [Edit(e.target, _unindented(model, e.replacement, plain),
                tuple(_unindented(model, b, plain) for b in e.before)) for e in edits]
    replaced = {id(e.target): k for k, e in enumerate(out) if e.replacement is not None}
    follow: list[cst.CSTNode] = []
    for k, edit in enumerate(list(out)):
        n = _lines(model, edit.target)
        first = _first_in_block(model, edit.target)
        if edit.before:
            out[k] = Edit(edit.target, edit.replacement, _separated(list(edit.before), n, first))
            follow.append(edit.target)
        elif isinstance(edit.replacement, cst.FlattenSentinel) and isinstance(edit.target, cst.BaseStatement):
            nodes = _separated(list(edit.replacement.nodes), n, first)
            out[k] = Edit(edit.target, cst.FlattenSentinel(nodes), edit.before)
            following = _next_statement(model, edit.target)
            if following is not None:
                follow.append(following)
    for statement in follow:
        index = replaced.get(id(statement))
        n = _lines(model, statement)
        if index is None:
            out.append(Edit(statement, _blank(statement, n)))
            replaced[id(statement)] = len(out) - 1
            continue
        edit = out[index]
        if isinstance(edit.replacement, cst.FlattenSentinel):
            nodes = list(edit.replacement.nodes)
            nodes[0] = _blank(nodes[0], n)
            out[index] = Edit(edit.target, cst.FlattenSentinel(nodes), edit.before)
        elif isinstance(edit.replacement, cst.BaseStatement):
            out[index] = Edit(edit.target, _blank(edit.replacement, n), edit.before)
    return out


def _separated(nodes: list, n: int, first: bool) -> tuple:
    """Generated statements: ``n`` empty lines before the first (none at the top of a block) and
    before each definition after it."""
    out = []
    for k, node in enumerate(nodes):
        if k == 0:
            out.append(node if first else _blank(node, n))
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)) or isinstance(nodes[k - 1], (cst.FunctionDef,
                                                                                           cst.ClassDef)):
            out.append(_exactly(node, n))
        else:
            out.append(node)
    return tuple(out)


def _exactly(statement, n: int):
    lines = list(statement.leading_lines)
    empty = 0
    while empty < len(lines) and lines[empty].comment is None:
        empty += 1
    return statement.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * n + lines[empty:])


def _first_in_block(model, statement: cst.CSTNode) -> bool:
    block = model.parent(statement)
    body = getattr(block, "body", None)
    return isinstance(body, (list, tuple)) and bool(body) and body[0] is statement


def _lines(model, statement: cst.CSTNode) -> int:
    return 2 if isinstance(model.parent(statement), cst.Module) else 1


def _blank(statement, n: int):
    """``statement`` with at least ``n`` empty lines before it (ahead of its own comments)."""
    if not hasattr(statement, "leading_lines"):
        return statement
    lines = list(statement.leading_lines)
    empty = 0
    for line in lines:
        if line.comment is not None:
            break
        empty += 1
    if empty >= n:
        return statement
    return statement.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * (n - empty) + lines)


def _next_statement(model, statement: cst.CSTNode) -> cst.BaseStatement | None:
    block = model.parent(statement)
    body = getattr(block, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    for k, item in enumerate(body):
        if item is statement:
            return body[k + 1] if k + 1 < len(body) else None
    return None


def _owner_of(node: cst.CSTNode, sites: list[_Site]) -> _Site:
    for entry in sites:
        if any(e.target is node for e in (entry.fix.edits if entry.fix else ())):
            return entry
    return sites[-1]
