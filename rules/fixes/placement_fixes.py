"""Fix building blocks of the placement rules (PM104, PM201-PM202, PM301-PM304).

The forms are the ones verified in `fixtures/programs/README.md` ("Helpers around pmap"):

* a replicated stack (`device_put_replicated`, flax `replicate`):
  `jax.tree.map(lambda leaf: jax.make_array_from_single_device_arrays((len(devs), *np.shape(leaf)),
  NamedSharding(Mesh(devs, ("i",)), P("i")), [jax.device_put(leaf, device)[None] for device in
  devs]), x)` -- one row per device, on exactly `devs`, in their order, which is what the
  rewritten pmap's mesh (`jax.local_devices()[:n]`) accepts without a reshard; the mesh axis name
  does not matter, the device list does. Each device receives only its own copy, and typed PRNG
  key leaves (`jax.random.key`) go through unchanged, as they did in legacy;
* a sharded stack (`device_put_sharded`): the same with row i from shard i
  (`zip(leaves, devs, strict=True)`);
* one device's row of a stacked value (`out[0]`, `unreplicate`):
  `out.addressable_shards[0].data.squeeze(0)`, exact when every value `out` may hold is a 1-D
  stack with one row per device (pmap outputs, the stacks above) in a single-process program,
  outside traced code; the row is committed to its device (legacy's was not), so not where it
  reaches a pmap, which refuses it (`feeds_a_pmap`);
* an input committed elsewhere: `jax.device_put(x, NamedSharding(Mesh(<the pmap's devices>,
  (axis,)), P(axis)))` at the call site, which is what legacy pmap did silently.

Rules decide; this module builds the edits, asking placement.Placement about the values (``Unfixable`` says why not).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import BuiltinAssignment

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.fixes.api import Unfixable, parenthesized, removal_spec
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.placement import Placement, call_arguments, cheap
from pmap_migrate.rules.fixes.pmap_options import Unsupported, axis_entry, int_tuple
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import tables

AXIS = '"i"'  # the helpers' mesh axis: any name works for a pmap input, only the devices matter


LINE_LIMIT = 100


# What a fix reading a row from its shard assumes unless the row goes straight to the host.
ROW_COMMITTED = ("the row is used on its own (read from its shard it is committed to its device, legacy's "
                 "`out[k]` was not: combined with another device's row or with a stacked array it raises)")


def row_of(value: cst.BaseExpression, index: cst.BaseExpression) -> cst.BaseExpression:
    """``value.addressable_shards[index].data.squeeze(0)``: the device's own block of a stack with
    one row per device, without gathering across devices."""
    shards = cst.Subscript(cst.Attribute(parenthesized(value), cst.Name("addressable_shards")),
                           [cst.SubscriptElement(cst.Index(index))])
    data = cst.Attribute(shards, cst.Name("data"))
    return cst.Call(cst.Attribute(data, cst.Name("squeeze")), [cst.Arg(cst.Integer("0"))])


def literal_index(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    return isinstance(node, cst.Integer)


def single_index(node: cst.Subscript) -> cst.BaseExpression | None:
    """The index of ``x[i]`` (one plain index, no slice, no tuple)."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    index = node.slice[0].slice
    if index.star is not None:
        return None
    return index.value


def is_assignment_target(model: SemanticModel, node: cst.CSTNode) -> bool:
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.AssignTarget, cst.Del)):
            return True
        if isinstance(ancestor, (cst.AugAssign, cst.AnnAssign)) and ancestor.target is child:
            return True
        if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
        child = ancestor
    return False


def sharding_text(devices: str, spec: str = f"P({AXIS})", axis: str = AXIS) -> str:
    return f"NamedSharding(Mesh({devices}, ({axis},)), {spec})"


def replicate_text(jax: str, tree: str, devices: str, column: int, unit: str) -> str:
    leaf = _fresh_param("leaf", devices, jax)
    device = _fresh_param("device", devices, jax, leaf)
    rows = f"{jax}.device_put({leaf}, {device})[None] for {device} in {devices}"
    weak = f"{jax}.numpy.broadcast_to({leaf}, (len({devices}), *np.shape({leaf})))"
    return _tree_map_stack(jax, leaf, leaf, f"np.shape({leaf})", rows, weak, devices, [tree], column, unit)


