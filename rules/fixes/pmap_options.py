"""A pmap site's options as the faithful rewrite reads them: literal axes, argnums, and why a site
cannot be rewritten (``Unsupported``)."""

from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.fixes.code import code_of, int_literal, is_none, one_line_code, simple_params
from pmap_migrate.rules.fixes.naming import NameAllocator
from pmap_migrate.rules.knowledge import tables

KNOWN_OPTIONS = {"fun", "axis_name", "in_axes", "out_axes", "static_broadcasted_argnums", "donate_argnums",
                 "devices", "backend", "axis_size"}


DEFAULT_AXIS = '"i"'  # legacy pmap without axis_name: no collective can name the axis


class Unsupported(Exception):
    """The site cannot be rewritten to plain JAX faithfully; the message says why."""


class NotConstant(Exception):
    """An option expression that is not computed from literals alone."""


def axis_value(node: cst.BaseExpression) -> int | None:
    """An in_axes/out_axes leaf: an int literal or None; anything else is not supported."""
    if is_none(node):
        return None
    value = int_literal(node)
    if value is None:
        raise Unsupported(f"`{code_of(node)}` is not a literal axis")
    return value


# An in_axes entry for one argument: an axis (int or None), or a one-level pytree prefix of axes
# for a dict argument ({"key": axis}) or a tuple argument ((axis, axis)).
AxisEntry = int | None | dict[str, int | None] | tuple[int | None, ...]


def axis_entry(node: cst.BaseExpression) -> AxisEntry:
    if isinstance(node, cst.Dict):
        entries: dict[str, int | None] = {}
        for element in node.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                raise Unsupported(f"`{code_of(node)}` is not a literal in_axes prefix")
            entries[code_of(element.key)] = axis_value(element.value)
        return entries
    if isinstance(node, cst.Tuple):
        return tuple(axis_value(e.value) for e in node.elements)
    return axis_value(node)


def leaf_axes(entry: AxisEntry) -> list[int | None]:
    if isinstance(entry, dict):
        return list(entry.values())
    if isinstance(entry, tuple):
        return list(entry)
    return [entry]


def int_tuple(node: cst.BaseExpression | None, option: str) -> tuple[int, ...]:
    if node is None:
        return ()
    value = int_literal(node)
    if value is not None:
        return (value,)
    if isinstance(node, (cst.Tuple, cst.List)):
        values = tuple(int_literal(e.value) for e in node.elements)
        if all(v is not None for v in values):
            return values  # type: ignore[return-value]
    raise Unsupported(f"`{option}` is not a literal")


