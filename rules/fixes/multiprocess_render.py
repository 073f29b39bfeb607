"""The text of the multi-process rewrite: the module's helpers (the global mesh, the conversions to
and from global arrays) and each pmap's jitted shard_map over the global mesh with its wrapper."""

from __future__ import annotations

import dataclasses


from pmap_migrate.rules.fixes.multiprocess_reads import Helpers, PlannedSite
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan, jitted_parts, spec_for
from pmap_migrate.rules.fixes.shared import (
    HOST_LOCAL,
    PROCESS_MESH,
    TO_GLOBAL,
    host_local_helper,
    process_mesh_helper,
    to_global_helper,
)
from pmap_migrate.rules.fixes.spec import Helper


class GlobalRender:
    """The rendering half of ``multiprocess.GlobalRewrite`` (which mixes it in)."""

    # ------------------------------------------------------------------ rendering
    def _helpers(self, axis: str) -> Helpers:
        """The global mesh and the conversion to global arrays: the package's shared helpers
        (`_process_mesh`, `_to_global`), which take the axis name."""
        helpers = self._helper_names
        if axis not in helpers:
            mesh = self.rewriter.shared_helper(PROCESS_MESH, process_mesh_helper)
            to_global = self.rewriter.shared_helper(TO_GLOBAL, to_global_helper)
            helpers[axis] = Helpers(axis, mesh.name, to_global.name)
        return helpers[axis]

    def _render(self, entry: PlannedSite, plan: Plan, indent: str) -> str:
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
                  f"{i1}mesh = {helpers.mesh}({plan.axis}, {size} // jax.process_count())  # rows per process",
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
            lines.append(f"{i1}args, kwargs = {helpers.to_global}((args, kwargs), {plan.axis}, rows)")
        elif all(spec == default for _, spec in converted) and len(converted) > 1:
            names = ", ".join(name for name, _ in converted)
            lines.append(f"{i1}{names} = {helpers.to_global}(({names}), {plan.axis}, rows)")
        else:
            for name, spec in converted:
                extra = "" if spec == default else f", {spec}"
                lines.append(f"{i1}{name} = {helpers.to_global}({name}, {plan.axis}, rows{extra})")
        result = f"{jit_name}({forward})"
        if entry.boundary is not None:
            result = f"{self.host_local_name()}({result})"
        lines.append(f"{i1}return {result}")
        return "\n".join(lines) + "\n"

    def host_local_name(self) -> str:
        """The host-local view helper (the package's shared `_host_local`), when a read uses it."""
        if self._host_local is None:
            self._host_local = self.rewriter.shared_helper(HOST_LOCAL, host_local_helper).name
        self._host_local_used = True
        return self._host_local

    def helpers_used(self) -> tuple[Helper, ...]:
        """The shared helpers the module's rewrite calls."""
        keys = [PROCESS_MESH, TO_GLOBAL] + ([HOST_LOCAL] if self._host_local_used else [])
        renders = {PROCESS_MESH: process_mesh_helper, TO_GLOBAL: to_global_helper, HOST_LOCAL: host_local_helper}
        return tuple(self.rewriter.shared_helper(key, renders[key]) for key in keys)
