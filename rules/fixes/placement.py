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

Rules decide; this module builds the edits (``Unfixable`` says why not).
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.metadata import BuiltinAssignment, ClassScope

from pmap_migrate.rules.knowledge import tables
from pmap_migrate.rules.fixes.api import Unfixable, jax_name, parenthesized, removal_spec
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import DEVICE_STACKED, PMAP, TransformSite
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.naming import NameAllocator

__all__ = ["Unfixable"]

AXIS = '"i"'  # the helpers' mesh axis: any name works for a pmap input, only the devices matter
LINE_LIMIT = 100
SHIM = ImportSpec("runtime_shim")

# Names the templates use, what each may already be bound to, and the import that binds it.
_TEMPLATE = {
    "np": ({"numpy"}, ImportSpec("numpy", None, "np")),
    "Mesh": ({"jax.sharding.Mesh"}, ImportSpec("jax.sharding", "Mesh")),
    "NamedSharding": ({"jax.sharding.NamedSharding", "jax.NamedSharding"}, ImportSpec("jax.sharding", "NamedSharding")),
    "P": ({"jax.sharding.PartitionSpec", "jax.P"}, ImportSpec("jax.sharding", "PartitionSpec", "P")),
    "runtime_shim": ({"runtime_shim"}, SHIM),
}
_DEVICE_QUERIES = frozenset({"jax.devices", "jax.local_devices"})
# Calls that take an array to the host (the first argument), and printing (any argument).
_HOST_CONVERSIONS = frozenset({f"{prefix}{name}" for prefix in ("", "builtins.")
                               for name in ("float", "int", "bool", "complex", "str", "repr", "format")}
                              | {"numpy.asarray", "numpy.array", "jax.device_get"})
_PRINTERS = frozenset({"print", "builtins.print"})
# What a fix reading a row from its shard assumes unless the row goes straight to the host.
ROW_COMMITTED = ("the row is used on its own (read from its shard it is committed to its device, legacy's "
                 "`out[k]` was not: combined with another device's row or with a stacked array it raises)")
# Calls that return arrays whatever they are given (array constructors and array functions).
_ARRAY_MODULES = ("numpy.", "jax.numpy.", "jax.random.", "jax.nn.", "jax.scipy.")
# Collectives return the structure of their first argument (arrays for arrays, dicts for dicts).
_STRUCTURE_PRESERVING = frozenset(f"jax.lax.{name}" for name in (
    "psum", "pmean", "pmax", "pmin", "all_gather", "ppermute", "psum_scatter", "all_to_all", "pshuffle",
    "pswapaxes", "stop_gradient"))
# jax.lax functions that return tuples or pytrees (or their argument's structure), not one array.
_STRUCTURED_LAX = _STRUCTURE_PRESERVING | frozenset(f"jax.lax.{name}" for name in (
    "scan", "cond", "switch", "while_loop", "fori_loop", "map", "associative_scan", "custom_root",
    "custom_linear_solve", "reduce", "reduce_window", "sort", "sort_key_val", "top_k", "approx_max_k",
    "approx_min_k", "optimization_barrier", "platform_dependent", "pvary", "pcast", "tie_in", "linalg",
    "ragged_all_to_all", "all_gather_invariant", "psum_invariant", "with_sharding_constraint"))
_ARRAY_METHODS = frozenset({"sum", "mean", "max", "min", "prod", "astype", "reshape", "squeeze", "transpose",
                            "ravel", "flatten", "clip", "round", "argmax", "argmin", "std", "var", "cumsum"})


