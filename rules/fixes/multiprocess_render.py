"""The text of the multi-process rewrite: the module's helpers (the global mesh, the conversions to
and from global arrays) and each pmap's jitted shard_map over the global mesh with its wrapper."""

from __future__ import annotations

import dataclasses

import libcst as cst

from pmap_migrate.rules.fixes.multiprocess_reads import Helpers, PlannedSite
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan, jitted_parts, spec_for


class GlobalRender:
    """The rendering half of ``multiprocess.GlobalRewrite`` (which mixes it in)."""

    # ------------------------------------------------------------------ rendering
    def _helpers(self, axis: str) -> Helpers:
        helpers = self._helper_names
        if axis not in helpers:
            stem = axis.strip("\"'")
            stem = stem if axis[:1] in "\"'" and stem.isidentifier() else "pmap"  # a literal's word only
            helpers[axis] = Helpers(axis, self.rewriter.names.fresh(f"{stem}_mesh"),
                                     self.rewriter.names.fresh(f"{stem}_global"))
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

    def _helper_statements(self, helpers: Helpers, indent: str) -> list[cst.BaseStatement]:
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