def stack_text(jax: str, shards: str, devices: str, column: int, unit: str) -> str:
    leaves = _fresh_param("leaves", devices, jax)
    leaf = _fresh_param("leaf", devices, jax, leaves)
    device = _fresh_param("device", devices, jax, leaves, leaf)
    rows = (f"{jax}.device_put({leaf}, {device})[None] "
            f"for {leaf}, {device} in zip({leaves}, {devices}, strict=True)")
    return _tree_map_stack(jax, f"*{leaves}", f"{leaves}[0]", f"np.shape({leaves}[0])", rows,
                           f"{jax}.numpy.stack({leaves})", devices, [f"*{shards}"], column, unit)


def _tree_map_stack(jax: str, params: str, first: str, shape: str, rows: str, weak: str, devices: str,
                    trees: list[str], column: int, unit: str) -> str:
    """`jax.tree.map(lambda <params>: <the stack of every leaf's rows>, *trees)`: one (1, ...) row
    per device, put on that device and assembled without any device compute. A typed PRNG key
    leaf goes through as is (a NumPy stack would raise TypeError), and each device holds only its
    own copy. A weakly typed leaf (``first``: a Python number, or an array computed from one) is
    stacked by ``weak`` on one device and then put in place: the assembly would make it strongly
    typed (legacy kept it weak, which decides the dtype when it meets a bfloat16 array)."""
    inner = len(unit) * 2
    shape = f"(len({devices}), *{shape})"
    sharding = sharding_text(devices)
    head = f"{shape}, {sharding},"
    lines = [head] if column + inner + len(head) <= LINE_LIMIT else [f"{shape},", f"{sharding},"]
    comprehension = f"[{rows}])"
    if column + inner + len(comprehension) > LINE_LIMIT:
        put, _, loop = rows.partition(" for ")
        comprehension = f"[{put}\n{unit * 2} for {loop}])"
    lines.append(comprehension)
    put_weak = f"else {jax}.device_put({weak}, {sharding})"
    if column + len(unit) + len(put_weak) > LINE_LIMIT:
        put_weak = f"else {jax}.device_put(\n{unit * 2}{weak},\n{unit * 2}{sharding})"
    lam = (f"lambda {params}: {jax}.make_array_from_single_device_arrays(\n"
           + "\n".join(unit * 2 + line for line in lines)
           + f"\n{unit}if not {jax}.typeof({first}).weak_type\n{unit}{put_weak}")
    return f"{jax}.tree.map(\n" + ",\n".join(unit + a for a in (lam, *trees)) + ")"


def _fresh_param(base: str, *texts: str) -> str:
    name = base
    while any(_mentions(text, name) for text in texts):
        name += "_"
    return name


def _mentions(text: str, name: str) -> bool:
    import re

    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def called(model: SemanticModel, reference: cst.BaseExpression) -> cst.Call | None:
    """The call whose function ``reference`` is (`jax.device_put_replicated(...)`), if any."""
    parent = model.parent(reference)
    return parent if isinstance(parent, cst.Call) and parent.func is reference else None


def keep_parens(old: cst.BaseExpression, new: cst.BaseExpression) -> cst.BaseExpression:
    return new.with_changes(lpar=getattr(old, "lpar", ()), rpar=getattr(old, "rpar", ()))


def shim_swap(placement: Placement, reference: cst.BaseExpression, attribute: str, why: str) -> FixSpec | None:
    """Swap the reference for `runtime_shim.<attribute>`, the drop-in with the legacy result."""
    try:
        imports = placement.names(reference, "runtime_shim")
    except Unfixable:
        return None
    replacement = keep_parens(reference, cst.Attribute(cst.Name("runtime_shim"), cst.Name(attribute)))
    spec = removal_spec(placement.model, reference)
    return FixSpec(Applicability.SAFE, f"use `runtime_shim.{attribute}` (the legacy result at run time; needs "
                           f"pmap-migrate-shim installed): {why}", replacement=replacement, target=reference, add_imports=imports,
                   remove_imports=(spec,) if spec is not None else (), shimmed=True, why=why)


