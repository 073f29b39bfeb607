from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid


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
    ```python
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.local_devices()
    mesh = Mesh(np.array(devices), ("i",))
    batch = jax.device_put(np.stack(per_device_batches), NamedSharding(mesh, P("i")))
    ```
    (for pytrees of shards: `jax.tree.map(lambda *xs: np.stack(xs), *per_device_batches)` first).

    ## Fix safety
    No automatic fix yet. `runtime_shim.device_put_sharded` is a drop-in with the legacy result.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM302"
    NAME = "device-put-sharded"
    MESSAGE = ("`jax.device_put_sharded` was removed in jax 0.10.0; stack the shards and `jax.device_put` "
               "them with `NamedSharding(mesh, P('i'))` (or use `runtime_shim.device_put_sharded`)")
    TRIGGERS = ("device_put_sharded",)

    VALID = [
        Valid("import jax\nx = jax.device_put(batch, NamedSharding(mesh, P('i')))\n"),
        Valid("from runtime_shim import device_put_sharded\nx = device_put_sharded(shards, devs)\n"),
        Valid("import jax\nx = jax.device_put_replicated(p, devs)\n"),
        Valid("def device_put_sharded(xs, devices):\n    return xs\ny = device_put_sharded(s, d)\n"),
    ]
    INVALID = [
        Invalid("import jax\nbatch = jax.device_put_sharded(shards, jax.local_devices())\n", lines=(2,)),
        Invalid("from jax import device_put_sharded\nbatch = device_put_sharded(shards, devs)\n", lines=(2,)),
        Invalid("from jax import device_put_sharded as dps\nbatch = dps(shards, devs)\n", lines=(2,)),
        Invalid("import jax\ndps = jax.device_put_sharded\nb = dps(s, d)\n", lines=(2, 3)),
        Invalid("import jax\nplace = {'sharded': jax.device_put_sharded}\n", lines=(2,)),
        Invalid(
            "import jax\n"
            "def to_devices(batch):\n"
            "    return jax.device_put_sharded(\n        list(batch), jax.local_devices())\n",
            lines=(3,),
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        for reference in self.model.references(tables.DEVICE_PUT_SHARDED, ("device_put_sharded",),
                                               follow_aliases=True):
            self.report(reference)
