"""What a module does with pmap, computed once per file and shared by every rule.

Rules ask questions ("is this call a pmap?", "does this name hold a pmap output?") instead of
re-deriving them. Names resolve through libcst's QualifiedNameProvider and ScopeProvider,
never by text; module-local aliases (``p = jax.pmap``, ``pmap_i = partial(jax.pmap, ...)``) are
followed through scope assignments. The data flow is flow-insensitive (a name that is *ever*
assigned a pmap output in its scope counts as holding one) with two cheap refinements: a
statement's own binding does not reach the reads of its value (``x = f(x)`` reads the previous
``x``) unless a loop may run it again, and an assignment that runs on every path to a read hides
the earlier ones (see ``reaching_assignments``). Module-wide facts come from one extra traversal
(``Indexer``); the only other walks are local (a pmapped function's own return statements). Rules
ask the model instead of walking the tree again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import libcst as cst
from libcst.metadata import (
    Assignment,
    BaseAssignment,
    MetadataWrapper,
)

from pmap_migrate.rules.analysis.bindings import Bindings
from pmap_migrate.rules.analysis.facts import AliasFact, PmappedFact, ReturnsFact
from pmap_migrate.rules.analysis.imported import ImportedAlias, imported_alias
from pmap_migrate.rules.analysis.index import Indexer, indent_unit, resolve_scopes
from pmap_migrate.rules.analysis.nesting import Nesting
from pmap_migrate.rules.analysis.project import ModuleView
from pmap_migrate.rules.analysis.returns import Returns
from pmap_migrate.rules.analysis.sites import JIT, PMAP, Callee, TransformSite
from pmap_migrate.rules.analysis.values import ValueFlow
from pmap_migrate.rules.knowledge import tables


class SemanticModel(Bindings, ValueFlow, Returns, Nesting):
    """Facts about one module's use of pmap, jit and the pmap-era helpers."""

    def __init__(self, wrapper: MetadataWrapper, project: ModuleView | None = None,
                 run_by: tuple[str, ...] = ()) -> None:
        self.module = wrapper.module
        # The project index as this module sees it (rules/analysis/project.py): what names imported
        # from other modules of the project are. None: the module is analysed on its own.
        self.project = project
        self._project_facts: dict[str, AliasFact | PmappedFact | None] = {}
        self._stars: tuple[str, ...] | None = None  # the modules of `from m import *`, as spelled
        self._external_sites: dict[PmappedFact, TransformSite] = {}
        index = Indexer()
        self.module.visit(index)
        # Qualified names are asked of the scopes directly, for the few nodes that need them:
        # what QualifiedNameProvider answers, without its traversal of every node.
        self._scopes = resolve_scopes(wrapper, index.stores)
        self.index = index  # the one walk's facts (``Indexer``): read by the fix builders too
        self.parents = index.parents
        self._qname_cache: dict[cst.CSTNode, frozenset[str]] = {}
        self._partials: frozenset[str] | None = None  # Bindings._partial_names
        self._callee_cache: dict[cst.CSTNode, Callee | None] = {}
        self._resolving: set[cst.CSTNode] = set()
        self._resolves_cache: dict[tuple[int, frozenset[str]], bool] = {}
        self._assigned_names = frozenset(t.value for t in index.assigned_value if isinstance(t, cst.Name))
        self._value_uses: dict[str, list[cst.BaseExpression]] = {}
        self._copying: set[cst.Name] = set()

        self.sites: dict[cst.CSTNode, TransformSite] = {}  # Call/Decorator node -> site
        self.alias_definitions: dict[cst.BaseExpression, tuple[str, Callee]] = {}
        self._find_sites()
        self._calls_to: dict[cst.Call, TransformSite] = {}
        # Names/attributes bound to a transformed callable (`p = jax.pmap(f)`, `@jax.pmap def f`,
        # `self.p = jax.pmap(...)`), to find what a call or an argument refers to.
        self._callable_by_assignment: dict[BaseAssignment, TransformSite] = {}
        self._callable_by_attribute: dict[tuple[int, str], TransformSite] = {}
        self._find_transformed_calls()
        self._rows_per_device: dict[int, bool] = {}
        self._stacking_defs: dict[str, str] | None = None  # ValueFlow._stacking_helper's, made once
        # ValueFlow._returns_rows's: the defs returning a jit's output (or its `_host_local` view), by name
        self._row_wrappers: dict[str, list[tuple[cst.FunctionDef, cst.Call]]] | None = None
        self._tags: dict[BaseAssignment, set[str]] = defaultdict(set)
        self._call_tags: dict[cst.Call, set[str]] = {}
        # Which transform sites produced a value (PM304 compares the producer's `devices=`).
        self._assignment_producers: dict[BaseAssignment, list[TransformSite]] = defaultdict(list)
        # Which tagged calls (helpers such as device_put_replicated included) produced a value, with
        # the position of the call's tuple output the name received (None: the whole output).
        self._assignment_calls: dict[BaseAssignment, list[tuple[cst.Call, int | None]]] = defaultdict(list)
        # Names bound to a whole tuple-returning output (`out = step(x)` with `return a, b`):
        # `out[0]` on them selects an output, it does not index the device axis.
        self._whole_tuple_outputs: set[BaseAssignment] = set()
        # Names bound to a stacked value that is visibly a Python list or tuple of the pytree (a
        # pmapped function returning `[w * 2 for w in ws]` there, `device_put_replicated([w, b])`):
        # tags describe its leaves; `x[0]` on it picks an element, as it does on a tuple output.
        self._sequence_values: set[BaseAssignment] = set()
        self._tuple_sites: dict[int, bool] = {}
        self._sequence_sites: dict[tuple[int, int | None], bool] = {}
        # Calls of functions returning pmap outputs or stacks (this module's, or another's of the
        # project), with what they return.
        self._returned: dict[cst.Call, ReturnsFact] = {}
        self._tag_values()
        self._propagate_tags()
        self._tag_returning_calls()
        self._nested: dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]] | None = None
        self._nested_nodes: set[int] | None = None
        self._multi_process: bool | None = None
        # Multi-process programs of the project that run this module's pmaps (`fix` finds them:
        # codemod/crossmodule.py, ``RuleOptions.multi_process_callers``); the module is then one of theirs.
        self.run_by = run_by
        self._pmap_patched: tuple[cst.CSTNode | None] | None = None

    # ---------------------------------------------------------------- callees
    def callee(self, expr: cst.BaseExpression) -> Callee | None:
        """If calling ``expr`` with a function applies pmap or jit, describe how."""
        if expr in self._callee_cache:
            return self._callee_cache[expr]
        if expr in self._resolving:  # alias cycles: p = q; q = p
            return None
        self._resolving.add(expr)
        try:
            result = self._compute_callee(expr)
        finally:
            self._resolving.discard(expr)
        self._callee_cache[expr] = result
        return result

    def _compute_callee(self, expr: cst.BaseExpression) -> Callee | None:
        if isinstance(expr, (cst.Name, cst.Attribute)):
            names = self._project_names(expr)
            if not names.isdisjoint(tables.PMAP):
                return Callee(PMAP)
            if not names.isdisjoint(tables.JIT):
                return Callee(JIT)
            qualified, fact = self._project_fact_named(names)
            if isinstance(fact, AliasFact):
                imported = self._imported_alias(fact, expr, qualified)
                args = imported.args if not imported.problem else _parsed_arguments(fact.options)
                return Callee(PMAP, args, (_code(expr),), origin=fact.module, imported=imported)
        if isinstance(expr, cst.Call) and self.matches(expr.func, tables.PARTIAL) and expr.args:
            first = expr.args[0]
            if first.keyword is None and not first.star:
                inner = self.callee(first.value)
                if inner is not None:
                    return Callee(inner.transform, inner.bound_args + tuple(expr.args[1:]), inner.via,
                                  inner.ambiguous, inner.origin, inner.imported)
        if isinstance(expr, cst.Name):
            return self._alias_callee(expr)
        return None

    def _project_names(self, expr: cst.Name | cst.Attribute) -> frozenset[str]:
        """``expr``'s qualified names, or, for a name nothing in the module binds, what the module's
        star imports may bind it to (`from .constants import *`: `.constants.pmap`), for the
        project index to tell."""
        names = self.qualified_names(expr)
        if names or self.project is None or not isinstance(expr, cst.Name):
            return names
        if self._stars is None:
            self._stars = tuple("." * len(s.relative) + (_code(s.module) if s.module is not None else "")
                                for line in self.module.body if isinstance(line, cst.SimpleStatementLine)
                                for s in line.body if isinstance(s, cst.ImportFrom) and isinstance(s.names, cst.ImportStar))
        scope = self.scope_of(expr)
        if not self._stars or scope is None or scope[expr.value]:
            return names
        return frozenset(f"{star}.{expr.value}" for star in self._stars if self.project.star_binds(star, expr.value))

    def _project_fact(self, names: frozenset[str]) -> AliasFact | PmappedFact | None:
        """What the project index says one of ``names`` (an imported name's qualified names) is."""
        return self._project_fact_named(names)[1]

    def _project_fact_named(self, names: frozenset[str]) -> tuple[str, AliasFact | PmappedFact | None]:
        """``_project_fact``, with the qualified name the answer is for."""
        if self.project is None:
            return "", None
        for name in sorted(names):
            if name not in self._project_facts:
                self._project_facts[name] = self.project.lookup(name)
            fact = self._project_facts[name]
            if fact is not None:
                return name, fact
        return "", None

    def _imported_alias(self, fact: AliasFact, expr: cst.Name | cst.Attribute, qualified: str) -> ImportedAlias:
        """The alias ``expr`` names, as this module can spell its options (analysis/imported.py)."""
        scope = self.scope_of(self.module)
        bound = frozenset(a.name for a in scope.assignments) if scope is not None else frozenset()
        return imported_alias(fact, expr, qualified, self.project.name, self.project.package, bound)

    @property
    def uses_project(self) -> bool:
        """Whether the project index told this module's analysis anything (an imported alias or
        pmapped function was found)."""
        return any(fact is not None for fact in self._project_facts.values())

    def _external_site(self, expr: cst.BaseExpression) -> TransformSite | None:
        """The site of a function that another module of the project pmaps (``from .train import
        step``, ``train.step``), named by ``expr``."""
        if self.project is None or not isinstance(expr, (cst.Name, cst.Attribute)):
            return None
        fact = self._project_fact(self._project_names(expr))
        if not isinstance(fact, PmappedFact):
            return None
        site = self._external_sites.get(fact)
        if site is None and fact.rewritten:  # `fix` rewrote it: a jit whose outputs are the pmap's stacks
            call = _parsed_call(f"jax.jit({fact.name})")
            if call is None:
                return None
            site = TransformSite(JIT, call, Callee(JIT, via=(_code(expr),), origin=fact.module), tuple(call.args),
                                 origin=fact.module, tuple_output=fact.returns_tuple, rows=True,
                                 processes=fact.processes)
            self._external_sites[fact] = site
        elif site is None:
            call = _parsed_call(f"jax.pmap({fact.name}, {fact.options})" if fact.options else f"jax.pmap({fact.name})")
            if call is None:
                return None
            site = TransformSite(PMAP, call, Callee(PMAP, via=(_code(expr),), origin=fact.module), tuple(call.args),
                                 origin=fact.module, tuple_output=fact.returns_tuple, processes=fact.multi_process)
            self._external_sites[fact] = site
        return site

    def _alias_callee(self, name: cst.Name) -> Callee | None:
        found: list[Callee] = []
        other = False
        for assignment in self.assignments_of(name):
            value = self.index.assigned_value.get(assignment.node) if isinstance(assignment, Assignment) else None
            inner = self.callee(value) if value is not None else None
            if inner is None:
                other = True
            else:
                found.append(inner)
        if not found:
            return None
        first = found[0]
        ambiguous = other or any(c.transform != first.transform for c in found)
        return Callee(first.transform, first.bound_args, (name.value,) + first.via, ambiguous or first.ambiguous,
                      first.origin, first.imported)

    # ------------------------------------------------------------------ sites
    def _find_sites(self) -> None:
        for call in self.index.calls:
            callee = self.callee(call.func)
            if callee is None or not call.args:
                continue
            site = TransformSite(callee.transform, call, callee, callee.bound_args + tuple(call.args))
            self._bind_result(site, call)
            self.sites[call] = site
        for decorator in self.index.decorators:
            callee = self.callee(decorator.decorator)
            if callee is None:
                continue
            func = self.parents.get(decorator)
            if not isinstance(func, cst.FunctionDef):
                continue
            site = TransformSite(callee.transform, decorator, callee, callee.bound_args, decorated=func)
            assignment = self._function_assignment(func)
            if assignment is not None:
                site.bound_names.append(assignment)
            self.sites[decorator] = site
        for target, value in self.index.assigned_value.items():
            if isinstance(target, cst.Name) and value not in self.sites:
                callee = self.callee(value)
                if callee is not None:
                    self.alias_definitions[value] = (target.value, callee)

    def _function_assignment(self, func: cst.FunctionDef) -> BaseAssignment | None:
        scope = self.scope_of(func)
        if scope is None:
            return None
        for assignment in scope.assignments[func.name.value]:
            if assignment.node is func:
                return assignment
        return None

    def _bind_result(self, site: TransformSite, call: cst.Call) -> None:
        parent = self.parents.get(call)
        if not isinstance(parent, (cst.Assign, cst.AnnAssign)):
            return
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        for target in targets:
            if isinstance(target, cst.Name):
                assignment = self.assignment_for_target(target)
                if assignment is not None:
                    site.bound_names.append(assignment)
            elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
                cls = self.enclosing_class(call)
                if cls is not None and target.value.value == "self":
                    site.bound_attribute = (cls, target.attr.value)

    def transform_references(self, transform: str) -> list[cst.BaseExpression]:
        """Every read of the transform (``jax.pmap``, ``from jax import pmap as p``) or of a
        module-local alias of it (``p = jax.pmap``; ``pmap_i = partial(jax.pmap, ...)``)."""
        names, last = (tables.PMAP, ("pmap",)) if transform == PMAP else (tables.JIT, ("jit", "pjit"))
        found: list[cst.BaseExpression] = list(self.references(names, last))
        aliases = {name for name, callee in self.alias_definitions.values() if callee.transform == transform}
        for alias in aliases:
            for node in self.index.names.get(alias, ()):
                if self._is_attribute_tail(node) or self.is_binding(node):
                    continue
                callee = self.callee(node)
                if callee is not None and callee.transform == transform:
                    found.append(node)
        return found

    def value_uses(self, transform: str = PMAP) -> list[cst.BaseExpression]:
        """References to the transform that neither apply it to a function (a site: call or
        decorator, through ``functools.partial`` too) nor define an alias of it: the transform
        handled as a value (``[jax.pmap, jax.vmap]``, ``apply(jax.pmap, f)``, ``return jax.pmap``).
        Together with the sites and alias definitions these cover every reference."""
        cached = self._value_uses.get(transform)
        if cached is not None:
            return cached
        uses = []
        for reference in self.transform_references(transform):
            if not self._applied_or_aliased(reference):
                uses.append(reference)
        self._value_uses[transform] = uses
        return uses

    def _applied_or_aliased(self, reference: cst.BaseExpression) -> bool:
        node: cst.CSTNode = reference
        while True:
            parent = self.parents.get(node)
            if isinstance(parent, cst.Call) and parent.func is node:
                return parent in self.sites  # `jax.pmap()` with no function applies nothing
            if isinstance(parent, cst.Decorator):
                return parent in self.sites
            if node in self.alias_definitions:
                return True
            # partial(jax.pmap, ...) is applied or aliased if the partial is.
            if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
                call = self.parents.get(parent)
                if isinstance(call, cst.Call) and call.args and call.args[0] is parent and self.matches(
                        call.func, tables.PARTIAL):
                    node = call
                    continue
            return False

    def pmap_sites(self) -> list[TransformSite]:
        return [s for s in self.sites.values() if s.transform == PMAP]

    def site(self, node: cst.CSTNode) -> TransformSite | None:
        return self.sites.get(node)

    # ------------------------------------------------------- transformed calls
    def _find_transformed_calls(self) -> None:
        for site in self.sites.values():
            for assignment in site.bound_names:
                _prefer_pmap(self._callable_by_assignment, assignment, site)
            if site.bound_attribute is not None:
                cls, attr = site.bound_attribute
                _prefer_pmap(self._callable_by_attribute, (id(cls), attr), site)
        for call in self.index.calls:
            site = self.sites.get(call.func) or self.callable_site(call.func)
            if site is not None:
                self._calls_to[call] = site

    def callable_site(self, expr: cst.BaseExpression) -> TransformSite | None:
        """The site whose transformed function ``expr`` names: ``p`` after ``p = jax.pmap(f)`` or
        ``@jax.pmap def p``, ``self.p`` after ``self.p = jax.pmap(...)`` in the same class. When a
        function is both jitted and pmapped (stacked decorators), the pmap site wins: the pmap is
        what runs on the devices and what needs migrating. A function that another module of the
        project pmaps (``from .train import step``) has a site of its own (``_external_site``)."""
        site = self._local_callable_site(expr)
        return site if site is not None else self._external_site(expr)

    def _local_callable_site(self, expr: cst.BaseExpression) -> TransformSite | None:
        if isinstance(expr, cst.Name):
            if not self._callable_by_assignment:
                return None
            assignments = self.assignments_of(expr)
            if not any(a in self._callable_by_assignment for a in assignments):
                return self._copied_site(assignments)
            # Only the bindings that reach the read: in `f = jax.pmap(f)` the argument is the plain
            # function (the statement's own binding comes after it, unless a loop runs it again).
            found = None
            for assignment in self.reaching_assignments(expr):
                site = self._callable_by_assignment.get(assignment)
                if site is not None and (found is None or site.transform == PMAP):
                    found = site
            return found
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            if not self._callable_by_attribute:
                return None
            cls = self.enclosing_class(expr)
            if cls is not None:
                site = self._callable_by_attribute.get((id(cls), expr.attr.value))
                if site is not None and self._before_own_binding(expr, site):
                    return None
                return site
        return None

    def _copied_site(self, assignments) -> TransformSite | None:
        """The site of a name bound only to a copy of a transformed callable's name (`step =
        train_step_mapped`), a few copies deep."""
        if len(assignments) != 1 or len(self._copying) > 3:
            return None
        value = self.assigned_value(getattr(assignments[0], "node", None))
        if not isinstance(value, cst.Name) or value in self._copying:
            return None
        self._copying.add(value)
        try:
            return self.callable_site(value)
        finally:
            self._copying.discard(value)

    def _before_own_binding(self, expr: cst.Attribute, site: TransformSite) -> bool:
        """``self.f`` read in the arguments of the very site that ``self.f = jax.pmap(self.f)`` binds
        in a method, outside loops: the read sees the plain method (or what an earlier statement
        stored), not this pmap. Only a second run of the method on the same object (an `__init__`
        runs once; `_train_init`-style set-up methods once in practice) would see it: not taken
        for a nested pmap, which legacy could hardly have run either (its inner pmap would have
        needed a second device axis in every per-device slice)."""
        if not self.is_within(expr, site.node) or self._repeats(expr):
            return False
        function = next((a for a in self.ancestors(expr) if isinstance(a, (cst.FunctionDef, cst.Lambda))), None)
        return isinstance(function, cst.FunctionDef) \
            and self.parent(self.parent(function)) is self.enclosing_class(expr)  # a method of the class

    def transformed_call(self, call: cst.Call) -> TransformSite | None:
        """The site whose transformed function ``call`` calls, if any."""
        return self._calls_to.get(call)

    def pmap_calls(self) -> dict[cst.Call, TransformSite]:
        return {c: s for c, s in self._calls_to.items() if s.transform == PMAP}

    def external_calls(self) -> dict[cst.Call, TransformSite]:
        """The calls of functions that other modules of the project pmap (or rewrote from a pmap)."""
        return {c: s for c, s in self._calls_to.items() if s.origin is not None}

    # ------------------------------------------------------------ module-wide
    def multi_process(self) -> bool:
        """The module uses the multi-process API (`jax.process_index()`, ...), or a multi-process
        program of the project runs its pmaps (``run_by``): a program whose pmaps took host-local
        inputs (PM501)."""
        if self._multi_process is None:
            self._multi_process = bool(self.run_by) or self.uses_any(tables.MULTI_PROCESS,
                                                                     tables.MULTI_PROCESS_PREFIXES)
        return self._multi_process

    def pmap_patched_at(self) -> cst.CSTNode | None:
        """Where the module replaces `jax.pmap` while it runs (the first place): a test fake
        (`chex.fake_pmap()`), `mock.patch("jax.pmap", ...)`, `mock.patch.object(jax, "pmap", ...)`,
        `monkeypatch.setattr(jax, "pmap", ...)` or `setattr`, `jax.pmap = ...`. Its pmaps must keep
        going through `jax.pmap`, or the fake would no longer see them."""
        if self._pmap_patched is None:
            self._pmap_patched = (self._find_pmap_patch(),)
        return self._pmap_patched[0]

    def _find_pmap_patch(self) -> cst.CSTNode | None:
        for call in self.index.calls:
            func = self.qualified_names(call.func)
            if not func.isdisjoint(tables.PMAP_FAKES):
                return call
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            setter = not func.isdisjoint(tables.ATTRIBUTE_PATCHERS) or (
                isinstance(call.func, cst.Attribute) and call.func.attr.value == "setattr")
            if (not func.isdisjoint(tables.PATCHERS) or setter) and positional \
                    and _names_pmap(positional[0]) in tables.PMAP:
                return call  # `patch("jax.pmap", ...)`, `monkeypatch.setattr("jax.pmap", ...)`
            if setter and len(positional) >= 2 and _names_pmap(positional[1]) == "pmap" \
                    and any(f"{q}.pmap" in tables.PMAP for q in self.qualified_names(positional[0])):
                return call  # `patch.object(jax, "pmap", ...)`, `setattr(jax, "pmap", ...)`
        for attribute in self.index.attributes.get("pmap", ()):
            if isinstance(self.parent(attribute), cst.AssignTarget) and self.matches(attribute, tables.PMAP):
                return attribute  # `jax.pmap = fake`
        return None

    @property
    def indent(self) -> str:
        """One level of the module's indentation, for generated code (``indent_unit``)."""
        return indent_unit(self.module)

    @property
    def is_script(self) -> bool:
        """The module has an ``if __name__ == "__main__":`` block (a program, not a library)."""
        for statement in self.module.body:
            if isinstance(statement, cst.If) and "__main__" in cst.Module([]).code_for_node(statement.test) \
                    and "__name__" in cst.Module([]).code_for_node(statement.test):
                return True
        return False

    def uses_any(self, names: Iterable[str], prefixes: tuple[str, ...] = ()) -> bool:
        """Whether the module refers to one of ``names`` or to anything in a module named by
        ``prefixes`` (``"jax.distributed."``), however it was imported."""
        names = frozenset(names)
        modules = frozenset(p.rstrip(".") for p in prefixes)

        def hit(qualified: frozenset[str]) -> bool:
            return not qualified.isdisjoint(names) or any(q in modules or q.startswith(prefixes) for q in qualified)

        components = {n.rsplit(".", 1)[-1] for n in names | modules}
        # Local names an import bound to one of them (`import jax.distributed as jd`, `from
        # jax.experimental.multihost_utils import process_allgather`), checked through scopes.
        imported = {local for local, fulls in self.index.imports.items()
                    if any(f in names or f in modules or f.startswith(prefixes) for f in fulls)}
        for component in components:
            for node in self.index.attributes.get(component, ()):
                if hit(self.qualified_names(node)):
                    return True
        for local in components | imported:
            for node in self.index.names.get(local, ()):
                if not self._is_attribute_tail(node) and hit(self.qualified_names(node)):
                    return True
        return False

    @property
    def subscripts(self) -> list[cst.Subscript]:
        return self.index.subscripts


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _parsed_call(text: str) -> cst.Call | None:
    try:
        call = cst.parse_expression(text)
    except cst.ParserSyntaxError:  # options libcst cannot read back (the other module's Python is newer)
        return None
    return call if isinstance(call, cst.Call) else None


def _parsed_arguments(options: str) -> tuple[cst.Arg, ...]:
    """The arguments an alias of another module binds (its ``functools.partial``'s), as nodes of
    their own: they are read (options), never edited (they are not in this module)."""
    if not options:
        return ()
    call = _parsed_call(f"f({options})")
    return tuple(call.args) if call is not None else ()


def _prefer_pmap(table: dict, key, site: TransformSite) -> None:
    current = table.get(key)
    if current is None or (current.transform != PMAP and site.transform == PMAP):
        table[key] = site


def _names_pmap(node: cst.BaseExpression) -> str | None:
    """The string ``"jax.pmap"`` (or ``"pmap"``, an attribute name) a patcher is given."""
    if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
        value = node.evaluated_value
        if value in tables.PMAP or value == "pmap":
            return value
    return None
