"""The text of the multi-process rewrite: the module's helpers (the global mesh, the conversions to
and from global arrays) and each pmap as `_global_pmap(f, axis_name, ...)`, pmap's call renamed:
its jitted shard_map over the global mesh, called with global arrays."""

from __future__ import annotations

import dataclasses

import libcst as cst

from pmap_migrate.rules.fixes.code import code_of, is_none
from pmap_migrate.rules.fixes.in_lines import hanging_call, options_in_lines, room
from pmap_migrate.rules.fixes.multiprocess_reads import PlannedSite
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_render import Plan, tuple_text
from pmap_migrate.rules.fixes.shared import (
    GLOBAL_PMAP,
    TO_GLOBAL,
    global_pmap_helper,
    to_global_helper,
)
from pmap_migrate.rules.fixes.spec import Helper


class GlobalRender:
    """The rendering half of ``multiprocess.GlobalRewrite`` (which mixes it in)."""

    # ------------------------------------------------------------------ rendering
    def _global_pmap(self) -> str:
        """The multi-process pmap: the package's shared `_global_pmap`."""
        return self.rewriter.shared_helper(GLOBAL_PMAP, global_pmap_helper).name

    def _render(self, entry: PlannedSite, plan: Plan, indent: str) -> str:
        # (an unknown signature with static positions: `_global_pmap` and `_shard_mapped` take
        # them by position at each call, as legacy pmap did; a computed axis name: `_global_pmap`
        # reads it where pmap read it)
        if entry.boundary is not None and plan.params is None and not plan.keywords:
            # Callers not seen may pass keywords: take them (mapped on axis 0, as legacy did).
            plan = dataclasses.replace(plan, keywords=True, body_call=plan.body_call.removesuffix("(*args)")
                                       + "(*args, **kwargs)")
        entry.plan = plan
        entry.wrapper_name = plan.name
        parts = self._pmap_options(entry, plan)
        if parts is None:
            raise Unsupported("a mapped function that is not a plain name, in a multi-process program")
        if plan.static and plan.params is None and plan.in_axes != 0:
            raise Unsupported("static_broadcasted_argnums and in_axes for arguments not seen")
        # (`_global_pmap` reads the axis name, in_axes and static positions from `_shard_mapped`'s
        # function; the static arguments go to jit as they are, the rest of the positional ones on
        # their axes, keyword arguments on axis 0)
        local = [] if entry.boundary is not None else ["local=False"]  # global outputs: reads all seen
        callee, options = parts
        in_lines = self._in_lines(entry, plan, options, local)
        if in_lines is not None:
            return in_lines
        texts = [f"{option}={text}" for option, text in options.items()]
        # a computed axis name as written: `_global_pmap` reads it where pmap read it
        axis = plan.axis_source or plan.axis
        hoisted = [] if self._in_place(entry) else plan.hoisted
        call = f"{self._global_pmap()}({', '.join([callee, axis, *texts, *local])})"
        return "\n".join([*hoisted, f"{plan.name} = {call}"]) + "\n"

    @staticmethod
    def _in_place(entry: PlannedSite) -> bool:
        """The mapped function is the expression of a pmap call (not a decorated def), a lambda,
        on one line, or over several whose first ends with an open bracket (a hanging indent, so
        its lines need no other columns where it moves): it goes into the new statement as written,
        where the pmap call was, evaluated there (one whose lines align with its old columns keeps
        them under a name of its own, evaluated there too, and laid out again)."""
        fun = entry.site.fun
        if fun is None or entry.site.is_decorator:
            return False
        first, _, rest = code_of(fun).partition("\n")
        return isinstance(fun, cst.Lambda) or not rest or first.rstrip().endswith(("(", "[", "{"))

    def _pmap_options(self, entry: PlannedSite, plan: Plan) -> tuple[str, dict[str, str]] | None:
        """(the mapped function's text, `_global_pmap`'s options after it and the axis name, as
        pmap's, each by name to its value's text: in_axes/out_axes, static_broadcasted_argnums
        (which `_global_pmap` also gives jit), devices (as written), donate_argnums); None where
        the mapped function is not a plain name."""
        callee = plan.body_call[: plan.body_call.find("(")]
        if self._in_place(entry):
            # the expression pmap was given, evaluated where pmap evaluated it (a lambda as written:
            # never the name its body happens to call first; `functools.partial(step, ...)` and
            # bound methods without a name of their own)
            callee = code_of(entry.site.fun)
        elif not callee.isidentifier():
            return None
        if plan.leading or plan.size is not None:
            return None
        options = {}
        if isinstance(plan.in_axes, list) and plan.params is not None:
            entries = iter(plan.in_axes)
            axes = [None if k in plan.static else next(entries) for k in range(len(plan.params))]
            if any(axis != 0 for axis in axes) or plan.static:
                options["in_axes"] = _axes_text(tuple(axes))
        elif plan.in_axes != 0:
            options["in_axes"] = _axes_text(plan.in_axes)
        if plan.out_axes != 0:
            options["out_axes"] = _axes_text(tuple(plan.out_axes) if isinstance(plan.out_axes, list) else plan.out_axes)
        if plan.static:
            options["static_broadcasted_argnums"] = tuple_text(plan.static)
        devices = entry.site.option("devices")
        if devices is not None and not is_none(devices):  # evaluated where pmap evaluated it
            options["devices"] = code_of(devices)
        if plan.donate:
            options["donate_argnums"] = tuple_text(plan.donate)
        return callee, options

    def _in_lines(self, entry: PlannedSite, plan: Plan, options: dict[str, str], local: list[str]) -> str | None:
        """`_global_pmap(...)` in the lines of a pmap call written over several (fixes/in_lines.py),
        where the call is what its statement assigns: the statement's text, or None."""
        call = hanging_call(entry.site)
        if call is None:
            return None
        statement, target = self.rewriter.assignment_statement(call)
        if statement is None or target != plan.name:
            return None
        built = options_in_lines(call, self._global_pmap(), options, {}, added=local, flat=True,
                                 room=room(self.rewriter.model, call))
        return None if built is None else f"{plan.name} = {code_of(built)}\n"

    def helpers_used(self) -> tuple[Helper, ...]:
        """The shared helpers the module's rewrite calls: `_global_pmap`, and those it calls (the
        conversion to global arrays, the compact form's `_shard_mapped` with the options its
        calls pass on and processes=True)."""
        helpers = (dataclasses.replace(self.rewriter.shared_helper(TO_GLOBAL, to_global_helper), support=True),)
        if not self.sites:
            return helpers
        compact = dataclasses.replace(self.rewriter.compact_helper()[1], support=True)
        return (self.rewriter.shared_helper(GLOBAL_PMAP, global_pmap_helper), *helpers, compact)


def _axes_text(axes) -> str:
    """An in_axes/out_axes value (ints, None, tuples, dicts whose keys are their source text) as a
    literal."""
    if isinstance(axes, tuple):
        return "(" + ", ".join(_axes_text(a) for a in axes) + ("," if len(axes) == 1 else "") + ")"
    if isinstance(axes, dict):
        return "{" + ", ".join(f"{key}: {_axes_text(value)}" for key, value in axes.items()) + "}"
    return repr(axes)