def alias_definition(model: SemanticModel,
                     reference: cst.BaseExpression) -> tuple[cst.SimpleStatementLine, cst.Name] | None:
    """``dpr = jax.device_put_replicated`` (alone on its line): the line and the alias name."""
    assign = model.parent(reference)
    if not isinstance(assign, cst.Assign) or assign.value is not reference or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    line = model.parent(assign)
    if not isinstance(target, cst.Name) or not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    return line, target


def alias_fix(placement: Placement, reference: cst.BaseExpression, attribute: str | None) -> FixSpec | None:
    """A local alias of a removed helper (`dpr = jax.device_put_replicated`): its uses are fixed
    where they are; once none is left the alias goes (a public alias of a library module keeps
    working for importers through the shim, when there is one)."""
    model = placement.model
    found = alias_definition(model, reference)
    if found is None:
        return None
    line, target = found
    assignment = model.assignment_for_target(target)
    if assignment is None or assignment.references:
        return None  # still used: the uses are fixed first
    module_level = model.scope_of(target) is model.scope_of(model.module)
    if module_level and not target.value.startswith("_") and not model.is_script:
        if attribute is None:
            return None
        return shim_swap(placement, reference, attribute,
                         f"keep the public alias `{target.value}` working for importers")
    spec = removal_spec(model, reference)
    return FixSpec(Applicability.SAFE, f"remove the unused alias `{target.value}`", replacement=remove_line(model, line),
                   target=line, remove_imports=(spec,) if spec is not None else ())


def remove_line(model: SemanticModel, line: cst.SimpleStatementLine):
    """Delete a statement line; a block it is the only statement of keeps a `pass`."""
    block = model.parent(line)
    body = getattr(block, "body", ())
    if isinstance(block, cst.IndentedBlock) and len(body) == 1:
        return line.with_changes(body=[cst.Pass()])
    return cst.RemovalSentinel.REMOVE


