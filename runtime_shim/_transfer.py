"""The pmap-era transfer helpers jax removed, and a cheap ``unreplicate``.

``device_put_replicated`` / ``device_put_sharded`` return arrays stacked on a new leading
axis with slice ``i`` on ``devices[i]``, as legacy jax did; their sharding is a
``NamedSharding`` over those devices instead of the removed ``PmapSharding``, which any
shim pmap over the same devices accepts without a copy. A weakly typed leaf (a Python number)
stays weakly typed, as in legacy: it is stacked on one device and then put in place (the
assembly from per-device blocks would make it strongly typed).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

_STACK_AXIS = "_device_put_axis"

try:  # the array type, for rows that are not committed to their device (``_uncommitted``)
    from jax._src.array import ArrayImpl as _ArrayImpl
except ImportError:  # pragma: no cover - a jax without it keeps committed rows
    _ArrayImpl = None


def _stacked_sharding(devices: Sequence[Any]) -> NamedSharding:
    return NamedSharding(Mesh(np.array(devices), (_STACK_AXIS,)), P(_STACK_AXIS))


def _with_new_axis(x: Any) -> Any:
    if isinstance(x, (np.ndarray, jax.Array)):
        return x[None]
    return np.asarray(x)[None]


def _assemble(sharding: NamedSharding, devices: Sequence[Any], blocks: list) -> jax.Array:
    """One (1, ...) block per device -> the stacked array, without any device compute."""
    shape = (len(devices), *blocks[0].shape[1:])
    placed = [jax.device_put(b, d) for b, d in zip(blocks, devices)]
    return jax.make_array_from_single_device_arrays(shape, sharding, placed)


def device_put_replicated(x: Any, devices: Sequence[Any]) -> Any:
    """Copy ``x`` (a pytree) to each of ``devices``, stacked on a new leading axis."""
    if not isinstance(devices, Sequence) or not devices:
        raise ValueError("`devices` argument to `device_put_replicated must be "
                         "a non-empty sequence.")
    sharding = _stacked_sharding(devices)

    def replicate(leaf):
        if jax.typeof(leaf).weak_type:
            return jax.device_put(jax.numpy.broadcast_to(leaf, (len(devices), *np.shape(leaf))), sharding)
        # Transfer once, then device-to-device copies: no host round trip per device.
        first = jax.device_put(_with_new_axis(leaf), devices[0])
        return _assemble(sharding, devices, [first] * len(devices))

    return jax.tree_util.tree_map(replicate, x)


def device_put_sharded(shards: Sequence[Any], devices: Sequence[Any]) -> Any:
    """Put ``shards[i]`` (pytrees of one structure) on ``devices[i]``, stacked per leaf."""
    if not isinstance(shards, Sequence):
        raise TypeError("device_put_sharded `shards` input must be a sequence; "
                        f"got {type(shards)}")
    if len(shards) != len(devices):
        raise ValueError(f"len(shards) = {len(shards)} must equal "
                         f"len(devices) = {len(devices)}.")
    sharding = _stacked_sharding(devices)

    def stack(*xs):
        kinds = [(aval.shape, aval.dtype, aval.weak_type) for aval in map(jax.typeof, xs)]
        for a, b in zip(kinds, kinds[1:]):
            if a != b:
                raise ValueError("the shards passed to device_put_sharded must have "
                                 f"consistent shape and dtype, but got {_aval(*a)} and "
                                 f"{_aval(*b)}.")
        if kinds[0][2]:
            return jax.device_put(jax.numpy.stack(xs), sharding)
        return _assemble(sharding, devices, [_with_new_axis(x) for x in xs])

    return jax.tree_util.tree_map(stack, *shards)


def _aval(shape: tuple, dtype: Any, weak: bool) -> str:
    """As jax prints an abstract value: `~float32[2,3]` (`~`: weakly typed)."""
    return f"{'~' if weak else ''}{np.dtype(dtype).name}[{','.join(map(str, shape))}]"


@functools.lru_cache(maxsize=4096)
def _row0_position(sharding: Any, shape: tuple) -> int | None:
    """Position in ``addressable_data`` of the block that is exactly row 0, if any."""
    if sharding.shard_shape(shape) != (1, *shape[1:]):
        return None
    for pos, index in enumerate(sharding.addressable_devices_indices_map(shape).values()):
        if (index[0].start or 0) == 0:
            return pos
    return None


def _first(x: Any) -> Any:
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and x.ndim:
        pos = _row0_position(x.sharding, x.shape)
        if pos is not None:
            return _uncommitted(jax.lax.squeeze(x.addressable_data(pos), (0,)))
    return x[0]


def _uncommitted(row: jax.Array) -> jax.Array:
    """``row`` (on one device) not committed to its device, as legacy's ``x[0]`` was: jit then
    moves it next to arrays committed elsewhere instead of refusing the mix ("incompatible
    devices"). The same buffer, no copy. jax has no public way to say this: the array type's own
    constructor does it (checked on jax 0.7.2, 0.10.2 and 0.12); where it does not exist or
    refuses (a typed PRNG key), the row stays committed."""
    if _ArrayImpl is not None:
        try:
            return _ArrayImpl(row.aval, row.sharding, [row], committed=False)
        except Exception:  # noqa: BLE001 - any refusal: the committed row is still the right value
            pass
    return row


def unreplicate(tree: Any) -> Any:
    """``tree_map(lambda x: x[0], tree)`` without the cross-device gather.

    On a pmap output, ``x[0]`` under the new jax is a computation over every device; here
    the device that holds row 0 hands over its local block. Leaves that are not sharded
    along their first axis fall back to ``x[0]``.
    """
    return jax.tree_util.tree_map(_first, tree)
