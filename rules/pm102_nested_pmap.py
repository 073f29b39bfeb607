from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.knowledge import gates


class NestedPmap(Rule):
    """A pmap that runs inside a function that is itself pmapped.

    ## What it does
    Finds pmaps nested in pmaps: `pmap(pmap(f, 'j'), 'i')`, stacked `@jax.pmap` decorators, a
    pmapped function called (or handed to `jax.vmap`, `lax.map`, ...) inside another pmapped
    function of the same module, and a pmap applied in a helper (plain or jitted) that a pmapped
    body calls, however deep. The finding is at the inner pmap: the inner site, the call of the
    pmapped function, or the pmapped function passed to the outer pmap.

    ## Why is this bad?
    The legacy pmap nested like `vmap`: `pmap(pmap(f, 'j'), 'i')` ran `f` over a 2-D device grid.
    The new `jax.pmap` is a `shard_map` over a 1-D mesh of its own, and a shard_map inside another
    one with a different mesh raises `ValueError: The context mesh ... should match the mesh passed
    to shard_map`. The program fails at trace time on jax >= 0.8.

    ## Example
    ```python
    import jax

    step = jax.pmap(jax.pmap(f, axis_name="j"), axis_name="i")
    ```

    ## Use instead
    One `shard_map` over a 2-D mesh, with the per-device view restored by nested `vmap`:
    ```python
    import jax
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    @jax.jit
    def step(x):
        devices = np.array(jax.local_devices()[: x.shape[0] * x.shape[1]])
        mesh = Mesh(devices.reshape(x.shape[0], x.shape[1]), ("i", "j"))
        return jax.shard_map(jax.vmap(jax.vmap(f, axis_name="j"), axis_name="i"), mesh=mesh,
                             in_specs=P("i", "j"), out_specs=P("i", "j"), check_vma=False)(x)
    ```

    ## Fix safety
    No rewrite of its own: it goes with PM101's. Where every pmap of the nest is rewritten in the
    compact form (literal options, no `devices`, distinct axis names), each becomes
    `jax.jit(_shard_mapped(f, axis, nested=True))`: a pmap called in another's body runs as a
    vmap with its axis name on the outer pmap's devices (legacy gave it devices of its own), so
    collectives over either axis or both keep their meaning and autodiff is legacy's; a float sum
    over the inner axis may round differently in its last place. Otherwise `runtime_shim.pmap`
    keeps the legacy nesting semantics and is the drop-in for such code: where PM101's fix routes
    the inner pmap to it, the finding goes with that fix.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/notebooks/shard_map.html
    """

    CODE = "PM102"
    NAME = "nested-pmap"
    FIXABLE = Fixable.NEVER
    MESSAGE = "pmap nested inside a pmapped function: the new `jax.pmap` (a shard_map) raises on nesting"
    TRIGGERS = gates.PM102.TRIGGERS
    NAMES = gates.PM102.NAMES

    VALID = [
        Valid("import jax\nstep = jax.pmap(jax.vmap(f, axis_name='j'), axis_name='i')\n"),
        Valid("import jax\nouter = jax.pmap(f)\ninner = jax.pmap(g)\ny = inner(outer(x))\n"),
        # A pmapped function called from a plain (not pmapped) function is not nested.
        Valid(
            "import jax\n"
            "@jax.pmap\n"
            "def inner(x):\n    return x\n"
            "def driver(x):\n    return inner(x)\n"
            "@jax.pmap\n"
            "def other(x):\n    return x + 1\n"
        ),
        # pmap over a jitted function, and jit over a pmapped one: one pmap each time.
        Valid("import jax\nstep = jax.pmap(jax.jit(f))\nouter = jax.jit(jax.pmap(g))\n"),
        # Stacked decorators of which only one is a pmap.
        Valid("import jax\n@jax.jit\n@jax.pmap\ndef step(x):\n    return x\n"),
        # A name that shadows the pmapped function inside the body is another function.
        Valid(
            "import jax\n"
            "p = jax.pmap(f)\n"
            "@jax.pmap\n"
            "def step(x):\n"
            "    p = lambda y: y\n"
            "    return p(x)\n"
        ),
        # A pmapped callable passed to the outer pmap's caller, not into the pmapped body.
        Valid("import jax\np = jax.pmap(f)\nq = jax.pmap(g)\nrun(p, q)\n"),
        Valid("from flax import nnx\nstep = nnx.pmap(nnx.pmap(f))\n"),
        # The function rebound to its own pmap: the argument is the plain function (the binding
        # comes after it), at module level, in a function, and on `self` in a method.
        Valid("import jax\ndef step(x):\n    return x\nstep = jax.pmap(step)\ny = step(x)\n"),
        Valid(
            "import jax\n"
            "def train(x):\n"
            "    def epoch(y):\n        return y\n"
            "    epoch = jax.pmap(epoch, axis_name='i')\n"
            "    return epoch(x)\n"
        ),
        Valid(
            "import jax\n"
            "class Experiment:\n"
            "    def __init__(self):\n"
            "        self._update = jax.pmap(self._update, axis_name='i')\n"
            "    def _update(self, x):\n        return x\n"
        ),
        Valid(
            "import jax\n"
            "class Experiment:\n"
            "    def _train_init(self):\n"
            "        self._update = jax.pmap(self._update, axis_name='i')\n"
            "    def _update(self, x):\n        return x\n"
        ),
    ]
    INVALID = [
        Invalid("import jax\nstep = jax.pmap(jax.pmap(f, 'j'), 'i')\n", lines=(2,)),
        Invalid(
            "import jax\nstep = jax.pmap(\n    jax.pmap(f, axis_name='j'),\n    axis_name='i',\n)\n",
            lines=(3,),
        ),
        Invalid("from jax import pmap\nstep = pmap(pmap(pmap(f, 'k'), 'j'), 'i')\n", lines=(2, 2)),
        Invalid("import jax\n@jax.pmap\n@jax.pmap\ndef step(x):\n    return x\n", lines=(3,)),
        Invalid(
            "import functools, jax\n"
            "@functools.partial(jax.pmap, axis_name='i')\n"
            "@jax.jit\n"
            "@functools.partial(jax.pmap, axis_name='j')\n"
            "def step(x):\n    return x\n",
            lines=(4,),
        ),
        Invalid(
            "import jax\n"
            "@jax.pmap\n"
            "def inner(x):\n    return x * 2\n"
            "@jax.pmap\n"
            "def outer(x):\n    return inner(x) + 1\n",
            lines=(7,),
        ),
        Invalid(
            "import jax\n"
            "def helper(x):\n    return jax.pmap(lambda y: y)(x)\n"
            "def middle(x):\n    return helper(x)\n"
            "step = jax.pmap(middle, axis_name='i')\n",
            lines=(3,),
        ),
        Invalid(
            "import jax\n"
            "@jax.jit\n"
            "def helper(x):\n    return jax.pmap(g)(x)\n"
            "@jax.pmap\n"
            "def step(x):\n    return helper(x)\n",
            lines=(4,),
        ),
        Invalid("import jax\np_inner = jax.pmap(f, 'j')\nstep = jax.pmap(p_inner, 'i')\n", lines=(3,)),
        # Every call of the inner pmapped function is a finding, and so is each outer that runs it.
        Invalid(
            "import jax\n"
            "inner = jax.pmap(f, axis_name='j')\n"
            "@jax.pmap\n"
            "def a(x):\n    y = inner(x)\n    return inner(y)\n"
            "@jax.pmap\n"
            "def b(x):\n    return inner(x)\n",
            lines=(5, 6, 9),
        ),
        Invalid("import jax\n@jax.pmap\ndef g(x):\n    return x\nstep = jax.pmap(g)\n", lines=(5,)),
        Invalid(
            "import jax\n"
            "p_inner = jax.pmap(f, axis_name='j')\n"
            "@jax.pmap\n"
            "def step(x):\n    return jax.vmap(p_inner)(x)\n",
            lines=(5,),
        ),
        Invalid(
            "import jax\n"
            "class Trainer:\n"
            "    def __init__(self):\n"
            "        self.p_inner = jax.pmap(self.inner, axis_name='j')\n"
            "        self.p_step = jax.pmap(self.step, axis_name='i')\n"
            "    def inner(self, x):\n        return x\n"
            "    def step(self, x):\n        return self.p_inner(x)\n",
            lines=(9,),
        ),
        Invalid(
            "import jax\n"
            "from functools import partial\n"
            "pmap_i = partial(jax.pmap, axis_name='i')\n"
            "@pmap_i\n"
            "def step(x):\n"
            "    @partial(jax.pmap, axis_name='j')\n"
            "    def inner(y):\n        return y\n"
            "    return inner(x)\n",
            lines=(6, 9),
        ),
        Invalid("import jax\nstep = jax.pmap(jax.jit(jax.pmap(f, 'j')), 'i')\n", lines=(2,)),
        Invalid(
            "import jax\n"
            "@jax.pmap\n"
            "def step(x):\n"
            "    def body(c, y):\n        return c, jax.pmap(g)(y)\n"
            "    return jax.lax.scan(body, 0, x)\n",
            lines=(5,),
        ),
        # Rebound in a loop: the second pass pmaps the first pass's pmap.
        Invalid(
            "import jax\n"
            "def step(x):\n    return x\n"
            "for _ in range(2):\n    step = jax.pmap(step)\n",
            lines=(5,),
        ),
        Invalid(
            "import jax\n"
            "class Experiment:\n"
            "    def __init__(self):\n"
            "        for _ in range(2):\n"
            "            self._update = jax.pmap(self._update)\n"
            "    def _update(self, x):\n        return x\n",
            lines=(5,),
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        self._pending: list[tuple[cst.CSTNode, TransformSite, str]] = []
        for inner, (_, outer) in self.model.nested_sites().items():
            if self._applied_directly(inner, outer):
                where = "pmap applied to a function that is already pmapped"
            else:
                where = f"pmap run inside {self._describe(outer)}, which is itself pmapped"
            message = f"{where}: the new `jax.pmap` (a shard_map) raises on nesting; use one shard_map over a " \
                "multi-axis mesh"
            self._pending.append((inner, outer, message))

    def leave_Module(self, original_node: cst.Module) -> None:
        # Reported once every pmap's fix is known: where PM101's fix keeps the inner pmap on the
        # shim (legacy nesting semantics), the finding goes with it.
        for inner, outer, message in self._pending:
            # the nesting goes where either pmap goes to the shim (which nests as legacy did)
            fix = self.with_shimmed_pmaps([self._site_of(inner)], "the nesting") \
                or self.with_shimmed_pmaps([outer.node], "the nesting") \
                or self.with_nesting_pmaps([self._site_of(inner), outer.node])
            self.report(inner, message, fix=fix)

    def _site_of(self, inner: cst.CSTNode) -> cst.CSTNode:
        """The inner pmap's own node: ``inner`` itself, or the site of the pmapped callable it calls
        or hands on."""
        site = self.model.inner_site(inner)
        return site.node if site is not None else inner

    def _applied_directly(self, inner: cst.CSTNode, outer: TransformSite) -> bool:
        """`pmap(pmap(f))`, `pmap(p_inner)`, `pmap(jit(pmap(f)))`, stacked `@pmap` decorators."""
        if outer.decorated is not None:
            return any(d is inner for d in outer.decorated.decorators)
        return self.model.is_within(inner, outer.node)

    def _describe(self, outer: TransformSite) -> str:
        if outer.decorated is not None:
            return f"`{outer.decorated.name.value}`"
        fun = outer.fun
        if isinstance(fun, (cst.Name, cst.Attribute)):
            return f"`{self.model.module.code_for_node(fun)}`"
        if isinstance(fun, cst.Call) and self.model.resolve_functions(fun):
            functions = self.model.resolve_functions(fun)
            if isinstance(functions[0], cst.FunctionDef):
                return f"`{functions[0].name.value}`"
        return "a function"
