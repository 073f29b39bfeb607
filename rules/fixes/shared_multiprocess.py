"""The text of the multi-process rewrite's shared helpers (rules/fixes/shared.py holds them with
the others): `_global_pmap`, the call of a multi-process pmap site, and what it calls; and what
an earlier version wrote, which the packages it fixed still import (`_global_call`,
`_host_local`)."""

from __future__ import annotations

from pmap_migrate.rules.fixes.pmap_render import ALL_FEATURES
from pmap_migrate.rules.knowledge import tables

SHARD_MAPPED = "_shard_mapped"  # the compact form of the faithful pmap rewrite (pmap_render)

TO_GLOBAL = "_to_global"  # this process's rows -> global arrays (multiprocess_render)
HOST_LOCAL = "_host_local"  # global arrays -> this process's rows (multiprocess_render)


def to_global_helper(indent: str, features: frozenset[str] = ALL_FEATURES) -> str:
    """This process's rows (host-local stacks, as legacy pmap took them) as global arrays over the
    first ``rows`` devices of each process (the devices of `_shard_mapped(..., processes=True)`, in
    the same order), or with the feature "devices" over ``devices`` where given (pmap's option):
    arrays already global pass (outputs fed back, the same object: a donated one is deleted, as
    legacy deleted it), the rest goes through `multihost_utils.host_local_array_to_global_array`
    (rows already on this process's devices viewed without a copy, host data and arrays elsewhere
    put on them), typed PRNG keys through `jax.make_array_from_process_local_data` (jax 0.7.2's
    `host_local_array_to_global_array` takes no keys); on one process, host data is left for jit
    to place."""
    i1, i2, i3 = indent, indent * 2, indent * 3
    if "devices" in features:
        signature = "tree, axis_name, rows, spec=None, devices=None"
        devices = [f"{i1}if devices is None:  # legacy pmap's: the first rows of each process",
                   f"{i2}devices = [d for p in range(jax.process_count())",
                   f"{i2}           for d in jax.local_devices(process_index=p)[:rows]]"]
    else:
        signature = "tree, axis_name, rows, spec=None"
        devices = [f"{i1}devices = [  # legacy pmap's devices: the first rows of each process",
                   f"{i2}d for p in range(jax.process_count())",
                   f"{i2}for d in jax.local_devices(process_index=p)[:rows]]"]
    return "\n".join([
        f"def {TO_GLOBAL}({signature}):",
        f'{i1}"""This process\'s rows -> global arrays over every process\'s devices."""',
        *devices,
        f"{i1}spec = P(axis_name) if spec is None else spec",
        f"{i1}sharding = NamedSharding(Mesh(devices, (axis_name,)), spec)",
        "",
        f"{i1}def place(x):",
        f"{i2}if not isinstance(x, jax.Array):  # host data",
        f"{i3}if jax.process_count() == 1:",
        f"{i3}{i1}return x  # one process: jit puts it where it goes",
        f"{i2}elif x.sharding == sharding or not x.is_fully_addressable:",
        f"{i3}return x  # already global: an output fed back",
        f"{i2}if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):",
        f"{i3}return jax.make_array_from_process_local_data(sharding, x)",
        f"{i2}return multihost_utils.host_local_array_to_global_array(  # no copy",
        f"{i3}x, sharding.mesh, spec)  # of rows on this process's devices",
        "",
        f"{i1}return jax.tree.map(place, tree)",
    ]) + "\n"


def host_local_helper(indent: str) -> str:
    """Global arrays -> this process's rows, as legacy pmap returned them (the mesh and spec from
    each array); host data and arrays of this process only as they are."""
    i1, i2, i3 = indent, indent * 2, indent * 3
    return "\n".join([
        f"def {HOST_LOCAL}(tree):",
        f'{i1}"""{tables.HOST_LOCAL_DOC}"""',
        "",
        f"{i1}def local(x):",
        f"{i2}if isinstance(x, jax.Array) and not x.is_fully_addressable and (",
        f"{i2}{i2}isinstance(x.sharding, NamedSharding)):",
        f"{i3}return multihost_utils.global_array_to_host_local_array(",
        f"{i3}{i1}x, x.sharding.mesh, x.sharding.spec)",
        f"{i2}return x  # host data, and arrays of this process only, as they are",
        "",
        f"{i1}return jax.tree.map(local, tree)",
    ]) + "\n"


