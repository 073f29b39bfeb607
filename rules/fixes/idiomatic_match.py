"""The idiomatic rewrite's vocabulary (the names and shapes it recognises), and how it reads what the
driver loop does with the step's outputs (``LoopReads``, mixed into ``idiomatic.Idiomatic``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.analysis.syntax import ReturnFinder
from pmap_migrate.rules.fixes.code import code_of, simple_params
from pmap_migrate.rules.fixes.spec import Edit
from pmap_migrate.rules.knowledge import tables

ALL = "all"  # a device count meaning "every local device"


STATE, BATCH = "P()", "batch"


PRIORITY = 10  # chosen before the local fixes (PM201, PM301, PM303, ...) of the code it rewrites


COLLECTIVES = frozenset(f"jax.lax.{n}" for n in ("pmean", "psum", "pmax", "pmin", "all_gather"))


REDUCTIONS = frozenset(f"jax.lax.{n}" for n in ("pmean", "psum"))


AUTODIFF = frozenset({"jax.grad", "jax.value_and_grad", "jax.vjp", "jax.jvp", "jax.linearize"})


_METADATA = frozenset({"shape", "dtype", "ndim"})


_HOST_CONVERSIONS = frozenset({"numpy.asarray", "numpy.array", "jax.device_get", "builtins.float", "builtins.str",
                               "builtins.repr"})


_LAYOUT = frozenset({"round", "ravel", "flatten", "tolist", "astype"})


_FLAX_SHARD = frozenset({"flax.training.common_utils.shard"})


_STACK = frozenset({"numpy.stack", "jax.numpy.stack", "numpy.array", "jax.numpy.array", "numpy.asarray",
                    "jax.numpy.asarray"})


_BROADCAST = frozenset({"numpy.broadcast_to", "jax.numpy.broadcast_to"})


_SHAPE = frozenset({"numpy.shape", "jax.numpy.shape"})


_RESHAPE = frozenset({"numpy.reshape", "jax.numpy.reshape"})


_ALL_DEVICES = frozenset({"jax.local_devices", "jax.devices"})


_DEVICE_COUNT = frozenset({"jax.local_device_count", "jax.device_count"})


STEP_OPTIONS = {"fun", "axis_name", "donate_argnums", "in_axes", "out_axes"}


TEMPLATE_NAMES = {"NamedSharding": {"jax.sharding.NamedSharding", "jax.NamedSharding"}}


class Reject(Exception):
    """The module does not fit the pattern exactly; the message says where."""


@dataclass
class Step:
    site: TransformSite
    func: cst.FunctionDef  # the mapped function (its body stays unchanged)
    name: str  # what the driver calls
    statement: cst.BaseStatement  # the decorated def, or `name = jax.pmap(...)`
    params: list[str]
    elements: list[cst.BaseExpression]  # the returned values (one when not a tuple)
    tuple_return: bool
    axis: str  # the axis name's literal, quotes included
    donate: tuple[int, ...]
    calls: list[cst.Call] = field(default_factory=list)
    kinds: dict[int, str] = field(default_factory=dict)  # argument position -> STATE / BATCH


PLACEHOLDER = "__pmap_migrate_mesh__"


class Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.new) if updated_node.value == self.old else updated_node


class CallFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def single_return(func: cst.FunctionDef) -> cst.BaseExpression | None:
    """The returned expression when ``func`` has exactly one `return`, its last statement."""
    finder = ReturnFinder()
    for statement in func.body.body:
        statement.visit(finder)
    last = func.body.body[-1] if func.body.body else None
    if len(finder.returns) != 1 or not isinstance(last, cst.SimpleStatementLine) or len(last.body) != 1:
        return None
    if last.body[0] is not finder.returns[0]:
        return None
    return finder.returns[0].value


def _zero_index(node: cst.Subscript) -> bool:
    return (len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.Integer) and node.slice[0].slice.value.value == "0")


def _string_index(node: cst.Subscript) -> bool:
    return (len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.SimpleString))


def _row_zero_lambda(node: cst.BaseExpression) -> bool:
    if not isinstance(node, cst.Lambda):
        return False
    params = simple_params(node.params)
    return (params is not None and len(params) == 1 and isinstance(node.body, cst.Subscript)
            and _is_name(node.body.value, params[0]) and _zero_index(node.body))


def _row_read_of(model, value: cst.BaseExpression) -> cst.BaseExpression | None:
    """The x of ``x[0]`` / ``unreplicate(x)`` / ``tree_map(lambda v: v[0], x)``, else None."""
    if isinstance(value, cst.Subscript) and _zero_index(value):
        return value.value
    if isinstance(value, cst.Call) and all(a.keyword is None and not a.star for a in value.args):
        args = [a.value for a in value.args]
        if model.matches(value.func, tables.FLAX_UNREPLICATE) and len(args) == 1:
            return args[0]
        if model.matches(value.func, tables.TREE_MAP) and len(args) == 2 and _row_zero_lambda(args[0]):
            return args[1]
    return None


def _repeated(node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(x, n) for ``[x] * n`` or ``n * [x]``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        for seq, count in ((node.left, node.right), (node.right, node.left)):
            if isinstance(seq, cst.List) and len(seq.elements) == 1 and isinstance(seq.elements[0], cst.Element):
                return seq.elements[0].value, count
    return None


def mentions(node: cst.CSTNode, names: set[str]) -> bool:
    finder = _NameFinder()
    node.visit(finder)
    return not finder.names.isdisjoint(names)


class _NameFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def display_names(node: cst.BaseExpression) -> list[cst.Name] | None:
    """The names of a name, or of a tuple/list/dict display of names (None: anything else)."""
    if isinstance(node, cst.Name):
        return [node]
    if isinstance(node, (cst.Tuple, cst.List)) and node.elements:
        found = []
        for element in node.elements:
            inner = display_names(element.value) if isinstance(element, cst.Element) else None
            if inner is None:
                return None
            found += inner
        return found
    if isinstance(node, cst.Dict) and node.elements:
        found = []
        for element in node.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            inner = display_names(element.value)
            if inner is None:
                return None
            found += inner
        return found
    return None


def _is_name(node: cst.BaseExpression | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def tuple_literal(values: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


class LoopReads:
    """How the driver loop reads the step's outputs: unstacked rows, printed values, replicated state."""

    # ------------------------------------------------------------------------------ the reads
    def _output(self, name: str) -> None:
        """A step output that is not fed back: it may only be read with `[0]` / `unreplicate`
        (dropped), or printed when the step returns it reduced over the axis."""
        unstacks = self._unstacks(name)
        for assignment in self._assignments(name):
            if self._output_position(assignment) is None and id(self._statement_of(assignment.node)) not in unstacks:
                raise Reject(f"`{name}` holds a step output and something else")
        for access in self._accesses(name):
            self._read(name, access, unstacks, None)

    def _read(self, name: str, access: cst.Name, unstacks: dict[int, cst.SimpleStatementLine], kind) -> None:
        if self._step_argument(access) is not None:
            if kind is None:
                raise Reject(f"the step output `{name}` is passed to a step")
            if self._after_unstack(access, unstacks):
                raise Reject(f"`{name}` is passed to a step after it was unreplicated")
            self._argument_kind(access, kind)
            return
        if self._after_unstack(access, unstacks):
            return  # legacy read an unstacked value here too
        read = self._row_read(access)
        if read is not None:
            statement = self._statement_of(read)
            if id(statement) in unstacks:
                if len(self.model.parent(statement).body) == 1:
                    raise Reject(f"cannot remove `{code_of(statement).strip()}`: it is alone in its block")
                self.edits.append(Edit(statement, cst.RemovalSentinel.REMOVE))
                return
            if isinstance(read, cst.Subscript) and not self._array_output(name):
                raise Reject(f"`{code_of(read)}` may pick an element of a tuple output, not a device's row")
            plain = cst.Name(name, lpar=getattr(read, "lpar", ()), rpar=getattr(read, "rpar", ()))
            self.edits.append(Edit(read, plain))
            self._remove_import_of(read.func if isinstance(read, cst.Call) else None)
            return
        if self._printed(access) and (kind == STATE or self._replicated_output(name)):
            self.printed.add(name)
            return
        raise Reject(f"`{code_of(self._statement_of(access)).strip()}` reads the device axis of `{name}`")

    def _row_read(self, access: cst.Name) -> cst.BaseExpression | None:
        """``v[0]``, ``unreplicate(v)`` or ``tree_map(lambda x: x[0], v)`` around ``access``."""
        parent = self.model.parent(access)
        if isinstance(parent, cst.Subscript) and parent.value is access and _zero_index(parent):
            return parent
        call = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
        if not isinstance(call, cst.Call) or parent.keyword is not None or parent.star:
            return None
        args = list(call.args)
        if self.model.matches(call.func, tables.FLAX_UNREPLICATE) and args == [parent]:
            return call
        if (self.model.matches(call.func, tables.TREE_MAP) and len(args) == 2 and args[1] is parent
                and args[0].keyword is None and _row_zero_lambda(args[0].value)):
            return call
        return None

    def _unstacks(self, name: str) -> dict[int, cst.SimpleStatementLine]:
        """Statements ``name = unreplicate(name)`` (or ``name[0]``...): removed by the rewrite, and
        reads after them in the same block saw an unstacked value in legacy code too."""
        found = {}
        for assignment in self._assignments(name):
            value = self._assigned(assignment)
            if value is None:
                continue
            inner = _row_read_of(self.model, value)
            if isinstance(inner, cst.Name) and inner.value == name:
                statement = self._statement_of(value)
                found[id(statement)] = statement
        return found

    def _after_unstack(self, access: cst.Name, unstacks: dict[int, cst.SimpleStatementLine]) -> bool:
        """Whether an unstacking statement runs before ``access`` in a block enclosing it, with no
        step output bound to the name in between."""
        for statement in unstacks.values():
            block = self.model.parent(statement).body
            start, index = self._index(block, statement), self._index(block, access)
            if index is None or index <= start:
                continue
            between = block[start + 1:index + 1]
            if not any(self.model.is_within(call, s) for s in between for _, call in self.calls.values()):
                return True
        return False

    def _printed(self, access: cst.Name) -> bool:
        """``access`` is printed whole (its copies shown once instead of once per device): a
        `print` argument, possibly through string keys (``params["b"]``), ``.shape`` / ``.dtype`` /
        ``.ndim``, or a host conversion (``np.asarray(x)``, ``float(x)``) and a layout-only method
        (``.round(6)``, ``.ravel()``). Anything that indexes, reduces or computes is refused: it
        would see a different value without the device axis."""
        node: cst.CSTNode = access
        parent = self.model.parent(node)
        while isinstance(parent, cst.Subscript) and parent.value is node and _string_index(parent):
            node, parent = parent, self.model.parent(parent)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _METADATA:
            node, parent = parent, self.model.parent(parent)
        else:
            arg = parent
            call = self.model.parent(arg) if isinstance(arg, cst.Arg) else None
            if (isinstance(call, cst.Call) and arg.value is node and arg.keyword is None and not arg.star
                    and self.model.matches(call.func, _HOST_CONVERSIONS)):
                node, parent = call, self.model.parent(call)
                while isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _LAYOUT:
                    call = self.model.parent(parent)
                    if not (isinstance(call, cst.Call) and call.func is parent):
                        return False
                    node, parent = call, self.model.parent(call)
        if isinstance(parent, cst.FormattedStringExpression):
            node, parent = self.model.parent(parent), self.model.parent(self.model.parent(parent))
        call = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
        return (isinstance(call, cst.Call) and parent.value is node and not parent.star
                and self.model.matches(call.func, {"builtins.print"}))

    def _producers(self, name: str) -> list[tuple[Step, cst.Call, int]]:
        found = []
        for assignment in self._assignments(name):
            found.extend(self._outputs.get(id(getattr(assignment, "node", None)), ()))
        return found

    def _array_output(self, name: str) -> bool:
        """Every step output ``name`` holds is evidently an array, so ``name[0]`` indexes its
        device axis (not an element of a tuple)."""
        return all(self._array_like(step.elements[k]) for step, _, k in self._producers(name))

    def _array_like(self, value: cst.BaseExpression, depth: int = 0) -> bool:
        if depth > 4:
            return False
        if self.placement.is_array(value):
            return True
        if isinstance(value, cst.Call) and self.model.matches(value.func, COLLECTIVES) and value.args:
            return self._array_like(value.args[0].value, depth + 1)
        if not isinstance(value, cst.Name):
            return False
        assignments = self._reaching(value)
        for assignment in assignments:
            node = getattr(assignment, "node", None)
            assigned = self.model.assigned_value(node)
            if assigned is not None:
                if not self._array_like(assigned, depth + 1):
                    return False
            elif not self._loss_of_value_and_grad(node):
                return False
        return bool(assignments)

    def _reaching(self, name: cst.Name) -> list:
        """The assignments that may reach the read ``name``, without the one of its own statement
        (``loss = lax.pmean(loss, ...)`` reads the previous ``loss``)."""
        own = self._statement_of(name)

        def others(assignments):
            return [a for a in assignments
                    if not (isinstance(getattr(a, "node", None), cst.CSTNode) and self.model.is_within(a.node, own))]

        return others(self.model.reaching_assignments(name)) or others(self.model.assignments_of(name))

    def _loss_of_value_and_grad(self, node) -> bool:
        """``node`` is ``loss`` in ``loss, grads = jax.value_and_grad(f)(...)``."""
        target = self.model.parent(self.model.parent(node)) if isinstance(node, cst.Name) else None
        assign = self.model.parent(self.model.parent(target)) if isinstance(target, cst.Tuple) else None
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.targets[0].target is target
                and target.elements and target.elements[0].value is node):
            return False
        value = assign.value
        return (isinstance(value, cst.Call) and isinstance(value.func, cst.Call)
                and self.model.matches(value.func.func, {"jax.value_and_grad"}))

    def _replicated_output(self, name: str) -> bool:
        """Every step output ``name`` holds is a reduction over the axis (the same on every device)."""
        return all(self._reduced(step, step.elements[k]) for step, _, k in self._producers(name))

    def _reduced(self, step: Step, value: cst.BaseExpression) -> bool:
        axis = step.axis.strip("\"'")
        if isinstance(value, cst.Call):
            return self._collective_over(value, axis)
        if isinstance(value, cst.Name):
            assignments = self._reaching(value)
            values = [self.model.assigned_value(getattr(a, "node", None)) for a in assignments]
            return bool(values) and all(isinstance(v, cst.Call) and self._collective_over(v, axis) for v in values)
        return False

    # -------------------------------------------------------------------------- helper forms
    def _count(self, node: cst.BaseExpression | None, depth: int = 0):
        """A device count: an int literal, or ALL for `jax.local_device_count()` and the like."""
        if node is None or depth > 3:
            return None
        if isinstance(node, cst.Integer):
            return int(node.value, 0)
        if isinstance(node, cst.Call):
            if self.model.matches(node.func, _DEVICE_COUNT) and not node.args:
                return ALL
            if self.model.matches(node.func, {"builtins.len"}) and len(node.args) == 1 \
                    and self._all_devices(node.args[0].value):
                return ALL
        if isinstance(node, cst.Name):
            assignments = self.model.assignments_of(node)
            if len(assignments) == 1:
                value = self.model.assigned_value(getattr(assignments[0], "node", None))
                return self._count(value, depth + 1)
        return None

    def _all_devices(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and not node.args and self.model.matches(node.func, _ALL_DEVICES)

    def _replicated(self, value: cst.BaseExpression):
        """(the unreplicated expression, the device count) of a replication, or None."""
        if not isinstance(value, cst.Call) or any(a.star for a in value.args):
            return None
        args = list(value.args)
        if self.model.matches(value.func, tables.DEVICE_PUT_REPLICATED):
            named = {a.keyword.value: a.value for a in args if a.keyword is not None}
            positional = [a.value for a in args if a.keyword is None]
            source = positional[0] if positional else named.get("x")
            devices = positional[1] if len(positional) > 1 else named.get("devices")
            if source is not None and devices is not None and len(args) == 2 and self._all_devices(devices):
                return source, ALL
            return None
        if self.model.matches(value.func, tables.FLAX_REPLICATE):
            if len(args) == 1 and args[0].keyword is None:
                return args[0].value, ALL
            return None
        if self.model.matches(value.func, tables.TREE_MAP) and len(args) == 2 and all(a.keyword is None for a in args):
            function = args[0].value
            if isinstance(function, cst.Lambda):
                params = simple_params(function.params)
                if params is not None and len(params) == 1:
                    count = self._copies(function.body, params[0])
                    if count is not None:
                        return args[1].value, count
            return None
        if len(args) >= 1 and isinstance(args[0].value, (cst.List, cst.BinaryOperation, cst.Name)):
            source = self._copied(value)
            if source is not None:
                return source
        return None

    def _copied(self, value: cst.Call):
        """``np.stack([w] * n)`` / ``np.broadcast_to(w, (n, *w.shape))`` of a plain name ``w``."""
        args = list(value.args)
        if self.model.matches(value.func, _BROADCAST) and len(args) == 2 and isinstance(args[0].value, cst.Name):
            name = args[0].value.value
            count = self._copies(value, name)
            return (args[0].value, count) if count is not None else None
        if self.model.matches(value.func, _STACK) and len(args) == 1:
            repeated = _repeated(args[0].value)
            if repeated is not None and isinstance(repeated[0], cst.Name):
                count = self._count(repeated[1])
                return (repeated[0], count) if count is not None else None
        return None

    def _copies(self, body: cst.BaseExpression, name: str):
        """The count n when ``body`` stacks n copies of the name ``name``, else None."""
        if not isinstance(body, cst.Call) or any(a.star or a.keyword for a in body.args):
            return None
        args = [a.value for a in body.args]
        if self.model.matches(body.func, _STACK) and len(args) == 1:
            repeated = _repeated(args[0])
            if repeated is not None and _is_name(repeated[0], name):
                return self._count(repeated[1])
        if self.model.matches(body.func, _BROADCAST) and len(args) == 2 and _is_name(args[0], name):
            return self._count(self._leading_of_shape(args[1], name))
        return None

    def _leading_of_shape(self, shape: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
        """n in ``(n, *p.shape)``, ``(n,) + p.shape`` or ``(n,) + np.shape(p)``."""
        if isinstance(shape, cst.Tuple) and len(shape.elements) == 2:
            first, rest = shape.elements
            if isinstance(rest, cst.StarredElement) and self._shape_of(rest.value, name):
                return first.value
        if isinstance(shape, cst.BinaryOperation) and isinstance(shape.operator, cst.Add) \
                and isinstance(shape.left, cst.Tuple) and len(shape.left.elements) == 1 \
                and self._shape_of(shape.right, name):
            return shape.left.elements[0].value
        return None

    def _shape_of(self, node: cst.BaseExpression, name: str) -> bool:
        if isinstance(node, cst.Attribute) and node.attr.value == "shape" and _is_name(node.value, name):
            return True
        return (isinstance(node, cst.Call) and self.model.matches(node.func, _SHAPE) and len(node.args) == 1
                and _is_name(node.args[0].value, name))

    def _unstacked(self, value: cst.BaseExpression):
        """(the global batch expression, the device count) of ``b.reshape(n, -1, ...)`` or
        ``shard(b)``, or None."""
        if not isinstance(value, cst.Call) or any(a.keyword is not None for a in value.args):
            return None
        if self.model.matches(value.func, _FLAX_SHARD):
            return (value.args[0].value, ALL) if len(value.args) == 1 and not value.args[0].star else None
        function = self.model.matches(value.func, _RESHAPE)
        if function and len(value.args) == 2:
            receiver, shape_args = value.args[0].value, [value.args[1]]
        elif not function and isinstance(value.func, cst.Attribute) and value.func.attr.value == "reshape":
            receiver, shape_args = value.func.value, list(value.args)
        else:
            return None
        if len(shape_args) == 1 and not shape_args[0].star:
            shape = shape_args[0].value
            extra = None
            if isinstance(shape, cst.BinaryOperation) and isinstance(shape.operator, cst.Add) \
                    and isinstance(shape.left, cst.Tuple):
                shape, extra = shape.left, shape.right
            if not isinstance(shape, cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in shape.elements):
                return None
            items = [e.value for e in shape.elements]
            if len(items) < 2 or self._count(items[0]) is None:
                return None
            count = self._count(items[0])
            rest = [code_of(i) for i in items[2:]]
            if not rest and extra is not None and self._tail_shape(extra, receiver):
                return receiver, count
            text = "(" + ", ".join(["-1", *rest]) + ("," if not rest else "") + ")"
            if extra is not None:
                text += f" + {code_of(extra)}"
        else:
            if len(shape_args) < 2 or shape_args[0].star or shape_args[1].star:
                return None
            if self._count(shape_args[0].value) is None:
                return None
            count = self._count(shape_args[0].value)
            rest = shape_args[2:]
            if len(rest) == 1 and rest[0].star == "*" and self._tail_shape(rest[0].value, receiver):
                return receiver, count
            text = ", ".join(["-1", *(("*" if a.star else "") + code_of(a.value) for a in rest)])
        if function:
            new = f"{code_of(value.func)}({code_of(receiver)}, {text})"
        else:
            new = f"{code_of(receiver)}.reshape({text})"
        return cst.parse_expression(new), count

    def _tail_shape(self, node: cst.BaseExpression, receiver: cst.BaseExpression) -> bool:
        """``node`` is ``receiver.shape[1:]``."""
        return (isinstance(node, cst.Subscript) and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Slice)
                and isinstance(node.slice[0].slice.lower, cst.Integer) and node.slice[0].slice.lower.value == "1"
                and node.slice[0].slice.upper is None and node.slice[0].slice.step is None
                and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
                and code_of(node.value.value) == code_of(receiver))
