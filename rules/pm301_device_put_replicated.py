from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid


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
    The faithful equivalent (same stacked shape), one `device_put` for the whole tree:
    ```python
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.local_devices()
    mesh = Mesh(np.array(devices), ("i",))
    params = jax.device_put(jax.tree.map(lambda x: np.stack([x] * len(devices)), params),
                            NamedSharding(mesh, P("i")))
    ```
    or, once the pmap is migrated, no device axis at all:
    `jax.device_put(params, NamedSharding(mesh, P()))`.

    ## Fix safety
    No automatic fix yet. `runtime_shim.device_put_replicated` is a drop-in with the legacy
    result.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM301"
    NAME = "device-put-replicated"
    MESSAGE = ("`jax.device_put_replicated` was removed in jax 0.10.0; use `jax.device_put` with a "
               "`NamedSharding` (or `runtime_shim.device_put_replicated`)")
    TRIGGERS = ("device_put_replicated",)

    VALID = [
        Valid("import jax\nx = jax.device_put(params, sharding)\n"),
        Valid("from runtime_shim import device_put_replicated\nx = device_put_replicated(p, devs)\n"),
        Valid("def device_put_replicated(x, devices):\n    return x\ny = device_put_replicated(p, d)\n"),
        Valid("import jax\nname = 'jax.device_put_replicated'\n"),
        Valid("import jax\nx = jax.device_put_sharded(shards, devs)\n"),
    ]
    INVALID = [
        Invalid("import jax\nparams = jax.device_put_replicated(params, jax.local_devices())\n", lines=(2,)),
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
            self.report(reference)