GLOBAL_CALL = "_global_call"  # a multi-process pmap's call: rows in, global arrays to its jit (multiprocess_render)


def global_call_helper(indent: str, features: frozenset[str] = ALL_FEATURES) -> str:
    """A multi-process pmap's call as legacy pmap took it: this process's rows of each mapped
    argument (positional ones on their in_axes, an int or None each; keyword ones on axis 0, as
    legacy mapped them) made global arrays (``_to_global``) over the first rows of every process's
    devices, ``jitted`` (`jax.jit(_shard_mapped(f, axis, processes=True))`, whose axis name,
    in_axes and static positions the helper reads from the function `_shard_mapped` made, unless
    given as an earlier version wrote its calls) called on them; its
    outputs returned global (the reads the rewrite saw take this process's rows), or with
    ``local`` (callers or reads not all seen) as this process's rows, as legacy returned them.
    Traced inputs (a call under `jax.jit`) are refused on several processes (the global arrays
    are built outside traced code) and passed to ``jitted`` as they are on one, where this
    process's rows are the whole arrays. On one process the mesh is the first n local devices, n
    the mapped size, as legacy pmap's was. Without the features "axes" and "static" (the package's
    pmaps map every argument on axis 0: pmap_render.shard_mapped_helper), the shorter form for
    exactly those calls, `_global_call(jitted, local=...)` (the form a shared module holds; a
    module's own copy takes every call)."""
    i1, i2 = indent, indent * 2
    call = _traced_call(indent)
    if not features & {"axes", "static"}:  # every `_shard_mapped` of the package maps on axis 0
        return "\n".join([
            f"def {GLOBAL_CALL}(jitted, local=False):",
            f'{i1}"""{tables.GLOBAL_CALL_DOC}"""',
            f"{i1}axis_name = jitted.__wrapped__.pmap_options[0]  # ({SHARD_MAPPED}'s)",
            "",
            *call,
            *_rows_call(indent),
            f"{i2}return {HOST_LOCAL}(out) if local else out",
            "",
            f"{i1}return call",
        ]) + "\n"
    return "\n".join([
        f"def {GLOBAL_CALL}(jitted, axis_name=None, in_axes=None, local=False):",
        f'{i1}"""{tables.GLOBAL_CALL_DOC}"""',
        f"{i1}if axis_name is None:  # the pmap's own, as {SHARD_MAPPED} keeps them",
        f"{i2}axis_name, in_axes, static = jitted.__wrapped__.pmap_options",
        f"{i1}else:  # given (static arguments: None in in_axes)",
        f"{i2}in_axes, static = 0 if in_axes is None else in_axes, ()",
        "",
        *call,
        *_axes_call(indent),
        f"{i2}return {HOST_LOCAL}(out) if local else out",
        "",
        f"{i1}return call",
    ]) + "\n"


GLOBAL_PMAP = "_global_pmap"  # a multi-process pmap site: pmap's signature (multiprocess_render)


