"""What one ``pmap(...)`` was given, validated, and how its arguments split into leaves.

The pmap machinery (``_pmap``), nested calls (``_nesting``) and device placement
(``_placement``) all read it; it depends on ``_axes`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from runtime_shim import _axes


@dataclass(frozen=True, eq=False)
class PmapSpec:
    """Everything ``pmap(...)`` was given, validated; no device is touched here."""

    fun: Callable
    axis_name: Any
    mesh_axis: Any  # axis_name, or a private name when the pmap has none
    in_axes: Any
    out_axes: Any
    statics: tuple[int, ...]
    donate: tuple[int, ...]
    devices: tuple | None
    backend: str | None
    axis_size: int | None

    def check_static_count(self, args: tuple) -> None:
        if self.statics and max(self.statics) >= len(args):
            raise ValueError(
                f"pmapped function has static_broadcasted_argnums={self.statics} but was "
                f"called with only {len(args)} positional argument"
                f"{'s' if len(args) > 1 else ''}. All static broadcasted arguments must "
                "be passed positionally.")

    def check_static_hashable(self, args: tuple) -> None:
        for i in self.statics:
            try:
                hash(args[i])
            except TypeError:
                raise ValueError(
                    "Non-hashable static arguments are not supported, as this can lead to "
                    f"unexpected cache-misses. Static argument (index {i}) of type "
                    f"{type(args[i])} for function {getattr(self.fun, '__name__', self.fun)} "
                    "is non-hashable.") from None

    def split_static(self, args: tuple) -> tuple[tuple, Callable[[tuple], tuple]]:
        """The dynamic positional args, and a function putting the statics back."""
        if not self.statics:
            return args, lambda dyn: dyn
        static = {i: args[i] for i in self.statics}
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        n = len(args)

        def bind(dyn_args):
            it = iter(dyn_args)
            return tuple(static[i] if i in static else next(it) for i in range(n))

        return dyn, bind

    def leaves_and_axes(self, args: tuple, kwargs: dict):
        dyn_args, bind = self.split_static(args)
        dyn_in_axes = _axes.dynamic_in_axes(self.in_axes, self.statics, len(args))
        leaves, treedef = jax.tree_util.tree_flatten((dyn_args, kwargs))
        axes = _axes.flat_in_axes(dyn_in_axes, dyn_args, kwargs)
        return leaves, treedef, axes, bind
