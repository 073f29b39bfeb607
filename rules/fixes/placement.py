"""What the placement fixes must know of a module's values: which expressions are arrays, which
code may be traced, where a value is used on the host or reaches a pmap, which names a template can
use. Read-only questions over the semantic model, answered once per module (Placement); the
fixes themselves are built in placement_fixes."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.metadata import ClassScope

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import DEVICE_STACKED, JIT_OUTPUT, PMAP
from pmap_migrate.rules.analysis.syntax import ReturnFinder
from pmap_migrate.rules.analysis.tracing import Tracing
from pmap_migrate.rules.fixes.api import Unfixable, jax_name
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.naming import NameAllocator
from pmap_migrate.rules.fixes.spec import Edit, Helper, ImportSpec
from pmap_migrate.rules.knowledge import tables

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
        self.tracing = Tracing(model)
        self.helpers: dict[str, Helper] = {}  # the module's stacking helpers, by their shared name

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
        if cheap(node):
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
        if cheap(node):
            return True
        if isinstance(node, cst.Subscript):
            return _literal_slices(node) and self._device_query(node.value)
        if isinstance(node, cst.Call):
            return self.model.matches(node.func, _DEVICE_QUERIES) and all(
                not a.star and isinstance(a.value, (cst.SimpleString, cst.Integer)) for a in node.args)
        return False

    # ------------------------------------------------------------------ stacked values
    def one_row_per_device(self, value: cst.BaseExpression) -> bool:
        """Every value ``value`` may hold is a stack with one row per device along a 1-D mesh: a
        pmap output (out_axes 0, not of a nested pmap) or a `device_put_replicated` /
        `device_put_sharded` / flax `replicate` stack."""
        # A jit output that is also a pmap output is a faithful rewrite's: the same stack.
        if not self.model.always_tagged(value, DEVICE_STACKED, besides=(JIT_OUTPUT,)):
            return False
        # What a function returns (`run_step(x)`): its pmap's mesh and processes are not seen here.
        if any(self.model.returned_by(call) is not None for call, _ in self.model.tagged_sources(value)):
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
        if self.model.pmap_patched_at() is not None:
            return "the module replaces `jax.pmap` while it runs (a test fake): its outputs may not be stacks"
        if not self.one_row_per_device(value):
            return "the value may not be a pmap output (or a per-device stack) on every path"
        if not leaf and not self.array_valued(value):
            return "the value may be a list or tuple of the output pytree, where `[0]` picks an element"
        if self.tracing.may_be_traced(at):
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


_VALUE_AND_GRAD = frozenset({"jax.value_and_grad"})
# Attributes of an array that are read on the host, without its data.
_METADATA = frozenset({"shape", "dtype", "ndim", "size", "nbytes"})


# ---------------------------------------------------------------------------- text templates


# ---------------------------------------------------------------------------- expressions

def cheap(node: cst.BaseExpression) -> bool:
    """A name, `a.b`, or `a[:4]` / `a[i]` of those: cheap and side-effect free to evaluate again."""
    if isinstance(node, cst.Name):
        return True
    if isinstance(node, cst.Attribute):
        return cheap(node.value)
    if isinstance(node, cst.Subscript):
        return _literal_slices(node) and cheap(node.value)
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


# ---------------------------------------------------------------------------- shared fixes


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


# ---------------------------------------------------------------------------- stacks


# ---------------------------------------------------------------------------- reshards