def global_pmap_helper(indent: str, features: frozenset[str] = ALL_FEATURES) -> str:
    """`jax.pmap(f, axis_name, ...)` of a multi-process program, under pmap's own names (a pmap
    call becomes it by its name: its arguments stay as written): the compact form over every
    process's devices (`_shard_mapped(..., processes=True)`), jitted with its static positions as
    jit's and ``donate_argnums``, called as legacy pmap was (``_global_call``'s call: this
    process's rows in, made global arrays); its outputs returned, with ``local`` (the default:
    callers or reads not all seen), as this process's rows, as legacy returned them, else global
    (the reads the rewrite saw take this process's rows). Without the features "axes" and
    "static" (the package's pmaps map every argument on axis 0), the shorter form for exactly
    those calls; a module's own copy takes every option (and its `_shard_mapped` the options it
    passes on)."""
    i1, i2 = indent, indent * 2
    if not features & {"axes", "static", "devices"}:
        return "\n".join([
            f"def {GLOBAL_PMAP}(f, axis_name=None, *, donate_argnums=(), local=True):",
            f'{i1}"""{tables.GLOBAL_PMAP_DOC}"""',
            f"{i1}pmapped = {SHARD_MAPPED}(f, axis_name, processes=True)",
            f"{i1}jitted = jax.jit(pmapped, donate_argnums=donate_argnums)",
            f"{i1}axis_name = pmapped.pmap_options[0]",
            "",
            *_traced_call(indent),
            *_rows_call(indent),
            *_local_rows(indent),
            "",
            f"{i1}return call",
        ]) + "\n"
    own = ["in_axes=0", "out_axes=0"] if "axes" in features else []
    passed = ["in_axes=in_axes", "out_axes=out_axes"] if "axes" in features else []
    if "static" in features:
        own.append("static_broadcasted_argnums=()")
        passed.append("static_broadcasted_argnums=static_broadcasted_argnums")
    to_global = TO_GLOBAL
    if "devices" in features:  # pmap's devices, every process's: its mesh
        own.append("devices=None")
        passed.append("devices=devices")
        to_global = "to_global"
    return "\n".join([
        f"def {GLOBAL_PMAP}(",
        *_wrapped(["f", "axis_name=None", "*", *own, "donate_argnums=()", "local=True"], i2, "):"),
        f'{i1}"""{tables.GLOBAL_PMAP_DOC}"""',
        f"{i1}pmapped = {SHARD_MAPPED}(",
        *_wrapped(["f", "axis_name", *passed, "processes=True"], i2, ")"),
        f"{i1}axis_name, {'in_axes' if 'axes' in features else '_'}, static = pmapped.pmap_options",
        f"{i1}jitted = jax.jit(",
        f"{i2}pmapped, static_argnums=static, donate_argnums=donate_argnums)",
        *([f"{i1}to_global = functools.partial({TO_GLOBAL}, devices=devices)"] if "devices" in features else []),
        "",
        *_traced_call(indent),
        *(_axes_call(indent, 79, to_global) if "axes" in features else _static_call(indent, to_global)),
        *_local_rows(indent),
        "",
        f"{i1}return call",
    ]) + "\n"