def module_level_only(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """Every name ``expr`` reads is a module-level or builtin binding, and means the same at ``at``."""
    collector = _Names()
    expr.visit(collector)
    global_scope = model.scope_of(model.module)
    here = model.scope_of(at)
    for name in collector.names:
        assignments = model.assignments_of(name)
        if not assignments or any(not isinstance(a, BuiltinAssignment) and a.scope is not global_scope
                                  for a in assignments):
            return False
        if here is not None and here is not global_scope and name.value in here.assignments:
            return False  # shadowed where the expression would be evaluated
    return True


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: list[cst.Name] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def in_axis_of(site: TransformSite, call: cst.Call, arg: cst.Arg) -> int | None | str:
    """The in_axes entry legacy pmap applied to ``arg`` of ``call`` (an int, None for broadcast), or
    "unknown" when it is not a literal or is a pytree prefix."""
    node = site.option("in_axes")
    try:
        static = int_tuple(site.option("static_broadcasted_argnums"), "static_broadcasted_argnums")
        if node is None:
            entry = 0
        elif isinstance(node, (cst.Tuple, cst.List)):
            if arg.keyword is not None:
                return "unknown"
            positional = [a for a in call.args if a.keyword is None]
            index = next(i for i, a in enumerate(positional) if a is arg)
            if index in static or index >= len(node.elements):
                return "unknown"
            entry = axis_entry(node.elements[index].value)
        else:
            entry = axis_entry(node)
            if arg.keyword is not None:
                entry = 0  # legacy pmap maps keyword arguments on axis 0 whatever in_axes says
            elif not isinstance(entry, (int, type(None))):
                return "unknown"
            else:
                positional = [a for a in call.args if a.keyword is None]
                if next(i for i, a in enumerate(positional) if a is arg) in static:
                    return "unknown"
    except Unsupported:
        return "unknown"
    if entry is not None and (not isinstance(entry, int) or entry < 0):
        return "unknown"
    return entry


def axis_literal(site: TransformSite) -> str:
    node = site.option("axis_name")
    return code_of(node) if isinstance(node, cst.SimpleString) else AXIS


def spec_text(axis: int | None, name: str) -> str:
    return "P()" if axis is None else "P(" + "None, " * axis + f"{name})"


def helper_devices(model: SemanticModel, call: cst.Call) -> cst.BaseExpression | None | str:
    """The `devices` a helper call stacks on: the expression, None for the default
    (`jax.local_devices()`: flax `replicate` without devices), or "unknown"."""
    names = model.qualified_names(call.func)
    try:
        if not names.isdisjoint(tables.DEVICE_PUT_REPLICATED):
            return call_arguments(call, ("x", "devices")).get("devices", "unknown")
        if not names.isdisjoint(tables.DEVICE_PUT_SHARDED):
            return call_arguments(call, ("shards", "devices")).get("devices", "unknown")
        if not names.isdisjoint(tables.FLAX_REPLICATE):
            devices = call_arguments(call, ("tree", "devices", "axis_name")).get("devices")
            return None if devices is None or (isinstance(devices, cst.Name) and devices.value == "None") else devices
    except Unfixable:
        return "unknown"
    return "unknown"


def stack_fix(placement: Placement, call: cst.Call, reference: cst.BaseExpression, tree: cst.BaseExpression,
              devices: cst.BaseExpression | str, *, sharded: bool, what: str) -> FixSpec:
    """``call`` (a replicate or sharded helper) -> the explicit `jax.device_put` of the same stack.
    ``devices`` is the helper's device expression, or a text that only queries devices."""
    model = placement.model
    if placement.in_fstring(call):
        raise Unfixable("inside an f-string")
    if placement.in_class_body(call):
        raise Unfixable("in a class body (a lambda there cannot see the class's names)")
    jax, jax_imports = placement.jax(call)
    imports = placement.names(call, "np", "Mesh", "NamedSharding", "P")
    if isinstance(devices, str):
        devices_text, edits = placement.bind_once(cst.parse_expression(devices), call, "devices", query=True)
    else:
        devices_text, edits = placement.bind_once(devices, call, "devices")
    column, unit = placement.column_of(call), model.indent
    tree_text = code_of(parenthesized(tree) if sharded else tree)
    text = (stack_text if sharded else replicate_text)(jax, tree_text, devices_text, column, unit)
    replacement = keep_parens(call, cst.parse_expression(text))
    removal = removal_spec(model, reference)
    summary = (f"{what} -> the same stack, one row put on each device and assembled with "
               "`NamedSharding(Mesh(devices), P('i'))`")
    return FixSpec(Applicability.SAFE, summary, edits=(Edit(call, replacement), *edits),
                   add_imports=(*jax_imports, *imports), remove_imports=(removal,) if removal is not None else ())


def removed_helper_fix(placement: Placement, reference: cst.BaseExpression, attribute: str,
                       parameters: tuple[str, str], *, sharded: bool) -> FixSpec | None:
    """The fix of one reference to a removed stacking helper (`jax.<attribute>`, whose
    ``parameters`` are the tree and the devices): an unused local alias goes, a call becomes the
    explicit `jax.device_put` of the same stack, anything else the shim's drop-in."""
    if alias_definition(placement.model, reference) is not None:
        return alias_fix(placement, reference, attribute)
    call = called(placement.model, reference)
    if call is None:
        return shim_swap(placement, reference, attribute, "the function is used as a value")
    if placement.multi_process:
        return shim_swap(placement, reference, attribute,
                         "a multi-process program (host-local stacks for runtime_shim.pmap)")
    try:
        args = call_arguments(call, parameters)
        if any(name not in args for name in parameters):
            raise Unfixable("missing arguments")
        tree, devices = (args[name] for name in parameters)
        return stack_fix(placement, call, reference, tree, devices, sharded=sharded, what=f"`jax.{attribute}`")
    except Unfixable as why:
        return shim_swap(placement, reference, attribute, str(why))


def reshard_text(placement: Placement, value: cst.BaseExpression, call: cst.Call, site: TransformSite,
                 arg: cst.Arg) -> tuple[str, tuple[ImportSpec, ...]]:
    """`jax.device_put(value, NamedSharding(Mesh(<site's devices>, (axis,)), <spec>))`: ``value``
    (an argument of ``call``, or a leaf of one) laid out as the pmap ``site`` maps it, on the
    devices its migrated form runs on (the first n local devices, or its `devices=`)."""
    model = placement.model
    if placement.multi_process:
        raise Unfixable("multi-process program (host-local inputs)")
    if placement.in_fstring(call):
        raise Unfixable("inside an f-string")
    if not cheap(value):
        raise Unfixable("the argument is not a name")
    axis = in_axis_of(site, call, arg)
    if axis == "unknown":
        raise Unfixable("in_axes for this argument is not a literal int or None")
    name = axis_literal(site)
    jax, jax_imports = placement.jax(call)
    devices = site.option("devices")
    if devices is not None and not (isinstance(devices, cst.Name) and devices.value == "None"):
        if not module_level_only(model, devices, call):
            raise Unfixable("the pmap's `devices=` reads names not visible at the call")
        mesh_devices = code_of(devices)
    else:
        backend = site.option("backend")
        if backend is not None and not (isinstance(backend, cst.Name) and backend.value == "None"):
            if not isinstance(backend, cst.SimpleString):
                raise Unfixable("`backend=` is not a literal")
            query = f"{jax}.local_devices(backend={code_of(backend)})"
        else:
            query = f"{jax}.local_devices()"
        size = site.option("axis_size")
        if size is not None and isinstance(size, cst.Integer):
            count = code_of(size)
        elif axis is None:
            count = _mapped_size_from_other_argument(site, call)
        else:
            count = f"{code_of(value)}.shape[{axis}]"
        mesh_devices = f"{query}[: {count}]"
    imports = placement.names(call, "Mesh", "NamedSharding", "P")
    sharding = sharding_text(mesh_devices, spec_text(axis, name), name)
    text = f"{jax}.device_put({code_of(value)}, {sharding})"
    parent = model.parent(value)
    if len(text) > 60 and isinstance(parent, cst.Arg) and len(call.args) == 1:
        text = f"{jax}.device_put(\n{model.indent}{code_of(value)}, {sharding})"
    return text, (*jax_imports, *imports)


def _mapped_size_from_other_argument(site: TransformSite, call: cst.Call) -> str:
    """For a broadcast input: the mapped size, read from a mapped argument of the same call that
    is a plain name (legacy pmap requires every mapped argument to have that size)."""
    for other in call.args:
        if other.star or other.keyword is not None or not isinstance(other.value, cst.Name):
            continue
        axis = in_axis_of(site, call, other)
        if isinstance(axis, int):
            return f"{code_of(other.value)}.shape[{axis}]"
    raise Unfixable("a broadcast (in_axes None) input and no mapped argument that is a name")


def placed_for(placement: Placement, value: cst.BaseExpression, call: cst.Call, site: TransformSite,
               arg: cst.Arg) -> bool:
    """``value`` is already the explicit placement `reshard_text` writes (so fixing is idempotent)."""
    if not (isinstance(value, cst.Call) and placement.model.matches(value.func, tables.DEVICE_PUT) and value.args):
        return False
    try:
        expected, _ = reshard_text(placement, value.args[0].value, call, site, arg)
    except Unfixable:
        return False
    return _same_code(code_of(value), expected)


def _same_code(a: str, b: str) -> bool:
    """Equal up to layout and quoting."""
    import ast

    try:
        return ast.dump(ast.parse(a.strip(), mode="eval")) == ast.dump(ast.parse(b.strip(), mode="eval"))
    except SyntaxError:
        return False


_CANONICAL = frozenset({"jax.local_devices", "jax.devices"})


def devices_descriptor(model: SemanticModel, node: cst.BaseExpression, depth: int = 0) -> str | None:
    """What a device list is, as far as the code shows: "first" for the first devices in the
    default order (`jax.local_devices()`, `jax.devices()[:4]`, a name bound only to those),
    "other" for a known different list (`jax.devices()[4:]`, `[::-1]`), None when unknown."""
    if depth > 4:
        return None
    if isinstance(node, cst.Call):
        if model.matches(node.func, _CANONICAL) and not node.args:
            return "first"
        return None
    if isinstance(node, cst.Subscript):
        base = devices_descriptor(model, node.value, depth + 1)
        if base is None or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Slice):
            return None
        part = node.slice[0].slice
        lower_zero = part.lower is None or (isinstance(part.lower, cst.Integer) and part.lower.evaluated_value == 0)
        if base == "first" and lower_zero and part.step is None:
            return "first"
        return "other" if base in ("first", "other") else None
    if isinstance(node, cst.Name):
        found = set()
        for assignment in model.reaching_assignments(node):
            value = model.assigned_value(getattr(assignment, "node", None))
            if value is None:
                return None
            found.add(devices_descriptor(model, value, depth + 1))
        return found.pop() if len(found) == 1 else None
    return None
