from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid
from rules.semantic import DEVICE_STACKED, FunctionLike, integer_index

_OPERATOR_ITEMGETTER = frozenset({"operator.itemgetter"})


class Unreplicate(Rule):
    """Taking device 0's copy of every leaf of a pmap output.

    ## What it does
    Finds every use of `flax.jax_utils.unreplicate` (any import spelling, local aliases included),
    and `tree_map` calls (`jax.tree_util.tree_map`, `jax.tree.map`, `jax.tree_map`, a bare
    `tree_map`) whose function indexes its argument with an integer (`lambda x: x[0]`, a local
    `def first(x): return x[0]`, `operator.itemgetter(0)`) and whose tree is a pmap output, a
    `device_put_replicated` / `device_put_sharded` result or a flax `replicate` result. A `tree_map`
    of the same kind over other values (host arrays, function parameters) is not reported.

    ## Why is this bad?
    With the legacy pmap, `x[0]` on each leaf read device 0's buffer. With the new pmap every leaf
    is a `jax.Array` sharded over a mesh and `x[0]` is a jitted gather per leaf: unreplicating a
    model's parameters launches one cross-device computation per parameter, every time.

    ## Example
    ```python
    from flax import jax_utils

    state, metrics = p_train_step(state, batch)
    params = jax_utils.unreplicate(state.params)
    loss = jax.tree_util.tree_map(lambda x: x[0], metrics)
    ```

    ## Use instead
    ```python
    def first_device(x):
        return x.addressable_shards[0].data.squeeze(0)  # no communication

    params = jax.tree.map(first_device, state.params)
    loss = jax.tree.map(first_device, metrics)
    ```
    Better still, keep parameters replicated with `NamedSharding(mesh, P())` and drop the
    leading device axis: then there is nothing to unreplicate.

    ## Fix safety
    No automatic fix yet. `addressable_shards[0]` equals `x[0]` for stacked arrays in
    single-process programs; in multi-process programs device 0 may not be addressable.

    ## References
    - https://flax.readthedocs.io/en/latest/api_reference/flax.jax_utils.html
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    """

    CODE = "PM202"
    NAME = "unreplicate"
    MESSAGE = ("`tree_map(lambda x: x[0], ...)` on a pmap output gathers every leaf across devices; "
               "read `x.addressable_shards[0].data` instead")
    TRIGGERS = ("pmap", "replicate", "device_put_sharded")

    VALID = [
        Valid("import jax\nfirst = jax.tree_util.tree_map(lambda x: x[0], batch)\n"),
        Valid("import jax\ndef f(state):\n    return jax.tree.map(lambda x: x[0], state)\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nys = jax.tree.map(lambda x: x * 2, out)\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nys = jax.tree.map(lambda x: x[:1], out)\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nys = jax.tree.map(lambda x: y[0] + x, out)\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nn = jax.tree.map(lambda x: x.shape[0], out)\n"),
        Valid("import jax\nstep = jax.pmap(f, out_axes=None)\nout = step(x)\nys = jax.tree.map(lambda x: x[0], out)\n"),
        Valid("from mylib import unreplicate\nx = unreplicate(y)\n"),
        Valid("def unreplicate(t):\n    return t\nx = unreplicate(y)\n"),
    ]
    INVALID = [
        Invalid("from flax import jax_utils\nparams = jax_utils.unreplicate(state.params)\n", lines=(2,)),
        Invalid("from flax.jax_utils import unreplicate\nparams = unreplicate(state.params)\n", lines=(2,)),
        Invalid("import flax\nparams = flax.jax_utils.unreplicate(state.params)\n", lines=(2,)),
        Invalid("from flax.jax_utils import unreplicate as unrep\np = unrep(s)\n", lines=(2,)),
        Invalid("from flax import jax_utils\nunrep = jax_utils.unreplicate\np = unrep(s)\n", lines=(2, 3)),
        Invalid("from flax import jax_utils\nfns = [jax_utils.unreplicate]\n", lines=(2,)),
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(x)\nys = jax.tree_util.tree_map(lambda x: x[0], out)\n",
                lines=(4,)),
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(x)\nys = jax.tree.map(lambda x: x[0], out)\n", lines=(4,)),
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(x)\nys = jax.tree_map(lambda x: x[0], out)\n", lines=(4,)),
        Invalid(
            "import jax\nfrom jax.tree_util import tree_map\n"
            "step = jax.pmap(f)\nstate, metrics = step(s, b)\n"
            "m = tree_map(lambda x: float(x[0]), metrics)\n",
            lines=(5,),
        ),
        Invalid(
            "import jax\nstep = jax.pmap(f)\n"
            "def first(x):\n    return x[0]\n"
            "state = step(x)\nparams = jax.tree.map(first, state.params)\n",
            lines=(6,),
        ),
        Invalid("import jax, operator\nstep = jax.pmap(f)\nys = jax.tree.map(operator.itemgetter(0), step(x))\n",
                lines=(3,)),
        Invalid(
            "import jax\nreplicated = jax.device_put_replicated(params, jax.local_devices())\n"
            "back = jax.tree.map(lambda x: x[0], replicated)\n",
            lines=(3,),
        ),
        Invalid(
            "import jax\nfrom flax import jax_utils\nstate = jax_utils.replicate(state)\n"
            "host = jax.tree_util.tree_map(lambda leaf: leaf[0], state)\n",
            lines=(4,),
        ),
        Invalid("import jax\nstep = jax.pmap(f)\nys = jax.tree.map(lambda x: x[0], step(x), is_leaf=None)\n", lines=(3,)),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        for reference in self.model.references(tables.FLAX_UNREPLICATE, ("unreplicate",), follow_aliases=True):
            self.report(reference, "`flax.jax_utils.unreplicate` indexes `x[0]` on every leaf: a cross-device "
                                   "gather per leaf with the new pmap; read `x.addressable_shards[0].data`")

    def visit_Call(self, node: cst.Call) -> None:
        if not node.args or not self.model.resolves_to(node.func, tables.TREE_MAP):
            return
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        function = positional[0] if positional else None
        trees = positional[1:]
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "f":
                function = arg.value
            elif arg.keyword is not None and arg.keyword.value == "tree":
                trees.append(arg.value)
        if function is None or not self._indexes_argument(function):
            return
        if any(not self.model.value_tags(tree).isdisjoint(DEVICE_STACKED) for tree in trees):
            self.report(node)

    def _indexes_argument(self, function: cst.BaseExpression) -> bool:
        if isinstance(function, cst.Call) and self.model.matches(function.func, _OPERATOR_ITEMGETTER):
            return len(function.args) == 1 and isinstance(function.args[0].value, (cst.Integer, cst.UnaryOperation))
        return any(_indexes_first_parameter(f) for f in self.model.resolve_functions(function))


def _indexes_first_parameter(function: FunctionLike) -> bool:
    params = function.params.params
    if not params:
        return False
    finder = _IntegerIndexOf(params[0].name.value)
    function.body.visit(finder)
    return finder.found


class _IntegerIndexOf(cst.CSTVisitor):
    """Whether ``name[<int>]`` occurs (the name as the function's own parameter)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found = False

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        if isinstance(node.value, cst.Name) and node.value.value == self.name and integer_index(node):
            self.found = True
        return not self.found

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return not any(p.name.value == self.name for p in node.params.params)  # shadowed

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return not any(p.name.value == self.name for p in node.params.params)