class Placement:
    """The placement fixes of one module; shared by the rules of a file (they see the same tree)."""

    def __init__(self, model: SemanticModel, names: NameAllocator) -> None:
        self.model = model
        self.allocator = names
        self._traced: dict[int, bool] = {}

    # ------------------------------------------------------------------ names and layout
    def names(self, at: cst.CSTNode, *names: str) -> tuple[ImportSpec, ...]:
        """The imports binding the template ``names``; Unfixable when one is bound to something else."""
        scope = self.model.scope_of(at)
        imports = []
        for name in names:
            meanings, spec = _TEMPLATE[name]
            if scope is not None and name in scope:
                found = {q.name for q in scope.get_qualified_names_for(name)}
                if not found or not found <= meanings:
                    raise Unfixable(f"`{name}` is bound to something else here")
                continue  # already bound as needed (an import after other statements is not seen by the engine)
            imports.append(spec)
        return tuple(imports)

    def jax(self, at: cst.CSTNode) -> tuple[str, tuple[ImportSpec, ...]]:
        name, imports = jax_name(self.model, at)
        scope = self.model.scope_of(at)
        if scope is not None and name in scope:
            imports = ()  # bound to jax here already (jax_name checked it)
        return name, imports

    def in_fstring(self, node: cst.CSTNode) -> bool:
        """Inside an f-string's braces, where (before Python 3.12) neither line breaks nor the
        string's own quote may appear: the templates are not used there."""
        return any(isinstance(a, cst.FormattedStringExpression) for a in self.model.ancestors(node))

    def column_of(self, node: cst.CSTNode) -> int:
        """The indentation width of the statement holding ``node``. Continuation lines of a parsed
        expression are written relative to it: libcst adds the block's indentation itself."""
        depth = sum(isinstance(a, cst.IndentedBlock) for a in self.model.ancestors(node))
        return len(self.model.indent) * depth

    def fresh_name(self, base: str) -> str:
        return self.allocator.fresh(base)

    @property
    def multi_process(self) -> bool:
        return self.model.multi_process()

    # ------------------------------------------------------------------ statements
    def statement_of(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The statement line ``node`` is evaluated in exactly once, in order, with nothing of the
        statement between them deferring or repeating it (lambda, comprehension, `and`/`or`, `x if
        c else y`); None when there is no such line (a compound statement's header, a class body)."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
                                     cst.IfExp, cst.BooleanOperation)):
                return None
            if isinstance(ancestor, cst.SimpleStatementLine):
                block = self.model.parent(ancestor)
                if isinstance(block, cst.Module):
                    return ancestor
                if isinstance(block, cst.IndentedBlock) and not isinstance(self.model.parent(block), cst.ClassDef):
                    return ancestor
                return None
            if isinstance(ancestor, cst.BaseCompoundStatement):
                return None
        return None

    def in_class_body(self, node: cst.CSTNode) -> bool:
        return isinstance(self.model.scope_of(node), ClassScope)

    def bind_once(self, node: cst.BaseExpression, at: cst.CSTNode, base: str,
                  query: bool = False) -> tuple[str, tuple[Edit, ...]]:
        """How a template that evaluates ``node`` for every leaf refers to it: a name or a cheap
        expression as is; anything else bound to a fresh name just before the statement holding
        ``at``, or, where no statement can take the binding, repeated if it only queries devices
        (``query``: ``node`` is known to, e.g. a template's own `jax.local_devices()`)."""
        if _cheap(node):
            return code_of(node), ()
        statement = self.statement_of(at)
        if statement is not None:
            name = self.fresh_name(base)
            line = cst.parse_statement(f"{name} = {code_of(node)}\n")
            return name, (Edit(statement, before=(line,)),)
        if query or self._device_query(node):
            return code_of(node), ()
        raise Unfixable(f"`{code_of(node)}` cannot be evaluated once before the statement")

    def queries_devices(self, node: cst.BaseExpression) -> bool:
        """`jax.local_devices()`, `jax.devices()[:4]`: surely a device list (never None)."""
        if isinstance(node, cst.Subscript):
            return _literal_slices(node) and self.queries_devices(node.value)
        return isinstance(node, cst.Call) and self._device_query(node)

    def _device_query(self, node: cst.BaseExpression) -> bool:
        """`jax.local_devices()`, `jax.devices("cpu")[:4]`, names: pure, cheap to repeat."""
        if _cheap(node):
            return True
        if isinstance(node, cst.Subscript):
            return _literal_slices(node) and self._device_query(node.value)
        if isinstance(node, cst.Call):
            return self.model.matches(node.func, _DEVICE_QUERIES) and all(
                not a.star and isinstance(a.value, (cst.SimpleString, cst.Integer)) for a in node.args)
        return False

    # ------------------------------------------------------------------ traced code
    def may_be_traced(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``node`` may run under a jax transformation (its values are then tracers, with
        no `addressable_shards`): inside a lambda or a decorated function, or a function that is
        used other than by direct calls, or called from such code."""
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, cst.Lambda):
                return True
            if isinstance(ancestor, cst.FunctionDef) and self._function_may_be_traced(ancestor, depth):
                return True
        return False

    def _function_may_be_traced(self, func: cst.FunctionDef, depth: int) -> bool:
        key = id(func)
        if key in self._traced:
            return self._traced[key]
        self._traced[key] = True  # recursion guard (and the answer when in doubt)
        answer = True
        if not func.decorators and depth < 8:
            calls = self._direct_calls(func)
            if calls is not None:
                answer = any(self.may_be_traced(call, depth + 1) for call in calls)
        self._traced[key] = answer
        return answer

    def _direct_calls(self, func: cst.FunctionDef) -> list[cst.Call] | None:
        """The calls of ``func`` in this module; None when it is also used as a value."""
        name = func.name.value
        calls: list[cst.Call] = []
        scope = self.model.scope_of(func)
        if isinstance(scope, ClassScope):
            # a method: every `<x>.name` in the module might be it
            for attribute in self.model.index.attributes.get(name, ()):
                parent = self.model.parent(attribute)
                if not (isinstance(parent, cst.Call) and parent.func is attribute):
                    return None
                calls.append(parent)
            return calls
        if scope is None:
            return None
        for assignment in scope.assignments[name]:
            if getattr(assignment, "node", None) is not func:
                continue
            for access in assignment.references:
                parent = self.model.parent(access.node)
                if not (isinstance(parent, cst.Call) and parent.func is access.node):
                    return None
                calls.append(parent)
        return calls

    # ------------------------------------------------------------------ stacked values
    def one_row_per_device(self, value: cst.BaseExpression) -> bool:
        """Every value ``value`` may hold is a stack with one row per device along a 1-D mesh: a
        pmap output (out_axes 0, not of a nested pmap) or a `device_put_replicated` /
        `device_put_sharded` / flax `replicate` stack."""
        if not self.model.always_tagged(value, DEVICE_STACKED):
            return False
        nested = self.model.nested_nodes()
        for producer in self.model.producers(value):
            if producer.transform == PMAP and id(producer.node) in nested:
                return False
        return True

    def first_shard_reason(self, at: cst.CSTNode, value: cst.BaseExpression, *, leaf: bool = False) -> str | None:
        """Why reading a row of ``value`` from its shards would not be exact here (None: it is).
        ``leaf``: ``value`` is known to be an array (a leaf seen by `tree_map`); otherwise it must
        be shown to be one, not a list or tuple of the output pytree (where `x[0]` picks an element)."""
        if self.multi_process:
            return "multi-process program: the first addressable shard is not row 0 of the global array"
        if not self.one_row_per_device(value):
            return "the value may not be a pmap output (or a per-device stack) on every path"
        if not leaf and not self.array_valued(value):
            return "the value may be a list or tuple of the output pytree, where `[0]` picks an element"
        if self.may_be_traced(at):
            return "the code may run under jit/pmap, where the value is a tracer"
        if self.feeds_a_pmap(at):
            return ("the row is passed to a pmap: read from its shard it is committed to that device, which the "
                    "migrated pmap refuses (legacy's row was not committed)")
        return None

    def used_on_host(self, row: cst.BaseExpression) -> bool:
        """``row`` goes straight to the host (`float(out[0])`, `print(...)`, `np.asarray(...)`,
        `jax.device_get(...)`, `.item()`, `.tolist()`, an f-string): whether it is committed to
        its device cannot matter there. So does a part of it taken by integer indices and slices
        (`float(out[0][1])`: the part is on the row's device too), or its `.shape`/`.dtype`."""
        model = self.model
        parent = model.parent(row)
        while isinstance(parent, cst.Subscript) and parent.value is row and _literal_slices(parent, names=False):
            row, parent = parent, model.parent(parent)
        if isinstance(parent, cst.Attribute) and parent.value is row and parent.attr.value in _METADATA:
            return True
        if isinstance(parent, cst.FormattedStringExpression):
            return True
        if isinstance(parent, cst.Attribute) and parent.value is row and parent.attr.value in ("item", "tolist"):
            call = model.parent(parent)
            return isinstance(call, cst.Call) and call.func is parent
        if not isinstance(parent, cst.Arg) or parent.keyword is not None or parent.star:
            return False
        call = model.parent(parent)
        if not isinstance(call, cst.Call):
            return False
        names = model.qualified_names(call.func)
        if not names.isdisjoint(_PRINTERS):
            return True
        return call.args[0] is parent and not names.isdisjoint(_HOST_CONVERSIONS)

    def feeds_a_pmap(self, row: cst.BaseExpression) -> bool:
        """``row`` is an argument of a pmap call, directly or through the name it is assigned to
        (`w0 = w[0]; p_step(w0, x)`), or a leaf of a tuple/list/dict display passed as one."""
        model = self.model
        target = None
        parent = model.parent(row)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            assignment = model.assignment_for_target(parent.targets[0].target)
            if assignment is not None:
                target = assignment
        for call in model.pmap_calls():
            for arg in call.args:
                for value in iter_leaves(arg.value, starred=True):
                    if value is row:
                        return True
                    if target is not None and isinstance(value, cst.Name) and self._reaches(target, value):
                        return True
        return False

    def _reaches(self, assignment, read: cst.Name) -> bool:
        """``assignment`` may reach ``read``: among its reaching assignments, and before it in the
        code or in a loop around both (a later binding reaches an earlier read only on a next pass)."""
        model = self.model
        if not any(a is assignment for a in model.reaching_assignments(read)):
            return False
        order = model.index.order
        if assignment.node in order and read in order and order[assignment.node] > order[read]:
            return any(isinstance(a, (cst.For, cst.While)) and model.is_within(assignment.node, a)
                       for a in model.ancestors(read))
        return True

    # ------------------------------------------------------------------ arrays, not pytrees
    def array_valued(self, value: cst.BaseExpression) -> bool:
        """Every value ``value`` may hold is an array: each producing pmap returns arrays (or dicts
        of arrays, inside a top-level tuple that unpacking or `out[k]` on the tuple takes apart),
        each stacking helper stacks an array."""
        sources = self.model.tagged_sources(value)
        if not sources:
            return False
        for call, position in sources:
            site = self.model.transformed_call(call)
            if site is not None:
                functions = self.model.mapped_functions(site) if site.transform == PMAP else []
                if not functions or not all(self._returns_arrays(f, position) for f in functions):
                    return False
            elif not self._stacks_an_array(call):
                return False
        return True

    def _returns_arrays(self, func, position: int | None) -> bool:
        """Every return value of ``func`` is an array (or a dict of arrays) at ``position`` of its
        tuple (None: in every element, or the whole value when it is not a tuple display)."""
        from pmap_migrate.rules.analysis.syntax import ReturnFinder

        if isinstance(func, cst.Lambda):
            values = [func.body]
        else:
            finder = ReturnFinder()
            func.body.visit(finder)
            values = finder.values
        if not values or any(v is None for v in values):
            return False
        for value in values:
            if isinstance(value, (cst.Tuple, cst.List)):
                if any(isinstance(e, cst.StarredElement) for e in value.elements):
                    return False
                parts = [e.value for e in value.elements]
                if position is not None:
                    if position >= len(parts):
                        return False
                    parts = [parts[position]]
            else:
                parts = [value]
            if not all(self._dicts_of_arrays(part) for part in parts):
                return False
        return True

    def _dicts_of_arrays(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Dict):
            return all(isinstance(e, cst.DictElement) and self._dicts_of_arrays(e.value) for e in node.elements)
        return self.is_array(node)

    def _stacks_an_array(self, call: cst.Call) -> bool:
        names = self.model.qualified_names(call.func)
        try:
            if not names.isdisjoint(tables.DEVICE_PUT_REPLICATED):
                tree = call_arguments(call, ("x", "devices")).get("x")
            elif not names.isdisjoint(tables.FLAX_REPLICATE):
                tree = call_arguments(call, ("tree", "devices", "axis_name")).get("tree")
            elif not names.isdisjoint(tables.DEVICE_PUT_SHARDED):
                shards = call_arguments(call, ("shards", "devices")).get("shards")
                if isinstance(shards, (cst.List, cst.Tuple)):
                    return bool(shards.elements) and all(
                        not isinstance(e, cst.StarredElement) and self.is_array(e.value) for e in shards.elements)
                if isinstance(shards, (cst.ListComp, cst.GeneratorExp)):
                    return self.is_array(shards.elt)
                return False
            else:
                return False
        except Unfixable:
            return False
        return tree is not None and self.is_array(tree)

    def is_array(self, node: cst.BaseExpression, depth: int = 0) -> bool:
        """``node`` evidently evaluates to an array (or a scalar), not a pytree container: NumPy /
        jax.numpy / jax.random / jax.nn calls, arithmetic, literals, collectives of arrays, array
        methods of arrays, and names bound only to such values."""
        if depth > 6:
            return False
        if isinstance(node, (cst.Integer, cst.Float, cst.BinaryOperation, cst.Comparison)):
            return True
        if isinstance(node, cst.UnaryOperation):
            return True
        if isinstance(node, cst.Call):
            names = self.model.qualified_names(node.func)
            if any(n.startswith(_ARRAY_MODULES) for n in names):
                return True
            if any(n.startswith("jax.lax.") and n.count(".") == 2 and n not in _STRUCTURED_LAX for n in names):
                return True  # lax's array primitives (`lax.dot`, `lax.exp`, ...)
            if not names.isdisjoint(_STRUCTURE_PRESERVING) and node.args:
                return self.is_array(node.args[0].value, depth + 1)
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in _ARRAY_METHODS:
                return self.is_array(node.func.value, depth + 1)
            return False
        if isinstance(node, cst.Attribute) and node.attr.value in ("T", "mT", "real", "imag"):
            return self.is_array(node.value, depth + 1)
        if isinstance(node, cst.Name):
            assignments = self.model.reaching_assignments(node)
            if not assignments:
                return False
            for assignment in assignments:
                value = self.model.assigned_value(getattr(assignment, "node", None))
                if value is None and self._differentiated_value(getattr(assignment, "node", None)):
                    continue
                if value is None or not self.is_array(value, depth + 1):
                    return False
            return True
        return False

    def _differentiated_value(self, target: cst.CSTNode | None) -> bool:
        """``target`` unpacks the value of a `jax.value_and_grad` call: `loss, grads = jax.value_and_grad(f)(p)`,
        `(loss, aux), grads = ...(f, has_aux=True)(p)` (also through a name bound to the transform).
        That value is what a differentiated function returns: a scalar array (jax refuses anything else)."""
        model = self.model
        if not isinstance(target, cst.Name):
            return False
        path: list[int] = []
        node, parent = target, model.parent(target)
        while isinstance(parent, cst.Element):
            container = model.parent(parent)
            if not isinstance(container, (cst.Tuple, cst.List)):
                return False
            path.insert(0, next(i for i, e in enumerate(container.elements) if e is parent))
            node, parent = container, model.parent(container)
        statement = model.parent(parent) if isinstance(parent, cst.AssignTarget) else None
        if not isinstance(statement, cst.Assign) or len(statement.targets) != 1 or not isinstance(statement.value, cst.Call):
            return False
        transforms = [statement.value.func]
        if isinstance(transforms[0], cst.Name):
            transforms = [model.assigned_value(getattr(a, "node", None)) for a in model.reaching_assignments(transforms[0])]
        if not transforms:
            return False
        for transform in transforms:
            if not isinstance(transform, cst.Call) or model.qualified_names(transform.func).isdisjoint(_VALUE_AND_GRAD):
                return False
            has_aux = next((a.value for a in transform.args if a.keyword is not None and a.keyword.value == "has_aux"), None)
            if has_aux is None or isinstance(has_aux, cst.Name) and has_aux.value == "False":
                expected = [0]
            elif isinstance(has_aux, cst.Name) and has_aux.value == "True":
                expected = [0, 0]
            else:
                return False
            if path != expected:
                return False
        return True


def row_of(value: cst.BaseExpression, index: cst.BaseExpression) -> cst.BaseExpression:
    """``value.addressable_shards[index].data.squeeze(0)``: the device's own block of a stack with
    one row per device, without gathering across devices."""
    shards = cst.Subscript(cst.Attribute(parenthesized(value), cst.Name("addressable_shards")),
                           [cst.SubscriptElement(cst.Index(index))])
    data = cst.Attribute(shards, cst.Name("data"))
    return cst.Call(cst.Attribute(data, cst.Name("squeeze")), [cst.Arg(cst.Integer("0"))])


_VALUE_AND_GRAD = frozenset({"jax.value_and_grad"})
# Attributes of an array that are read on the host, without its data.
_METADATA = frozenset({"shape", "dtype", "ndim", "size", "nbytes"})


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


# ---------------------------------------------------------------------------- text templates

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


# ---------------------------------------------------------------------------- expressions

def _cheap(node: cst.BaseExpression) -> bool:
    """A name, `a.b`, or `a[:4]` / `a[i]` of those: cheap and side-effect free to evaluate again."""
    if isinstance(node, cst.Name):
        return True
    if isinstance(node, cst.Attribute):
        return _cheap(node.value)
    if isinstance(node, cst.Subscript):
        return _literal_slices(node) and _cheap(node.value)
    return False


def _literal_slices(node: cst.Subscript, *, names: bool = True) -> bool:
    """``x[1]``, ``x[:, -1]``, ``x[2:4]``: indices and slice bounds that are integer literals, or
    names unless ``names`` is false (a name could hold an index array on another device)."""
    kinds = (cst.Integer, cst.Name) if names else (cst.Integer,)

    def plain(value: cst.BaseExpression | None) -> bool:
        if value is None:
            return True
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            value = value.expression
        return isinstance(value, kinds)

    for element in node.slice:
        part = element.slice
        if isinstance(part, cst.Index):
            if part.star is not None or not plain(part.value):
                return False
        elif isinstance(part, cst.Slice):
            if not (plain(part.lower) and plain(part.upper) and plain(part.step)):
                return False
        else:
            return False
    return True


def call_arguments(call: cst.Call, names: tuple[str, ...]) -> dict[str, cst.BaseExpression]:
    """Bind ``call``'s arguments to the parameter ``names`` (positional, then keyword); Unfixable
    for `*args`/`**kwargs` or unknown keywords."""
    bound: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            raise Unfixable("arguments passed with * or **")
        if arg.keyword is None:
            if index >= len(names):
                raise Unfixable("more arguments than the function takes")
            bound[names[index]] = arg.value
        elif arg.keyword.value in names and arg.keyword.value not in bound:
            bound[arg.keyword.value] = arg.value
        else:
            raise Unfixable(f"argument `{arg.keyword.value}`")
    return bound


def called(model: SemanticModel, reference: cst.BaseExpression) -> cst.Call | None:
    """The call whose function ``reference`` is (`jax.device_put_replicated(...)`), if any."""
    parent = model.parent(reference)
    return parent if isinstance(parent, cst.Call) and parent.func is reference else None


def keep_parens(old: cst.BaseExpression, new: cst.BaseExpression) -> cst.BaseExpression:
    return new.with_changes(lpar=getattr(old, "lpar", ()), rpar=getattr(old, "rpar", ()))


# ---------------------------------------------------------------------------- shared fixes

def shim_swap(placement: Placement, reference: cst.BaseExpression, attribute: str, why: str) -> FixSpec | None:
    """Swap the reference for `runtime_shim.<attribute>`, the drop-in with the legacy result."""
    try:
        imports = placement.names(reference, "runtime_shim")
    except Unfixable:
        return None
    replacement = keep_parens(reference, cst.Attribute(cst.Name("runtime_shim"), cst.Name(attribute)))
    spec = removal_spec(placement.model, reference)
    return FixSpec(Applicability.SAFE, f"use `runtime_shim.{attribute}` (the legacy result at run time; needs pmap-migrate "
                           f"installed): {why}", replacement=replacement, target=reference, add_imports=imports,
                   remove_imports=(spec,) if spec is not None else (), shimmed=True)


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
    from pmap_migrate.rules.fixes.pmap_options import Unsupported, axis_entry, int_tuple

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


def iter_leaves(value: cst.BaseExpression, *, starred: bool = False) -> Iterable[cst.BaseExpression]:
    """The expressions a pytree argument is built from: `{"x": a, "y": b}`, `(a, [b])`, `a`;
    ``starred``: also what a starred element unpacks (`(*[a, b],)`)."""
    if isinstance(value, (cst.Tuple, cst.List)):
        for element in value.elements:
            if starred or not isinstance(element, cst.StarredElement):
                yield from iter_leaves(element.value, starred=starred)
    elif isinstance(value, cst.Dict):
        for element in value.elements:
            if isinstance(element, cst.DictElement):
                yield from iter_leaves(element.value, starred=starred)
    else:
        yield value


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


# ---------------------------------------------------------------------------- stacks

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


# ---------------------------------------------------------------------------- reshards

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
    if not _cheap(value):
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
