from __future__ import annotations

from dataclasses import replace

import libcst as cst
from libcst.metadata import ImportAssignment

from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.api import Unfixable, removal_spec
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.placement import Placement, call_arguments
from pmap_migrate.rules.fixes.placement_fixes import (
    alias_definition,
    alias_fix,
    called,
    keep_parens,
    stack_fix,
)
from pmap_migrate.rules.fixes.spec import FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import gates, tables

_LAST_COMPONENTS = tuple({name.rsplit(".", 1)[-1] for name in tables.FLAX_PMAP_HELPERS})
# The plain imports (`import flax`, `import flax.jax_utils`) a helper's attribute chain reads.
_FLAX_MODULES = frozenset({"flax", "flax.jax_utils", "flax.training", "flax.training.common_utils"})


class FlaxReplicate(Rule):
    """Use of flax's pmap-era data helpers.

    ## What it does
    Finds every reference to `flax.jax_utils.replicate`, `flax.training.common_utils.shard`,
    `flax.training.common_utils.shard_prng_key` and `flax.jax_utils.prefetch_to_device`, however
    imported (`from flax import jax_utils; jax_utils.replicate`, `from flax.jax_utils import
    replicate`, `import flax; flax.jax_utils.replicate`, local aliases).

    ## Why is this bad?
    These helpers build the stacked, one-slice-per-device layout the legacy pmap consumed:
    `replicate` copies a tree onto every local device (through `device_put_replicated`, removed in
    jax 0.10.0, on older flax), `shard` reshapes a batch to `(local_device_count, ...)`,
    `shard_prng_key` splits a key per device, `prefetch_to_device` stacks batches per device. With
    the new pmap the stacked layout costs gathers on every `x[0]`/`unreplicate`, and a migrated
    program wants `NamedSharding`s instead of a device axis.

    ## Example
    ```python
    from flax import jax_utils
    from flax.training import common_utils

    state = jax_utils.replicate(state)
    batch = common_utils.shard(batch)
    ```

    ## Use instead
    ```python
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((jax.device_count(),), ("batch",))
    state = jax.device_put(state, NamedSharding(mesh, P()))
    batch = jax.device_put(batch, NamedSharding(mesh, P("batch")))
    ```

    ## Fix safety
    Calls are replaced by what the helper computes, in plain JAX, where that is exact:

    - `replicate(tree)` / `replicate(tree, devices)` -> the `device_put_replicated` form of PM301
      on `jax.local_devices()` (flax's default device order) or the given devices: safe, the same
      stack on the same devices (flax's own `replicate` called `jax.device_put_replicated`, removed
      in jax 0.10.0, until flax 0.12.3). No fix in multi-process programs.
    - `shard(xs)` -> `jax.tree.map(lambda leaf: leaf.reshape((jax.local_device_count(), -1) +
      leaf.shape[1:]), xs)`, flax's own body (a host-side reshape): safe.
    - `shard_prng_key(key)` -> `jax.random.split(key, num=jax.local_device_count())`, flax's own
      body: safe.
    - `prefetch_to_device`: no fix (a generator with a prefetch queue; no expression replaces it).
    The helpers used as values (`map(common_utils.shard, ds)`) are not rewritten. The flax import
    goes once nothing uses it, a plain `import flax` / `import flax.jax_utils` too. The
    `replicate` stack is built from jax arrays per device, except for weakly typed leaves (Python
    numbers held in the tree), which stay weakly typed as in the legacy `replicate` (as for PM301);
    typed PRNG key leaves (`jax.random.key`) are replicated as they were. Verified by
    running programs: `fixtures/programs_flax/`. Dropping the device axis altogether (the
    idiomatic migration) changes every function that receives these values and is not done
    automatically.

    ## References
    - https://flax.readthedocs.io/en/latest/api_reference/flax.jax_utils.html
    - https://docs.jax.dev/en/latest/sharded-computation.html
    """

    CODE = "PM303"
    NAME = "flax-replicate"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = "flax pmap-era helper builds a per-device stack for a pmap; use `jax.device_put` with a `NamedSharding`"
    TRIGGERS = gates.PM303.TRIGGERS
    NAMES = gates.PM303.NAMES

    VALID = [
        Valid("import jax\nstate = jax.device_put(state, NamedSharding(mesh, P()))\n"),
        Valid("from flax.training import train_state\nstate = train_state.TrainState.create(apply_fn=f, params=p, tx=t)\n"),
        Valid("from flax import jax_utils\nparams = jax_utils.unreplicate(state.params)\n"),
        Valid("from mylib import replicate, shard\nx = shard(replicate(y))\n"),
        Valid("import flax\ndef replicate(x):\n    return x\ny = replicate(z)\n"),
        Valid("import numpy as np\nfrom flax import linen as nn\nshard = np.split(batch, 8)\n"),
    ]
    INVALID = [
        Invalid(
            "from flax import jax_utils\nstate = jax_utils.replicate(state)\n", lines=(2,),
            expected=(
                "import jax\n"
                "import jax.numpy as jnp\n"
                "import numpy as np\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                "def _replicate(tree, devices):\n"
                "    \"\"\"jax.device_put_replicated(tree, devices): a row per device.\"\"\"\n"
                "\n"
                "    def stack(leaf):\n"
                "        sharding = NamedSharding(Mesh(devices, (\"i\",)), P(\"i\"))\n"
                "        shape = (len(devices), *np.shape(leaf))\n"
                "        if jax.typeof(leaf).weak_type:  # stays weakly typed\n"
                "            return jax.device_put(jnp.broadcast_to(leaf, shape), sharding)\n"
                "        rows = [jax.device_put(leaf, device)[None] for device in devices]\n"
                "        return jax.make_array_from_single_device_arrays(shape, sharding, rows)\n"
                "\n"
                "    return jax.tree.map(stack, tree)\n"
                "\n"
                "\n"
                "state = _replicate(state, jax.local_devices())\n"
            ),
        ),
        Invalid("from flax.jax_utils import replicate\nstate = replicate(state)\n", lines=(2,)),
        Invalid("import flax\nstate = flax.jax_utils.replicate(state)\n", lines=(2,)),
        Invalid("import flax.jax_utils\nstate = flax.jax_utils.replicate(state)\n", lines=(2,)),
        # A plain `import flax...` goes too once nothing reads `flax` (the fixed code needs no flax).
        Invalid("import flax.training.common_utils\nk = flax.training.common_utils.shard_prng_key(key)\n",
                lines=(2,), expected=(
                    "import jax\n"
                    "k = jax.random.split(key, num=jax.local_device_count())\n"
                )),
        Invalid("from flax.jax_utils import replicate as rep\nstate = rep(state)\n", lines=(2,)),
        Invalid("from flax.training import common_utils\nbatch = common_utils.shard(batch)\n", lines=(2,)),
        Invalid(
            "from flax.training.common_utils import shard, shard_prng_key\nb = shard(x)\nk = shard_prng_key(key)\n",
            lines=(2, 3),
            expected=(
                "import jax\n"
                "b = jax.tree.map(lambda leaf: leaf.reshape((jax.local_device_count(), -1) + leaf.shape[1:]), x)\n"
                "k = jax.random.split(key, num=jax.local_device_count())\n"
            ),
        ),
        # No expression replaces the prefetching generator.
        Invalid("from flax import jax_utils\nit = jax_utils.prefetch_to_device(batches, 2)\n", lines=(2,),
                expected="from flax import jax_utils\nit = jax_utils.prefetch_to_device(batches, 2)\n"),
        # flax used `devices or local_devices()`: a name that may hold None is not rewritten.
        Invalid("from flax.jax_utils import replicate\ndef put(state, devices=None):\n    return replicate(state, devices)\n",
                lines=(3,),
                expected="from flax.jax_utils import replicate\ndef put(state, devices=None):\n    return replicate(state, devices)\n"),
        Invalid("from flax import jax_utils\nrep = jax_utils.replicate\nstate = rep(state)\n", lines=(2, 3)),
        Invalid("from flax.training import common_utils\nbatches = map(common_utils.shard, ds)\n", lines=(2,)),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        helpers = tables.FLAX_PMAP_HELPERS
        for reference in self.model.references(helpers, _LAST_COMPONENTS, follow_aliases=True):
            names = self.model.qualified_names(reference) & helpers.keys()
            name = min(names) if names else None
            if name is None:  # a local alias: name the helper it stands for
                name = next((h for h in sorted(helpers) if self.model.resolves_to(reference, frozenset({h}))), None)
            if name is None:
                self.report(reference)
            else:
                self.report(reference, f"`{name}` {helpers[name]}; with the new pmap use `jax.device_put` "
                                       "with a `NamedSharding` instead of a per-device stack",
                            fix=self._fix(reference, name))

    def _fix(self, reference: cst.BaseExpression, helper: str) -> FixSpec | None:
        spec = self._fix_of(reference, helper)
        plain = _plain_flax_imports(self.model, reference)
        if spec is None or not plain:
            return spec
        return replace(spec, remove_imports=(*spec.remove_imports, *plain))

    def _fix_of(self, reference: cst.BaseExpression, helper: str) -> FixSpec | None:
        placement = self.context.fixes.placement
        if alias_definition(self.model, reference) is not None:
            return alias_fix(placement, reference, None)
        call = called(self.model, reference)
        if call is None:
            return None
        try:
            if helper == "flax.jax_utils.replicate":
                return self._replicate(placement, call, reference)
            if helper == "flax.training.common_utils.shard":
                (xs,) = call_arguments(call, ("xs",)).values()
                jax, imports = placement.jax(call)
                text = (f"{jax}.tree.map(lambda leaf: leaf.reshape(({jax}.local_device_count(), -1) + leaf.shape[1:]), "
                        f"{code_of(xs)})")
                return self._inline(call, reference, text, imports, "flax's `shard`: the same host-side reshape")
            if helper == "flax.training.common_utils.shard_prng_key":
                (key,) = call_arguments(call, ("prng_key",)).values()
                jax, imports = placement.jax(call)
                text = f"{jax}.random.split({code_of(key)}, num={jax}.local_device_count())"
                return self._inline(call, reference, text, imports, "flax's `shard_prng_key`: the same split")
        except (Unfixable, ValueError):
            return None
        return None  # prefetch_to_device

    def _replicate(self, placement: Placement, call: cst.Call, reference: cst.BaseExpression) -> FixSpec | None:
        if placement.multi_process:
            return None
        args = call_arguments(call, ("tree", "devices"))
        if "tree" not in args:
            return None
        devices = args.get("devices")
        if devices is None or (isinstance(devices, cst.Name) and devices.value == "None"):
            jax, _ = placement.jax(call)
            devices = f"{jax}.local_devices()"  # flax's default order (`_pmap_device_order`)
        elif not placement.queries_devices(devices):
            return None  # flax used `devices or local_devices()`: a name may hold None
        return stack_fix(placement, call, reference, args["tree"], devices, sharded=False,
                         what="flax's `replicate`")

    def _inline(self, call: cst.Call, reference: cst.BaseExpression, text: str, imports, summary: str) -> FixSpec:
        removal = removal_spec(self.model, reference)
        return FixSpec(Applicability.SAFE, summary, replacement=keep_parens(call, cst.parse_expression(text)), target=call,
                       add_imports=imports, remove_imports=(removal,) if removal is not None else ())


def _plain_flax_imports(model, reference: cst.BaseExpression) -> tuple[ImportSpec, ...]:
    """`import flax` / `import flax.jax_utils` / `import flax.training.common_utils` (no `as`)
    binding the head of ``reference`` (`flax.jax_utils.replicate`): removed once the fix leaves no
    use of `flax` they provide (libcst keeps an import any remaining `flax.<...>` may read), as
    the from-imports are; otherwise the fixed program would still import flax, and need it
    installed, for nothing. Nothing when `flax` is also bound otherwise."""
    head = reference
    while isinstance(head, cst.Attribute):
        head = head.value
    if not isinstance(head, cst.Name) or head.value != "flax":
        return ()
    specs = []
    for assignment in model.assignments_of(head):
        if not (isinstance(assignment, ImportAssignment) and isinstance(assignment.node, cst.Import)):
            return ()
        specs.extend(ImportSpec(alias.evaluated_name) for alias in assignment.node.names
                     if alias.asname is None and alias.evaluated_name in _FLAX_MODULES)
    return tuple(dict.fromkeys(specs))
