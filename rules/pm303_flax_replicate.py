from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid

_LAST_COMPONENTS = tuple({name.rsplit(".", 1)[-1] for name in tables.FLAX_PMAP_HELPERS})


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
    No automatic fix: dropping the device axis changes every function that receives these values
    (an idiomatic rewrite of the whole data flow, offered by `fix --unsafe-fixes` where it is
    visible in one module).

    ## References
    - https://flax.readthedocs.io/en/latest/api_reference/flax.jax_utils.html
    - https://docs.jax.dev/en/latest/sharded-computation.html
    """

    CODE = "PM303"
    NAME = "flax-replicate"
    MESSAGE = "flax pmap-era helper builds a per-device stack for a pmap; use `jax.device_put` with a `NamedSharding`"
    TRIGGERS = ("flax",)

    VALID = [
        Valid("import jax\nstate = jax.device_put(state, NamedSharding(mesh, P()))\n"),
        Valid("from flax.training import train_state\nstate = train_state.TrainState.create(apply_fn=f, params=p, tx=t)\n"),
        Valid("from flax import jax_utils\nparams = jax_utils.unreplicate(state.params)\n"),
        Valid("from mylib import replicate, shard\nx = shard(replicate(y))\n"),
        Valid("import flax\ndef replicate(x):\n    return x\ny = replicate(z)\n"),
        Valid("import numpy as np\nfrom flax import linen as nn\nshard = np.split(batch, 8)\n"),
    ]
    INVALID = [
        Invalid("from flax import jax_utils\nstate = jax_utils.replicate(state)\n", lines=(2,)),
        Invalid("from flax.jax_utils import replicate\nstate = replicate(state)\n", lines=(2,)),
        Invalid("import flax\nstate = flax.jax_utils.replicate(state)\n", lines=(2,)),
        Invalid("import flax.jax_utils\nstate = flax.jax_utils.replicate(state)\n", lines=(2,)),
        Invalid("from flax.jax_utils import replicate as rep\nstate = rep(state)\n", lines=(2,)),
        Invalid("from flax.training import common_utils\nbatch = common_utils.shard(batch)\n", lines=(2,)),
        Invalid("from flax.training.common_utils import shard, shard_prng_key\nb = shard(x)\nk = shard_prng_key(key)\n",
                lines=(2, 3)),
        Invalid("from flax import jax_utils\nit = jax_utils.prefetch_to_device(batches, 2)\n", lines=(2,)),
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
                                       "with a `NamedSharding` instead of a per-device stack")
