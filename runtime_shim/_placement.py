"""Where a pmap runs and how its inputs get there.

- which devices form the mesh (legacy order: ``jax.devices()[:n]`` on one process,
  process-major blocks of local devices on several);
- resharding inputs committed elsewhere, which jit rejects and legacy pmap accepted;
- the host-local <-> global conversion of multi-process programs.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from runtime_shim import _axes
from runtime_shim._nesting import Plan
from runtime_shim._spec import PmapSpec


def _local(devices: tuple) -> list:
    return [d for d in devices if d.process_index == jax.process_index()]


class EmptyAxisError(ValueError, ZeroDivisionError):
    """A mapped axis of size 0. Legacy pmap raised ZeroDivisionError for it where the body has a
    collective (lowering divided by the axis size) and aborted the process in XLA otherwise: code
    that expects the ZeroDivisionError catches this one too."""


def global_size(spec: PmapSpec, local_size: int) -> int:
    """The mapped size over all processes, given this process's (legacy rules)."""
    if spec.axis_size is not None:
        return spec.axis_size
    if spec.devices is not None:
        return len(spec.devices)
    return local_size * jax.process_count()


def _explicit_devices_error(spec: PmapSpec, plan: Plan, needed: int,
                            nested: bool) -> ValueError:
    local = _local(spec.devices)
    shown = ", ".join(map(str, local))
    if not nested:
        return ValueError(
            "Leading axis size of input to pmapped function must equal the number of local "
            f"devices passed to pmap. Got axis_size={plan.sizes[0]}, num_local_devices="
            f"{len(local)}.\n(Local devices available to pmap: {shown})")
    return ValueError(
        f"pmapped function requires {needed} local devices to run due to nested pmapped or "
        f"other parallel functions, but only {len(local)} are available.\n(outer axis "
        f"size: {plan.sizes[0]}, local devices available to pmap: {shown})")


def _device_count_error(needed: int, available: int) -> ValueError:
    return ValueError(f"compiling computation that requires {needed} logical devices, but "
                      f"only {available} XLA devices are available (num_replicas={needed})")


def new_plan(spec: PmapSpec, local_size: int) -> Plan:
    """The plan of an outermost call whose mapped axis has ``local_size`` elements here."""
    if spec.devices is not None and not spec.devices:
        raise ValueError("'devices' argument to pmap must be non-empty, or None.")
    if local_size < 1:
        raise EmptyAxisError(f"pmap needs a mapped axis of size 1 or more, got {local_size}.")
    if jax.process_count() == 1 and spec.axis_size not in (None, local_size):
        raise ValueError(f"Specified axis_size {spec.axis_size} doesn't match received "
                         f"axis_size {local_size}.")
    plan = Plan(names=[spec.mesh_axis], sizes=[local_size])
    processes = jax.process_count()
    if spec.devices is not None:
        plan.limit = len(_local(spec.devices))
        plan.shortage = lambda needed, nested: _explicit_devices_error(spec, plan, needed,
                                                                       nested)
    else:
        plan.limit = (jax.local_device_count(spec.backend) if processes > 1
                      else len(jax.devices(spec.backend)))
        plan.shortage = lambda needed, nested: _device_count_error(
            needed * processes, plan.limit * processes)
    return plan


def check_devices_used(spec: PmapSpec, plan: Plan) -> None:
    """Legacy pmap ran on exactly the ``devices`` it was given, nested axes included.

    Checked once the body has been traced, when every inner axis is known.
    """
    if spec.devices is not None and math.prod(plan.sizes) != plan.limit:
        raise _explicit_devices_error(spec, plan, math.prod(plan.sizes), len(plan.sizes) > 1)


def build_mesh(spec: PmapSpec, plan: Plan) -> Mesh:
    local_total = math.prod(plan.sizes)
    if local_total > plan.limit:
        raise plan.shortage(local_total, len(plan.sizes) > 1)
    if spec.devices is not None:
        # One process: the first devices; their count is checked after tracing.
        devices = list(spec.devices)
        if jax.process_count() == 1:
            devices = devices[:local_total]
        elif local_total != plan.limit:
            raise _explicit_devices_error(spec, plan, local_total, len(plan.sizes) > 1)
    elif jax.process_count() > 1:
        devices = [d for p in range(jax.process_count())
                   for d in jax.local_devices(p, spec.backend)[:local_total]]
    else:
        devices = jax.devices(spec.backend)[:local_total]
    shape = (len(devices) // local_total * plan.sizes[0], *plan.sizes[1:])
    return Mesh(np.array(devices).reshape(shape), tuple(plan.names))


def _device_order(x: Any) -> tuple | None:
    """The ordered devices ``x`` is committed to, or None if jit may move it freely."""
    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
        return None
    if not getattr(x, "_committed", True):
        return None
    sharding = x.sharding
    if isinstance(sharding, NamedSharding):
        return tuple(sharding.mesh.devices.flat)
    order = getattr(sharding, "_device_assignment", None)
    return tuple(order) if order is not None else tuple(sharding.device_set)


def reshard(leaves: list, axes: list, mesh: Mesh) -> list | None:
    """Move inputs committed to other devices onto the mesh; None if there were none.

    jit refuses ("incompatible devices") arrays committed to a device set or device order
    other than the mesh's; legacy pmap copied them. Arrays on the mesh's devices in any
    sharding are left to jit, which reshards them inside the computation.
    """
    order = tuple(mesh.devices.flat)
    name = mesh.axis_names[0]
    moved = False
    out = []
    for x, axis in zip(leaves, axes):
        committed_to = _device_order(x)
        if committed_to is not None and committed_to != order:
            axis = _axes.normalize(axis, x.shape)
            x = jax.device_put(x, NamedSharding(mesh, _axes.spec(axis, name)))
            moved = True
        out.append(x)
    return out if moved else None


def to_global(leaves: list, axes: list, mesh: Mesh) -> list:
    """Host-local inputs (this process's slice of the mapped axis) -> global arrays."""
    from jax.experimental import multihost_utils

    name = mesh.axis_names[0]
    specs, values = [], []
    for x, axis in zip(leaves, axes):
        if not isinstance(x, (jax.Array, np.ndarray)):
            x = jax.numpy.asarray(x)
        specs.append(_axes.spec(_axes.normalize(axis, np.shape(x)), name))
        values.append(x)
    return multihost_utils.host_local_array_to_global_array(values, mesh, specs)


def to_host_local(out: Any, mesh: Mesh, out_specs: Any) -> Any:
    from jax.experimental import multihost_utils

    return multihost_utils.global_array_to_host_local_array(out, mesh, out_specs)
