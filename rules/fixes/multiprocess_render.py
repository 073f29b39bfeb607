"""The text of the multi-process rewrite: the module's helpers (the global mesh, the conversions to
and from global arrays) and each pmap's jitted shard_map over the global mesh with its wrapper."""

from __future__ import annotations

import dataclasses

import libcst as cst

from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.multiprocess_reads import PlannedSite
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan, jitted_parts, spec_for, tuple_text
from pmap_migrate.rules.fixes.shared import (
    HOST_LOCAL,
    TO_GLOBAL,
    host_local_helper,
    to_global_helper,
)
from pmap_migrate.rules.fixes.spec import Helper


class GlobalRender:
    """The rendering half of ``multiprocess.GlobalRewrite`` (which mixes it in)."""

    # ------------------------------------------------------------------ rendering
    def _to_global(self) -> str:
        """The conversion to global arrays: the package's shared `_to_global`."""
        return self.rewriter.shared_helper(TO_GLOBAL, to_global_helper).name

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
        to_global = self._to_global()
        jit_name = self.rewriter.names.fresh(f"_{plan.name.lstrip('_')}_sharded")
        i1 = indent
        size = jitted_parts(plan, indent, name=jit_name)[2]  # the mapped size, read from the arguments
        compact = self._compact(entry, plan, jit_name)
        if compact is None:
            raise Unsupported("a mapped function that is not a plain name, in a multi-process program")
        entry.compact = True
        lines = [*plan.hoisted, compact, "", ""]
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
        entry.uses_spec = any(spec != default for _, spec in converted)
        lines.append(f"def {plan.name}({', '.join(params)}):")
        if entry.boundary is None:
            lines += [
                f"{i1}# PM501: this process's rows in; global arrays out (reads take its rows)",
            ]
        else:
            if plan.params is None:
                checked = "(args, kwargs)" if plan.keywords else "args"
            else:
                checked = f"({', '.join(plan.params)}{',' if len(plan.params) == 1 else ''})"
            lines += [
                f"{i1}# PM501, callers or reads not all seen: this process's rows in and out",
                f"{i1}if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves({checked})):",
                f"{i1}{i1}raise NotImplementedError(\"a multi-process pmap called in traced code: use runtime_shim.pmap\")",
            ]
        lines.append(f"{i1}rows = jax.local_device_count() if jax.process_count() > 1 else {size}")
        if converted == [("args, kwargs", default)]:
            lines.append(f"{i1}args, kwargs = {to_global}((args, kwargs), {plan.axis}, rows)")
        elif all(spec == default for _, spec in converted) and len(converted) > 1:
            names = ", ".join(name for name, _ in converted)
            lines.append(f"{i1}{names} = {to_global}(({names}), {plan.axis}, rows)")
        else:
            for name, spec in converted:
                extra = "" if spec == default else f", {spec}"
                lines.append(f"{i1}{name} = {to_global}({name}, {plan.axis}, rows{extra})")
        result = f"{jit_name}({forward})"
        if entry.boundary is not None:
            result = f"{self.host_local_name()}({result})"
        lines.append(f"{i1}return {result}")
        return "\n".join(lines) + "\n"

    def _compact(self, entry: PlannedSite, plan: Plan, jit_name: str) -> str | None:
        """`<jit_name> = jax.jit(_shard_mapped(f, axis, ..., processes=True), ...)`: the compact
        form's helper over the global mesh (pmap_render.shard_mapped_helper), which applies the
        plan's axes at run time; None where the mapped function is not a plain name."""
        callee = plan.body_call[: plan.body_call.find("(")]
        if not callee.isidentifier() and isinstance(entry.site.fun, cst.Lambda):
            callee = code_of(entry.site.fun)  # its body was inlined: the lambda itself, where pmap took it
        elif not callee.isidentifier():
            return None
        if plan.leading or plan.size is not None:
            return None
        name, _ = self.rewriter.compact_helper()
        options = [plan.axis]
        if isinstance(plan.in_axes, list) and plan.params is not None:
            entries = iter(plan.in_axes)
            axes = [None if k in plan.static else next(entries) for k in range(len(plan.params))]
            if any(axis != 0 for axis in axes) or plan.static:
                options.append(f"in_axes={_axes_text(tuple(axes))}")
        elif plan.in_axes != 0:
            options.append(f"in_axes={_axes_text(plan.in_axes)}")
        if plan.out_axes != 0:
            out = tuple(plan.out_axes) if isinstance(plan.out_axes, list) else plan.out_axes
            options.append(f"out_axes={_axes_text(out)}")
        if plan.static:
            options.append(f"static_broadcasted_argnums={tuple_text(plan.static)}")
        options.append("processes=True")
        jit = [f"static_argnums={tuple_text(plan.static)}"] if plan.static else []
        jit += [f"donate_argnums={tuple_text(plan.donate)}"] if plan.donate else []
        mapped = f"{name}({callee}, {', '.join(options)})"
        return f"{jit_name} = jax.jit({', '.join([mapped, *jit])})"

    def host_local_name(self) -> str:
        """The host-local view helper (the package's shared `_host_local`), when a read uses it."""
        if self._host_local is None:
            self._host_local = self.rewriter.shared_helper(HOST_LOCAL, host_local_helper).name
        self._host_local_used = True
        return self._host_local

    def helpers_used(self) -> tuple[Helper, ...]:
        """The shared helpers the module's rewrite calls."""
        keys = [TO_GLOBAL] + ([HOST_LOCAL] if self._host_local_used else [])
        renders = {TO_GLOBAL: to_global_helper, HOST_LOCAL: host_local_helper}
        helpers = tuple(self.rewriter.shared_helper(key, renders[key]) for key in keys)
        compact = any(entry.compact for entry in self.sites)
        return helpers + ((self.rewriter.compact_helper()[1],) if compact else ())


def _axes_text(axes) -> str:
    """An in_axes/out_axes value (ints, None, tuples, dicts whose keys are their source text) as a
    literal."""
    if isinstance(axes, tuple):
        return "(" + ", ".join(_axes_text(a) for a in axes) + ("," if len(axes) == 1 else "") + ")"
    if isinstance(axes, dict):
        return "{" + ", ".join(f"{key}: {_axes_text(value)}" for key, value in axes.items()) + "}"
    return repr(axes)
