"""``pmap`` with the legacy semantics, built on ``jax.jit(jax.shard_map(...))``.

One ``jax.jit`` per ``pmap(...)``; its Python function builds the ``shard_map`` at trace
time, including the mesh, which depends on the mapped size. jax's C++ dispatch therefore
does all per-call work (flattening, static-argument hashing, the executable cache per
shape, dtype and sharding), and an outermost call costs one Python frame more than a
hand-written ``jax.jit(jax.shard_map(...))``.

Everything that depends on the arguments (per-leaf in_axes, partition specs, the mesh,
legacy error checks) runs inside the jitted function, i.e. once per trace. Failures take a
slow path: nested pmaps that need a bigger mesh (``Replan``), inputs committed to devices
outside the mesh (jit's "incompatible devices"), multi-process host-local arrays.
"""

from __future__ import annotations

import functools
import itertools
import types
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from runtime_shim import _axes, _nesting, _placement
from runtime_shim._nesting import Plan, Replan
from runtime_shim._spec import PmapSpec

_unnamed = itertools.count()


def pmap(
    fun: Callable,
    axis_name: Any = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    static_broadcasted_argnums: int | Iterable[int] = (),
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | Iterable[int] = (),
    global_arg_shapes: Any = None,
) -> Any:
    """Drop-in replacement for the legacy ``jax.pmap`` (jax <= 0.7.2 semantics).

    Same signature and behaviour as ``jax.pmap`` before jax 0.8: the body sees per-device
    values, inputs committed anywhere are resharded, nested pmaps run on a multi-axis
    mesh, multi-process programs pass host-local arrays. Runs on any jax that has
    ``jax.shard_map``.
    """
    if global_arg_shapes is not None:
        warnings.warn("pmap's global_arg_shapes has had no effect since sharded_jit was "
                      "removed; runtime_shim ignores it.", UserWarning, stacklevel=2)
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun}")
    _axes.check_axes_spec("in_axes", in_axes)
    _axes.check_axes_spec("out_axes", out_axes)
    if devices is not None:
        devices = tuple(devices)  # an empty tuple fails at the first call, as in legacy
    statics = _axes.index_tuple(static_broadcasted_argnums)
    spec = PmapSpec(
        fun=fun,
        axis_name=axis_name,
        mesh_axis=f"_pmap_axis_{next(_unnamed)}" if axis_name is None else axis_name,
        in_axes=in_axes,
        out_axes=out_axes,
        statics=statics,
        donate=tuple(i for i in _axes.index_tuple(donate_argnums) if i not in statics),
        devices=devices,
        backend=backend,
        axis_size=axis_size,
    )
    return _Pmapped(spec).wrapper()


