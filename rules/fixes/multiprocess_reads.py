"""The multi-process plan's sites, and the edits at the places a program reads a global output
(``Reads``): each read gets what legacy pmap returned there (this process's rows).

The plan (``multiprocess.GlobalRewrite``) is handed to ``Reads`` as ``plan``: its names, layouts and
tracing answers decide each read's edit."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import BaseAssignment

from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.analysis.syntax import IntegerIndexOf, is_key_subscript
from pmap_migrate.rules.fixes.api import removal_spec
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.placement_fixes import is_assignment_target, literal_index, row_of, single_index
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import tables

# An output's layout as out_axes gave it: an axis (int) or None (out_axes=None, one device's value),
# or a tuple of those for a function returning a tuple with per-output out_axes.
Layout = int | None | tuple

# Why a pmap whose output the program reads whole (not a row, not fed back to a rewritten pmap) takes
# the boundary form: it returns host-local rows, as legacy did, and no such read changes.
WHOLE = "its outputs are read whole"


@dataclass
class PlannedSite:
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


class SiteFailure(Exception):
    def __init__(self, site: PlannedSite, why: str) -> None:
        super().__init__(why)
        self.site = site
        self.why = why


class Outputs:
    """Assignments that receive (part of) the output of a rewritten pmap, with its layout."""

    def __init__(self) -> None:
        self._layouts: dict[BaseAssignment, Layout] = {}
        self._owners: dict[BaseAssignment, PlannedSite] = {}

    def add(self, assignment: BaseAssignment, entry: PlannedSite, layout: Layout) -> None:
        self._layouts[assignment] = layout
        self._owners[assignment] = entry

    def assignments(self):
        return list(self._layouts)

    def owner(self, assignment: BaseAssignment) -> PlannedSite:
        return self._owners[assignment]

    def layout(self, assignment: BaseAssignment) -> Layout:
        return self._layouts[assignment]

    def __contains__(self, assignment: object) -> bool:
        return assignment in self._layouts


class Reads:
    """The edits at the places the program reads a global output."""

    def __init__(self, plan, by_site: dict[int, PlannedSite], outputs: Outputs) -> None:
        self.plan = plan
        self.model = plan.model
        self.by_site = by_site
        self.outputs = outputs
        self.seen: set[int] = set()
        self.removes: list[ImportSpec] = []  # imports a rewritten read may leave unused (flax's unreplicate)
        # The nodes of reads rewritten to this process's row from its device (`out[0]`, a
        # `tree_map(lambda v: v[0], out)`, `unreplicate(out)`): no longer a gather after the fix.
        self.row_reads: set[int] = set()

    # ------------------------------------------------------------------ calls
    def for_calls(self, entry: PlannedSite) -> list[Edit]:
        """A call whose output is neither bound to names nor passed straight to a rewritten pmap
        (nor dropped) is read whole: its pmap takes the boundary form (raises SiteFailure); but a
        row read of the call itself (`step(x)[0]`) reads this process's row from the device that
        holds it, as a read of a name does, in either form (the boundary's host-local rows too)."""
        edits = []
        for call in entry.calls:
            if self.plan.bound_targets(entry, call) is not None or isinstance(self.model.parent(call), cst.Expr):
                continue
            row = self._call_row_read(call, entry.layout)
            if row is not None:
                edits.append(row)
            elif entry.boundary is None and not self._passed_through(call, entry.layout):
                raise SiteFailure(entry, WHOLE)
        return edits

    def _call_row_read(self, call: cst.Call, layout: Layout) -> Edit | None:
        """`step(x)[k]` (or `step(x)["loss"][k]`, `step(x)[1][k]` on a tuple output), a literal k,
        on a stack with one row per device, out of traced code: this process's row k, from the
        device that holds it. Not where the pmap is built in the call (`jax.pmap(f)(x)[0]`: its
        own rewrite edits inside)."""
        if not _rows_on_axis_0(layout) or not isinstance(call.func, (cst.Name, cst.Attribute)) \
                or self.plan.tracing.may_be_traced(call):
            return None
        return self._path_row_read(call)

    def _path_row_read(self, read: cst.BaseExpression) -> Edit | None:
        """The row read at the end of a path into an output (``read`` a name or a call): `read[k]`,
        `read["loss"][k]`, `read[1][k]` (an element of a tuple output) with a literal k, on a stack
        with one row per device: `<path>.addressable_shards[k].data.squeeze(0)`; None otherwise."""
        model, placement = self.model, self.plan.placement
        value, parent = read, model.parent(read)
        while isinstance(parent, cst.Subscript) and parent.value is value and (
                is_key_subscript(parent) or model.selects_output(parent)):
            value, parent = parent, model.parent(parent)
        if not isinstance(parent, cst.Subscript) or parent.value is not value:
            return None
        index = single_index(parent)
        if index is None or not literal_index(index) or model.selects_output(parent) \
                or not placement.one_row_per_device(value) or not placement.array_valued(value):
            return None
        self.row_reads.add(id(parent))
        return Edit(parent, row_of(value, index).with_changes(lpar=parent.lpar, rpar=parent.rpar))

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
        return any(a is arg and axis == 0 for a, axis in self.plan.argument_axes(target, call))

    # ------------------------------------------------------------------ names
    def for_assignment(self, assignment: BaseAssignment) -> list[Edit]:
        name = assignment.name
        edits: list[Edit] = []
        for node in self.model.index.names.get(name, ()):
            # `out += x`, `del out`: targets, not reads (the scopes do not list them as accesses)
            parent = self.model.parent(node)
            in_place = (isinstance(parent, cst.AugAssign) and parent.target is node) or isinstance(parent, cst.Del)
            if in_place and assignment in self.model.reaching_assignments(node):
                if self.outputs.owner(assignment).boundary is not None:
                    return []  # host-local rows, updated: read as they are
                raise Unsupported(f"`{name}` is updated in place")
        for read in self.plan.reads_of(name):
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
        # The global outputs it may read (none: host-local rows, as legacy returned them, read as they
        # are but for a row read, which no longer gathers). A read global outputs cannot take sends the
        # first of their pmaps to the boundary form (it returns host-local rows).
        owners = [owner for a in reaching if a in self.outputs if (owner := self.outputs.owner(a)).boundary is None]
        parent = model.parent(read)
        traced = self.plan.tracing.may_be_traced(read)
        in_place = isinstance(parent, (cst.AugAssign, cst.Del)) or is_assignment_target(model, read)
        if owners:
            if traced:
                raise SiteFailure(owners[0], f"`{read.value}` is read in code that may be traced")
            if self._passed_through(read, layout):
                return None
            if in_place:
                raise SiteFailure(owners[0], f"`{read.value}` is updated in place")
        elif traced or in_place:
            return None
        row = self._row_read(read, parent, self.plan.placement) if layout == 0 else None
        if row is not None:
            self.row_reads.add(id(parent))
            if isinstance(parent, cst.Arg):
                self.row_reads.add(id(model.parent(parent)))
            return row
        if owners:  # any other read: the output is read whole
            raise SiteFailure(owners[0], WHOLE)
        return None

    def _row_read(self, read: cst.Name, parent: cst.CSTNode | None, placement) -> list[Edit] | None:
        """`out[k]`, `tree_map(lambda v: v[k], out)`, `unreplicate(out)` on a stack with one row per
        device: this process's row k, from the device that holds it."""
        model = self.model
        if not placement.one_row_per_device(read):
            return None
        if isinstance(parent, cst.Subscript) and parent.value is read:
            row = self._path_row_read(read)
            return [row] if row is not None else None
        arg = parent
        call = model.parent(arg) if isinstance(arg, cst.Arg) else None
        if not isinstance(call, cst.Call) or arg.value is not read or arg.keyword is not None or arg.star:
            return None
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) != len(call.args):
            return None
        if model.resolves_to(call.func, tables.FLAX_UNREPLICATE) and len(positional) == 1:
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


def _rows_on_axis_0(layout: Layout) -> bool:
    """Every output (of a tuple output, each element) has its rows on axis 0."""
    return layout == 0 or (isinstance(layout, tuple) and bool(layout) and all(a == 0 for a in layout))


def owner_of(node: cst.CSTNode, sites: list[PlannedSite]) -> PlannedSite:
    for entry in sites:
        if any(e.target is node for e in (entry.fix.edits if entry.fix else ())):
            return entry
    return sites[-1]