def _wrapped(items: list[str], indent: str, end: str) -> list[str]:
    """``items`` joined by commas in lines of at most 79 columns at ``indent``, ``end`` after
    the last."""
    lines, line = [], ""
    for k, item in enumerate(items):
        piece = item + (end if k == len(items) - 1 else ",")
        if line and len(indent) + len(line) + 1 + len(piece) > 79:
            lines.append(indent + line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    return [*lines, indent + line]


def _traced_call(indent: str) -> list[str]:
    """The head of the multi-process call (`_global_call`'s, `_global_pmap`'s): traced inputs
    refused on several processes, passed as they are on one."""
    i1, i2, i3, i4 = indent, indent * 2, indent * 3, indent * 4
    return [
        f"{i1}@functools.wraps(jitted)",
        f"{i1}def call(*args, **kwargs):",
        f"{i2}traced = jax.tree.leaves((args, kwargs))",
        f"{i2}if any(isinstance(x, jax.core.Tracer) for x in traced):",
        f"{i3}if jax.process_count() > 1:",
        f"{i4}raise NotImplementedError(",
        f'{i4}{i1}"multi-process pmap in traced code: use runtime_shim.pmap")',
        f"{i3}return jitted(*args, **kwargs)  # one process: rows are all",
    ]


def _rows_call(indent: str) -> list[str]:
    """The rest of the call where every argument is mapped on axis 0, up to its outputs (`out`)."""
    i2, i3 = indent * 2, indent * 3
    return [
        f"{i2}rows = jax.local_device_count()",
        f"{i2}if jax.process_count() == 1:  # the mapped size, as legacy pmap's mesh",
        f"{i3}rows = traced[0].shape[0]",
        f"{i2}args, kwargs = {TO_GLOBAL}((args, kwargs), axis_name, rows)",
        f"{i2}out = jitted(*args, **kwargs)",
    ]


def _static_call(indent: str, to_global: str = TO_GLOBAL) -> list[str]:
    """The rest of `_global_pmap`'s call where every argument but the static ones is mapped on
    axis 0 (``static`` and ``axis_name`` bound), up to its outputs (`out`); ``to_global``: the
    name it calls `_to_global` by."""
    i2, i3 = indent * 2, indent * 3
    return [
        f"{i2}dynamic = [a for k, a in enumerate(args) if k not in static]",
        f"{i2}rows = jax.local_device_count()",
        f"{i2}if jax.process_count() == 1:  # the mapped size, as legacy pmap's mesh",
        f"{i3}rows = jax.tree.leaves((dynamic, kwargs))[0].shape[0]",
        f"{i2}args = [a if k in static else {to_global}(a, axis_name, rows)",
        f"{i2}        for k, a in enumerate(args)]",
        f"{i2}out = jitted(*args, **{to_global}(kwargs, axis_name, rows))",
    ]


def _local_rows(indent: str) -> list[str]:
    """`_global_pmap`'s return: its outputs (global arrays: the jitted shard_map's), with ``local``
    on several processes this process's rows of each, as legacy pmap returned them (a view, no
    copy: `_host_local` for outputs known to be the shard_map's)."""
    i2, i3, i4 = indent * 2, indent * 3, indent * 4
    return [
        f"{i2}if not local or jax.process_count() == 1:",
        f"{i3}return out",
        f"{i2}return jax.tree.map(  # this process's rows, as legacy returned them",
        f"{i3}lambda x: multihost_utils.global_array_to_host_local_array(",
        f"{i4}x, x.sharding.mesh, x.sharding.spec), out)",
    ]


def _axes_call(indent: str, width: int = 80, to_global: str = TO_GLOBAL) -> list[str]:
    """The rest of the call for in_axes (an int or None each, positional arguments; keyword ones
    on axis 0) and static positions (``in_axes``, ``static``, ``axis_name`` bound), up to its
    outputs (`out`); ``width``: 79 wraps its one longer line (80 as `_global_call` has always had
    it); ``to_global``: the name it calls `_to_global` by."""
    i2, i3, i4 = indent * 2, indent * 3, indent * 4
    axes = f"{i2}axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)"
    return [
        f"{i2}args = list(args)",
        *([axes] if len(axes) <= width else [
            f"{i2}axes = in_axes if isinstance(in_axes, tuple) else (",
            f"{i3}(in_axes,) * len(args))"]),
        f"{i2}axes = [None if k in static else a for k, a in enumerate(axes)]",
        f"{i2}axes += [0] * (len(args) - len(axes))  # the rest: axis 0",
        f"{i2}mapped = [(a, k) for a, k in zip(args, axes) if k is not None]",
        f"{i2}mapped += [(v, 0) for v in kwargs.values()]",
        f"{i2}rows = jax.local_device_count()",
        f"{i2}if jax.process_count() == 1:  # the mapped size, as legacy pmap's mesh",
        f"{i3}first = [(jax.tree.leaves(a), k) for a, k in mapped]",
        f"{i3}rows = next(x[0].shape[k] for x, k in first if x)",
        f"{i2}for i, k in enumerate(axes[: len(args)]):",
        f"{i3}if k is not None:",
        f"{i4}spec = P(*[None] * k, axis_name)",
        f"{i4}args[i] = {to_global}(args[i], axis_name, rows, spec)",
        f"{i2}out = jitted(*args, **{to_global}(kwargs, axis_name, rows))",
    ]
