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

    def _step(x, w): ...                           # the pmapped body, unchanged

    step = _global_pmap(_step, "batch", local=False)   # this process's rows in, global arrays out

`_global_pmap` takes pmap's arguments under pmap's names (a pmap call becomes it by its name: its
arguments stay on their lines, fixes/in_lines.py): `_shard_mapped(..., processes=True)`, the
compact form over the first n / process_count devices of every process (legacy pmap's devices,
process by process), jitted (static positions, donate_argnums) and called through `_global_call`
(rules/fixes/shared.py), which makes this process's rows of each mapped argument global arrays
(`_to_global`: outputs fed back pass through, the rest goes through
`multihost_utils.host_local_array_to_global_array`, typed keys through
`jax.make_array_from_process_local_data`);
with ``local`` (its default: the boundary form below) it returns this process's rows of the result
and refuses traced inputs. The helpers are written once per package (`_pmap_compat.py`), or once in
the module.

The outputs of a pmap whose every output is either read by row or passed straight to a rewritten
pmap stay global: `out[k]` on an array output -> `out.addressable_shards[k].data.squeeze(0)` (this
process's row k, from the device that holds it), the same on a leaf (`metrics["loss"][0]`) and on
the call where it is made (`step(x)[0]`, either form), inside `tree_map(lambda v: v[0], out)`
and for flax `unreplicate(out)`; an output passed straight to a rewritten pmap (at an in_axes-0
position) is left global. An output read whole anywhere else (`metrics["loss"]`, `return state`)
makes its pmap take the boundary form below (host-local rows out, as legacy returned them, no copy),
so that no such read changes; its row reads are still rewritten (a host-local array's shard k is
row k).
On one process the same code computes what the single-process legacy pmap did: the mesh is the
first n devices and the conversions do nothing to arrays already there.

`_host_local` converts only arrays that span other processes and takes their mesh and spec from
the array itself, so a read of a name that may also hold host data (a NumPy stack before the first
step) is exact too. Where the data flow is not visible -- the pmapped function used as a value,
stored on `self`, a public module-level pmap of a library module (importers would get global
arrays), a name bound more than once, an output updated in place, a call or read in code that may
be traced (a method, a decorated function, a callback) -- the site gets the boundary form: the same
definition through `_global_pmap(...)` (local), which returns this process's rows, as legacy
returned them, and raises on traced inputs, so no caller or read needs rewriting; an output fed
back goes in without a copy (`_to_global` hands arrays whose rows already sit on this process's
devices to `host_local_array_to_global_array`). A call seen to be
traced (in a lambda or function handed to a `jax.*` callable or decorated by one), options the mesh
cannot express, or an `in_axes=None` argument from callers not seen keep the shim (`Unsupported`
says why); the module's other pmaps are still rewritten.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ClassScope

from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.analysis.tracing import ProgramTracing
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of, int_literal, is_none, keyword_arg
from pmap_migrate.rules.fixes.edits import LostEdit, compose_edits, spaced
from pmap_migrate.rules.fixes.multiprocess_reads import (
    Layout,
    Outputs,
    PlannedSite,
    Reads,
    SiteFailure,
    owner_of,
)
from pmap_migrate.rules.fixes.multiprocess_render import GlobalRender
from pmap_migrate.rules.fixes.placement import Placement
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import tables

_UNSUPPORTED_OPTIONS = ("backend", "axis_size")


class GlobalRewrite(GlobalRender):
    """The module's global-mesh plan: which pmap sites are rewritten (and how), which keep the shim."""

    def __init__(self, rewriter: Rewriter, placement: Placement) -> None:
        self.rewriter = rewriter
        self.placement = placement
        self.model = rewriter.model
        self._reasons: dict[int, str] = {}
        self.sites: list[PlannedSite] = []
        self._fix: FixSpec | None = None
        self._planned = False
        self._accesses: dict[str, list[cst.Name]] | None = None
        self.tracing = ProgramTracing(self.model)
        self.row_reads: frozenset[int] = frozenset()  # the planned fix's (Reads.row_reads)

    # ------------------------------------------------------------------ public
    def fix_for(self, site: TransformSite) -> FixSpec:
        self._plan()
        why = self._reasons.get(id(site))
        if why is not None:
            raise Unsupported(why)
        leader = self.sites[0]
        assert self._fix is not None
        if leader.site is site:
            return self._fix
        return FixSpec(self._fix.applicability, f"rewritten together with `{leader.wrapper_name}` "
                       "(one global-mesh rewrite for every pmap of this multi-process module)")

    def reads_row(self, node: cst.CSTNode) -> FixSpec | None:
        """The module's fix where it rewrites the read ``node`` of a pmap output into this
        process's row read from its device (`out[0]`, a `tree_map(lambda v: v[0], out)`); None
        where it does not."""
        self._plan()
        return self._fix if self._fix is not None and self.sites and id(node) in self.row_reads else None

    # ------------------------------------------------------------------ planning
    def _plan(self) -> None:
        if self._planned:
            return
        self._planned = True
        candidates: list[PlannedSite] = []
        for site in sorted(self.model.pmap_sites(), key=self._position):
            try:
                candidates.append(self._candidate(site))
            except Unsupported as why:
                self._reasons[id(site)] = str(why)
        # A site whose reads cannot be rewritten drops out; the reads of the others then see one
        # pmap fewer that takes global arrays: recompute until nothing changes.
        while candidates:
            self.sites = candidates
            try:
                self._fix = self._combined_fix()
                return
            except SiteFailure as failure:
                entry = failure.site
                if entry.boundary is None and self.boundary_admits(entry):
                    # Its outputs are read whole, or their reads cannot be followed: it returns
                    # host-local rows instead, which every read takes as it took legacy's.
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
        self.sites = []

    def _position(self, site: TransformSite) -> int:
        """Source order (the first Name node under the site's node)."""
        order = self.model.index.order
        for node in _walk(site.node):
            if isinstance(node, cst.Name) and node in order:
                return order[node]
        return 0

    def _candidate(self, site: TransformSite) -> PlannedSite:
        """The checks that depend on the site alone; raises Unsupported."""
        rewriter = self.rewriter
        rewriter.check_rewritable(site)
        for option in _UNSUPPORTED_OPTIONS:
            node = site.option(option)
            if node is not None and not is_none(node):
                raise Unsupported(f"`{option}=` in a multi-process program")
        entry = PlannedSite(site)
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
                statement, target = rewriter.assignment_statement(site.node)
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
            if self.tracing.may_be_traced(call):
                if self.tracing.surely_traced(call):
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
        if entry.boundary is not None and not self.boundary_admits(entry):
            raise Unsupported(f"{entry.boundary}, and an in_axes=None argument from a caller not seen may be a "
                              "committed jax.Array (jit refuses those with global arrays)")
        return entry

    def _define(self, entry: PlannedSite) -> None:
        """The definition edits of ``entry`` (the faithful machinery with the global renderer); when
        rendered again (as a boundary), with the same names."""
        taken = self.rewriter.names.taken()
        earlier = entry.names
        taken.difference_update(earlier)
        before = set(taken)
        # a pmap built inside an expression (`jax.pmap(f)(x)`, `return jax.pmap(f)`) becomes
        # `_global_pmap(f, ...)` there, evaluated where pmap was, in either form (the reads of
        # its outputs are planned from its calls, not from a name)
        entry.fix = self.rewriter.definition_fix(entry.site, lambda plan, indent: self._render(entry, plan, indent),
                                                 in_place=True)
        if entry.site.is_decorator:
            entry.fix = self._as_decorator(entry)
        assign = self.model.parent(entry.site.node)
        if not any(edit.before for edit in entry.fix.edits):
            if isinstance(assign, cst.Assign):
                entry.wrapper_name = code_of(assign.targets[0].target)  # written in its place: `self.step = ...`
            elif entry.site.fun is not None and not entry.site.is_decorator:
                fun = code_of(entry.site.fun)
                entry.wrapper_name = fun if len(fun) <= 40 and "\n" not in fun else "pmap"
        entry.names = (taken - before) | earlier
        taken.update(earlier)  # names taken once stay taken (the helpers', made on the first rendering only)

    def _as_decorator(self, entry: PlannedSite) -> FixSpec:
        """A decorator pmap (`@functools.partial(jax.pmap, axis_name="batch", ...)`) as the
        decorator `@functools.partial(_global_pmap, axis_name="batch", ...)` (`@_global_pmap` with
        no option), pmap's name swapped, the options as `_global_pmap` takes them: the function
        keeps its name, evaluated where it was (the fix ``entry.fix`` holds otherwise: its
        imports, helpers and checks)."""
        fix, plan, decorator = entry.fix, entry.plan, entry.site.node
        assert fix is not None and plan is not None and isinstance(decorator, cst.Decorator)
        helper = cst.Name(self._global_pmap())
        expr = decorator.decorator
        swapped = self._swapped(expr, helper, entry.boundary is None)
        if swapped is not None:  # the decorator as written, pmap's name swapped: the least diff
            return dataclasses.replace(fix, edits=(Edit(decorator, decorator.with_changes(decorator=swapped)),))
        parts = self._pmap_options(entry, plan)
        assert parts is not None
        options = {"axis_name": plan.axis_source or plan.axis, **parts[1]}
        if entry.boundary is None:
            options["local"] = "False"
        if not entry.site.positional() and entry.site.option("axis_name") is None and len(options) == 1:
            options = {}  # `@jax.pmap`: `_global_pmap` names its axis as pmap did
        imports = fix.add_imports
        if isinstance(expr, cst.Call) and self.model.matches(expr.func, tables.PARTIAL):
            partial = expr.func  # the module's own spelling (`partial`, `functools.partial`)
        else:
            partial = cst.Attribute(cst.Name("functools"), cst.Name("partial"))
            imports = (*imports, ImportSpec("functools")) if options else imports
        new = helper if not options else cst.Call(partial, [
            cst.Arg(helper), *(keyword_arg(key, cst.parse_expression(text)) for key, text in options.items())])
        return dataclasses.replace(fix, edits=(Edit(decorator, decorator.with_changes(decorator=new)),),
                                   add_imports=imports)

    # pmap's options that `_global_pmap` takes as pmap took them, as written (in_axes and out_axes
    # go as the analysis reads them: a list of axes is a tuple to pmap)
    _AS_WRITTEN = frozenset({"axis_name", "static_broadcasted_argnums", "donate_argnums", "devices"})

    def _swapped(self, expr: cst.BaseExpression, helper: cst.Name, global_outputs: bool) -> cst.BaseExpression | None:
        """``expr``, the decorator `jax.pmap` or `partial(jax.pmap, <keywords>)`, with `jax.pmap`
        replaced by ``helper`` (and `local=False` added for ``global_outputs``), where every
        option is one `_global_pmap` takes as written (in_axes: as the analysis reads it); None
        otherwise."""
        if not isinstance(expr, cst.Call):
            return None if global_outputs else helper  # `@jax.pmap` -> `@_global_pmap`
        if not self.model.matches(expr.func, tables.PARTIAL) or not expr.args or expr.args[0].keyword is not None:
            return None
        if any(a.keyword is None or a.star or a.keyword.value not in self._AS_WRITTEN for a in expr.args[1:]):
            return None
        args = [expr.args[0].with_changes(value=helper), *expr.args[1:]]
        if global_outputs:
            last = args[-1]
            comma = last.comma if isinstance(last.comma, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            args[-1] = last.with_changes(comma=comma)
            args.append(keyword_arg("local", cst.Name("False")))
        return expr.with_changes(args=args)

    @staticmethod
    def boundary_admits(entry: PlannedSite) -> bool:
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
        for read in self.reads_of(name):
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

    def _check_in_axes(self, entry: PlannedSite) -> None:
        in_axes = entry.in_axes
        entries = in_axes if isinstance(in_axes, list) else [in_axes]
        if any(isinstance(value, (dict, tuple)) for value in entries):
            raise Unsupported("an in_axes pytree prefix in a multi-process program")
        if not isinstance(in_axes, list) and in_axes is None:
            raise Unsupported("in_axes=None for every argument")
        # in_axes=None arguments go to jit as they are (each process's own value, as legacy): a
        # jax.Array committed to this process's devices would be refused there.
        for call in entry.calls:
            for arg, axis in self.argument_axes(entry, call):
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

    # ------------------------------------------------------------------ the fix
    def _combined_fix(self) -> FixSpec:
        edits: list[Edit] = []
        imports: list[ImportSpec] = []
        removes: list[ImportSpec] = []
        by_site = {id(entry.site): entry for entry in self.sites}
        outputs = self._output_assignments(by_site)
        reads = Reads(self, by_site, outputs)
        for entry in self.sites:
            assert entry.fix is not None
            site_edits = list(entry.fix.edits)  # (a boundary's wrapper returns host-local rows: `local=True`)
            try:
                site_edits += reads.for_calls(entry)
                for assignment in outputs.assignments():
                    if outputs.owner(assignment) is entry:
                        site_edits += reads.for_assignment(assignment)
            except Unsupported as why:
                raise SiteFailure(entry, str(why)) from None
            edits += site_edits
            removes += entry.fix.remove_imports
        removes += reads.removes
        self.row_reads = frozenset(reads.row_reads)
        try:
            edits = compose_edits(self.model, spaced(self.model, edits, self.rewriter.plain_generated))
        except LostEdit as lost:
            raise SiteFailure(owner_of(lost.edit.target, self.sites), "its rewrite overlaps the rewrite of "
                               "another part of the program") from None
        # the sites name `_global_pmap` only: `jax` where a read names it (`jax.tree.map(...)`), and
        # `import jax` goes where nothing uses it any more
        if any(_names_jax(edit) for edit in edits):
            imports.append(ImportSpec("jax"))
            self.rewriter.check_names_free(self.rewriter.SITE_NAMES)
        else:
            removes.append(ImportSpec("jax"))
        # each name once (functions of different scopes may share one)
        inside = ", ".join(dict.fromkeys(f"`{e.wrapper_name}`" for e in self.sites if e.boundary is None))
        boundary = ", ".join(dict.fromkeys(f"`{e.wrapper_name}`" for e in self.sites if e.boundary is not None))
        mesh = "as `jax.jit(jax.shard_map(...))` over a global mesh of every process's devices (legacy pmap's order)"
        at_boundary = ("taking and returning this process's rows as legacy pmap did, so that no caller or read "
                       "changes (called in traced code on several processes, they raise)")
        if not inside:
            summary = f"rewrite {boundary} {mesh}, {at_boundary} (same values as legacy pmap)"
        else:
            summary = (f"rewrite {inside} {mesh}: host-local inputs become global arrays, outputs fed back stay "
                       "global, reads take this process's rows (same values as legacy pmap)")
            if boundary:
                summary += f"; and {boundary} the same way, {at_boundary}"
        return FixSpec(Applicability.SAFE, summary, edits=tuple(edits), add_imports=tuple(dict.fromkeys(imports)),
                       remove_imports=tuple(dict.fromkeys(removes)), priority=1, helpers=self.helpers_used())

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

    def bound_targets(self, entry: PlannedSite, call: cst.Call) -> list[cst.BaseExpression] | None:
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

    def _output_assignments(self, by_site: dict[int, PlannedSite]) -> Outputs:
        """Every name a call of a rewritten pmap binds, with the layout of what it receives."""
        outputs = Outputs()
        for entry in self.sites:
            # (a boundary's outputs are host-local rows, read as legacy's were: only its row reads change)
            for call in entry.calls:
                for target in self.bound_targets(entry, call) or ():
                    if isinstance(target, cst.Name):
                        self._bind(outputs, entry, target, entry.layout)
                        continue
                    for k, element in enumerate(target.elements):
                        layout = entry.layout[k] if isinstance(entry.layout, tuple) else entry.layout
                        self._bind(outputs, entry, element.value, layout)
        return outputs

    def _bind(self, outputs: Outputs, entry: PlannedSite, target: cst.Name, layout: Layout) -> None:
        assignment = self.model.assignment_for_target(target)
        if entry.boundary is not None:
            if assignment is not None and not isinstance(assignment.scope, ClassScope):
                outputs.add(assignment, entry, layout)
            return
        if assignment is None:
            raise SiteFailure(entry, f"`{target.value}` is bound where its reads cannot be followed")
        if isinstance(assignment.scope, ClassScope):
            raise SiteFailure(entry, f"`{target.value}` is a class attribute: its reads are not visible here")
        if assignment.scope is self.model.scope_of(self.model.module) and not self._is_program() \
                and not target.value.startswith("_"):
            raise SiteFailure(entry, f"`{target.value}` is a public module-level output of a library module")
        outputs.add(assignment, entry, layout)

    def reads_of(self, name: str) -> list[cst.Name]:
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

    def argument_axes(self, entry: PlannedSite, call: cst.Call):
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


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _names_jax(edit: Edit) -> bool:
    """``edit``'s new code names `jax` (a read's `jax.tree.map`)."""
    nodes = [edit.replacement] if isinstance(edit.replacement, cst.CSTNode) else []
    nodes += list(edit.replacement.nodes) if isinstance(edit.replacement, cst.FlattenSentinel) else []
    nodes += list(edit.before)
    return any(m.findall(node, m.Name("jax")) for node in nodes)
