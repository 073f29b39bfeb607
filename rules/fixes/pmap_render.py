"""The text of the faithful rewrite: the jitted shard_map wrapper of a planned pmap site."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from pmap_migrate.rules.fixes.pmap_options import AxisEntry, Unsupported
from pmap_migrate.rules.knowledge import tables


@dataclass
class Signature:
    params: list[str] | None  # None: unknown, use *args
    call_prefix: str = ""  # e.g. "_blend(" for the body call; the body call is f"{callee}({args})"


@dataclass
class Plan:
    name: str
    params: list[str] | None
    axis: str
    in_axes: list[AxisEntry] | int | None
    out_axes: list[int | None] | int | None
    static: tuple[int, ...]
    donate: tuple[int, ...]
    mesh_devices: str  # the device list; "{size}" stands for the mapped axis size
    size: str | None  # axis_size, when given
    body_call: str  # how per_device calls the mapped function
    hoisted: list[str] = field(default_factory=list)
    unsafe_reasons: list[str] = field(default_factory=list)
    # Unknown signature: the wrapper also takes keyword arguments (mapped on axis 0, as legacy did).
    keywords: bool = False
    # A computed axis_name (read where pmap read it): its expression as written, and the statements
    # that bind ``axis`` to it ahead of the wrapper, after ``hoisted``; "" and none for a literal.
    axis_source: str = ""
    axis_lines: list[str] = field(default_factory=list)
    # Parameters before the mapped arguments, static for jit: the mapped function itself (and a
    # computed axis name), evaluated where pmap evaluated them and passed in with `functools.partial`.
    leading: tuple[str, ...] = ()


def spec_for(axis: int | None, name: str) -> str:
    if axis is None:
        return "P()"
    return "P(" + "None, " * axis + f"{name})"


def squeeze_line(names: list[str], axis: int | tuple[int, ...]) -> str:
    if len(names) == 1:
        return f"{names[0]} = jax.tree.map(lambda leaf: leaf.squeeze({axis}), {names[0]})"
    joined = ", ".join(names)
    return f"{joined} = jax.tree.map(lambda leaf: leaf.squeeze({axis}), ({joined}))"


def squeeze_expr(expr: str, axis: int) -> str:
    return f"jax.tree.map(lambda leaf: leaf.squeeze({axis}), {expr})"


def entry_spec(entry: AxisEntry, name: str) -> str:
    if isinstance(entry, dict):
        return "{" + ", ".join(f"{key}: {spec_for(axis, name)}" for key, axis in entry.items()) + "}"
    if isinstance(entry, tuple):
        return "(" + ", ".join(spec_for(axis, name) for axis in entry) + ("," if len(entry) == 1 else "") + ")"
    return spec_for(entry, name)


def expand_expr(expr: str, axis: int | tuple[int, ...]) -> str:
    return f"jax.tree.map(lambda leaf: jnp.expand_dims(leaf, {axis}), {expr})"


def render(plan: Plan, indent: str = "    ") -> str:
    """The wrapper's source text (module-level indentation)."""
    i1 = indent
    lines = [*plan.hoisted, *plan.axis_lines]
    head, body, mesh_size, call = jitted_parts(plan, indent)
    mesh = f"{i1}mesh = Mesh({plan.mesh_devices.replace('{size}', mesh_size)}, ({plan.axis},))"
    lines += [*head, *body, "", *process_guard(i1), mesh, call]
    return "\n".join(lines) + "\n"


