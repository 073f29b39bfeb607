from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.placement_fixes import removed_helper_fix
from pmap_migrate.rules.knowledge import gates, tables


class DevicePutSharded(Rule):
    """Use of the removed `jax.device_put_sharded`.

    ## What it does
    Finds every reference to `jax.device_put_sharded`: calls, the function passed or stored as a
    value, and module-local aliases (`from jax import device_put_sharded as dps`,
    `dps = jax.device_put_sharded`) together with their uses.

    ## Why is this bad?
    `device_put_sharded(shards, devices)` put one array per device and stacked them for a pmap's
    input. jax 0.10.0 removed it (AttributeError).

    ## Example
    ```python
    import jax

    batch = jax.device_put_sharded(per_device_batches, jax.local_devices())
    ```

    ## Use instead
    The same stack, placed explicitly (shard `k` put on `devices[k]` as a row, then assembled
    without any device compute), by a helper written once:
    ```python
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


    def _put_sharded(shards, devices):
        '''jax.device_put_sharded(shards, devices): shard k on device k.'''

        def stack(*leaves):
            sharding = NamedSharding(Mesh(devices, ("i",)), P("i"))
            if jax.typeof(leaves[0]).weak_type:  # stays weakly typed
                return jax.device_put(jnp.stack(leaves), sharding)
            rows = [
                jax.device_put(leaf, device)[None]
                for leaf, device in zip(leaves, devices, strict=True)
            ]
            shape = (len(devices), *np.shape(leaves[0]))
            return jax.make_array_from_single_device_arrays(shape, sharding, rows)

        return jax.tree.map(stack, *shards)


    batch = _put_sharded(per_device_batches, jax.local_devices())
    ```
    Row `k` lives on `devices[k]`, as before, so the result feeds a migrated pmap without a
    reshard.

    ## Fix safety
    Calls are rewritten to the form above: safe, the same values, shapes, dtypes and devices for
    every input legacy accepted (it required as many shards as devices, of one shape and dtype). The
    helper is written once per module, or once per package in the `_pmap_compat.py` that `fix`
    creates beside it. Weakly typed shards
    (Python numbers: `[0.0, 1.0]`) stay weakly typed, as in legacy: they are stacked on one device
    and put in place. Typed PRNG key shards (`jax.random.key`) are stacked as they were. As many
    shards as devices, of one shape and dtype, or a `ValueError`, as in legacy. Where the form does
    not apply (the function used as a value, multi-process programs, `*args`) the
    reference becomes `runtime_shim.device_put_sharded`, the drop-in with the legacy result.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM302"
    NAME = "device-put-sharded"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("`jax.device_put_sharded` was removed in jax 0.10.0; stack the shards and `jax.device_put` "
               "them with `NamedSharding(mesh, P('i'))` (or use `runtime_shim.device_put_sharded`)")
    TRIGGERS = gates.PM302.TRIGGERS
    NAMES = gates.PM302.NAMES

    VALID = [
        Valid("import jax\nx = jax.device_put(batch, NamedSharding(mesh, P('i')))\n"),
        Valid("from runtime_shim import device_put_sharded\nx = device_put_sharded(shards, devs)\n"),
        Valid("import jax\nx = jax.device_put_replicated(p, devs)\n"),
        Valid("def device_put_sharded(xs, devices):\n    return xs\ny = device_put_sharded(s, d)\n"),
    ]
    INVALID = [
        Invalid(
            "import jax\nbatch = jax.device_put_sharded(shards, jax.local_devices())\n", lines=(2,),
            expected=(
                "import jax\n"
                "import jax.numpy as jnp\n"
                "import numpy as np\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                "def _put_sharded(shards, devices):\n"
                "    \"\"\"jax.device_put_sharded(shards, devices): shard k on device k.\"\"\"\n"
                "\n"
                "    def stack(*leaves):\n"
                "        sharding = NamedSharding(Mesh(devices, (\"i\",)), P(\"i\"))\n"
                "        if jax.typeof(leaves[0]).weak_type:  # stays weakly typed\n"
                "            return jax.device_put(jnp.stack(leaves), sharding)\n"
                "        rows = [\n"
                "            jax.device_put(leaf, device)[None]\n"
                "            for leaf, device in zip(leaves, devices, strict=True)\n"
                "        ]\n"
                "        shape = (len(devices), *np.shape(leaves[0]))\n"
                "        return jax.make_array_from_single_device_arrays(shape, sharding, rows)\n"
                "\n"
                "    return jax.tree.map(stack, *shards)\n"
                "\n"
                "\n"
                "batch = _put_sharded(shards, jax.local_devices())\n"
            ),
        ),
        Invalid(
            "from jax import device_put_sharded as dps\nbatch = dps([a, b], devs)\n", lines=(2,),
            expected=(
                "import jax\n"
                "import jax.numpy as jnp\n"
                "import numpy as np\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                "def _put_sharded(shards, devices):\n"
                "    \"\"\"jax.device_put_sharded(shards, devices): shard k on device k.\"\"\"\n"
                "\n"
                "    def stack(*leaves):\n"
                "        sharding = NamedSharding(Mesh(devices, (\"i\",)), P(\"i\"))\n"
                "        if jax.typeof(leaves[0]).weak_type:  # stays weakly typed\n"
                "            return jax.device_put(jnp.stack(leaves), sharding)\n"
                "        rows = [\n"
                "            jax.device_put(leaf, device)[None]\n"
                "            for leaf, device in zip(leaves, devices, strict=True)\n"
                "        ]\n"
                "        shape = (len(devices), *np.shape(leaves[0]))\n"
                "        return jax.make_array_from_single_device_arrays(shape, sharding, rows)\n"
                "\n"
                "    return jax.tree.map(stack, *shards)\n"
                "\n"
                "\n"
                "batch = _put_sharded([a, b], devs)\n"
            ),
        ),
        Invalid("from jax import device_put_sharded\nbatch = device_put_sharded(shards, devs)\n", lines=(2,)),
        Invalid("from jax import device_put_sharded as dps\nbatch = dps(shards, devs)\n", lines=(2,)),
        Invalid("import jax\ndps = jax.device_put_sharded\nb = dps(s, d)\n", lines=(2, 3)),
        Invalid("import jax\nplace = {'sharded': jax.device_put_sharded}\n", lines=(2,)),
        Invalid(
            "import jax\n"
            "def to_devices(batch):\n"
            "    return jax.device_put_sharded(\n        list(batch), jax.local_devices())\n",
            lines=(3,),
            expected=(
                "import jax\n"
                "import jax.numpy as jnp\n"
                "import numpy as np\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                "def _put_sharded(shards, devices):\n"
                "    \"\"\"jax.device_put_sharded(shards, devices): shard k on device k.\"\"\"\n"
                "\n"
                "    def stack(*leaves):\n"
                "        sharding = NamedSharding(Mesh(devices, (\"i\",)), P(\"i\"))\n"
                "        if jax.typeof(leaves[0]).weak_type:  # stays weakly typed\n"
                "            return jax.device_put(jnp.stack(leaves), sharding)\n"
                "        rows = [\n"
                "            jax.device_put(leaf, device)[None]\n"
                "            for leaf, device in zip(leaves, devices, strict=True)\n"
                "        ]\n"
                "        shape = (len(devices), *np.shape(leaves[0]))\n"
                "        return jax.make_array_from_single_device_arrays(shape, sharding, rows)\n"
                "\n"
                "    return jax.tree.map(stack, *shards)\n"
                "\n"
                "\n"
                "def to_devices(batch):\n"
                "    return _put_sharded(list(batch), jax.local_devices())\n"
            ),
        ),
        Invalid(
            "import jax\nplace = {'sharded': jax.device_put_sharded}\n", lines=(2,),
            expected=(
                "import jax\n"
                "\n"
                "import runtime_shim\n"
                "# pmap-migrate: kept on the legacy shim: the function is used as a value\n"
                "place = {'sharded': runtime_shim.device_put_sharded}\n"
            ),
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        for reference in self.model.references(tables.DEVICE_PUT_SHARDED, ("device_put_sharded",),
                                               follow_aliases=True):
            fix = removed_helper_fix(self.context.fixes.placement, reference, "device_put_sharded", ("shards", "devices"), sharded=True)
            self.report(reference, fix=fix)
