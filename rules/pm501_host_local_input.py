from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid


class HostLocalInput(Rule):
    """A pmap in a multi-process program, whose inputs are host-local arrays.

    ## What it does
    Reports every pmap site of a module that also uses multi-process APIs: `jax.process_index()`,
    `jax.process_count()`, `jax.host_id()`, `jax.host_count()`, anything in `jax.distributed`
    (`jax.distributed.initialize()`) or in `jax.experimental.multihost_utils`, however imported.

    ## Why is this bad?
    In a multi-process program each process passes pmap its own `local_device_count()` slices and
    gets host-local arrays back. The new pmap is a `jit(shard_map)` over a global mesh, so on every
    call it converts host-local inputs to global arrays and the outputs back, a round trip the
    legacy pmap never made. A faithful rewrite has to build the global array explicitly.

    ## Example
    ```python
    import jax

    jax.distributed.initialize()
    step = jax.pmap(train_step, axis_name="batch")
    state = step(state, local_batch)
    ```

    ## Use instead
    ```python
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.distributed.initialize()
    mesh = Mesh(jax.devices(), ("batch",))  # every process's devices
    batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), local_batch)
    state = jax.jit(jax.shard_map(jax.vmap(train_step, axis_name="batch"), mesh=mesh,
                                  in_specs=P("batch"), out_specs=P("batch"), check_vma=False))(state, batch)
    ```

    ## Fix safety
    No fix of its own: PM101's fix routes every pmap of such a module to `runtime_shim.pmap`, which
    keeps the legacy host-local semantics (the plain `jax.jit(jax.shard_map)` form maps over this
    process's devices only, so it would reduce per process). The placement fixes hold back there
    too: `device_put_replicated` / `device_put_sharded` become the shim's drop-ins, and `out[0]` /
    `unreplicate` are not rewritten. A global-mesh rewrite (`Mesh(jax.devices(), ...)` and
    `jax.make_array_from_process_local_data` at every call, the outputs converted back where they
    are read) is not offered: where host-local data becomes global is a decision about the
    program's input pipeline.

    ## References
    - https://docs.jax.dev/en/latest/multi_process.html
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    """

    CODE = "PM501"
    NAME = "host-local-input"
    MESSAGE = ("pmap in a multi-process program: its inputs and outputs are host-local arrays, converted to and "
               "from global arrays on every call by the new pmap; build global arrays with "
               "`jax.make_array_from_process_local_data`")
    TRIGGERS = ("pmap",)

    VALID = [
        Valid("import jax\nstep = jax.pmap(f)\nn = jax.local_device_count()\n"),
        Valid("import jax\njax.distributed.initialize()\nstep = jax.jit(f)\n"),
        Valid("import jax\nstep = jax.pmap(f)\ndef process_index():\n    return 0\ni = process_index()\n"),
        Valid("import jax\nstep = jax.pmap(f)\nname = 'jax.process_index'\n"),
        Valid("import jax\nstep = jax.pmap(f)\nfrom mylib import distributed\ndistributed.initialize()\n"),
    ]
    INVALID = [
        Invalid("import jax\njax.distributed.initialize()\nstep = jax.pmap(f)\n", lines=(3,)),
        Invalid(
            "import jax\n@jax.pmap\ndef step(x):\n    return x\n"
            "if jax.process_index() == 0:\n    print('chief')\n"
            "other = jax.pmap(g, axis_name='i')\n",
            lines=(2, 7),
        ),
        Invalid("import jax\nstep = jax.pmap(f)\nn = jax.process_count()\n", lines=(2,)),
        Invalid("import jax\nstep = jax.pmap(f)\nhost = jax.host_id()\n", lines=(2,)),
        Invalid("from jax import process_index\nimport jax\nstep = jax.pmap(f)\ni = process_index()\n", lines=(3,)),
        Invalid("import jax\nfrom jax.experimental import multihost_utils\nstep = jax.pmap(f)\n"
                "multihost_utils.sync_global_devices('done')\n", lines=(3,)),
        Invalid("import jax\nfrom jax.experimental.multihost_utils import process_allgather\nstep = jax.pmap(f)\n"
                "g = process_allgather(x)\n", lines=(3,)),
        Invalid("import jax\nimport jax.experimental.multihost_utils as mhu\nstep = jax.pmap(f)\nmhu.broadcast_one_to_all(x)\n",
                lines=(3,)),
        Invalid("import jax\nstep = jax.pmap(f)\njax.distributed.shutdown()\n", lines=(2,)),
        Invalid("import jax\nfrom jax import distributed\nstep = jax.pmap(f)\ndistributed.initialize()\n", lines=(3,)),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        sites = self.model.pmap_sites()
        if sites and self.model.uses_any(tables.MULTI_PROCESS, tables.MULTI_PROCESS_PREFIXES):
            for site in sites:
                self.report(site.node)
