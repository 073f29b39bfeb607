"""``in_axes`` / ``out_axes``: validation, per-leaf broadcasting, partition specs.

Everything here runs when a pmap is defined or traced, never on the per-call fast path.
Error messages copy the wording of jax 0.7.2's pmap so that programs (and their tests)
that match on them keep working.
"""

from __future__ import annotations

import collections
import difflib
import inspect
import operator
import textwrap
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


def _children(tree: Any) -> list:
    """(key, child) pairs one level down."""
    pairs, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda y: y is not tree)
    return [(path[0], child) for path, child in pairs]


def _metadata(tree: Any) -> str:
    _, meta = jax.tree_util.tree_structure(tree, is_leaf=lambda y: y is not tree).node_data()
    return str(tuple(meta) if isinstance(tree, dict) else meta)


def prefix_error(name: str, prefix: Any, full: Any, path: tuple = ()) -> str | None:
    """jax's message for the first place where ``prefix`` is not a prefix of ``full``."""
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(prefix, is_leaf=is_none)):
        return None
    at = (f" at key path\n    {name}{jax.tree_util.keystr(path)}\nAt that key path, the prefix "
          f"pytree {name} has a subtree of type")
    if type(prefix) is not type(full):
        return (f"pytree structure error: different types{at}\n    {type(prefix)}\nbut at the "
                "same key path the full pytree has a subtree of different type\n"
                f"    {type(full)}.")
    if isinstance(prefix, (list, tuple)) and len(prefix) != len(full):
        kind = type(prefix).__name__
        return (f"pytree structure error: different lengths of {kind}{at} {kind} of length "
                f"{len(prefix)}, but the full pytree has a subtree of the same type but of "
                f"length {len(full)}.")
    mine, theirs = _children(prefix), _children(full)
    if len(mine) != len(theirs):
        return (f"pytree structure error: different numbers of pytree children{at}\n"
                f"    {type(prefix)}\nwith {len(mine)} child keys, but at the same key path "
                f"the full pytree has a subtree of the same type but with {len(theirs)} "
                "child keys")
    if _metadata(prefix) != _metadata(full):
        ours, other = _metadata(prefix), _metadata(full)
        diff = textwrap.indent("\n".join(difflib.ndiff([ours], [other])), "    ")
        return (f"pytree structure error: different pytree metadata{at}\n    {type(prefix)}\n"
                f"with metadata\n    {ours}\nbut at the same key path the full pytree has a "
                f"subtree of the same type but with metadata\n    {other}\nso the diff in "
                f"the metadata at these pytree nodes is\n{diff}")
    for (key, a), (_, b) in zip(mine, theirs):
        found = prefix_error(name, a, b, (*path, key))
        if found:
            return found
    return None


def flat_in_axes(dyn_in_axes: Any, dyn_args: tuple, kwargs: dict) -> list:
    """Per-leaf axes of ``(dyn_args, kwargs)``; keyword arguments map over axis 0."""
    try:
        return broadcast((dyn_in_axes, 0), (dyn_args, kwargs))
    except ValueError:
        msg = (prefix_error("pmap in_axes", (dyn_in_axes, 0), (dyn_args, kwargs))
               or "pmap in_axes is not a tree prefix of the arguments") + _PREFIX_HINT
        if kwargs:
            msg += _KWARGS_HINT
        raise ValueError(msg + _CHECK_HINT) from None


def flat_out_axes(out_axes: Any, out: Any) -> list:
    if any(leaf < 0 for leaf in jax.tree_util.tree_leaves(out_axes)):
        # Legacy pmap died on an assertion when called (not when defined) and the new jax.pmap
        # returns a wrongly shaped array; a clear error at the same moment is the faithful choice.
        raise ValueError(f"pmap out_axes must be non-negative, got {out_axes}.")
    try:
        return broadcast(out_axes, out)
    except ValueError:
        msg = (prefix_error("pmap out_axes", out_axes, out)
               or "pmap out_axes is not a tree prefix of the output")
        raise ValueError(msg + _OUT_HINT) from None


def normalize(axis: int | None, shape: tuple) -> int | None:
    """A non-negative axis, or the legacy rank error."""
    if axis is None:
        return None
    ndim = len(shape)
    if -ndim <= axis < ndim:
        return axis % ndim
    min_rank = axis + 1 if axis >= 0 else -axis
    raise ValueError(
        f"pmap was requested to map its argument along axis {axis}, which implies that "
        f"its rank should be at least {min_rank}, but is only {ndim} (its shape is {shape})")


def _describe(x: Any) -> str:
    try:
        return f"{np.dtype(x.dtype).name}[{','.join(map(str, np.shape(x)))}]"
    except (AttributeError, TypeError):
        return "unknown"


def _inconsistent(fun: Any, treedef: Any, leaves: list, axes: list, sizes: list) -> str:
    """jax 0.7.2's message: which arguments had which mapped sizes."""
    args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
    try:
        params = list(inspect.signature(fun).parameters) if fun is not None else None
    except (TypeError, ValueError):
        params = None

    def where(path, x):
        i = path[0].idx
        name = (f"args{jax.tree_util.keystr(path)}" if params is None or i >= len(params)
                else f"argument {params[i]}{jax.tree_util.keystr(path[1:])}")
        return f"{name} of type {_describe(x)}"

    names = [where(p, x) for p, x in jax.tree_util.tree_flatten_with_path(args)[0]]
    names += [f"kwargs{jax.tree_util.keystr(p)} of type {_describe(x)}"
              for p, x in jax.tree_util.tree_flatten_with_path(kwargs)[0]]
    counts = collections.Counter(s for s in sizes if s is not None).most_common()
    lines = []
    for rank, (size, count) in enumerate(counts):
        i = sizes.index(size)
        if count == 1:
            lines.append(f"  * one axis had size {size}: axis {axes[i]} of {names[i]};")
        elif rank == 0:
            lines.append(f"  * most axes ({count} of them) had size {size}, e.g. axis "
                         f"{axes[i]} of {names[i]};")
        else:
            lines.append(f"  * some axes ({count} of them) had size {size}, e.g. axis "
                         f"{axes[i]} of {names[i]};")
    return "pmap got inconsistent sizes for array axes to be mapped:\n" + "\n".join(lines)[:-1]


def mapped_size(leaves: list, axes: list, treedef: Any = None, fun: Any = None) -> int:
    """The size of the mapped axis, with jax 0.7.2's errors for the cases that have none."""
    if not leaves:
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves) if treedef else ((), {})
        raise ValueError("pmap wrapped function must be passed at least one argument "
                         f"containing an array, got empty *args={args} and **kwargs={kwargs}")
    sizes = [None if a is None else np.shape(x)[normalize(a, np.shape(x))]
             for x, a in zip(leaves, axes)]
    mapped = [s for s in sizes if s is not None]
    if not mapped:
        raise ValueError("pmap must have at least one non-None value in in_axes")
    if any(s != mapped[0] for s in mapped):
        raise ValueError(_inconsistent(fun, treedef, leaves, axes, sizes))
    return int(mapped[0])


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
