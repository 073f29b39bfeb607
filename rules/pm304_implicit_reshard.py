from __future__ import annotations

import re

import libcst as cst

from pmap_migrate.rules.analysis.sites import (
    COMMITTED,
    JIT_OUTPUT,
    PMAP,
    REPLICATED,
    SHARDED_STACK,
    TransformSite,
)
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.api import Unfixable
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.placement import iter_leaves
from pmap_migrate.rules.fixes.placement_fixes import (
    devices_descriptor,
    helper_devices,
    placed_for,
    reshard_text,
)
from pmap_migrate.rules.fixes.spec import Edit, FixSpec
from pmap_migrate.rules.knowledge import gates

_SPACE = re.compile(r"\s+")


class ImplicitReshard(Rule):
    """A pmap input placed elsewhere, which the legacy pmap moved silently.

    ## What it does
    Finds arguments of a call to a pmapped function (or of an inline `jax.pmap(f)(x)`), or leaves
    of dict/list/tuple displays passed as arguments, that are placed on other devices: values
    committed by `jax.device_put(x, device_or_sharding)`, outputs of `jax.jit` functions
    (`@jax.jit`, `partial(jax.jit, ...)`, `jax.jit(f)(x)`), outputs of a pmap whose `devices=`
    option differs (as written) from the called pmap's, and per-device stacks
    (`device_put_replicated` / `device_put_sharded` / flax `replicate`) built on a device list
    known to differ from the pmap's (`jax.devices()[4:]` for a pmap over the first devices). The
    finding is at the argument. `jax.device_put(x)` without a placement leaves `x` uncommitted
    and is not reported.

    ## Why is this bad?
    The legacy pmap copied each input to its devices whatever its placement. The new pmap is a
    `jit` with `in_shardings`: an input committed to one device raises `ValueError: Sharding passed
    to jit does not match the sharding on the respective arg`, and so does a jit output computed
    from committed inputs. An output of a pmap over other devices is still resharded, but as a
    cross-device copy on every call that nothing in the code shows.

    ## Example
    ```python
    import jax

    x = jax.device_put(batch, jax.devices()[0])
    out = p_step(x)
    ```

    ## Use instead
    ```python
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.local_devices()[: batch.shape[0]]), ("i",))
    x = jax.device_put(batch, NamedSharding(mesh, P("i")))  # laid out as the pmap expects
    out = p_step(x)
    ```

    ## Fix safety
    Safe fix where the pmap's mesh is known at the call: the argument (a name) is put explicitly
    where the legacy pmap put it, `step(jax.device_put(x, NamedSharding(Mesh(
    jax.local_devices()[: x.shape[0]], ("i",)), P("i"))))` (its `devices=` instead when given;
    `P(None, "i")` for `in_axes=1`, `P()` for a broadcast input of a pmap with `devices=` or
    `axis_size=`). The value is copied as legacy copied it; the variable itself keeps its
    placement for its other uses. No fix for arguments that are not names, pytree-prefix
    `in_axes`, `devices=` expressions that read local state, or multi-process programs (host-local
    inputs; `runtime_shim.pmap` reshards inputs like the legacy pmap did).

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/sharded-computation.html
    """

    CODE = "PM304"
    NAME = "implicit-reshard"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("pmap input committed to a device by `jax.device_put(..., device)`: the new pmap raises instead "
               "of resharding it; put it with `NamedSharding(mesh, P('i'))` or leave it uncommitted")
    TRIGGERS = gates.PM304.TRIGGERS
    NAMES = gates.PM304.NAMES

    VALID = [
        Valid("import jax\nstep = jax.pmap(f)\nout = step(jax.device_put(x))\n"),
        Valid("import jax\nstep = jax.pmap(f)\nx = jax.device_put(b, d)\nout = step({'n': x.shape[0]}, [len(x)])\n"),
        Valid("import jax\nstep = jax.pmap(f)\nx = jax.device_put(batch, None)\nout = step(x)\n"),
        Valid("import numpy as np, jax\nstep = jax.pmap(f)\nout = step(np.ones((8, 3)))\n"),
        # The same pmap's output fed back in (a training loop), and pmaps over the same devices.
        Valid("import jax\nstep = jax.pmap(f)\nstate = step(state)\nstate = step(state)\n"),
        Valid(
            "import jax\ndevs = jax.local_devices()[:4]\n"
            "a = jax.pmap(f, devices=devs)\nb = jax.pmap(g, devices=devs)\ny = b(a(x))\n"
        ),
        Valid("import jax\na = jax.pmap(f)\nb = jax.pmap(g)\ny = b(a(x))\n"),
        # Committed values passed to functions that are not pmapped.
        Valid("import jax\nx = jax.device_put(batch, jax.devices()[0])\ny = jax.jit(f)(x)\nz = g(x)\n"),
        Valid("import jax\nj = jax.jit(f)\ny = j(x)\n"),
        # A parameter named like a committed value elsewhere.
        Valid("import jax\nstep = jax.pmap(f)\nx = jax.device_put(b, d)\ndef run(x):\n    return step(x)\n"),
        # Stacks on the first devices, and this rule's own fix.
        Valid("import jax\nstep = jax.pmap(f)\ns = jax.device_put_replicated(p, jax.local_devices()[:4])\nout = step(s)\n"),
        Valid("import jax\nstep = jax.pmap(f)\nx = jax.device_put(b, d)\n"
              "out = step(jax.device_put(x, NamedSharding(Mesh(jax.local_devices()[: x.shape[0]], ('i',)), P('i'))))\n"),
    ]
    INVALID = [
        Invalid(
            "import jax\nstep = jax.pmap(f)\nx = jax.device_put(batch, jax.devices()[0])\nout = step(x)\n", lines=(4,),
            expected=(
                "import jax\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "step = jax.pmap(f)\n"
                "x = jax.device_put(batch, jax.devices()[0])\n"
                "out = step(jax.device_put(\n"
                "    x, NamedSharding(Mesh(jax.local_devices()[: x.shape[0]], (\"i\",)), P(\"i\"))))\n"
            ),
        ),
        # in_axes: the broadcast input is replicated over the mesh, the mapped one split on its axis 1.
        Invalid(
            "import jax\nstep = jax.pmap(f, axis_name='b', in_axes=(None, 1))\nw = jax.device_put(w, dev)\n"
            "x = jax.device_put(batch, dev)\nout = step(w, x)\n",
            lines=(5, 5),
            expected=(
                "import jax\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "step = jax.pmap(f, axis_name='b', in_axes=(None, 1))\n"
                "w = jax.device_put(w, dev)\n"
                "x = jax.device_put(batch, dev)\n"
                "out = step(\n"
                "    jax.device_put(w, NamedSharding(Mesh(jax.local_devices()[: x.shape[1]], ('b',)), P())),\n"
                "    jax.device_put(x, NamedSharding(Mesh(jax.local_devices()[: x.shape[1]], ('b',)), P(None, 'b'))),\n"
                ")\n"
            ),
        ),
        # A stack built on other devices than the pmap's first ones.
        Invalid(
            "import jax\nstep = jax.pmap(f)\nstacked = jax.device_put_replicated(p, jax.devices()[::-1])\nout = step(stacked)\n",
            lines=(4,),
            expected=(
                "import jax\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "step = jax.pmap(f)\n"
                "stacked = jax.device_put_replicated(p, jax.devices()[::-1])\n"
                "out = step(jax.device_put(\n"
                "    stacked, NamedSharding(Mesh(jax.local_devices()[: stacked.shape[0]], (\"i\",)), P(\"i\"))))\n"
            ),
        ),
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(jax.device_put(batch, device=dev))\n", lines=(3,)),
        Invalid(
            "import jax\nstep = jax.pmap(f)\n"
            "params = jax.device_put(params, NamedSharding(mesh, P()))\nout = step(params, batch)\n",
            lines=(4,),
        ),
        Invalid("import jax\nx = jax.device_put(batch, dev)\nout = jax.pmap(lambda v: v)(x)\n", lines=(3,)),
        Invalid(
            "import jax\n@jax.jit\ndef prep(x):\n    return x * 2\n"
            "@jax.pmap\ndef step(x):\n    return x\n"
            "y = step(prep(batch))\n",
            lines=(8,),
        ),
        Invalid(
            "import jax\nfrom functools import partial\n"
            "@partial(jax.jit, static_argnums=1)\ndef prep(x, n):\n    return x * n\n"
            "step = jax.pmap(f)\nz = prep(batch, 2)\ny = step(z)\n",
            lines=(8,),
        ),
        Invalid("import jax\nstep = jax.pmap(f)\ny = step(jax.jit(g)(batch))\n", lines=(3,)),
        Invalid(
            "import jax\n"
            "a = jax.pmap(f, devices=jax.local_devices()[:4])\n"
            "b = jax.pmap(g, devices=jax.local_devices()[4:])\n"
            "h = a(x)\ny = b(h)\n",
            lines=(5,),
            expected=(
                "import jax\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "a = jax.pmap(f, devices=jax.local_devices()[:4])\n"
                "b = jax.pmap(g, devices=jax.local_devices()[4:])\n"
                "h = a(x)\n"
                "y = b(jax.device_put(\n"
                "    h, NamedSharding(Mesh(jax.local_devices()[4:], (\"i\",)), P(\"i\"))))\n"
            ),
        ),
        Invalid("import jax\na = jax.pmap(f, devices=devs)\nb = jax.pmap(g)\ny = b(a(x))\n", lines=(4,)),
        Invalid(
            "import jax\nstep = jax.pmap(f)\nx = jax.device_put(b, d)\nj = jax.jit(g)\nout = step(x, j(b), scale=x)\n",
            lines=(5, 5, 5),
        ),
        Invalid(
            "import jax\nstep = jax.pmap(f)\nx = jax.device_put(b, jax.devices()[0])\n"
            "out = step({'x': x, 'y': y}, (jax.jit(g)(y), [x]))\n",
            lines=(4, 4, 4),
        ),
        Invalid(
            "import jax\nclass T:\n    def __init__(self):\n        self.p_step = jax.pmap(self.step)\n"
            "    def step(self, x):\n        return x\n"
            "    def run(self, batch):\n        x = jax.device_put(batch, jax.devices()[0])\n        return self.p_step(x)\n",
            lines=(9,),
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        callee = self.model.transformed_call(node)
        if callee is None or callee.transform != PMAP:
            return
        placement = self.context.fixes.placement
        for arg in node.args:
            if arg.star:
                continue
            for value in iter_leaves(arg.value):
                if placed_for(placement, value, node, callee, arg):
                    continue  # already placed where this pmap maps it (this rule's own fix)
                message = self._placement_problem(value, callee)
                if message is not None:
                    fix = self._fix(value, node, callee, arg)
                    if fix is None:  # the shim reshards as legacy did, where the pmap goes to it
                        self._pending.append((value, message, callee.node))
                    else:
                        self.report(value, message, fix=fix)

    def visit_Module(self, node: cst.Module) -> None:
        self._pending: list[tuple[cst.CSTNode, str, cst.CSTNode]] = []

    def leave_Module(self, original_node: cst.Module) -> None:
        for value, message, site in self._pending:
            self.report(value, message, fix=self.with_shimmed_pmaps([site], "the input where it is"))

    def _fix(self, value: cst.BaseExpression, call: cst.Call, callee: TransformSite, arg: cst.Arg) -> FixSpec | None:
        try:
            text, imports = reshard_text(self.context.fixes.placement, value, call, callee, arg)
        except Unfixable:
            return None
        replacement = cst.parse_expression(text)
        return FixSpec(Applicability.SAFE, "put the input where the legacy pmap put it, explicitly (the new one raises "
                               "instead of resharding)", edits=(Edit(value, replacement),), add_imports=imports)

    def _placement_problem(self, value: cst.BaseExpression, callee: TransformSite) -> str | None:
        tags = self.model.value_tags(value)
        if COMMITTED in tags:
            return self.MESSAGE
        if JIT_OUTPUT in tags:
            return ("pmap input is a `jax.jit` output: committed to its device whenever the jit's inputs were, and "
                    "then the new pmap raises instead of resharding it; place it with `NamedSharding(mesh, P('i'))`")
        wanted = self._devices(callee)
        for producer in self.model.producers(value):
            if producer.transform == PMAP and producer is not callee and self._devices(producer) != wanted:
                return ("pmap input is the output of a pmap over other `devices=`: the legacy pmap moved it silently "
                        "and the new one reshards it on every call; run both on one mesh")
        if not tags.isdisjoint({REPLICATED, SHARDED_STACK}):
            for call, _ in self.model.tagged_sources(value):
                devices = helper_devices(self.model, call)
                if devices is None or isinstance(devices, str):
                    continue  # the default (first) devices, or not known
                if wanted is not None:
                    differs = _SPACE.sub("", self.model.module.code_for_node(devices)) != wanted
                else:
                    differs = devices_descriptor(self.model, devices) == "other"
                if differs:
                    return ("pmap input is a per-device stack on other devices than the pmap's: the legacy pmap moved "
                            "it silently, the new one raises; place it on the pmap's devices")
        return None

    def _devices(self, site: TransformSite) -> str | None:
        option = site.option("devices")
        if option is None:
            return None
        return _SPACE.sub("", self.model.module.code_for_node(option))
