"""Nested pmaps: a pmap called while another shim pmap is being traced.

Legacy pmap ran ``pmap(pmap(f, 'j'), 'i')`` on ``n_i * n_j`` devices: every device ran the
outer body for its ``i`` (redundantly across ``j``), sliced its ``j`` element for the inner
body, and all-gathered the inner results over ``j``. The shim does the same inside one
fully manual ``shard_map`` over a mesh ``(i, j, ...)``: an inner pmap becomes
``dynamic_index(axis_index('j'))`` -> body -> ``all_gather('j')``, so collectives over
``'i'``, ``'j'`` or both are ordinary mesh collectives and the inner axis runs in parallel.

The outermost call learns the inner axes while tracing: an inner pmap whose axis is not
yet on the mesh records it in the :class:`Plan` and raises :class:`Replan`; the outer call
rebuilds its mesh and traces again. Programs without nesting are traced exactly once.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax import lax

from runtime_shim import _axes
from runtime_shim._spec import PmapSpec


class Replan(BaseException):
    """The mesh of the outermost pmap lacks an inner axis; it was added to the plan.

    A BaseException so that user code doing ``except Exception`` around an inner pmap
    cannot swallow it.
    """


@dataclass
class Plan:
    """The mesh axes of an outermost pmap at one mapped size: its own, then inner ones."""

    names: list = field(default_factory=list)
    sizes: list = field(default_factory=list)  # per process for the outermost axis
    limit: int = 1  # devices one process can give to one call
    # the legacy error for needing more devices than the limit: (needed, nested) -> error
    shortage: Callable[[int, bool], Exception] | None = None
    vmapped: set = field(default_factory=set)  # inner axes that did not fit: run as vmap
    mesh: Any = None  # built from names/sizes on first use, dropped when they grow

    def size_of(self, name: Any) -> int | None:
        return self.sizes[self.names.index(name)] if name in self.names else None

    def claim(self, name: Any, size: int, chain: tuple) -> bool:
        """True: shard the inner axis over the mesh. False: run it as a vmap."""
        if name in chain or name in self.vmapped:
            return False  # an axis name reused inside its own scope shadows it, as in vmap
        known = self.size_of(name)
        if known == size:
            return True
        if known is not None:
            self.vmapped.add(name)  # one name, two sizes: cannot be one mesh axis
            return False
        needed = math.prod(self.size_of(c) or 1 for c in chain) * size  # vmapped: no devices
        if needed > self.limit:
            raise self.shortage(needed, True)
        if math.prod(self.sizes) * size > self.limit:
            # Legacy pmap reused devices for sibling inner pmaps; a mesh cannot give two
            # names to one axis, so this sibling runs vectorised on each device instead.
            self.vmapped.add(name)
            return False
        self.names.append(name)
        self.sizes.append(size)
        self.mesh = None
        raise Replan()


class _Frames(threading.local):
    stack: list

    def __init__(self):
        self.stack = []


FRAMES = _Frames()
# Frames being traced in any thread. Reading a thread-local costs ~0.1 us, a third of the
# shim's whole per-call overhead; outermost calls test this list first and only look at
# their own thread's frames while some trace is under way.
ACTIVE: list = []


@dataclass(frozen=True, eq=False)
class Frame:
    plan: Plan
    chain: tuple  # mesh axes claimed by the enclosing pmaps, outermost first
    trace: Any = None  # the trace of the body (`_current_trace()` when it was entered)


@contextmanager
def frame(plan: Plan, chain: tuple):
    entered = Frame(plan, chain, _current_trace())
    FRAMES.stack.append(entered)
    ACTIVE.append(entered)
    try:
        yield
    finally:
        FRAMES.stack.pop()
        ACTIVE.remove(entered)


def _current_trace() -> Any:
    """The trace calls are made in now (None: a jax without ``trace_ctx``)."""
    try:
        from jax._src import core
    except ImportError:  # pragma: no cover - a jax without these internals
        return None
    return getattr(getattr(core, "trace_ctx", None), "trace", None)


def call_inner(spec: PmapSpec, args: tuple, kwargs: dict) -> Any:
    """Run ``spec``'s pmap inside the trace of an enclosing one."""
    outer = FRAMES.stack[-1]
    if spec.devices is not None:
        raise ValueError("Nested pmap with explicit devices argument.")
    spec.check_static_count(args)
    leaves, treedef, axes, bind = spec.leaves_and_axes(args, kwargs)
    axes = [_axes.normalize(a, np.shape(x)) for x, a in zip(leaves, axes)]
    size = _axes.mapped_size(leaves, axes, treedef, spec.fun)
    name = spec.mesh_axis
    chain = outer.chain + (name,)

    # Called in the outer body's own trace (jitted, or eager under `jax.disable_jit()`), the inner
    # pmap runs on a mesh axis of its own (the device path below). Called in any other trace
    # inside the body (under `jax.grad`, `jax.jvp` or `jax.vmap`, in a `jax.jit`, `lax.scan`,
    # `jax.checkpoint` or `lax.cond` function the body calls), it runs as a vmap, whose derivatives
    # are legacy's: a derivative taken around the device path's slice and all-gather, which are
    # differentiated by value device by device (``check_vma=False``), would sum the inner axis's
    # cotangents on one device instead of giving each its own.
    here = _current_trace()
    if (here is not None and here is not outer.trace) or not outer.plan.claim(name, size, outer.chain):
        dyn_args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        vmapped = jax.vmap(lambda *a, **k: spec.fun(*bind(a), **k),
                           in_axes=_axes.dynamic_in_axes(spec.in_axes, spec.statics, len(args)),
                           out_axes=spec.out_axes, axis_name=name, axis_size=size)
        with frame(outer.plan, chain):
            return vmapped(*dyn_args, **kwargs)

    # Every device of the inner axis holds the whole value: take its own element, run the
    # body, and all-gather the results along the inner axis (legacy pmap's lowering).
    index = lax.axis_index(name)
    mine = [x if a is None else lax.dynamic_index_in_dim(x, index, a, keepdims=False)
            for x, a in zip(leaves, axes)]
    dyn_args, kwargs = jax.tree_util.tree_unflatten(treedef, mine)
    with frame(outer.plan, chain):
        out = spec.fun(*bind(dyn_args), **kwargs)
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    gathered = [jax.numpy.asarray(y) if a is None else lax.all_gather(y, name, axis=a)
                for y, a in zip(out_leaves, _axes.flat_out_axes(spec.out_axes, out))]
    return jax.tree_util.tree_unflatten(out_tree, gathered)
