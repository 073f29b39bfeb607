"""Nested pmaps, a part of ``pmap_rewrite.Rewriter`` (its base class): a direct nest whose
function's signature is known as one shard_map over a multi-axis mesh (`pmap(pmap(f, 'j'), 'i')`,
the explicit form), and every other nest in the compact form, each of its pmaps
`jax.jit(_shard_mapped(f, axis, nested=True))` (pmap_render.shard_mapped_helper: a pmap run in
another's body is a vmap with its axis name), all of the nest or none of it."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.fixes.code import code_of, is_none
from pmap_migrate.rules.fixes.observed import only_legacy
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan, expand_expr, process_guard, squeeze_line
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec


class Nests:
    """The nest rewrites of ``Rewriter`` (which gives ``model``, ``reader``, ``_compact_fix``,
    ``_check_option_values``, ``assignment_statement``, ``parse_generated`` and ``_finish``)."""

    # ------------------------------------------------------------ nests, in the compact form
    def _nest_group(self, site: TransformSite) -> list[TransformSite] | None:
        """The pmaps of the module that nest with ``site`` (``model.nested_sites``: it runs in
        their bodies or they in its, transitively), ``site`` included; None where it nests with
        none. A nest one of whose pmaps is not a pmap site of this module (an imported pmapped
        function, a callable the analysis cannot name) is one group with a None member."""
        groups = self.__dict__.get("_nest_groups")
        if groups is None:
            groups = {}
            for inner, (_, outer) in self.model.nested_sites().items():
                found = self.model.inner_site(inner)
                if found is not None and (found.transform != PMAP or self.model.site(found.node) is not found):
                    found = None  # not a pmap site of this module
                members = groups.get(id(outer.node), [outer])
                if found is not None and id(found.node) in groups and groups[id(found.node)] is not members:
                    other = groups[id(found.node)]
                    members.extend(m for m in other if all(m is not k for k in members))
                elif all(m is not found for m in members):
                    members.append(found)
                for member in members:
                    if member is not None:
                        groups[id(member.node)] = members
            self.__dict__["_nest_groups"] = groups
        return groups.get(id(site.node))

    def _enclosing_member(self, site: TransformSite) -> TransformSite | None:
        """The pmap call of ``site``'s nest whose arguments hold ``site`` (`pmap(pmap(f))`,
        `pmap(jax.jit(pmap(f)))`): its fix rewrites ``site`` too (one edit)."""
        for member in self._nest_group(site) or ():
            if member is not None and member is not site and isinstance(member.node, cst.Call) \
                    and self.model.is_within(site.node, member.node):
                return member
        return None

    def _with_inner_members(self, site: TransformSite, fun: cst.BaseExpression) -> cst.BaseExpression | None:
        """``fun``, the function ``site`` pmaps, with the pmaps of its nest in it rewritten in the
        compact form (``_enclosing_member``); None where one of them does not take it."""
        inside = [m for m in self._nest_group(site) or () if m is not None and m is not site
                  and self.model.is_within(m.node, fun)]
        for member in inside:
            if any(other is not member and self.model.is_within(member.node, other.node) for other in inside):
                continue  # rewritten with the one around it
            fix = self._compact_fix(member, nested=True)
            if fix is None:
                return None
            fun = fun.deep_replace(member.node, fix.edits[0].replacement)
        return fun

    def _nests_compact(self, site: TransformSite) -> bool:
        """Whether every pmap of ``site``'s nest (``_nest_group``) takes the compact form with
        `nested=True` (pmap_render.shard_mapped_helper: a pmap called in another's body runs as a
        vmap with its axis name on the outer one's devices): each a pmap of this module with
        literal options and no `devices` (legacy refused nested pmaps given devices), axis names
        literal strings none of them twice (or none: an axis of its own). All or none: a shard_map
        in a pmap kept on the shim, or the shim's pmap in a shard_map, would not nest."""
        group = self._nest_group(site)
        if group is None:
            return False
        made = self.__dict__.setdefault("_nests_compact_made", {})
        key = id(group)
        if key not in made:
            made[key] = None not in group and self._group_compacts(group)
        return made[key]

    def _group_compacts(self, group: list[TransformSite]) -> bool:
        names: list[str] = []
        for member in group:
            if self._groups_replicas(member):
                return False
            axis = member.option("axis_name")
            devices = member.option("devices")
            if member.callee.ambiguous or (devices is not None and not is_none(devices)):
                return False
            if axis is not None and not is_none(axis):
                if not isinstance(axis, cst.SimpleString):
                    return False
                names.append(axis.evaluated_value)
            try:
                only_legacy(self.model, member)
                self._check_option_values(member)
                if self._compact_fix(member, nested=True) is None:
                    return False
            except Unsupported:
                return False
        return len(set(names)) == len(names)

    def _nest_refusal(self, site: TransformSite) -> str:
        """Why ``site``, a pmap of a nest, has no plain rewrite."""
        if any(m is not None and self._groups_replicas(m) for m in self._nest_group(site) or [site]):
            return "`axis_index_groups` in a nest of pmaps (see PM102)"
        return "a nest of pmaps (see PM102)"

    def _groups_replicas(self, member: TransformSite) -> bool:
        """Whether the function (else the module) holding ``member`` passes `axis_index_groups` to
        something (`lax.psum(x, "i", axis_index_groups=...)`): legacy pmap ran such a collective
        across a nest's devices; neither the vmap an inner pmap becomes nor shard_map takes it."""
        holder = next((a for a in self.model.ancestors(member.node) if isinstance(a, cst.FunctionDef)),
                      self.model.module)
        found = self.__dict__.setdefault("_groups_replicas_in", {})  # (each nest's members ask again)
        if id(holder) not in found:
            found[id(holder)] = bool(m.findall(holder, m.Arg(keyword=m.Name("axis_index_groups"))))
        return found[id(holder)]

    # ------------------------------------------------------------ nesting
    def _nest_fix_once(self, chain: list[TransformSite]) -> FixSpec:
        """``_nested_fix(chain)``, computed once per nest (its outer level and each inner level ask)."""
        results = self.__dict__.setdefault("_nest_fixes", {})
        key = id(chain[0].node)
        if key not in results:
            try:
                results[key] = self._nested_fix(chain)
            except Unsupported as unsupported:
                results[key] = unsupported
        if isinstance(results[key], Unsupported):
            raise Unsupported(str(results[key]))
        return results[key]

    def _nested_fix(self, chain: list[TransformSite]) -> FixSpec:
        outer = chain[0]
        only_legacy(self.model, outer)
        statement, target = self.assignment_statement(outer.node)
        fun = chain[-1].fun
        assert statement is not None and fun is not None
        params, body_call, hoisted = self.reader.signature(fun, target, outer)
        if params is None:
            raise Unsupported("nested pmap of a function whose signature is unknown")
        axes = [code_of(level.option("axis_name")) for level in chain]
        if len({level.option("axis_name").evaluated_value for level in chain}) < len(chain):
            raise Unsupported("a nest of pmaps that names one axis twice (the inner one shadows the outer one)")
        depth = len(chain)
        leading = tuple(range(depth))
        i1, i2 = (self.model.indent,) * 2
        i2 = i1 * 2
        sizes = ", ".join(f"n_{k}" for k in range(depth))
        product = " * ".join(f"n_{k}" for k in range(depth))
        spec = "P(" + ", ".join(axes) + ")"
        text = "\n".join([
            *hoisted,
            "@jax.jit",
            f"def {target}({', '.join(params)}):",
            f"{i1}def per_device({', '.join(params)}):  # each device holds a ({'1, ' * depth}...) block; "
            "the nested pmap body saw the slice",
            f"{i2}{squeeze_line(params, leading)}",
            f"{i2}return {expand_expr(body_call, leading)}",
            "",
            f"{i1}{sizes}{',' if depth == 1 else ''} = jax.tree.leaves({params[0]})[0].shape[:{depth}]",
            *process_guard(i1),
            f"{i1}mesh = Mesh(np.array(jax.local_devices()[: {product}]).reshape({sizes}), ({', '.join(axes)}))",
            f"{i1}return jax.shard_map(per_device, mesh=mesh, in_specs={spec}, out_specs={spec}, "
            f"check_vma=False)({', '.join(params)})",
        ]) + "\n"
        new = self.parse_generated(text)
        first = new[0].with_changes(leading_lines=statement.leading_lines)
        plan = Plan(name=target, params=params, axis=axes[0], in_axes=0, out_axes=0, static=(), donate=(),
                    mesh_devices="", size=None, body_call=body_call)
        fix = self._finish(outer, plan, (Edit(statement, cst.FlattenSentinel([first, *new[1:]])),),
                           f"the nested pmap `{target}` over a {depth}-axis mesh")
        return FixSpec(fix.applicability, fix.summary, edits=fix.edits,
                       add_imports=fix.add_imports + (ImportSpec("numpy", None, "np"),),
                       remove_imports=fix.remove_imports)