def jitted_parts(plan: Plan, indent: str, name: str | None = None) -> tuple[list[str], list[str], str, str]:
    """The pieces of the jitted shard_map wrapper: its decorator and `def` line, the `per_device`
    body, the mapped size expression and the final `return jax.shard_map(...)(...)` line; the
    caller puts the mesh in between."""
    jit_kwargs = []
    static = tuple(range(len(plan.leading))) + tuple(i + len(plan.leading) for i in plan.static)
    donate = tuple(i + len(plan.leading) for i in plan.donate)
    if static:
        jit_kwargs.append(f"static_argnums={tuple_text(static)}")
    if donate:
        jit_kwargs.append(f"donate_argnums={tuple_text(donate)}")
    decorator = f"@functools.partial(jax.jit, {', '.join(jit_kwargs)})" if jit_kwargs else "@jax.jit"
    name = name or plan.name
    i1, i2 = indent, indent * 2
    if plan.params is None and plan.keywords:
        # Unknown signature, called with keywords (or used as a value): every argument, positional or
        # keyword, mapped on axis 0, as legacy did; the function applies its own defaults.
        head = [decorator, f"def {name}({''.join(f'{p}, ' for p in plan.leading)}*args, **kwargs):"]
        body = [
            f"{i1}def per_device(args, kwargs):  # each device holds a (1, ...) block; the pmap body saw the slice",
            f"{i2}args, kwargs = jax.tree.map(lambda leaf: leaf.squeeze(0), (args, kwargs))",
            f"{i2}return {expand_expr(plan.body_call, 0)}",
        ]
        call = (f"{i1}return jax.shard_map(per_device, mesh=mesh, in_specs=P({plan.axis}), out_specs=P({plan.axis}), "
                f"check_vma=False)(args, kwargs)")
        return head, body, plan.size or "jax.tree.leaves((args, kwargs))[0].shape[0]", call
    if plan.params is None and plan.static:
        # Unknown signature with static positions: the others mapped on axis 0; the static ones stay
        # the Python values jit hashed (legacy pmap passed them as they were), put back in place.
        static = tuple_text(plan.static)
        assert plan.body_call.endswith("(*args)") and not plan.keywords, plan.body_call
        callee = plan.body_call.removesuffix("(*args)")
        head = [decorator, f"def {name}(*args):"]
        last = max(plan.static)
        body = [
            f"{i1}if len(args) <= {last}:  # as legacy pmap: every static argument is passed by position",
            f'{i2}raise ValueError(f"pmapped function has static_broadcasted_argnums={static} but was called with '
            f'only {{len(args)}} positional arguments. All static broadcasted arguments must be passed positionally.")',
            f"{i1}dynamic = [arg for i, arg in enumerate(args) if i not in {static}]  # static arguments: not mapped",
            "",
            f"{i1}def per_device(*blocks):  # each device holds a (1, ...) block; the pmap body saw the slice",
            f"{i2}blocks = iter(jax.tree.map(lambda leaf: leaf.squeeze(0), blocks))",
            f"{i2}return {expand_expr(f'{callee}(*[arg if i in {static} else next(blocks) for i, arg in enumerate(args)])', 0)}",
        ]
        call = (f"{i1}return jax.shard_map(per_device, mesh=mesh, in_specs=P({plan.axis}), out_specs=P({plan.axis}), "
                f"check_vma=False)(*dynamic)")
        return head, body, plan.size or "jax.tree.leaves(dynamic)[0].shape[0]", call
    if plan.params is None:
        # Unknown signature: every positional argument mapped on axis 0 (checked by the planner).
        head = [decorator, f"def {name}(*args):"]
        body = [
            f"{i1}def per_device(*args):  # each device holds a (1, ...) block; the pmap body saw the slice",
            f"{i2}args = jax.tree.map(lambda leaf: leaf.squeeze(0), args)",
            f"{i2}return {expand_expr(plan.body_call, 0)}",
        ]
        call = (f"{i1}return jax.shard_map(per_device, mesh=mesh, in_specs=P({plan.axis}), out_specs=P({plan.axis}), "
                f"check_vma=False)(*args)")
        return head, body, plan.size or "jax.tree.leaves(args)[0].shape[0]", call
    params = plan.params
    mapped = [p for i, p in enumerate(params) if i not in plan.static]
    axes = plan.in_axes if isinstance(plan.in_axes, list) else [plan.in_axes] * len(mapped)
    body = [f"{i1}def per_device({', '.join(mapped)}):  # each device holds a (1, ...) block; the pmap body saw the slice"]
    groups: dict[int, list[str]] = {}
    for name_, entry in zip(mapped, axes):
        if isinstance(entry, int):
            groups.setdefault(entry, []).append(name_)
    for axis, names in groups.items():
        body.append(f"{i2}{squeeze_line(names, axis)}")
    for name_, entry in zip(mapped, axes):
        if isinstance(entry, dict):
            parts = ", ".join(f"{key}: {squeeze_expr(f'{name_}[{key}]', axis)}"
                              for key, axis in entry.items() if axis is not None)
            body.append(f"{i2}{name_} = {{**{name_}, {parts}}}")
        elif isinstance(entry, tuple):
            parts = [f"{name_}[{k}]" if axis is None else squeeze_expr(f"{name_}[{k}]", axis)
                     for k, axis in enumerate(entry)]
            body.append(f"{i2}{name_} = ({', '.join(parts)}{',' if len(parts) == 1 else ''})")
    out = plan.out_axes
    if isinstance(out, list):
        body.append(f"{i2}out = {plan.body_call}")
        parts = [f"out[{k}]" if a is None else expand_expr(f"out[{k}]", a) for k, a in enumerate(out)]
        body.append(f"{i2}return {', '.join(parts)}")
        out_specs = "(" + ", ".join(spec_for(a, plan.axis) for a in out) + ")"
    elif out is None:
        body.append(f"{i2}return {plan.body_call}")
        out_specs = "P()"
    else:
        body.append(f"{i2}return {expand_expr(plan.body_call, out)}")
        out_specs = spec_for(out, plan.axis)
    size = plan.size if plan.size is not None else size_expression(mapped, axes)
    in_specs = "(" + ", ".join(entry_spec(a, plan.axis) for a in axes) + ("," if len(axes) == 1 else "") + ")"
    call = (f"{i1}return jax.shard_map(per_device, mesh=mesh, in_specs={in_specs}, out_specs={out_specs}, "
            f"check_vma=False)({', '.join(mapped)})")
    return [decorator, f"def {name}({', '.join(params)}):"], body, size, call


