from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.pmap_render import shard_mapped_helper
from pmap_migrate.rules.fixes.shared import global_pmap_helper, to_global_helper
from pmap_migrate.rules.knowledge import gates

# The shared helpers of the global-mesh rewrite as the fix writes them in a module of no package (the
# expected outputs of the examples below); in a package, they are imported from its `_pmap_compat`.
_GLOBAL_PMAP = global_pmap_helper("    ")
_MESH_HELPERS = to_global_helper("    ")
# (`_global_pmap`'s own copy passes on every option it takes)
_SHARD_MAPPED = shard_mapped_helper("_shard_mapped", "    ", frozenset({"axes", "devices", "processes", "static"}))


class HostLocalInput(Rule):
    """A pmap in a multi-process program, whose inputs are host-local arrays.

    ## What it does
    Reports every pmap site of a module that also uses multi-process APIs: `jax.process_index()`,
    `jax.process_count()`, `jax.host_id()`, `jax.host_count()`, anything in `jax.distributed`
    (`jax.distributed.initialize()`) or in `jax.experimental.multihost_utils`, however imported.
    Such a module's calls of a function that another module of the project pmaps
    (`steps.p_double(x)`) are reported too, where that module does not use those APIs (no fix
    here: the pmap's own module is where it changes). `fix` finds the multi-process programs of
    the project (every Python file and notebook under its root, files outside the run included)
    that name a function another module pmaps, or one of that module's functions returning their
    outputs, and fixes that module as one of theirs: its pmaps are written for every process, as
    below. A pmap already rewritten for one process (`jax.jit(_shard_mapped(f, "i"))`, which raises
    on several) is still reported at such a call.

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
    A global mesh over every process's devices, in legacy pmap's order (process by process, each
    process's local devices in order); this process's rows made global arrays; outputs kept global
    and read back as this process's rows:
    ```python
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.distributed.initialize()
    devices = [d for p in range(jax.process_count()) for d in jax.local_devices(p)]
    mesh = Mesh(np.array(devices), ("batch",))
    rows = NamedSharding(mesh, P("batch"))
    batch = jax.make_array_from_process_local_data(rows, local_batch)
    state = jax.jit(jax.shard_map(jax.vmap(train_step, axis_name="batch"), mesh=mesh,
                                  in_specs=P("batch"), out_specs=P("batch"), check_vma=False))(state, batch)
    loss0 = loss.addressable_shards[0].data.squeeze(0)  # legacy `loss[0]`: this process's first row
    local = multihost_utils.global_array_to_host_local_array(state, mesh, P("batch"))  # legacy `state`
    ```

    ## Fix safety
    Where the module's data flow is visible, the fix (also PM101's) rewrites every such pmap at once
    to plain JAX that computes what legacy pmap computed (safe): under the pmapped function's name,
    `_global_pmap(f, axis, ..., local=False)` (pmap's call renamed, its arguments as written), the
    faithful `jax.jit(jax.shard_map(...))` over the first rows of each process's devices (process
    by process), called with this process's rows made global arrays
    (`jax.make_array_from_process_local_data`; global arrays, outputs fed back, pass through); the
    helpers are written once per package. Outputs stay global arrays where the program only reads
    rows of them or passes them straight to a rewritten pmap: `out[k]` becomes
    `out.addressable_shards[k].data.squeeze(0)` (this process's row k; also on a leaf,
    `metrics["loss"][0]`, on the call, `step(x)[0]`, inside `tree_map(lambda v: v[0], out)` and
    flax `unreplicate(out)`). On one process the same code is the
    single-process pmap: the first n devices.

    The data flow is visible when the pmapped function is bound to a name that is only ever called
    (not stored on `self`, passed as a value, nor a public module-level name of a library module;
    a script or a module that calls `jax.distributed.initialize()` at module level is a program),
    and no output is updated in place (`out += 1`), read whole (`print(out.shape)`) or read in code
    that may be traced. Where it is not, the pmap gets the boundary form, `_global_pmap(f, axis,
    ...)` (local, its default): it takes and returns this process's rows (the global result
    made host-local, no copy), so callers and reads stay as they are (row reads still read the
    device's own row), and it raises when called with traced values. Calls seen to be traced (in a lambda or function handed to a `jax.*`
    callable or decorated by one; a call that only may be, in a method, a function with a decorator
    of its own, a callback, gets the boundary form), options that are not literals (but for the
    axis name, static positions and `devices=`, passed as written), `backend=`, `axis_size=`,
    pytree `in_axes` prefixes, and an `in_axes=None` argument from callers not seen (it must be a Python or NumPy
    value: jit takes it on every process as it is) keep the shim: PM101's fix routes such a site to
    `runtime_shim.pmap` and says why; this finding then carries that fix (nothing to edit here:
    the shim takes host-local arrays as legacy pmap did). The placement rules
    still swap `device_put_replicated` / `device_put_sharded` for the shim's drop-ins in these
    modules (their host-local stacks are valid inputs of the rewritten pmaps).

    ## References
    - https://docs.jax.dev/en/latest/multi_process.html
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    """

    CODE = "PM501"
    NAME = "host-local-input"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("pmap in a multi-process program: its inputs and outputs are host-local arrays, converted to and "
               "from global arrays on every call by the new pmap; build global arrays with "
               "`jax.make_array_from_process_local_data`")
    TRIGGERS = gates.PM501.TRIGGERS
    NAMES = gates.PM501.NAMES
    CONTEXT_NAMES = gates.PM501.CONTEXT_NAMES

    VALID = [
        Valid("import jax\nstep = jax.pmap(f)\nn = jax.local_device_count()\n"),
        Valid("import jax\njax.distributed.initialize()\nstep = jax.jit(f)\n"),
        Valid("import jax\nstep = jax.pmap(f)\ndef process_index():\n    return 0\ni = process_index()\n"),
        Valid("import jax\nstep = jax.pmap(f)\nname = 'jax.process_index'\n"),
        Valid("import jax\nstep = jax.pmap(f)\nfrom mylib import distributed\ndistributed.initialize()\n"),
    ]
    INVALID = [
        Invalid("import jax\njax.distributed.initialize()\nstep = jax.pmap(f)\n", lines=(3,)),
        # `backend=`: PM101's fix routes the site to the shim, and this finding has no fix of its own
        Invalid("import jax\njax.distributed.initialize()\nstep = jax.pmap(f, backend='cpu')\n", lines=(3,)),
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
        Invalid(
            ("import functools\n"
             "import jax\n"
             "\n"
             "jax.distributed.initialize()\n"
             "\n"
             "\n"
             "@functools.partial(jax.pmap, axis_name=\"batch\")\n"
             "def step(x):\n"
             "    return jax.lax.psum(x * x, \"batch\")\n"
             "\n"
             "\n"
             "total = step(xs)\n"
             "print(total[0])\n"),
            lines=(7,),
            expected=((
                "import functools\n"
                "import jax\n"
                "import jax.numpy as jnp\n"
                "from jax.experimental import multihost_utils\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                )
                + _GLOBAL_PMAP
                + (
                "\n"
                "\n"
                )
                + _MESH_HELPERS
                + (
                "\n"
                "\n"
                )
                + _SHARD_MAPPED
                + (
                "\n"
                "\n"
                "jax.distributed.initialize()\n"
                "\n"
                "\n"
                "@functools.partial(_global_pmap, axis_name=\"batch\", local=False)\n"
                "def step(x):\n"
                "    return jax.lax.psum(x * x, \"batch\")\n"
                "\n"
                "\n"
                "total = step(xs)\n"
                "print(total.addressable_shards[0].data.squeeze(0))\n"
                )),
        ),
        Invalid(
            ("import jax\n"
             "\n"
             "class Trainer:\n"
             "    def __init__(self):\n"
             "        self.step = jax.pmap(f, axis_name=\"i\")\n"
             "\n"
             "n = jax.process_count()\n"),
            lines=(5,),
            expected=((
                "import functools\n"
                "\n"
                "import jax\n"
                "import jax.numpy as jnp\n"
                "from jax.experimental import multihost_utils\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                )
                + _GLOBAL_PMAP
                + (
                "\n"
                "\n"
                )
                + _MESH_HELPERS
                + (
                "\n"
                "\n"
                )
                + _SHARD_MAPPED
                + (
                "\n"
                "\n"
                "class Trainer:\n"
                "    def __init__(self):\n"
                "        self.step = _global_pmap(f, \"i\")\n"
                "\n"
                "n = jax.process_count()\n"
                )),
        ),
        Invalid(
            ("import jax\n"
             "import numpy as np\n"
             "\n"
             "jax.distributed.initialize()\n"
             "step = jax.pmap(f, axis_name=\"i\")\n"
             "out = np.zeros((4,))\n"
             "for x in batches:\n"
             "    out = step(x)\n"
             "print(out.shape)\n"),
            lines=(5,),
            expected=((
                "import functools\n"
                "\n"
                "import jax\n"
                "import jax.numpy as jnp\n"
                "import numpy as np\n"
                "from jax.experimental import multihost_utils\n"
                "from jax.sharding import Mesh, NamedSharding\n"
                "from jax.sharding import PartitionSpec as P\n"
                "\n"
                "\n"
                )
                + _GLOBAL_PMAP
                + (
                "\n"
                "\n"
                )
                + _MESH_HELPERS
                + (
                "\n"
                "\n"
                )
                + _SHARD_MAPPED
                + (
                "\n"
                "\n"
                "jax.distributed.initialize()\n"
                "step = _global_pmap(f, \"i\")\n"
                "out = np.zeros((4,))\n"
                "for x in batches:\n"
                "    out = step(x)\n"
                "print(out.shape)\n"
                )),
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        self._unfixed: list[cst.CSTNode] = []  # reported at the end, once every pmap's fix is known
        sites = self.model.pmap_sites()
        external = self.model.external_calls()
        if not (sites or external) or not self.model.multi_process():
            return
        for site in sites:
            fix = self.context.fixes.global_fix(site)
            if fix is None:
                self._unfixed.append(site.node)
            else:
                self.report(site.node, fix=fix)
        for call, site in external.items():
            message = _external_message(site)
            if message is not None:
                self.report(call, message)

    def leave_Module(self, original_node: cst.Module) -> None:
        for node in self._unfixed:
            self.report(node, fix=self.with_shimmed_pmaps([node], "the host-local inputs and outputs"))


def _external_message(site: TransformSite) -> str | None:
    """What a multi-process module's call of a function another module pmaps (``site``: its
    external site) is told, unless that module writes it for every process's devices (its own
    PM501 finding and fix, or their result): the data flow crosses the modules, and the fix of the
    other module does not see this program."""
    name = site.callee.via[0] if site.callee.via else "it"
    if site.transform == PMAP and not site.processes:
        return (f"pmap in a multi-process program, through `{name}` (pmapped in `{site.origin}`): its inputs and "
                f"outputs are this process's rows (host-local arrays); `fix` of `{site.origin}` writes it for every "
                "process (the global-mesh rewrite) when this program is among the project's files, else for one "
                "process, which raises on several")
    if site.rows and not site.processes:
        return (f"`{name}` (`{site.origin}`) is a pmap rewritten for one process, called in a multi-process "
                "program: it raises on several processes; put that pmap on `runtime_shim.pmap`, or write it for "
                "every process (`_global_pmap(f, axis)`, which takes and returns this process's rows)")
    return None
