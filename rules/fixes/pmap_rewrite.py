"""The faithful pmap rewrite: legacy `jax.pmap` sites -> `jax.jit(jax.shard_map(...))` in plain JAX.

The emitted form (verified by running the programs in fixtures/programs on jax 0.7.2, 0.10.2 and
0.12; see fixtures/programs/README.md):

    def _step(x, w):                      # the pmapped body, unchanged
        ...

    @jax.jit                              # static_argnums / donate_argnums carried over
    def step(x, w):
        def per_device(x, w):             # each device holds a (1, ...) block: squeeze it back
            x = jax.tree.map(lambda leaf: leaf.squeeze(0), x)
            return jax.tree.map(lambda leaf: jnp.expand_dims(leaf, 0), _step(x, w))

        mesh = Mesh(jax.local_devices()[: jax.tree.leaves(x)[0].shape[0]], ("i",))
        return jax.shard_map(per_device, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"),
                             check_vma=False)(x, w)

The mesh is built at trace time (importing the module queries no device; the first n local
devices, as legacy pmap used), jit caches it per signature (no retrace per call), and
`check_vma=False` keeps legacy autodiff numbers. The pmaps of a multi-process module (PM501) get
the same jit(shard_map) on a global mesh of every process's devices instead, with their inputs
made global arrays and their outputs read back as this process's rows (rules/fixes/multiprocess.py).
What cannot be expressed exactly (nested pmaps, options computed at run time, pmap as a value, a
multi-process data flow that is not visible, ...) is routed to `runtime_shim.pmap`, which
reproduces the legacy semantics at run time.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Assignment

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import (
    WHITESPACE_LINE,
    assigned,
    assigns,
    code_of,
    helper_statements,
    is_none,
    keyword_arg,
    own_blank_lines_unindented,
    simple_params,
)
from pmap_migrate.rules.fixes.evaluation import EvaluationPlaces
from pmap_migrate.rules.fixes.in_lines import compact_in_lines
from pmap_migrate.rules.fixes.naming import NameAllocator
from pmap_migrate.rules.fixes.nests import Nests
from pmap_migrate.rules.fixes.observed import only_legacy
from pmap_migrate.rules.fixes.pmap_options import DEFAULT_AXIS, KNOWN_OPTIONS, SiteReader, Unsupported
from pmap_migrate.rules.fixes.pmap_render import (
    ALL_FEATURES,
    STATIC_TEMPLATE_LOCALS,
    Plan,
    helper_features,
    render,
    shard_mapped_helper,
    tuple_text,
)
from pmap_migrate.rules.fixes.shared import SHARD_MAPPED, SHARED_HELPERS, imported_name
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, Helper, ImportSpec
from pmap_migrate.rules.knowledge import tables

SHIM_IMPORT = ImportSpec("runtime_shim")


class Rewriter(Nests, EvaluationPlaces):
    """Builds fixes for the PM1xx rules of one module."""

    def __init__(self, model: SemanticModel, names: NameAllocator | None = None) -> None:
        self.model = model
        self.names = names or NameAllocator(model)
        self.reader = SiteReader(model, self.names)
        # Generated statements (and their direct children) parsed from text without whitespace-only
        # lines, by id (the dictionary keeps them alive): none of their empty lines carries indentation.
        self.plain_generated: dict[int, cst.CSTNode] = {}
        self._helper_made: tuple[str, Helper] | None = None

    # ------------------------------------------------------------------ shim
    def shim_fix(self, site: TransformSite, why: str) -> FixSpec:
        """Swap the `jax.pmap` reference of ``site`` for `runtime_shim.pmap` (always exact)."""
        expr = site.node.func if isinstance(site.node, cst.Call) else site.node.decorator
        target = self.pmap_reference(expr)
        summary = f"use `runtime_shim.pmap` (legacy semantics at run time; needs pmap-migrate-shim installed): {why}"
        if target is None:
            return FixSpec(Applicability.SAFE, summary)  # reference lives elsewhere (an alias); its own fix swaps it
        return self.shim_reference(target, summary, why)

    def shim_reference(self, node: cst.BaseExpression, summary: str, why: str = "") -> FixSpec:
        replacement = cst.Attribute(cst.Name("runtime_shim"), cst.Name("pmap"))
        replacement = replacement.with_changes(lpar=getattr(node, "lpar", ()), rpar=getattr(node, "rpar", ()))
        removes: tuple[ImportSpec, ...] = ()
        if isinstance(node, cst.Name):
            removes = (ImportSpec("jax", "pmap", None if node.value == "pmap" else node.value),)
        elif isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "jax":
            removes = (ImportSpec("jax"),)  # `import jax`, when `jax.pmap` was its last use (an alias module)
        return FixSpec(Applicability.SAFE, summary, replacement=replacement, target=node, add_imports=(SHIM_IMPORT,),
                       remove_imports=removes, shimmed=True, why=why)

    def pmap_imports(self, expr: cst.BaseExpression) -> tuple[ImportSpec, ...]:
        """Imports that removing ``expr`` (a pmap callee: `jax.pmap`, `pmap`, `partial(jax.pmap, ..)`,
        `functools.partial(...)`) may leave unused; the engine removes them only if nothing uses
        them any more. Imports the fix did not touch are never removed, used or not."""
        specs: list[ImportSpec] = []
        if isinstance(expr, cst.Call) and expr.args:
            if isinstance(expr.func, cst.Attribute) and isinstance(expr.func.value, cst.Name):
                specs.append(ImportSpec(expr.func.value.value))  # functools.partial -> functools
            elif isinstance(expr.func, cst.Name):
                specs.append(ImportSpec("functools", "partial", None if expr.func.value == "partial" else expr.func.value))
            expr = expr.args[0].value
        if isinstance(expr, cst.Name) and self.model.matches(expr, tables.PMAP):
            specs.append(ImportSpec("jax", "pmap", None if expr.value == "pmap" else expr.value))
        return tuple(specs)

    def pmap_reference(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        if isinstance(expr, (cst.Name, cst.Attribute)) and self.model.matches(expr, tables.PMAP):
            return expr
        if isinstance(expr, cst.Call) and expr.args and self.model.matches(expr.func, tables.PARTIAL):
            return self.pmap_reference(expr.args[0].value)
        if isinstance(expr, cst.Name):
            # a local alias: swap its definition, which covers every use
            for assignment in self.model.assignments_of(expr):
                if isinstance(assignment, Assignment):
                    value = self.model.assigned_value(assignment.node)
                    if value is not None:
                        found = self.pmap_reference(value)
                        if found is not None:
                            return found
        return None

    # -------------------------------------------------------------- faithful
    def faithful(self, site: TransformSite) -> FixSpec:
        """The single-process faithful rewrite of ``site``; raises Unsupported."""
        if site.transform != PMAP:
            raise Unsupported("not a pmap")
        if site.callee.ambiguous:
            raise Unsupported("the pmap alias is also bound to something else")
        chain = self._direct_nest(site)
        if chain is not None:
            try:
                return self._nest_fix_once(chain)
            except Unsupported:
                if not self._nests_compact(site):
                    raise
        only_legacy(self.model, site)
        enclosing = self._enclosing_direct_nest(site)
        if enclosing is not None:
            # Rewritten with its nest, or not at all: alone it would run a shard_map inside the
            # outer pmap kept on the shim, on a mesh that is not the outer's.
            try:
                self._nest_fix_once(enclosing)
                return FixSpec(Applicability.SAFE, "rewritten together with the enclosing pmap")
            except Unsupported:
                if not self._nests_compact(site):
                    raise
        self._check_options(site, nests=True)
        nested = self._nest_group(site) is not None
        if nested and self._enclosing_member(site) is not None:
            return FixSpec(Applicability.SAFE, "rewritten together with the enclosing pmap")
        compact = self._compact_fix(site, nested=nested)
        if compact is not None:
            return compact
        if nested:  # (``_nests_compact`` saw every pmap of the nest take the compact form)
            raise Unsupported(self._nest_refusal(site))
        return self.definition_fix(site)

    # ------------------------------------------------------------ the compact form
    _COMPACT_OPTIONS = frozenset({"fun", "axis_name", "in_axes", "out_axes", "static_broadcasted_argnums",
                                  "donate_argnums", "devices", "backend"})

    def _compact_fix(self, site: TransformSite, nested: bool = False) -> FixSpec | None:
        """`jax.pmap(f, axis_name, in_axes=..., static_broadcasted_argnums=..., donate_argnums=...)`
        -> `jax.jit(_shard_mapped(f, axis_name, in_axes=..., static_broadcasted_argnums=...),
        static_argnums=..., donate_argnums=...)` in place, the package's one helper doing what every
        such pmap did (pmap_render.shard_mapped_helper applies the axes at run time, as legacy pmap
        did): for pmaps spelled directly (not through an alias, whose options were evaluated
        elsewhere, but for an alias of another module whose options this module spells:
        analysis/imported.py) whose options are literals. The function and axis name are evaluated
        where pmap evaluated them, in place (the helper gives the same function for the same `f`
        and options, so jit's cache holds where a pmap is built again and again). None: the site
        needs the explicit form."""
        direct = not site.callee.via or (site.callee.imported is not None and len(site.callee.via) == 1)
        if not direct or site.dynamic_options or len(site.positional()) > (1 if site.is_decorator else 2):
            return None
        if any(a.keyword is not None and a.keyword.value not in self._COMPACT_OPTIONS
               and not (a.keyword.value == "global_arg_shapes" and is_none(a.value)) for a in site.args):
            return None
        try:
            opts = self.reader.compact_options(site)
        except Unsupported:
            return None
        devices = site.option("devices")
        where = site.decorated if site.is_decorator else site.node  # a decorator runs where its def does
        if devices is not None and not is_none(devices) and \
                not any(isinstance(a, (cst.FunctionDef, cst.Lambda)) for a in self.model.ancestors(where)):
            return None  # evaluated at import: the explicit form queries the devices when it traces
        axis = site.option("axis_name")
        if axis is not None and is_none(axis):
            axis = None
        name, helper = self.compact_helper()
        jit = cst.Attribute(cst.Name("jax"), cst.Name("jit"))
        partial = cst.Attribute(cst.Name("functools"), cst.Name("partial"))
        # the argnums as the literal they fold to (legacy took any iterable; jit takes a sequence)
        argnums = [(option, cst.parse_expression(tuple_text(opts[key])))
                   for option, key in (("static_argnums", "static"), ("donate_argnums", "donate")) if opts[key]]
        if opts["donate_expr"] is not None:
            argnums.append(("donate_argnums", opts["donate_expr"]))
        donated = [keyword_arg(option, value) for option, value in argnums]  # jit's
        mapping = [keyword_arg(option, opts[option]) for option in ("in_axes", "out_axes") if opts[option] is not None]
        if opts["static"]:
            mapping.append(keyword_arg("static_broadcasted_argnums", cst.parse_expression(tuple_text(opts["static"]))))
        for option in ("devices", "backend"):  # evaluated where pmap evaluated them
            value = site.option(option)
            if value is not None and not is_none(value):
                mapping.append(keyword_arg(option, value))
        if nested:  # a pmap in a pmap, or one with pmaps in it (``_nests_compact``)
            mapping.append(keyword_arg("nested", cst.Name("True")))
        if site.is_decorator:
            options = [*([keyword_arg("axis_name", axis)] if axis is not None else []), *mapping]
            mapped = cst.Call(partial, [cst.Arg(cst.Name(name)), *options]) if options else cst.Name(name)
            jitted = jit if not donated else cst.Call(partial, [cst.Arg(jit), *donated])
            decorators = cst.FlattenSentinel([site.node.with_changes(decorator=jitted),
                                              cst.Decorator(mapped, leading_lines=())])
            edits = (Edit(site.node, decorators),)
            what = f"`{site.decorated.name.value}`"
        else:
            fun = site.fun
            call = site.node
            if fun is None:
                return None
            inner = self._with_inner_members(site, fun) if nested else fun
            if inner is None:
                return None
            lines = compact_in_lines(site, name, opts, argnums, self.model) if inner is fun else None
            fun = inner
            built = lines or cst.Call(jit, [
                cst.Arg(cst.Call(cst.Name(name), [
                    cst.Arg(fun), *([cst.Arg(axis)] if axis is not None else []), *mapping])), *donated],
                lpar=call.lpar, rpar=call.rpar)
            # In place, where pmap was built and evaluated (`jax.pmap(f)(x)` in a loop too: the
            # helper gives the same function for the same `f`, so jit's cache holds; a lambda is a
            # new function each time, which legacy pmap traced anew as well).
            edits = (Edit(call, built),)
            _, target = self.assignment_statement(call)
            what = f"`{target or self._base_name(call, fun)}`"
        expr = site.node.func if isinstance(site.node, cst.Call) else site.node.decorator
        # the call site's own: jax.jit, and functools.partial for a decorator with options
        partial_used = site.is_decorator and (axis is not None or bool(donated) or bool(mapping))
        self.check_names_free({**self.SITE_NAMES, **({"functools": {"functools"}} if partial_used else {})})
        imports = (ImportSpec("jax"), *((ImportSpec("functools"),) if partial_used else ()))
        return FixSpec(Applicability.SAFE, f"rewrite {what} as `jax.jit(jax.shard_map(...))` (same values as "
                       "legacy pmap)", edits=edits, add_imports=imports, remove_imports=self.pmap_imports(expr),
                       helpers=(helper,))

    def compact_helper(self) -> tuple[str, Helper]:
        """The compact form's helper of this module: one the module defines already or imports
        from its package's shared module (a fix of an earlier run or round), else under a fresh
        name. The engine imports it from the package's shared module where there is one."""
        if self._helper_made is None:
            indent = self.model.indent
            name = imported_name(self.model.module, SHARD_MAPPED)
            for statement in self.model.module.body if name is None else ():
                if isinstance(statement, cst.FunctionDef) and statement.name.value.startswith(SHARD_MAPPED) \
                        and helper_features(self.model.module.code_for_node(statement), statement.name.value) is not None:
                    name = statement.name.value  # (the engine fits it to the module's calls)
                    break
            name = name or self.names.fresh(SHARD_MAPPED)

            def variant(features, name=name, indent=indent):
                return tuple(self.parse_generated(shard_mapped_helper(name, indent, features), helper=True))

            self._helper_made = name, Helper(name, variant(ALL_FEATURES), imports=SHARED_HELPERS[SHARD_MAPPED].imports,
                                             shared=SHARD_MAPPED, variant=variant)
        return self._helper_made

    def shared_helper(self, key: str, render) -> Helper:
        """The shared helper ``key`` (rules/fixes/shared.py) under its own name, which helpers call
        each other by: imported from the package's shared module, or written in the module by
        ``render(indent)``; Unsupported where the module binds that name to anything else."""
        made = self.__dict__.setdefault("_shared_helpers", {})
        if key not in made:
            text = render(self.model.indent)
            module_scope = self.model.scope_of(self.model.module)
            if any(key in scope.assignments for scope in self.model.scopes() if scope is not module_scope):
                raise Unsupported(f"a function binds `{key}`, a name of the helpers of the rewrite")
            if imported_name(self.model.module, key) != key and module_scope is not None \
                    and key in module_scope.assignments:
                defined = [s for s in self.model.module.body if isinstance(s, cst.FunctionDef) and s.name.value == key]
                if len(defined) != 1 or self.model.module.code_for_node(defined[0]).strip() != text.strip():
                    raise Unsupported(f"the module binds `{key}`, a name of the helpers of the rewrite")
            self.names.taken().add(key)
            made[key] = Helper(key, tuple(self.parse_generated(text, helper=True)), imports=SHARED_HELPERS[key].imports,
                               shared=key)
        return made[key]

    def check_rewritable(self, site: TransformSite) -> None:
        """What rules out any plain-JAX form of a pmap of a multi-process module."""
        if site.transform != PMAP:
            raise Unsupported("not a pmap")
        if site.callee.ambiguous:
            raise Unsupported("the pmap alias is also bound to something else")
        if self._direct_nest(site) is not None or self._inner_of_direct_nest(site):
            raise Unsupported("a nested pmap in a multi-process program (host-local inputs, see PM501)")
        only_legacy(self.model, site)
        self._check_options(site)

    def _check_options(self, site: TransformSite, *, nests: bool = False) -> None:
        """``nests``: a nested pmap passes where its whole nest takes the compact form."""
        if id(site.node) in self.model.nested_nodes() and not (nests and self._nests_compact(site)):
            raise Unsupported(self._nest_refusal(site))
        self._check_option_values(site)

    def _check_option_values(self, site: TransformSite) -> None:
        if site.dynamic_options:
            raise Unsupported("options passed with * or **")
        for arg in site.args:
            if arg.keyword is None or arg.keyword.value in KNOWN_OPTIONS:
                continue
            if arg.keyword.value == "global_arg_shapes":
                if is_none(arg.value):
                    continue  # the default, spelled out: nothing to carry over (PM104 drops it too)
                # PM104's unsafe fix drops it in the same run: another option's reason, if any, first
                self.reader.compact_options(site)
                raise Unsupported("`global_arg_shapes` is given a value (see PM104)")
            raise Unsupported(f"option `{arg.keyword.value}` has no exact equivalent")

    def definition_fix(self, site: TransformSite, renderer=None, *, in_place: bool = False) -> FixSpec:
        """The edits that replace the pmap's definition with ``renderer(plan, indent)`` (default:
        the faithful single-process form, `render`). ``in_place``: a pmap built inside an
        expression becomes the value ``renderer`` assigns, where it stands (the multi-process
        forms, whose reads are planned from its calls), not a wrapper defined before its
        statement."""
        renderer = renderer or render
        if site.is_decorator:
            return self._decorator_fix(site, renderer)
        return self._call_fix(site, renderer, in_place)


    def _plan(self, site: TransformSite, name: str, params: list[str] | None, body_call: str,
              hoisted: list[str], template: bool = True) -> Plan:
        """``template``: the plan is for the faithful template (`render`), whose wrapper splits
        the static arguments off by position itself; another renderer's helper (the multi-process
        `_global_pmap`) takes them by position at each call, whatever the signature."""
        opts = self.reader.options(site, params)
        risk = self.reader.keyword_risk(site, params, opts)
        if risk is not None:
            opts["unsafe"].append(risk)
        keywords = params is None and self.reader.may_get_keywords(site)
        if params is None and opts["static"] and template:
            if keywords:
                raise Unsupported("static_broadcasted_argnums with an unknown signature, and keyword arguments "
                                  "(or the function used as a value)")
            callee = body_call.removesuffix("(*args)")
            if callee in STATIC_TEMPLATE_LOCALS:
                raise Unsupported(f"the mapped function's name `{callee}` is a name of the wrapper's own")
        if keywords:
            assert body_call.endswith("(*args)"), body_call
            body_call = body_call[: -len("(*args)")] + "(*args, **kwargs)"
        axis, source, axis_lines = opts["axis"], "", []
        if axis is None:
            # A computed axis name (`self.pmap_axis_name`): legacy read it once, when pmap was built;
            # the wrapper's mesh and specs read it from a name bound there. None named no axis.
            expression = opts["axis_node"]
            source = code_of(expression)
            axis = self.names.fresh(f"{name.lstrip('_') or 'pmapped'}_axis")
            axis_lines = [f"{axis} = {source}  # pmap's axis_name, read once where pmap read it"]
            if not self.reader.strings_only(expression):
                axis_lines.append(f"{axis} = {DEFAULT_AXIS} if {axis} is None else {axis}  # None: an unnamed axis")
        return Plan(name=name, params=params, axis=axis, in_axes=opts["in_axes"], out_axes=opts["out_axes"],
                    static=opts["static"], donate=opts["donate"], mesh_devices=opts["mesh_devices"],
                    size=opts["size"], body_call=body_call, hoisted=hoisted, unsafe_reasons=opts["unsafe"],
                    keywords=keywords, axis_source=source, axis_lines=axis_lines)

    def _imports(self, plan: Plan) -> tuple[ImportSpec, ...]:
        specs = [ImportSpec("jax"), ImportSpec("jax.sharding", "Mesh"), ImportSpec("jax.sharding", "PartitionSpec", "P")]
        specs.append(ImportSpec("jax.numpy", None, "jnp"))
        if plan.static or plan.donate:
            specs.append(ImportSpec("functools"))
        return tuple(specs)

    _TEMPLATE_NAMES = {
        "P": {"jax.sharding.PartitionSpec", "jax.P"},
        "Mesh": {"jax.sharding.Mesh"},
        "jnp": {"jax.numpy"},
        "jax": {"jax"},
        "functools": {"functools"},
        "np": {"numpy"},
    }
    # What the compact and the multi-process call sites name (`jax.jit(_shard_mapped(...))`,
    # `_global_pmap(f, ...)`): the helpers' own names are their module's, the shared module's
    # or this one's where they are copied, whose added imports the engine's name check refuses if
    # they would rebind a name.
    SITE_NAMES = {"jax": {"jax"}}

    def check_names_free(self, names: dict[str, set[str]] | None = None) -> None:
        """The template's names must be unbound or bound to what the template means."""
        scope = self.model.scope_of(self.model.module)
        if scope is None:
            return
        for name, meanings in (names or self._TEMPLATE_NAMES).items():
            if name in scope.assignments:
                found = {q.name for q in scope.get_qualified_names_for(name)}
                if not found <= meanings:
                    raise Unsupported(f"the module binds `{name}` to something other than `{min(meanings)}`")

    def _finish(self, site: TransformSite, plan: Plan, edits: tuple[Edit, ...], what: str,
                renderer=render) -> FixSpec:
        # the explicit form names Mesh, P, jnp ... at the site; the multi-process renderer's, `jax` only
        self.check_names_free(None if renderer is render else self.SITE_NAMES)
        summary = f"rewrite {what} as `jax.jit(jax.shard_map(...))` (same values as legacy pmap)"
        applicability = Applicability.SAFE
        if plan.unsafe_reasons:
            applicability = Applicability.UNSAFE
            summary += "; " + "; ".join(plan.unsafe_reasons)
        expr = site.node.func if isinstance(site.node, cst.Call) else site.node.decorator
        return FixSpec(applicability, summary, edits=edits, add_imports=self._imports(plan),
                       remove_imports=self.pmap_imports(expr))

    def parse_generated(self, text: str, *, helper: bool = False) -> list[cst.BaseStatement]:
        """The statements of generated code ``text``, recorded in ``plain_generated`` (with their
        direct children) when none of their empty lines carries indentation: the multi-process plan
        then need not walk them looking for one (rules/fixes/multiprocess.py, ``_unindented``).
        libcst gives an empty line indentation when it starts with its block's: a line of only
        whitespace anywhere, a blank line only at module level (whose indentation is none), in front
        of a statement or a decorator or after the decorators; nested blocks' blank lines have none.
        ``helper``: the text of a helper (``Helper``), parsed once per process (``helper_statements``)."""
        body = list(helper_statements(text) if helper else cst.parse_module(text).body)
        if WHITESPACE_LINE.search(text) is None:
            for k, statement in enumerate(body):
                if isinstance(statement, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef)):
                    body[k] = statement = own_blank_lines_unindented(statement)
                    for node in (statement, *statement.children):
                        self.plain_generated[id(node)] = node
        return body

    def _decorator_fix(self, site: TransformSite, renderer=render) -> FixSpec:
        func = site.decorated
        assert func is not None
        # Defaults, *args, **kwargs or keyword-only parameters: the wrapper cannot repeat the
        # signature; it passes its arguments on (params None: every one mapped on axis 0).
        params = simple_params(func.params)
        if isinstance(func.asynchronous, cst.Asynchronous):
            raise Unsupported("async function")
        if self._in_class_body(func):
            raise Unsupported("a method: the wrapper could not call its body by name from the class body")
        index = next(i for i, d in enumerate(func.decorators) if d is site.node)
        above, below = func.decorators[:index], func.decorators[index + 1:]
        body_name = self.names.fresh("_" + func.name.value)
        body_call = f"{body_name}(*args)" if params is None else f"{body_name}({', '.join(params)})"
        plan = self._plan(site, func.name.value, params, body_call, [], template=renderer is render)
        indent = self.model.indent
        wrapper = self.parse_generated(renderer(plan, indent))
        wrapper_def = wrapper[-1]
        if isinstance(wrapper_def, cst.FunctionDef):
            wrapper_def = wrapper_def.with_changes(decorators=[*above, *wrapper_def.decorators],
                                                   leading_lines=func.leading_lines)
        elif above:  # an assignment (`step = _global_pmap(...)`) takes no decorator
            raise Unsupported("decorators above the pmap")
        body_def = func.with_changes(name=cst.Name(body_name), decorators=below)
        blank = [line for line in func.leading_lines if line.comment is None]
        between = [w.with_changes(leading_lines=blank) if k == 0 else w for k, w in enumerate(wrapper[:-1])]
        replacement = cst.FlattenSentinel([body_def, *between, wrapper_def])
        return self._finish(site, plan, (Edit(func, replacement),), f"`{func.name.value}`", renderer)

    def _call_fix(self, site: TransformSite, renderer=render, in_place: bool = False) -> FixSpec:
        call = site.node
        assert isinstance(call, cst.Call)
        fun = site.fun
        if fun is None:
            raise Unsupported("no function to map")
        statement, target = self.assignment_statement(call)
        if statement is not None:
            # `step = jax.pmap(f, ...)`: the statement becomes the wrapper's definition.
            params, body_call, hoisted = self.reader.signature(fun, target, site)
            plan = self._plan(site, target, params, body_call, hoisted, template=renderer is render)
            new = self.parse_generated(renderer(plan, self.model.indent))
            new[0] = new[0].with_changes(leading_lines=statement.leading_lines)
            if isinstance(new[-1], cst.SimpleStatementLine) and statement.trailing_whitespace.comment is not None:
                # the statement's comment (`# pytype: disable=...`) stays with what it assigns
                new[-1] = new[-1].with_changes(trailing_whitespace=statement.trailing_whitespace)
            replacement = cst.FlattenSentinel(new)
            return self._finish(site, plan, (Edit(statement, replacement),), f"`{target}`", renderer)
        return self._hoisted_fix(site, call, fun, renderer, in_place)

    def _hoisted_fix(self, site: TransformSite, call: cst.Call, fun: cst.BaseExpression,
                     renderer=render, in_place: bool = False) -> FixSpec:
        """A pmap built inside an expression (`jax.pmap(f)(x)`, `self.step = jax.pmap(...)`): the
        wrapper is defined before the statement that evaluates the pmap, and the expression refers
        to it. What the wrapper needs (a function given as an expression, a computed axis name) is
        evaluated there, before the rest of the statement, which is where pmap evaluated it when
        the pmap is what the statement evaluates first. At module level instead (so that a call in
        a loop or a function is not re-traced), when the function and options are names of
        module-level definitions, literals and lambdas: defined once, they mean the same there.

        No wrapper is hoisted out of what evaluates the pmap later, conditionally or repeatedly (a
        lambda, a comprehension, a conditional expression, `and`/`or`, a `while` test), nor into a
        class body (it would become a class attribute): Unsupported."""
        statement = self._evaluating_statement(call)
        if statement is None:
            return self._static_fun_fix(site, call, fun)  # a lambda, comprehension, conditional expression ...
        expressions = [fun] + [a.value for a in site.args if a.value is not fun]  # options by position too
        top = self._top_level_statement(statement)
        if top is not None and top is not statement and all(self._definition_time_only(e) for e in expressions):
            anchor = top
        elif self._in_class_body(statement):
            return self._static_fun_fix(site, call, fun)  # a wrapper defined there would be a class attribute
        else:
            anchor = statement
        base = self._base_name(call, fun)
        wrapper_name = self.names.fresh(f"{base}_mapped")
        params, body_call, hoisted = self.reader.signature(fun, base, site, named=False)
        plan = self._plan(site, wrapper_name, params, body_call, hoisted, template=renderer is render)
        if (plan.hoisted or plan.axis_lines) and anchor is statement and not self._evaluated_first(call, statement):
            return self._static_fun_fix(site, call, fun)  # evaluated before the statement, its order would change
        new = self.parse_generated(renderer(plan, self.model.indent))
        in_place = in_place and len(new) == 1
        value = assigned(new, wrapper_name) if in_place or (anchor is statement and assigns(statement, call)) else None
        if value is not None:
            # `self.step = jax.pmap(...)` written as one expression (multi-process), or any pmap of
            # the multi-process boundary form: in its place
            edits = (Edit(call, value.with_changes(lpar=call.lpar, rpar=call.rpar)),)
            return self._finish(site, plan, edits, f"`{base}`", renderer)
        # Separate the new definitions as the anchor is separated from what precedes it (comments
        # in its leading lines stay with it).
        blank = [line for line in anchor.leading_lines if line.comment is None]
        new[0] = new[0].with_changes(leading_lines=blank)
        edits = (Edit(anchor, before=tuple(new)), Edit(call, cst.Name(wrapper_name, lpar=call.lpar, rpar=call.rpar)))
        return self._finish(site, plan, edits, f"`{base}`", renderer)

    _STATIC_FORM_OPTIONS = frozenset({"fun", "axis_name", "in_axes", "out_axes", "donate_argnums"})

    def _static_fun_fix(self, site: TransformSite, call: cst.Call, fun: cst.BaseExpression) -> FixSpec:
        """A pmap built where no wrapper can be defined in its place (inside a lambda, a comprehension,
        a conditional expression, a class body, or after other parts of its statement): a jitted
        wrapper at module level takes the mapped function (and a computed axis name) as static
        arguments, and the pmap becomes `functools.partial(wrapper, f)`, which evaluates them where
        pmap evaluated them. jit caches the trace on the function, as legacy pmap did; it needs the
        function to be hashable (a def, a lambda, a bound method are)."""
        top = self._top_level_statement(self._enclosing_statement(call) or call)
        if top is None:
            raise Unsupported("a pmap outside any statement")
        for arg in site.args:
            if arg.keyword is not None and arg.keyword.value not in self._STATIC_FORM_OPTIONS \
                    and not (arg.keyword.value == "global_arg_shapes" and is_none(arg.value)):
                raise Unsupported(f"option `{arg.keyword.value}` on a pmap built inside an expression that "
                                  "evaluates it later, conditionally or repeatedly")
        if len(site.positional()) > 2:
            raise Unsupported("options by position on a pmap built inside an expression")
        opts = self.reader.options(site, None)  # an unknown signature: in_axes and out_axes 0
        leading = ["fun"]
        passed: list[cst.BaseExpression] = [fun]
        axis = opts["axis"]
        if axis is None:  # computed: evaluated at the site, a static argument
            expression = opts["axis_node"]
            if not self.reader.strings_only(expression):
                raise Unsupported("a computed axis_name that may be None, on a pmap built inside an expression")
            leading.append("axis")
            passed.append(expression)
            axis = "axis"
        base = self._base_name(call, fun)
        name = self.names.fresh(f"{base}_pmapped")
        plan = Plan(name=name, params=None, axis=axis, in_axes=0, out_axes=0, static=(), donate=opts["donate"],
                    mesh_devices="jax.local_devices()[: {size}]", size=None, body_call="fun(*args, **kwargs)",
                    unsafe_reasons=list(opts["unsafe"]), keywords=True, leading=tuple(leading))
        if not self._surely_hashable(fun):
            plan.unsafe_reasons.append(f"assumes `{code_of(fun)}` is hashable: the wrapper takes the mapped function "
                                       "as a static argument of jit (legacy pmap cached on it too)")
        new = self.parse_generated(render(plan, self.model.indent))
        blank = [line for line in top.leading_lines if line.comment is None]
        new[0] = new[0].with_changes(leading_lines=blank)
        partial = cst.Call(cst.Attribute(cst.Name("functools"), cst.Name("partial")),
                           [cst.Arg(cst.Name(name)), *(cst.Arg(node) for node in passed)],
                           lpar=call.lpar, rpar=call.rpar)
        fix = self._finish(site, plan, (Edit(top, before=tuple(new)), Edit(call, partial)), f"`{base}`")
        return FixSpec(fix.applicability, fix.summary.replace("as `jax.jit(jax.shard_map(...))`", "as "
                       "`jax.jit(jax.shard_map(...))` taking the function as a static argument"), edits=fix.edits,
                       add_imports=fix.add_imports + (ImportSpec("functools"),), remove_imports=fix.remove_imports)