# The names the wrapper of an unknown signature with static positions binds around the call of the
# mapped function (a function of one of these names would not be the one called).
STATIC_TEMPLATE_LOCALS = frozenset({"args", "dynamic", "blocks", "per_device", "mesh"})


def process_guard(indent: str) -> list[str]:
    """The rewrite maps over this process's devices only. In a multi-process program legacy pmap
    mapped host-local inputs over every process's devices (PM501): fail loudly there rather than
    compute per-process collectives. (Spelled with device counts, not `jax.process_count()`, so
    that the rewritten module does not look multi-process to PM501 itself.)"""
    return [f"{indent}if jax.device_count() > jax.local_device_count():  # several processes: see PM501",
            f'{indent}{indent}raise NotImplementedError("multi-process pmap semantics: use runtime_shim.pmap")']


def size_expression(mapped: list[str], axes: list) -> str:
    """The mapped axis size, read from the first argument (or pytree entry) that is mapped."""
    for name, entry in zip(mapped, axes):
        if isinstance(entry, int):
            return f"jax.tree.leaves({name})[0].shape[{entry}]"
    for name, entry in zip(mapped, axes):
        if isinstance(entry, dict):
            for key, axis in entry.items():
                if axis is not None:
                    return f"jax.tree.leaves({name}[{key}])[0].shape[{axis}]"
        if isinstance(entry, tuple):
            for k, axis in enumerate(entry):
                if axis is not None:
                    return f"jax.tree.leaves({name}[{k}])[0].shape[{axis}]"
    raise Unsupported("no mapped argument and no axis_size")


