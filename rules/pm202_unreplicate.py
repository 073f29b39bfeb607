from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.sites import DEVICE_STACKED, FunctionLike
from pmap_migrate.rules.analysis.syntax import IntegerIndexOf
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.api import Unfixable, removal_spec
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.placement_fixes import (
    alias_definition,
    alias_fix,
    called,
    keep_parens,
    literal_index,
    row_of,
    single_index,
)
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import gates, tables

_OPERATOR_ITEMGETTER = frozenset({"operator.itemgetter"})


_NOT_COMBINED = ("the leaves are used on their own (read from their shards they are committed to their device, "
                 "legacy's were not: combined with another device's rows or with stacked arrays they raise)")


class Unreplicate(Rule):
    """Taking device 0's copy of every leaf of a pmap output.

    ## What it does
    Finds every use of `flax.jax_utils.unreplicate` (any import spelling, local aliases included),
    and `tree_map` calls (`jax.tree_util.tree_map`, `jax.tree.map`, `jax.tree_map`, a bare
    `tree_map`) whose function indexes its argument with an integer (`lambda x: x[0]`, a local
    `def first(x): return x[0]`, `operator.itemgetter(0)`) and whose tree is a pmap output, a
    `device_put_replicated` / `device_put_sharded` result or a flax `replicate` result, or what a
    function returns whose every return is one of these (`def run_step(x): return p_step(x)`, in the
    module or imported from another module of the project). A `tree_map` of the same kind over
    other values (host arrays, function parameters) is not reported.

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
    `tree_map(lambda x: x[0], out)` becomes `tree_map(lambda x: x.addressable_shards[0].data.squeeze(0),
    out)` (every `x[k]` of the lambda's parameter), `tree_map(operator.itemgetter(k), out)` and
    `flax.jax_utils.unreplicate(out)` the same with a `lambda leaf: ...`. Safe when every value
    `out` may hold is a pmap output (not of a nested pmap) or a per-device stack, whose leaves are
    arrays with one row per device in mesh order, in a single-process program and outside code
    that may run under jit: then shard k is row k, which is what `x[k]` read. Unsafe for a
    non-literal index (`x[i]`: assumes an int). The leaves read from their shards are committed to
    their device, where legacy's `x[k]` were not: the same for a tree used on its own, but a pmap
    refuses them as inputs, and rows of two devices, or a row and a stacked array, cannot be
    combined. So the fix is safe only for row 0 going straight to the host
    (`jax.device_get(unreplicate(state))`, `print(...)`, `np.asarray(...)`); otherwise it is
    unsafe (assumes the leaves are used on their own), and there is no fix where the result, or
    the name it is assigned to, is passed to a pmap (`x[0]` stays: a gather on the new jax,
    correct). No fix either for functions defined with `def` (they may be used elsewhere),
    several trees, `is_leaf=`, values that may come from elsewhere on some path, what a function
    returns (its pmap's mesh and processes are not seen at the call), or multi-process programs
    (`runtime_shim.unreplicate` reads the shard that holds row 0 there).

    ## References
    - https://flax.readthedocs.io/en/latest/api_reference/flax.jax_utils.html
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    """

    CODE = "PM202"
    NAME = "unreplicate"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("`tree_map(lambda x: x[0], ...)` on a pmap output gathers every leaf across devices; "
               "read `x.addressable_shards[0].data` instead")
    TRIGGERS = gates.PM202.TRIGGERS
    NAMES = gates.PM202.NAMES
    CONTEXT_NAMES = gates.PM202.CONTEXT_NAMES

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
        # The read in the value runs before the statement binds `x`: it is the host array, not the stack.
        Valid("import jax\nimport numpy as np\nx = np.ones((8, 3))\n"
              "x = jax.device_put_replicated(jax.tree.map(lambda a: a[0], x), jax.local_devices())\n"),
    ]
    INVALID = [
        # Not fixed: nothing shows `state` is a pmap output.
        Invalid("from flax import jax_utils\nparams = jax_utils.unreplicate(state.params)\n", lines=(2,),
                expected="from flax import jax_utils\nparams = jax_utils.unreplicate(state.params)\n"),
        Invalid(
            "from flax import jax_utils\nimport jax\np_step = jax.pmap(lambda s: s)\nstate = jax_utils.replicate(state)\n"
            "for _ in range(3):\n    state = p_step(state)\nfinal = jax_utils.unreplicate(state)\n",
            lines=(7,),
            expected=(
                "from flax import jax_utils\nimport jax\np_step = jax.pmap(lambda s: s)\nstate = jax_utils.replicate(state)\n"
                "for _ in range(3):\n    state = p_step(state)\n"
                "final = jax.tree.map(lambda leaf: leaf.addressable_shards[0].data.squeeze(0), state)\n"
            ),
        ),
        # Not fixed: the unreplicated tree goes to a pmap, which refuses leaves committed to one device.
        Invalid(
            "import jax\np_step = jax.pmap(lambda s: s)\np_eval = jax.pmap(lambda p, x: x, in_axes=(None, 0))\n"
            "state = p_step(state)\nparams = jax.tree_util.tree_map(lambda a: a[0], state)\nys = p_eval(params, xs)\n",
            lines=(5,),
            expected=("import jax\np_step = jax.pmap(lambda s: s)\np_eval = jax.pmap(lambda p, x: x, in_axes=(None, 0))\n"
                      "state = p_step(state)\nparams = jax.tree_util.tree_map(lambda a: a[0], state)\n"
                      "ys = p_eval(params, xs)\n"),
        ),
        # The flax idiom rebinding the name: the read is the value before this statement binds it.
        Invalid(
            "import jax\nfrom flax import jax_utils\np_step = jax.pmap(lambda s, b: (s, b.mean()))\n"
            "state = jax_utils.replicate(state)\nstate, loss = p_step(state, batch)\n"
            "state = jax_utils.unreplicate(state)\n",
            lines=(6,),
            expected=(
                "import jax\nfrom flax import jax_utils\np_step = jax.pmap(lambda s, b: (s, b.mean()))\n"
                "state = jax_utils.replicate(state)\nstate, loss = p_step(state, batch)\n"
                "state = jax.tree.map(lambda leaf: leaf.addressable_shards[0].data.squeeze(0), state)\n"
            ),
        ),
        Invalid(
            "import jax\np_step = jax.pmap(lambda s: s)\nstate = p_step(state)\n"
            "state = jax.tree_util.tree_map(lambda a: a[0], state)\n",
            lines=(4,),
            expected=(
                "import jax\np_step = jax.pmap(lambda s: s)\nstate = p_step(state)\n"
                "state = jax.tree_util.tree_map(lambda a: a.addressable_shards[0].data.squeeze(0), state)\n"
            ),
        ),
        # In a loop: fixed where this iteration's pmap output is what reaches the read...
        Invalid(
            "from flax import jax_utils\nimport jax\np_step = jax.pmap(lambda s, b: s)\n"
            "for batch in batches:\n    state = jax_utils.replicate(state)\n    state = p_step(state, batch)\n"
            "    state = jax_utils.unreplicate(state)\n",
            lines=(7,),
            expected=(
                "from flax import jax_utils\nimport jax\np_step = jax.pmap(lambda s, b: s)\n"
                "for batch in batches:\n    state = jax_utils.replicate(state)\n    state = p_step(state, batch)\n"
                "    state = jax.tree.map(lambda leaf: leaf.addressable_shards[0].data.squeeze(0), state)\n"
            ),
        ),
        # ... not where the previous iteration's unreplicated value may reach it (a host copy then).
        Invalid(
            "from flax import jax_utils\nimport jax\np_step = jax.pmap(lambda s, b: s)\n"
            "state = jax_utils.replicate(state)\nfor batch in batches:\n"
            "    if batch is not None:\n        state = p_step(state, batch)\n"
            "    state = jax_utils.unreplicate(state)\n",
            lines=(8,),
            expected=(
                "from flax import jax_utils\nimport jax\np_step = jax.pmap(lambda s, b: s)\n"
                "state = jax_utils.replicate(state)\nfor batch in batches:\n"
                "    if batch is not None:\n        state = p_step(state, batch)\n"
                "    state = jax_utils.unreplicate(state)\n"
            ),
        ),
        Invalid(
            "import jax\nstate = jax.pmap(lambda s: s)(state)\nwhile state is not None:\n"
            "    state = jax.tree.map(lambda a: a[0], state)\n",
            lines=(4,),
            expected=(
                "import jax\nstate = jax.pmap(lambda s: s)(state)\nwhile state is not None:\n"
                "    state = jax.tree.map(lambda a: a[0], state)\n"
            ),
        ),
        Invalid(
            "import jax\nstep = jax.pmap(lambda s, x: {'w': s['w'] - x.mean()})\nstate = step(state, xs)\n"
            "host = jax.tree_util.tree_map(lambda x: float(x[0]), state)\n",
            lines=(4,),
            expected=(
                "import jax\nstep = jax.pmap(lambda s, x: {'w': s['w'] - x.mean()})\nstate = step(state, xs)\n"
                "host = jax.tree_util.tree_map(lambda x: float(x.addressable_shards[0].data.squeeze(0)), state)\n"
            ),
        ),
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
                lines=(3,),
                expected=("import jax\nstep = jax.pmap(f)\n"
                          "ys = jax.tree.map(lambda leaf: leaf.addressable_shards[0].data.squeeze(0), step(x))\n")),
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

    def leave_Module(self, original_node: cst.Module) -> None:
        # (at the end: the multi-process rewrite, PM501's fix, may read these rows itself)
        for reference in self.model.references(tables.FLAX_UNREPLICATE, ("unreplicate",), follow_aliases=True):
            self.report(reference, "`flax.jax_utils.unreplicate` indexes `x[0]` on every leaf: a cross-device "
                                   "gather per leaf with the new pmap; read `x.addressable_shards[0].data`",
                        fix=self._unreplicate_fix(reference) or self.with_global_rewrite(called(self.model, reference) or reference))

    def _unreplicate_fix(self, reference: cst.BaseExpression) -> FixSpec | None:
        placement = self.context.fixes.placement
        if alias_definition(self.model, reference) is not None:
            return alias_fix(placement, reference, None)
        call = called(self.model, reference)
        if call is None or len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        tree = call.args[0].value
        if placement.first_shard_reason(call, tree, leaf=True) is not None:
            return None
        try:
            jax, imports = placement.jax(call)
        except Unfixable:
            return None
        text = f"{jax}.tree.map(lambda leaf: {code_of(row_of(cst.Name('leaf'), cst.Integer('0')))}, {code_of(tree)})"
        removal = removal_spec(self.model, reference)
        summary = "read each leaf's row 0 from the device that holds it, without a cross-device gather"
        applicability = Applicability.SAFE if placement.used_on_host(call) else Applicability.UNSAFE
        if applicability is Applicability.UNSAFE:
            summary += "; assumes " + _NOT_COMBINED
        return FixSpec(applicability, summary,
                       replacement=keep_parens(call, cst.parse_expression(text)), target=call, add_imports=imports,
                       remove_imports=(removal,) if removal is not None else ())

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
            self.report(node, fix=self._tree_map_fix(node, function, trees) or self.with_global_rewrite(node))

    def _tree_map_fix(self, node: cst.Call, function: cst.BaseExpression, trees: list) -> FixSpec | None:
        if len(trees) != 1 or any(a.keyword is not None and a.keyword.value not in ("f", "tree") for a in node.args):
            return None
        if self.context.fixes.placement.first_shard_reason(node, trees[0], leaf=True) is not None:
            return None
        summary = "read each leaf's row from the device that holds it, without a cross-device gather"
        if isinstance(function, cst.Call):  # operator.itemgetter(k)
            index = function.args[0].value
            text = f"lambda leaf: {code_of(row_of(cst.Name('leaf'), index))}"
            removal = removal_spec(self.model, function.func)
            head = function.func.value if isinstance(function.func, cst.Attribute) else None
            if removal is None and isinstance(head, cst.Name) and head.value == "operator":
                removal = ImportSpec("operator")  # `import operator`: removed only if nothing else uses it
            on_host = code_of(index) == "0" and self.context.fixes.placement.used_on_host(node)
            applicability, note = (Applicability.SAFE, "") if on_host else (Applicability.UNSAFE, "; assumes " + _NOT_COMBINED)
            return FixSpec(applicability, summary + note, replacement=keep_parens(function, cst.parse_expression(text)),
                           target=function, remove_imports=(removal,) if removal is not None else ())
        if not isinstance(function, cst.Lambda):
            return None  # a def may be used elsewhere
        finder = IntegerIndexOf(function.params.params[0].name.value, collect=True)
        function.body.visit(finder)
        edits, assumptions = [], []
        for subscript in finder.subscripts:
            index = single_index(subscript)
            if index is None:
                return None
            if not literal_index(index):
                assumptions.append(f"`{code_of(index)}` is an int")
            edits.append(Edit(subscript, keep_parens(subscript, row_of(subscript.value, index))))
        if not edits:
            return None
        if assumptions or any(code_of(single_index(s)) != "0" for s in finder.subscripts) \
                or not self.context.fixes.placement.used_on_host(node):
            assumptions.append(_NOT_COMBINED)
        if assumptions:
            return FixSpec(Applicability.UNSAFE, summary + "; assumes " + ", ".join(assumptions), edits=tuple(edits))
        return FixSpec(Applicability.SAFE, summary, edits=tuple(edits))

    def _indexes_argument(self, function: cst.BaseExpression) -> bool:
        if isinstance(function, cst.Call) and self.model.matches(function.func, _OPERATOR_ITEMGETTER):
            return len(function.args) == 1 and isinstance(function.args[0].value, (cst.Integer, cst.UnaryOperation))
        return any(_indexes_first_parameter(f) for f in self.model.resolve_functions(function))


def _indexes_first_parameter(function: FunctionLike) -> bool:
    params = function.params.params
    if not params:
        return False
    finder = IntegerIndexOf(params[0].name.value)
    function.body.visit(finder)
    return finder.found
