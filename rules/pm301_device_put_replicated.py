from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.placement_fixes import removed_helper_fix
from pmap_migrate.rules.knowledge import gates, tables


class DevicePutReplicated(Rule):
    """Use of the removed `jax.device_put_replicated`.

    ## What it does
    Finds every reference to `jax.device_put_replicated`: calls, the function passed or stored
    as a value, and module-local aliases (`from jax import device_put_replicated as dpr`,
    `dpr = jax.device_put_replicated`) together with their uses.

    ## Why is this bad?
    `device_put_replicated(x, devices)` stacked one copy of `x` per device for a pmap's input.
    jax 0.10.0 removed it (AttributeError). Its result, a stack with a leading device axis, is
    also what makes `x[0]` and `unreplicate` gathers later on.

    ## Example
    ```python
    import jax

    params = jax.device_put_replicated(params, jax.local_devices())
    ```

    ## Use instead
    The same stack, placed explicitly (one row put on each device, then assembled without any
    device compute, so no device holds more than its own copy), by a helper written once:
    ```python
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


    def _replicate(tree, devices):
        '''jax.device_put_replicated(tree, devices): a row per device.'''

        def stack(leaf):
            sharding = NamedSharding(Mesh(devices, ("i",)), P("i"))
            shape = (len(devices), *np.shape(leaf))
            if jax.typeof(leaf).weak_type:  # stays weakly typed
                return jax.device_put(jnp.broadcast_to(leaf, shape), sharding)
            rows = [jax.device_put(leaf, device)[None] for device in devices]
            return jax.make_array_from_single_device_arrays(shape, sharding, rows)

        return jax.tree.map(stack, tree)


    params = _replicate(params, jax.local_devices())
    ```
    Each row lives on the device of the same index in `devices`, as before, so the result feeds a
    migrated pmap (whose mesh is `jax.local_devices()[:n]`) without a reshard; the mesh's axis
    name does not matter. Once the pmap is migrated idiomatically there is no device axis at all:
    `jax.device_put(params, NamedSharding(mesh, P()))`.

    ## Fix safety
    Calls are rewritten to the form above: safe, the same values, shapes, dtypes and devices; the
    arguments are evaluated as the call evaluated them. The helper is written once per module, or
    once per package in the `_pmap_compat.py` that `fix` creates beside it. A weakly typed
    leaf (a Python number such as `{"lr": 0.1}`, or an array computed from one) stays weakly
    typed, as in legacy (its product with a bfloat16 array stays bfloat16): it is broadcast on
    one device and put in place, since the assembly makes every array strongly typed. Typed PRNG
    key arrays (`jax.random.key`) are replicated as they were (each row is the key itself, put on
    its device).
    Where that form does not apply (the function used as a value, multi-process programs,
    `*args`) the reference becomes `runtime_shim.device_put_replicated`, the
    drop-in with the legacy result. A local alias (`dpr = jax.device_put_replicated`) is removed
    once its uses are rewritten.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM301"
    NAME = "device-put-replicated"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("`jax.device_put_replicated` was removed in jax 0.10.0; use `jax.device_put` with a "
               "`NamedSharding` (or `runtime_shim.device_put_replicated`)")
    TRIGGERS = gates.PM301.TRIGGERS
    NAMES = gates.PM301.NAMES

    VALID = [
        Valid("import jax\nx = jax.device_put(params, sharding)\n"),
        Valid("from runtime_shim import device_put_replicated\nx = device_put_replicated(p, devs)\n"),
        Valid("def device_put_replicated(x, devices):\n    return x\ny = device_put_replicated(p, d)\n"),
        Valid("import jax\nname = 'jax.device_put_replicated'\n"),
        Valid("import jax\nx = jax.device_put_sharded(shards, devs)\n"),
    ]
    INVALID = [
        Invalid(
            "import jax\nparams = jax.device_put_replicated(params, jax.local_devices())\n", lines=(2,),
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
                "params = _replicate(params, jax.local_devices())\n"
            ),
        ),
        # A name needs no binding; the import goes once unused.
        Invalid(
            "from jax import device_put_replicated as dpr\nimport numpy as np\nparams = dpr(p, devs)\n", lines=(3,),
            expected=(
                "import jax\n"
                "import jax.numpy as jnp\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "import numpy as np\n"
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
                "params = _replicate(p, devs)\n"
            ),
        ),
        # A Python number stays weakly typed: the branch on `jax.typeof(leaf).weak_type`.
        Invalid(
            "import jax\nimport numpy as np\nfrom jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
            "def main(devs):\n    return jax.device_put_replicated({'lr': 0.1}, devs)\n",
            lines=(5,),
            expected=(
                "import jax\n"
                "import jax.numpy as jnp\n"
                "import numpy as np\n"
                "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
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
                "def main(devs):\n"
                "    return _replicate({'lr': 0.1}, devs)\n"
            ),
        ),
        # Used as a value, or in a multi-process program: the shim's drop-in.
        Invalid(
            "import jax\nplace = [jax.device_put_replicated]\n", lines=(2,),
            expected=(
                "import jax\n"
                "\n"
                "import runtime_shim\n"
                "# pmap-migrate: kept on the legacy shim: the function is used as a value\n"
                "place = [runtime_shim.device_put_replicated]\n"
            ),
        ),
        Invalid(
            "import jax\njax.distributed.initialize()\nx = jax.device_put_replicated(p, jax.local_devices())\n",
            lines=(3,),
            expected=("import jax\n"
                "\n"
                "import runtime_shim\n"
                "jax.distributed.initialize()\n"
                "# pmap-migrate: kept on the legacy shim: a multi-process program (host-local stacks for "
                "runtime_shim.pmap)\n"
                "x = runtime_shim.device_put_replicated(p, jax.local_devices())\n"),
        ),
        # A local alias goes once its uses are rewritten.
        Invalid(
            "import jax\nimport numpy as np\ndef main(p, devs):\n    dpr = jax.device_put_replicated\n"
            "    return dpr(p, devs)\n",
            lines=(4, 5),
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
                "def main(p, devs):\n"
                "    return _replicate(p, devs)\n"
            ),
        ),
        Invalid("from jax import device_put_replicated\nparams = device_put_replicated(p, devs)\n", lines=(2,)),
        Invalid("from jax import device_put_replicated as dpr\nparams = dpr(p, devs)\n", lines=(2,)),
        Invalid("import jax as J\nparams = J.device_put_replicated(p, J.devices())\n", lines=(2,)),
        Invalid("import jax\ndpr = jax.device_put_replicated\nparams = dpr(p, devs)\n", lines=(2, 3)),
        Invalid("import jax\nplace = [jax.device_put_replicated, jax.device_put_sharded]\n", lines=(2,)),
        Invalid("import jax.api\nx = jax.api.device_put_replicated(p, devs)\n", lines=(2,)),
        Invalid(
            "import jax\nclass T:\n    def setup(self):\n"
            "        self.params = jax.device_put_replicated(self.params, jax.local_devices())\n",
            lines=(4,),
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        for reference in self.model.references(tables.DEVICE_PUT_REPLICATED, ("device_put_replicated",),
                                               follow_aliases=True):
            fix = removed_helper_fix(self.context.fixes.placement, reference, "device_put_replicated", ("x", "devices"), sharded=False)
            self.report(reference, fix=fix)