def tuple_text(values: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


# The options of `jax.pmap` the compact form's helper handles beyond `f` and `axis_name` (with
# in_axes and out_axes 0, one process, the first n local devices), by the keywords that call sites
# pass it: a package's helper holds only the ones its call sites pass (``shard_mapped_helper``).
HELPER_FEATURES = {"in_axes": "axes", "out_axes": "axes", "static_broadcasted_argnums": "static",
                   "devices": "devices", "backend": "devices", "processes": "processes", "nested": "nests"}
ALL_FEATURES = frozenset(HELPER_FEATURES.values())
# The helper with these options has its parameters one group a line (the whole helper of earlier
# versions, which had no "nests").
_SPREAD = frozenset({"axes", "static", "devices", "processes"})


@lru_cache(maxsize=256)  # (recognising a helper's text renders every variant: `helper_features`)
def shard_mapped_helper(name: str, indent: str, features: frozenset[str] = ALL_FEATURES) -> str:
    """The compact form's helper: `jax.pmap(f, axis_name, in_axes=..., out_axes=...,
    static_broadcasted_argnums=...)` written as `jax.shard_map` over the first n local devices,
    with pmap's own semantics applied when called: each argument's mapped axis (a pytree prefix of
    the positional arguments; keyword arguments on axis 0, as legacy pmap did), the body given each
    device's slice, each output's axis (`None`: the value of the first device), the static arguments
    passed as they are; with ``processes``, over a global mesh of the first n / process_count
    devices of each process (the multi-process rewrite's wrappers pass global arrays). Call sites
    read `jax.jit(<name>(f, axis_name, ...), static_argnums=..., donate_argnums=...)`; jit caches
    the trace, as pmap did. The function made is kept per set of options with ``f`` (a plain
    function or a partial, in its `__dict__`: it goes when ``f`` goes) or, for another callable
    (`jnp.sin`, a method), among the last 64 the helper keeps, so that a pmap built again where
    it is used (`jax.pmap(f)(x)` in a loop) finds jit's cache as legacy pmap found its own, keyed
    on the function (a bound method made anew at each access, and a lambda made anew, are traced
    anew, as legacy did). The mesh is built when jit traces, so importing the module queries no device.
    ``features`` (of ``ALL_FEATURES``) are the options it takes besides ``f`` and ``axis_name``:
    "axes" (in_axes, out_axes), "static" (static_broadcasted_argnums), "devices" (devices,
    backend), "processes"; without one, the helper is that much shorter, and the same for the
    calls that do not pass it. Lines fit in 79 columns at any indentation of up to four spaces."""
    axes, static, devices, processes, nests = (feature in features for feature in (
        "axes", "static", "devices", "processes", "nests"))
    i1, i2, i3, i4 = indent, indent * 2, indent * 3, indent * 4
    params = ["f", "axis_name=None", *(["in_axes=0", "out_axes=0"] if axes else []),
              *(["static_broadcasted_argnums=()"] if static else []),
              *(["devices=None", "backend=None"] if devices else []), *(["processes=False"] if processes else []),
              *(["nested=False"] if nests else [])]
    if features >= _SPREAD:
        head = [f"def {name}(",
                f"{i2}f, axis_name=None, in_axes=0, out_axes=0,",
                f"{i2}static_broadcasted_argnums=(), devices=None, backend=None,",
                f"{i2}processes=False):  # True: global arrays over all processes"]
        if nests:
            head[-1:] = [f"{i2}processes=False,  # True: global arrays over all processes",
                         f"{i2}nested=False):  # True: a pmap in a pmap, or one with pmaps in it"]
    else:
        head = [f"def {name}({', '.join(params)}):"]
        if len(head[0]) > 79:
            head = [f"def {name}(", *_wrapped(params, i2, "):")]
    options = [p.partition("=")[0] for p in params[1:]]
    lines = [*head, f'{i1}"""{tables.SHARD_MAPPED_DOC}"""']
    if features >= _SPREAD:
        lines += [f"{i1}options = axis_name, in_axes, out_axes, static_broadcasted_argnums",
                  f"{i1}key = id(f), repr((*options, devices, backend, processes{', nested' if nests else ''}))"]
    elif len(options) == 1:
        lines += [f"{i1}key = id(f), repr(axis_name)"]
    else:
        key = f"{i1}key = id(f), repr(({', '.join(options)}))"
        lines += [key] if len(key) <= 79 else [f"{i1}options = (", *_wrapped(options, i2, ")"),
                                               f"{i1}key = id(f), repr(options)"]
    lines += [
        f"{i1}own = isinstance(f, (functools.partial, type({name})))",
        f'{i1}made = vars(f if own else {name}).setdefault("_shard_mapped", {{}})',
        f"{i1}if key in made:  # the same pmap again: the same function, jit's cache",
        f"{i2}return made[key][1]",
        f'{i1}axis = "i" if axis_name is None else axis_name',
    ]
    if nests:
        lines[-1:] = [
            f"{i1}if axis_name is None:  # unnamed: an axis of its own (nested: its code's)",
            f"{i2}axis = f\"i{{id(getattr(f, '__code__', f))}}\" if nested else \"i\"",
            f"{i1}else:",
            f"{i2}axis = axis_name",
        ]
    if static:
        lines += [f"{i1}static = static_broadcasted_argnums",
                  f"{i1}static = (static,) if isinstance(static, int) else tuple(static)"]
    if axes:
        lines += [
            "",
            f"{i1}def spec(a):  # a leaf mapped on axis a (None: not mapped)",
            f"{i2}return P() if a is None else P(*[None] * a, axis)",
            "",
            f"{i1}def specs(axes, tree):  # axes: a prefix of tree, as pmap took them",
            f"{i2}return jax.tree.map(",
            f"{i3}lambda a, t: jax.tree.map(lambda _: spec(a), t),",
            f"{i3}axes, tree, is_leaf=lambda a: a is None)",
            "",
            f"{i1}def each(specs, tree, move):",
            f"{i2}# move(y, axis) for each leaf y pmap mapped (s: x's spec)",
            f"{i2}def leaf(s, x):",
            f"{i3}k = s.index(axis) if s else None",
            f"{i3}return x if k is None else jax.tree.map(lambda y: move(y, k), x)",
            "",
            f"{i2}return jax.tree.map(leaf, specs, tree)",
        ]
    guard = f"{i2}if jax.device_count() > jax.local_device_count()" + (" and not processes:" if processes else ":")
    lines += [
        "",
        f"{i1}@functools.wraps(f)",
        f"{i1}def mapped(*args, **kwargs):",
        guard,
        f'{i3}raise NotImplementedError("several processes: see PM501")',
    ]
    if static:
        lines += [
            f"{i2}if static and len(args) <= max(static):",
            f"{i3}raise ValueError(  # legacy pmap's words",
            f'{i4}f"pmapped function has static_broadcasted_argnums={{static}}"',
            f'{i4}f" but was called with only {{len(args)}} positional argument"',
            f'{i4}f"{{\'s\' if len(args) > 1 else \'\'}}. All static broadcasted"',
            f'{i4}" arguments must be passed positionally.")',
            f"{i2}dyn = [k for k in range(len(args)) if k not in static]",
            f"{i2}dynamic = tuple(args[k] for k in dyn)",
        ]
    dynamic = "dynamic" if static else "args"
    if axes:
        lines += [f"{i2}axes = in_axes"]
        if static:
            lines += [f"{i2}if static and isinstance(in_axes, tuple):",
                      f"{i3}axes = tuple(in_axes[k] for k in dyn)"]
        lines += [
            f"{i2}in_specs = specs((axes, 0), ({dynamic}, kwargs))",
            f"{i2}out_specs = jax.tree.map(spec, out_axes, is_leaf=lambda a: a is None)",
            f"{i2}leaves = jax.tree.leaves(in_specs), jax.tree.leaves(({dynamic}, kwargs))",
            f"{i2}n = next(x.shape[s.index(axis)] for s, x in zip(*leaves) if s)",
        ]
    else:
        lines += [f"{i2}n = jax.tree.leaves(({dynamic}, kwargs))[0].shape[0]"]
    if devices:
        lines += [f"{i2}chosen = devices",
                  f"{i2}if chosen is None{' and not processes' if processes else ''}:",
                  f"{i3}chosen = jax.local_devices(backend=backend)[:n]"]
    else:
        lines += [f"{i2}chosen = jax.local_devices()[:n]"]
    if processes:
        lines += [
            # (devices given: those, as legacy pmap took them)
            f"{i2}elif chosen is None:  # the first rows of each process, as legacy pmap" if devices else
            f"{i2}if processes:  # legacy pmap's devices: the first rows of each process",
            f"{i3}rows = n * jax.local_device_count() // jax.device_count()",
            # (each process's index from its devices, not `jax.process_count()`: a module's own
            # copy must not look multi-process to PM501, see `process_guard`)
            f"{i3}owners = sorted({{d.process_index for d in jax.devices()}})",
            f"{i3}chosen = [d for p in owners",
            f"{i3}          for d in jax.local_devices(process_index=p)[:rows]]",
        ]
    take, put = ("take", "put") if nests else ("jnp.squeeze", "jnp.expand_dims")
    if nests:
        lines += ["", f"{i2}def per_device({dynamic}, kwargs, take=jnp.squeeze, put=jnp.expand_dims):",
                  f"{i3}# pmap's body saw each device's slice"]
    else:
        lines += ["", f"{i2}def per_device({dynamic}, kwargs):  # pmap's body saw each device's slice"]
    if axes:
        lines += [f"{i3}{dynamic}, kwargs = each(in_specs, ({dynamic}, kwargs), {take})"]
    else:
        lines += [f"{i3}{dynamic}, kwargs = jax.tree.map(",
                  f"{i4}lambda x: {take}(x, 0), ({dynamic}, kwargs))"]
    if static:
        lines += [f"{i3}rest = iter(dynamic)  # the static arguments as they are",
                  f"{i3}args_ = [next(rest) if k in dyn else a for k, a in enumerate(args)]"]
    call = f"f(*{'args_' if static else 'args'}, **kwargs)"
    if axes:
        lines += [f"{i3}return each(out_specs, {call}, {put})"]
    else:
        lines += [f"{i3}out = {call}",
                  f"{i3}return jax.tree.map(lambda y: {put}(y, 0), out)"]
    specs = "in_specs=in_specs," if axes else "in_specs=P(axis),"
    if nests:
        # A pmap run in another's body (legacy: on devices of its own) runs as a vmap with its
        # axis name on the outer pmap's devices: the same values (float sums over its axis in
        # vmap's order) and legacy's autodiff (a closure or an unmapped input: its cotangents
        # summed over the axis), where a slice per device of a bigger mesh would not be.
        where = []
        if axes:
            where = ["", f"{i3}def where(s):  # vmap's axis of a leaf of spec s",
                     f"{i4}return s.index(axis) if s else None"]
        lines += [
            "",
            f"{i2}if nested and jax.sharding.get_abstract_mesh().manual_axes:",
            f"{i3}def same(x, a):  # in another pmap's body: a vmap",
            f"{i4}return x",
            *where,
            "",
            f"{i3}return jax.vmap(",
            f"{i4}functools.partial(per_device, take=same, put=same),",
            *([f"{i4}*[jax.tree.map(where, s) for s in (in_specs, out_specs)],"] if axes else []),
            f"{i4}axis_name=axis)({dynamic}, kwargs)",
        ]
    lines += [
        "",
        f"{i2}return jax.shard_map(",
        f"{i3}per_device, mesh=Mesh(chosen, (axis,)), {specs}",
        f"{i3}out_specs={'out_specs' if axes else 'P(axis)'}, check_vma=False)({dynamic}, kwargs)",
        "",
    ]
    if processes:
        read = f"axis, {'in_axes' if axes else '0'}, {'static' if static else '()'}"
        lines += [f"{i1}mapped.pmap_options = {read}  # (read by _global_call)"]
    lines += [
        f"{i1}if not own and len(made) > 64:  # other callables: the last few kept",
        f"{i2}made.clear()",
        f"{i1}made[key] = f, mapped",
        f"{i1}return mapped",
    ]
    return "\n".join(lines) + "\n"


def _wrapped(words: list[str], indent: str, end: str) -> list[str]:
    """``words`` joined by commas in lines of at most 79 columns at ``indent``, ``end`` after the last."""
    lines, line = [], indent
    for k, word in enumerate(words):
        piece = word + (end if k == len(words) - 1 else ",")
        if line.strip() and len(line) + 1 + len(piece) > 79:
            lines.append(line)
            line = indent
        line += ("" if not line.strip() else " ") + piece
    return [*lines, line]


def helper_features(text: str, name: str) -> frozenset[str] | None:
    """The features of ``text`` when it is the compact form's helper ``name`` as this version
    writes it (at its indentation); None otherwise."""
    stripped = text.strip()
    indent = next((line[:len(line) - len(line.lstrip())] for line in stripped.split("\n")
                   if line.lstrip().startswith('"""')), "    ")  # (the docstring's)
    for features in FEATURE_SETS:
        if shard_mapped_helper(name, indent, features).strip() == stripped:
            return features
    return None


FEATURE_SETS = tuple(frozenset(f for k, f in enumerate(sorted(ALL_FEATURES)) if mask >> k & 1)
                     for mask in range(2 ** len(ALL_FEATURES)))