class _Pmapped:
    """The state behind one ``pmap(...)``: its jit and one mesh plan per mapped size."""

    def __init__(self, spec: PmapSpec):
        self.spec = spec
        self.plans: dict[int, Plan] = {}  # global mapped size -> plan
        self.multiprocess: bool | None = None  # known at the first call, not before

        def traced(*args, **kwargs):
            return self.apply_shard_map(*args, **kwargs)

        # jit names the computation (and its errors) after the function: use the user's.
        traced.__name__ = f"pmap_{getattr(spec.fun, '__name__', 'fun')}"
        traced.__qualname__ = traced.__name__
        # jax.jit queries no device; the shard_map and its mesh are built when tracing.
        self.jitted = jax.jit(traced, static_argnums=spec.statics, donate_argnums=spec.donate)

    # ------------------------------------------------------------------ trace time

    def plan_for(self, size: int, local_size: int | None = None) -> Plan:
        plan = self.plans.get(size)
        if plan is None:
            if local_size is None:  # single process (or traced under jit): global == local
                local_size = size // jax.process_count()
            plan = self.plans[size] = _placement.new_plan(self.spec, local_size)
        if plan.mesh is None:
            plan.mesh = _placement.build_mesh(self.spec, plan)
        return plan

    def apply_shard_map(self, *args, **kwargs):
        """The jitted function: legacy checks, the mesh for this size, the shard_map."""
        spec = self.spec
        spec.check_static_count(args)  # jit would silently ignore missing static args
        spec.check_static_hashable(args)  # jit checks too, unless jit is disabled
        leaves, treedef, axes, bind = spec.leaves_and_axes(args, kwargs)
        axes = [_axes.normalize(a, np.shape(x)) for x, a in zip(leaves, axes)]
        plan = self.plan_for(_axes.mapped_size(leaves, axes, treedef, spec.fun))
        name = spec.mesh_axis

        def body(*blocks):
            dyn_args, kw = jax.tree_util.tree_unflatten(
                treedef, [_axes.squeeze(b, a) for b, a in zip(blocks, axes)])
            with _nesting.frame(plan, (name,)):
                out = spec.fun(*bind(dyn_args), **kw)
            out_leaves, out_tree = jax.tree_util.tree_flatten(out)
            expanded = [_axes.expand(y, a)
                        for y, a in zip(out_leaves, _axes.flat_out_axes(spec.out_axes, out))]
            return jax.tree_util.tree_unflatten(out_tree, expanded)

        # check_vma=False keeps legacy autodiff (no implicit psum in the gradients of
        # replicated values) and makes out_specs P() return one device's value, which is
        # exactly legacy out_axes=None.
        out = jax.shard_map(
            body, mesh=plan.mesh, in_specs=tuple(_axes.spec(a, name) for a in axes),
            out_specs=_axes.out_specs(spec.out_axes, name), check_vma=False)(*leaves)
        _placement.check_devices_used(spec, plan)
        return out

    # ------------------------------------------------------------------ slow paths

    def retrying(self, call: Callable, args: tuple, kwargs: dict) -> Any:
        """``call`` again until no inner pmap asks for a bigger mesh."""
        while True:
            try:
                return call(*args, **kwargs)
            except Replan:
                continue

    def recover(self, call: Callable, args: tuple, kwargs: dict, error: BaseException) -> Any:
        """After the fast path failed: grow the mesh for nested pmaps, move stray inputs."""
        if isinstance(error, Replan):
            return self.retrying(call, args, kwargs)
        if self.multiprocess:
            raise error  # host_local_call already placed every input
        # jit refuses inputs committed to devices outside the mesh; legacy pmap moved them.
        spec = self.spec
        try:
            leaves, treedef, axes, bind = spec.leaves_and_axes(args, kwargs)
            size = _axes.mapped_size(leaves, axes, treedef, spec.fun)
            moved = _placement.reshard(leaves, axes, self.plan_for(size).mesh)
        except Exception:  # noqa: BLE001 - the arguments are what failed: report that
            moved = None
        if moved is None:
            raise error
        dyn_args, kwargs = jax.tree_util.tree_unflatten(treedef, moved)
        return self.retrying(self.jitted, bind(dyn_args), kwargs)

    def host_local_call(self, *args, **kwargs) -> Any:
        """Multi-process: this process's slice in and out, global arrays in between."""
        spec = self.spec
        leaves, treedef, axes, bind = spec.leaves_and_axes(args, kwargs)
        local_size = _axes.mapped_size(leaves, axes, treedef, spec.fun)
        plan = self.plan_for(_placement.global_size(spec, local_size), local_size)
        dyn_args, kwargs = jax.tree_util.tree_unflatten(
            treedef, _placement.to_global(leaves, axes, plan.mesh))
        out = self.jitted(*bind(dyn_args), **kwargs)
        return _placement.to_host_local(out, plan.mesh,
                                        _axes.out_specs(spec.out_axes, spec.mesh_axis))

    # ------------------------------------------------------------------ public surface

    def lower(self, *args, **kwargs):
        """Like the legacy ``pmapped.lower``: a ``jax.stages.Lowered``."""
        self.spec.check_static_count(args)
        if jax.process_count() > 1:
            spec = self.spec
            leaves, treedef, axes, bind = spec.leaves_and_axes(args, kwargs)
            local_size = _axes.mapped_size(leaves, axes, treedef, spec.fun)
            plan = self.plan_for(_placement.global_size(spec, local_size), local_size)
            dyn_args, kwargs = jax.tree_util.tree_unflatten(
                treedef, _placement.to_global(leaves, axes, plan.mesh))
            args = bind(dyn_args)
        with jax.disable_jit(False):  # legacy lowered even under disable_jit
            return self.retrying(self.jitted.lower, args, kwargs)

    def wrapper(self) -> Callable:
        spec = self.spec
        active, frames = _nesting.ACTIVE, _nesting.FRAMES
        call_inner = _nesting.call_inner
        recover = self.recover

        def first_call(*args, **kwargs):
            # The process count is only known once jax.distributed is up: decide here,
            # then dispatch straight to the chosen callable on every later call.
            nonlocal call
            self.multiprocess = jax.process_count() > 1
            call = self.host_local_call if self.multiprocess else self.jitted
            return call(*args, **kwargs)

        call = first_call

        # The fast path: two closure reads and a try block around jax's C++ dispatch.
        def pmapped(*args, **kwargs):
            if active and frames.stack:  # inside the trace of another shim pmap
                return call_inner(spec, args, kwargs)
            try:
                return call(*args, **kwargs)
            except (ValueError, Replan) as error:
                return recover(call, args, kwargs, error)

        return PmapFunction(pmapped, spec, self.lower, _CacheSize(self.jitted._cache_size))


class PmapFunction:
    """What ``pmap(f)`` returns. Its type has the name of legacy pmap's (jaxlib's C++
    ``PmapFunction``), by which libraries tell a pmapped function from a plain one (haiku's
    ``check_not_jax_transformed``, chex's ``is_traceable``); like a function (and the C++ type)
    it carries ``f``'s metadata with ``__wrapped__`` = ``f``, and binds as a method."""

    def __init__(self, call: Callable, spec: PmapSpec, lower: Callable, cache_size: _CacheSize):
        functools.update_wrapper(self, spec.fun)
        self._call = call
        self.lower = lower
        self._cache_size = cache_size
        self._runtime_shim_spec = spec

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<PmapFunction of {self.__wrapped__!r}>"


class _CacheSize:
    """``pmapped._cache_size``: legacy code reads it as an int (the C++ pmap's property)
    and as a method (the Python pmap's); this compares like the one and calls like the
    other, counting the executables of the underlying jit."""

    __slots__ = ("_count",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, count: Callable[[], int]):
        self._count = count

    def __call__(self) -> int:
        return self._count()

    def __int__(self) -> int:
        return self._count()

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        return self._count() == other

    def __repr__(self) -> str:
        return repr(self._count())