class SiteReader:
    """What a pmap site's options and mapped function say, as the faithful rewrite needs them: the
    options as literals (or Unsupported), the signature the wrapper can repeat, who calls it."""

    def __init__(self, model: SemanticModel, names: NameAllocator) -> None:
        self.model = model
        self.names = names

    def options(self, site: TransformSite, params: list[str] | None) -> dict:
        axis_node = site.option("axis_name")
        if axis_node is None or is_none(axis_node):
            axis = DEFAULT_AXIS
        elif isinstance(axis_node, cst.SimpleString):
            axis = code_of(axis_node)
        elif isinstance(axis_node, cst.Name) and self._string_constant(axis_node):
            axis = axis_node.value  # `_PMAP_AXIS_NAME = "data"`: the mesh axis follows the constant
        else:
            axis = None  # any other expression: read once, where pmap read it (`_plan` hoists it)
        static = int_tuple(self._folded(site.option("static_broadcasted_argnums"), iterable=True),
                            "static_broadcasted_argnums")
        donate = int_tuple(self._folded(site.option("donate_argnums"), iterable=True), "donate_argnums")
        if any(i < 0 for i in static + donate):
            raise Unsupported("negative argnums")
        n_params = len(params) if params is not None else None
        if n_params is not None and any(i >= n_params for i in static + donate):
            raise Unsupported("argnums beyond the function's parameters")
        n_mapped = (n_params - len(set(static))) if n_params is not None else None

        size_node = site.option("axis_size")
        size = None
        if size_node is not None and not is_none(size_node):
            if int_literal(size_node) is None:
                raise Unsupported("`axis_size` is not a literal")
            size = code_of(size_node)
        in_node = self._folded(site.option("in_axes"))
        in_axes: list[AxisEntry] | int | None
        if in_node is None:
            in_axes = 0
        elif isinstance(in_node, cst.List):
            # The arguments are a tuple: legacy pmap refused a list prefix (a ValueError at the call).
            raise Unsupported("an in_axes list (legacy pmap refused it: the arguments are a tuple)")
        elif isinstance(in_node, cst.Tuple):
            if params is None:
                raise Unsupported("a per-argument in_axes with an unknown signature")
            entries = [axis_entry(e.value) for e in in_node.elements]
            if static:
                # Legacy pmap picks in_axes[i] for each non-static position i.
                dynamic = [i for i in range(n_params) if i not in static]
                if dynamic and max(dynamic) >= len(entries):
                    raise Unsupported("in_axes does not cover every non-static argument")
                entries = [entries[i] for i in dynamic]
            elif len(entries) != n_mapped:
                raise Unsupported("in_axes does not match the number of arguments")
            in_axes = entries
        else:
            in_axes = axis_value(in_node)
            if in_axes is None and params is None:
                raise Unsupported("in_axes=None with an unknown signature")
        flat_in = [a for e in (in_axes if isinstance(in_axes, list) else [in_axes]) for a in leaf_axes(e)]
        if any(a is not None and a < 0 for a in flat_in):
            raise Unsupported("negative in_axes")
        if all(a is None for a in flat_in) and size is None:
            raise Unsupported("no mapped argument and no axis_size")
        if params is None and in_axes != 0:
            raise Unsupported("non-zero in_axes with an unknown signature")

        out_node = self._folded(site.option("out_axes"))
        out_axes: list[int | None] | int | None
        if out_node is None:
            out_axes = 0
        elif isinstance(out_node, cst.List):
            # A list prefix matches list outputs only (legacy refused a tuple output with it).
            raise Unsupported("an out_axes list (legacy pmap matched it to list outputs only)")
        elif isinstance(out_node, cst.Tuple):
            out_axes = [axis_value(e.value) for e in out_node.elements]
        else:
            out_axes = axis_value(out_node)
        flat_out = out_axes if isinstance(out_axes, list) else [out_axes]
        if any(a is not None and a < 0 for a in flat_out):
            raise Unsupported("negative out_axes")
        if params is None and out_axes != 0:
            raise Unsupported("non-zero out_axes with an unknown signature")

        unsafe: list[str] = []
        devices_node = site.option("devices")
        backend = site.option("backend")
        if devices_node is not None and not is_none(devices_node):
            # Legacy pmap maps over exactly the given devices (their number must match the axis).
            devices = code_of(devices_node)
            unsafe.append(f"assumes `{devices}` names the same devices when the function is first called "
                          "as when pmap was built")
            mesh_devices = devices
        else:
            if backend is not None and not is_none(backend):
                if not isinstance(backend, cst.SimpleString):
                    raise Unsupported("`backend` is not a string literal")
                mesh_devices = f"jax.local_devices(backend={code_of(backend)})"
            else:
                mesh_devices = "jax.local_devices()"
            mesh_devices += "[: {size}]"
        return dict(axis=axis, axis_node=axis_node, static=static, donate=donate, in_axes=in_axes,
                    out_axes=out_axes, mesh_devices=mesh_devices, size=size, unsafe=unsafe)

    def compact_options(self, site: TransformSite) -> dict:
        """The options of ``site`` as the compact form's helper takes them (pmap_render.
        shard_mapped_helper applies them at run time, as legacy pmap did): ``in_axes`` and
        ``out_axes`` as literal expressions (None where absent), ``static`` and ``donate`` as tuples
        of ints (``donate_expr``: a computed donate_argnums, as written, else None). Unsupported:
        an option that is not a literal pytree prefix of non-negative axes (or a list where legacy
        pmap wanted a tuple), or no argument mapped."""
        static = int_tuple(self._folded(site.option("static_broadcasted_argnums"), iterable=True),
                            "static_broadcasted_argnums")
        # donate_argnums is jit's alone: one computed (`donate_argnums=donated`) moves there as written,
        # evaluated once, where pmap evaluated it
        donate_node = self._folded(site.option("donate_argnums"), iterable=True)
        try:
            donate, computed = int_tuple(donate_node, "donate_argnums"), None
        except Unsupported:
            donate, computed = (), donate_node
        if any(i < 0 for i in static + donate):
            raise Unsupported("negative argnums")
        found: dict = {"static": static, "donate": donate, "donate_expr": computed}
        for option in ("in_axes", "out_axes"):
            node = self._folded(site.option(option))
            if node is not None and isinstance(node, cst.List):
                raise Unsupported(f"an {option} list (legacy pmap took a tuple)")
            axes = _prefix_axes(node) if node is not None else [0]
            if option == "in_axes":
                if isinstance(node, cst.Tuple) and static:
                    axes = [a for k, e in enumerate(node.elements) if k not in static for a in _prefix_axes(e.value)]
                if all(a is None for a in axes):
                    raise Unsupported("no mapped argument and no axis_size")
            found[option] = node
        return found

    def _folded(self, node: cst.BaseExpression | None, *, iterable: bool = False) -> cst.BaseExpression | None:
        """An option computed from literals (`list(range(5))`, `(0,) * 5 + (None,)`) as the literal
        it always evaluates to (the builtins being the builtins); any other node as it is.
        ``iterable``: the option takes any iterable of ints (the argnums), so a `range` stands for
        the tuple of its items; in_axes and out_axes take containers only (legacy refused a range)."""
        if node is None or isinstance(node, (cst.Integer, cst.Name, cst.SimpleString, cst.Dict)):
            return node
        try:
            value = self._constant(node)
        except NotConstant:
            return node
        if iterable and isinstance(value, range):
            value = tuple(value)
        if isinstance(value, (tuple, list)) and all(v is None or isinstance(v, int) for v in value):
            return cst.parse_expression(repr(value))
        return node

    def _constant(self, node: cst.BaseExpression):
        """The value of an expression of int literals, None, tuples and lists, `+` and `*` on them,
        and the builtins `range`, `list` and `tuple` (raises NotConstant for anything else; a `range`
        call is a `range`, which only `list`/`tuple` and ``iterable`` options take)."""
        if is_none(node):
            return None
        value = int_literal(node)
        if value is not None:
            return value
        if isinstance(node, (cst.Tuple, cst.List)) and not any(isinstance(e, cst.StarredElement) for e in node.elements):
            items = [self._constant(e.value) for e in node.elements]
            return tuple(items) if isinstance(node, cst.Tuple) else items
        if isinstance(node, cst.BinaryOperation):
            left, right = self._constant(node.left), self._constant(node.right)
            if isinstance(node.operator, cst.Add) and type(left) is type(right) and isinstance(left, (tuple, list)):
                return left + right
            if isinstance(node.operator, cst.Multiply):
                if isinstance(left, (tuple, list)) and isinstance(right, int) and 0 <= right <= 64:
                    return left * right
                if isinstance(right, (tuple, list)) and isinstance(left, int) and 0 <= left <= 64:
                    return right * left
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("range", "list", "tuple") \
                and all(a.keyword is None and not a.star for a in node.args) \
                and self.model.qualified_names(node.func) == {f"builtins.{node.func.value}"}:
            args = [self._constant(a.value) for a in node.args]
            if node.func.value == "range" and 1 <= len(args) <= 3 and all(isinstance(a, int) for a in args) \
                    and len(range(*args)) <= 64:
                return range(*args)
            if node.func.value in ("list", "tuple") and len(args) == 1 and isinstance(args[0], (tuple, list, range)):
                return list(args[0]) if node.func.value == "list" else tuple(args[0])
        raise NotConstant

    def strings_only(self, expr: cst.BaseExpression) -> bool:
        """``expr`` is a name every binding of which assigns a string literal (it cannot be None)."""
        if not isinstance(expr, cst.Name):
            return False
        assignments = self.model.assignments_of(expr)
        return bool(assignments) and all(
            isinstance(self.model.assigned_value(getattr(a, "node", None)), cst.SimpleString) for a in assignments)

    def _string_constant(self, name: cst.Name) -> bool:
        """``name`` is a module-level name bound once, to a string literal, and never rebound: the
        body's collectives and the wrapper's mesh read the same value whenever they run."""
        module_scope = self.model.scope_of(self.model.module)
        if module_scope is None or self.model.scope_of(name) is None:
            return False
        assignments = self.model.assignments_of(name)
        if len(assignments) != 1 or assignments[0].scope is not module_scope:
            return False
        if len(module_scope.assignments[name.value]) != 1:
            return False
        value = self.model.assigned_value(getattr(assignments[0], "node", None))
        return isinstance(value, cst.SimpleString)

    def keyword_risk(self, site: TransformSite, params: list[str] | None, opts: dict) -> str | None:
        """Legacy pmap maps keyword arguments on axis 0 whatever in_axes says; the wrapper gives a
        keyword the axis of its parameter. Equal only when those axes are 0."""
        if params is None:
            return None
        static = opts["static"]
        mapped = [p for i, p in enumerate(params) if i not in static]
        in_axes = opts["in_axes"]
        axes = in_axes if isinstance(in_axes, list) else [in_axes] * len(mapped)
        risky = {name for name, axis in zip(mapped, axes) if axis != 0}
        if not risky:
            return None
        for call, called in self.model.pmap_calls().items():
            if called is not site:
                continue
            if any(a.star for a in call.args):
                raise Unsupported("called with *args/**kwargs while in_axes is not 0 everywhere")
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in risky:
                    raise Unsupported(f"called with the keyword `{arg.keyword.value}`, which legacy pmap maps "
                                      "on axis 0 whatever in_axes says")
        if self.used_as_value(site):
            return (f"assumes callers pass {', '.join(sorted(risky))} positionally (legacy pmap maps "
                    "keyword arguments on axis 0; the function is also used as a value here)")
        return None

    def used_as_value(self, site: TransformSite) -> bool:
        """A name the pmapped function is bound to is read other than as the callee of a call."""
        for assignment in site.bound_names:
            for access in assignment.references:
                parent = self.model.parent(access.node)
                if not (isinstance(parent, cst.Call) and parent.func is access.node):
                    return True
        return False

    def may_get_keywords(self, site: TransformSite) -> bool:
        """Some call of the pmapped function passes keyword arguments (or `**`), or it is used as a
        value, where its callers cannot be seen."""
        for call, called in self.model.pmap_calls().items():
            if called is site and any(arg.keyword is not None or arg.star == "**" for arg in call.args):
                return True
        return self.used_as_value(site)

    def signature(self, fun: cst.BaseExpression, target: str, site: TransformSite, *, named: bool = True
                   ) -> tuple[list[str] | None, str, list[str]]:
        """(params, body call, statements to hoist) for the mapped function expression of ``site``;
        ``named``: the wrapper is defined under ``target`` itself (not a name of its own)."""
        if isinstance(fun, cst.Lambda):
            params = simple_params(fun.params)
            if params is not None:
                return params, code_of(fun.body), []
        if isinstance(fun, cst.Name):
            defs = [f for f in self.model.resolve_functions(fun) if isinstance(f, cst.FunctionDef)]
            params = simple_params(defs[0].params) if len(defs) == 1 else None
            called, hoisted = fun.value, []
            if named and fun.value == target:  # `f = jax.pmap(f)`: the wrapper takes the name, keep the function
                called = self.names.fresh(f"{target}_body")
                hoisted = [f"{called} = {fun.value}  # the function pmap was applied to"]
            if params is not None:
                return params, f"{called}({', '.join(params)})", hoisted
            return None, f"{called}(*args)", hoisted
        # Any other expression (a bound method, partial(...), a call): evaluate it once, where pmap
        # evaluated it, under a name of its own.
        stem = fun.attr.value.lstrip("_") if isinstance(fun, cst.Attribute) else "_" + target
        hoisted_name = self.names.fresh(stem or "_" + target)
        # (one line, which the layout wraps if it must: the expression moves, its lines with it)
        hoisted = [f"{hoisted_name} = {one_line_code(fun)}  # evaluated once, where pmap evaluated it"]
        if isinstance(fun, cst.Lambda):  # a def where the lambda was evaluated (PEP 8: no lambda bound to a name)
            hoisted = [f"def {hoisted_name}({code_of(fun.params)}):  # the lambda pmap was given",
                       f"{self.model.indent}return {one_line_code(fun.body)}"]
        params = self._method_params(fun)
        if params is None:
            params = self._partial_params(fun, site)
        if params is not None:
            return params, f"{hoisted_name}({', '.join(params)})", hoisted
        return None, f"{hoisted_name}(*args)", hoisted

    def _partial_params(self, fun: cst.BaseExpression, site: TransformSite) -> list[str] | None:
        """The positional parameters of ``functools.partial(f, *bound, **keywords)`` when the wrapper
        can repeat them exactly: ``f``'s plain parameters after the ``bound`` ones, up to the first
        that a keyword binds (a positional argument reaching that one would bind it twice: a
        TypeError either way), none of them with a default; every parameter after them is bound by
        a keyword or has a default, and ``f`` (one undecorated def of this module) has no ``*args``
        that positional arguments could reach. The partial also takes keywords for those later
        parameters, which the wrapper does not: every call must be seen (the pmap bound to a name
        that is only called, or called where it is built) and pass no other keyword."""
        if not (isinstance(fun, cst.Call) and fun.args and self.model.matches(fun.func, tables.PARTIAL)):
            return None
        calls = self._visible_calls(site)
        if calls is None:
            return None
        first, *rest = fun.args
        if first.keyword is not None or first.star or any(arg.star for arg in rest):
            return None
        bound = [arg for arg in rest if arg.keyword is None]
        keywords = {arg.keyword.value for arg in rest if arg.keyword is not None}
        defs = [f for f in self.model.resolve_functions(first.value) if isinstance(f, cst.FunctionDef)]
        if len(defs) != 1 or defs[0].decorators or not isinstance(first.value, cst.Name):
            return None
        params = defs[0].params
        if len(bound) > len(params.posonly_params) + len(params.params):
            return None
        plain = [*params.posonly_params, *params.params][len(bound):]
        if any(p.name.value in keywords for p in params.posonly_params):
            return None  # a TypeError at every call
        cut = next((i for i, p in enumerate(plain) if p.name.value in keywords), len(plain))
        if cut == len(plain) and isinstance(params.star_arg, cst.Param):
            return None  # extra positional arguments go to *args
        if any(p.default is not None for p in plain[:cut]):
            return None
        later = [*plain[cut:], *params.kwonly_params]
        if any(p.name.value not in keywords and p.default is None for p in later):
            return None  # a parameter only a keyword could fill
        names = [p.name.value for p in plain[:cut]]
        for call in calls:
            if any(arg.star or (arg.keyword is not None and arg.keyword.value not in names) for arg in call.args):
                return None
        return names

    def _visible_calls(self, site: TransformSite) -> list[cst.Call] | None:
        """Every call of the pmapped function, when all of them can be seen: the site called where it
        is built (`jax.pmap(f)(x)`), or bound to names (not an attribute) that are only called."""
        parent = self.model.parent(site.node)
        if isinstance(parent, cst.Call) and parent.func is site.node:
            return [parent]
        if site.decorated is not None or site.bound_attribute is not None or not site.bound_names \
                or self.used_as_value(site):
            return None
        return [call for call, called in self.model.pmap_calls().items() if called is site]

    def _method_params(self, fun: cst.BaseExpression) -> list[str] | None:
        """Parameters of ``self.method`` after ``self`` (plain methods only)."""
        if not (isinstance(fun, cst.Attribute) and isinstance(fun.value, cst.Name) and fun.value.value == "self"):
            return None
        defs = [f for f in self.model.resolve_functions(fun) if isinstance(f, cst.FunctionDef)]
        if len(defs) != 1 or defs[0].decorators:
            return None
        params = simple_params(defs[0].params)
        return params[1:] if params else None


def _prefix_axes(node: cst.BaseExpression) -> list[int | None]:
    """The axes of a literal in_axes/out_axes pytree prefix (ints, None, tuples, lists, dicts with
    string keys), or Unsupported."""
    if isinstance(node, (cst.Tuple, cst.List)):
        if any(isinstance(e, cst.StarredElement) for e in node.elements):
            raise Unsupported(f"`{code_of(node)}` is not a literal axes prefix")
        return [a for e in node.elements for a in _prefix_axes(e.value)]
    if isinstance(node, cst.Dict):
        if any(not isinstance(e, cst.DictElement) or not isinstance(e.key, cst.SimpleString) for e in node.elements):
            raise Unsupported(f"`{code_of(node)}` is not a literal axes prefix")
        return [a for e in node.elements for a in _prefix_axes(e.value)]
    value = axis_value(node)
    if value is not None and value < 0:
        raise Unsupported("a negative axis")
    return [value]
