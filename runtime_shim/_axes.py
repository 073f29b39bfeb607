"""``in_axes`` / ``out_axes``: validation, per-leaf broadcasting, partition specs.

Everything here runs when a pmap is defined or traced, never on the per-call fast path.
Error messages copy the wording of jax 0.7.2's pmap so that programs (and their tests)
that match on them keep working.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

_PREFIX_HINT = (
    "\n\nThe 'full pytree' here is the tuple of arguments passed positionally to the "
    "pmapped function, and the value of `in_axes` must be a tree prefix of that tuple. "
    "But it was not a prefix.")
_KWARGS_HINT = (
    "\n\nWhen some arguments are passed by keyword to the pmapped function, they are not "
    "included in the comparison to `in_axes`. Instead, each argument passed by keyword is "
    "mapped over its leading axis. See the description of `in_axes` in the `pmap` "
    "docstring: https://docs.jax.dev/en/latest/_autosummary/jax.pmap.html#jax.pmap")
_CHECK_HINT = (
    "\n\nCheck that the value of the `in_axes` argument to `pmap` is a tree prefix of the "
    "tuple of arguments passed positionally to the pmapped function.")
_OUT_HINT = (
    "\n\nThe full pytree is the output of the pmapped function. Ensure that the `out_axes` "
    "argument to `pmap` is a pytree prefix of the pmapped function's output.")


def is_none(x: Any) -> bool:
    return x is None


def index_tuple(argnums: int | Iterable[int]) -> tuple[int, ...]:
    if isinstance(argnums, int):
        return (operator.index(argnums),)
    return tuple(operator.index(i) for i in argnums)


def check_axes_spec(kind: str, axes: Any) -> None:
    """Reject non-int leaves when the pmap is defined, as legacy pmap did."""
    if not all(type(leaf) is int for leaf in jax.tree_util.tree_leaves(axes)):
        raise TypeError(f"pmap {kind} must be an int, None, or (nested) container "
                        f"with those types as leaves, but got {axes}.")
    if kind == "out_axes" and any(leaf < 0 for leaf in jax.tree_util.tree_leaves(axes)):
        # Legacy pmap died on an assertion here and the new jax.pmap returns a wrongly
        # shaped array; a clear error is the only faithful choice.
        raise ValueError(f"pmap out_axes must be non-negative, got {axes}.")


def dynamic_in_axes(in_axes: Any, statics: tuple[int, ...], nargs: int) -> Any:
    """The ``in_axes`` prefix of the positional arguments that are not static."""
    if statics and isinstance(in_axes, tuple):
        return tuple(in_axes[i] for i in range(nargs) if i not in statics)
    return in_axes


def broadcast(prefix: Any, tree: Any) -> list:
    """One entry of ``prefix`` per leaf of ``tree`` (``None`` counts as a prefix leaf)."""
    out: list = []

    def collect(axis, subtree):
        out.extend([axis] * len(jax.tree_util.tree_leaves(subtree)))

    jax.tree_util.tree_map(collect, prefix, tree, is_leaf=is_none)
    return out


def _prefix_message(what: str, prefix: Any, tree: Any) -> str:
    treedef = jax.tree_util.tree_structure(tree)
    return (f"{what} specification must be a tree prefix of the corresponding value, "
            f"got specification {prefix} for value tree {treedef}.")


def flat_in_axes(dyn_in_axes: Any, dyn_args: tuple, kwargs: dict) -> list:
    """Per-leaf axes of ``(dyn_args, kwargs)``; keyword arguments map over axis 0."""
    try:
        return broadcast((dyn_in_axes, 0), (dyn_args, kwargs))
    except ValueError:
        msg = _prefix_message("pmap in_axes", dyn_in_axes, dyn_args) + _PREFIX_HINT
        if kwargs:
            msg += _KWARGS_HINT
        raise ValueError(msg + _CHECK_HINT) from None


def flat_out_axes(out_axes: Any, out: Any) -> list:
    try:
        return broadcast(out_axes, out)
    except ValueError:
        raise ValueError(_prefix_message("pmap out_axes", out_axes, out) + _OUT_HINT) from None


def normalize(axis: int | None, ndim: int) -> int | None:
    """A non-negative axis, or the legacy rank error."""
    if axis is None:
        return None
    if -ndim <= axis < ndim:
        return axis % ndim
    min_rank = axis + 1 if axis >= 0 else -axis
    raise ValueError(
        f"pmap was requested to map its argument along axis {axis}, which implies that "
        f"its rank should be at least {min_rank}, but is only {ndim}")


def _describe(x: Any) -> str:
    try:
        return f"{np.dtype(x.dtype).name}{list(np.shape(x))}"
    except (AttributeError, TypeError):
        return type(x).__name__


def mapped_size(leaves: list, axes: list, treedef: Any = None) -> int:
    """The size of the mapped axis, with jax 0.7.2's errors for the cases that have none."""
    if not leaves:
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves) if treedef else ((), {})
        raise ValueError("pmap wrapped function must be passed at least one argument "
                         f"containing an array, got empty *args={args} and **kwargs={kwargs}")
    sizes = []
    for leaf, axis in zip(leaves, axes):
        if axis is not None:
            shape = np.shape(leaf)
            sizes.append(shape[normalize(axis, len(shape))])
    if not sizes:
        raise ValueError("pmap must have at least one non-None value in in_axes")
    if any(s != sizes[0] for s in sizes):
        lines = [f"  * one axis had size {s}: axis {a} of an argument of type {_describe(x)}"
                 for x, a, s in zip((x for x, a in zip(leaves, axes) if a is not None),
                                    (a for a in axes if a is not None), sizes)]
        raise ValueError("pmap got inconsistent sizes for array axes to be mapped:\n"
                         + "\n".join(lines))
    return int(sizes[0])


def spec(axis: int | None, name: Any) -> P:
    """The partition spec that shards dimension ``axis`` over mesh axis ``name``."""
    return P() if axis is None else P(*([None] * axis), name)


def out_specs(out_axes: Any, name: Any) -> Any:
    return jax.tree_util.tree_map(lambda ax: spec(ax, name), out_axes, is_leaf=is_none)


def squeeze(x: Any, axis: int | None) -> Any:
    return x if axis is None else lax.squeeze(x, (axis,))


def expand(x: Any, axis: int | None) -> Any:
    x = jax.numpy.asarray(x)
    return x if axis is None else lax.expand_dims(x, (axis,))
