from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid
from rules.import_names import imported_names

_LAST_COMPONENTS = frozenset(entry.last for entry in tables.REMOVED_NAMES)


def removed_message(entry: tables.RemovedName, imported: str | None = None) -> str:
    """`jax.tree_map` was removed from jax; use `jax.tree.map` -- naming the replacement or what to do."""
    if imported is not None:
        imported = imported.removesuffix(".*")  # `from removed.module import *`
    if imported is not None and imported != entry.name:
        head = f"`{imported}` cannot be imported: `{entry.name}` was removed from jax"
    elif imported is not None:
        head = f"`{entry.name}` was removed from jax (the import fails)"
    else:
        head = f"`{entry.name}` was removed from jax"
    if entry.replacement is not None:
        message = f"{head}; use `{entry.replacement}`"
        return f"{message} ({entry.note})" if entry.note else message
    return f"{head}; {entry.note}"


class RemovedJaxApi(Rule):
    """Use of a jax API that pmap-era code relies on and that current jax no longer has.

    ## What it does
    Finds every name of the removed-API table (`rules/tables.py`, `REMOVED_NAMES`) however it is
    spelled: attribute access (`jax.tree_map`, `jnp.DeviceArray`, `pxla.ShardedDeviceArray`,
    `jax.lib.xla_bridge.get_backend()`), and imports (`from jax import tree_map`,
    `from jax.interpreters.pxla import ShardedDeviceArray`, `import jax.experimental.host_callback`).
    A name imported from a removed module (`from jax.lib.xla_bridge import get_compile_options`)
    is reported at the import. The table covers the tree aliases (`jax.tree_map`, `tree_leaves`,
    ...), `jax.xla_computation`, the pmap-era array types (`ShardedDeviceArray`, `DeviceArray`,
    `GlobalDeviceArray`, `KeyArray`), `PmapSharding` and the other old shardings, pmap's
    `ShardingSpec` machinery, `jax.lib.xla_bridge`, `jax.experimental.host_callback`,
    `jax.ops.index_update`, `from jax.config import config` and more, each with its replacement.

    A name used through a reported import (`tree_map(f, x)` after `from jax import tree_map`) is
    not reported again: the import is what fails. Names other rules own are left to them:
    `jax.device_put_replicated` / `device_put_sharded` (PM301/PM302), `jax.experimental.maps`
    (PM402), the experimental `shard_map` (PM401) and `pjit` (PM403).

    ## Why is this bad?
    These names raise `AttributeError` or `ImportError` on the jax releases without the legacy
    pmap (0.10 and later); most were gone even earlier. Code that still names them cannot be
    imported or crashes on first use after an upgrade.

    ## Example
    ```python
    import jax
    from jax.interpreters.pxla import ShardedDeviceArray

    def unstack(tree):
        return jax.tree_map(lambda x: x[0] if isinstance(x, ShardedDeviceArray) else x, tree)
    ```

    ## Use instead
    ```python
    import jax

    def unstack(tree):
        return jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) else x, tree)
    ```

    ## Fix safety
    Report only for now. Renames whose replacement is the same function (`jax.tree_map` ->
    `jax.tree.map`, `xla_bridge.device_count` -> `jax.device_count`) are candidates for a safe fix;
    names without a drop-in (`jax.xla_computation`, `ShardingSpec`, `jax.ops.index_update`) need
    a manual edit, described in the message. Uses under `if hasattr(jax, ...)`, a jax version
    test, or `try: ... except (ImportError, AttributeError)` are compatibility code and not reported.

    ## References
    - https://docs.jax.dev/en/latest/changelog.html
    - https://docs.jax.dev/en/latest/jax.tree.html
    - https://docs.jax.dev/en/latest/jax_array_migration.html
    - https://docs.jax.dev/en/latest/external-callbacks.html
    """

    CODE = "PM404"
    NAME = "removed-jax-api"
    MESSAGE = ("a jax API removed by current jax (e.g. `jax.tree_map` -> `jax.tree.map`, "
               "`ShardedDeviceArray` -> `jax.Array`); each finding names its replacement")
    TRIGGERS = tuple(sorted({t for entry in tables.REMOVED_NAMES for t in entry.text_triggers}))

    VALID = [
        Valid("import jax\nout = jax.tree.map(f, tree)\nleaves = jax.tree.leaves(tree)\n"),
        Valid("import jax\nout = jax.tree_util.tree_map(f, tree)\n"),
        Valid("from jax.tree_util import tree_map, tree_leaves\nout = tree_map(f, tree)\n"),
        # A local function that happens to share a removed name.
        Valid("def tree_map(f, tree):\n    return [f(x) for x in tree]\nout = tree_map(g, xs)\n"),
        Valid("import optree\nout = optree.tree_map(f, tree)\n"),
        Valid("import jax\nisinstance(x, jax.Array)\n"),
        Valid("import jax.numpy as jnp\nx = jnp.ndarray\n"),
        Valid("import jax\nsharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('i'))\n"),
        Valid("from jax import config\nconfig.update('jax_enable_x64', True)\n"),
        Valid("import jax\njax.config.update('jax_enable_x64', True)\n"),
        Valid("import jax\nbackend = jax.extend.backend.get_backend()\nn = jax.device_count()\n"),
        Valid("import jax\njax.debug.callback(print, x)\n"),
        Valid("import jax\nhost = jax.process_index()\n"),
        Valid("import jax\nx = x.at[0].set(1.0)\n"),
        Valid("import jax\ntotal = jax.ops.segment_sum(data, ids, num_segments=4)\n"),
        Valid("from jax.interpreters import pxla\nenv = pxla.thread_resources\n"),
        Valid("from jax.example_libraries import optimizers, stax\n"),
        Valid("from jax import *\nfrom jax.tree_util import *\nfrom .jax import tree_map\n"),
        # Other rules own these: PM301/PM302, PM402, PM401, PM403, PM101.
        Valid("import jax\nxs = jax.device_put_replicated(x, jax.local_devices())\n"),
        Valid("from jax.experimental.maps import Mesh\nimport jax\nm = jax.experimental.maps.Mesh(d, ('i',))\n"),
        Valid("from jax.experimental.shard_map import shard_map\nfrom jax.experimental.pjit import pjit\n"),
        Valid("import jax\nstep = jax.api.pmap(f)\nxs = jax.api.device_put_sharded(shards, devices)\n"),
        # Compatibility code for old and new jax.
        Valid(
            "try:\n"
            "    from jax import tree_map\n"
            "except ImportError:\n"
            "    from jax.tree_util import tree_map\n"
        ),
        Valid(
            "import jax\n"
            "if hasattr(jax, 'tree_map'):\n"
            "    out = jax.tree_map(f, tree)\n"
            "else:\n"
            "    out = jax.tree.map(f, tree)\n"
        ),
        Valid("import jax\nname = 'jax.tree_map'\n# jax.tree_map(f, x)\n"),
    ]
    INVALID = [
        Invalid("import jax\nout = jax.tree_map(f, tree)\n", lines=(2,)),
        Invalid("import jax as J\nout = J.tree_multimap(f, a, b)\n", lines=(2,)),
        Invalid("import jax.tree_util as tu\nout = tu.tree_multimap(f, a, b)\n", lines=(2,)),
        # The import fails: the import is reported, not each later use.
        Invalid("from jax import tree_map, tree_leaves\nout = tree_map(f, tree)\nn = len(tree_leaves(tree))\n",
                lines=(1, 1)),
        Invalid("from jax import tree_flatten as flatten\nleaves, treedef = flatten(tree)\n", lines=(1,)),
        Invalid(
            "import jax\n"
            "leaves = jax.tree_leaves(tree)\n"
            "treedef = jax.tree_structure(tree)\n"
            "tree2 = jax.tree_unflatten(treedef, leaves)\n"
            "t = jax.tree_transpose(outer, inner, tree)\n",
            lines=(2, 3, 4, 5),
        ),
        Invalid("import jax\nhlo = jax.xla_computation(f)(x).as_hlo_text()\n", lines=(2,)),
        Invalid("from jax.interpreters.pxla import ShardedDeviceArray\n", lines=(1,)),
        Invalid("from jax.interpreters import pxla\nisinstance(x, pxla.ShardedDeviceArray)\n", lines=(2,)),
        Invalid("import jax\nisinstance(x, jax.interpreters.pxla.ShardedDeviceArray)\n", lines=(2,)),
        Invalid("import jax.numpy as jnp\ndef f(x: jnp.DeviceArray) -> jnp.DeviceArray:\n    return x\n",
                lines=(2, 2)),
        Invalid("import jax\nkey: jax.random.KeyArray = jax.random.PRNGKey(0)\n", lines=(2,)),
        Invalid("import jax\ns = jax.sharding.PmapSharding.default((8,), 0)\n", lines=(2,)),
        Invalid("from jax.sharding import PmapSharding, NamedSharding\n", lines=(1,)),
        Invalid("from jax.experimental import PartitionSpec as P\nspec = P('data')\n", lines=(1,)),
        Invalid("from jax.experimental.pjit import pjit, with_sharding_constraint\n", lines=(1,)),
        Invalid("from jax.experimental import pjit\ny = pjit.with_sharding_constraint(x, spec)\n", lines=(2,)),
        Invalid("from jax.experimental.global_device_array import GlobalDeviceArray\n", lines=(1,)),
        Invalid("import jax.experimental.global_device_array as gda\n", lines=(1,)),
        Invalid("from jax.interpreters import pxla\nspec = pxla.ShardingSpec(sharding=s, mesh_mapping=m)\n",
                lines=(2,)),
        Invalid("from jax.lib import xla_bridge\nprint(xla_bridge.get_backend().platform)\n", lines=(1, 2)),
        Invalid("import jax\nplatform = jax.lib.xla_bridge.get_backend().platform\n", lines=(2,)),
        # A name without its own entry is reported through its removed module, once per chain.
        Invalid("import jax\nopts = jax.lib.xla_bridge.get_compile_options(1, 1)\n", lines=(2,)),
        Invalid("from jax.lib.xla_bridge import get_compile_options\n", lines=(1,)),
        Invalid("from jax.lib.xla_bridge import *\n", lines=(1,)),
        Invalid("import jax\nn = jax.lib.xla_bridge.device_count()\n", lines=(2,)),
        Invalid(
            "import jax.experimental.host_callback as hcb\n"
            "hcb.id_tap(lambda x, t: print(x), y)\n"
            "hcb.barrier_wait()\n",
            lines=(1, 2, 3),
        ),
        Invalid("from jax.experimental.host_callback import id_print\n", lines=(1,)),
        Invalid("from jax.config import config\nconfig.update('jax_enable_x64', True)\n", lines=(1,)),
        Invalid("from jax.ops import index_update, index\nx = index_update(x, index[0], 1.0)\n", lines=(1, 1)),
        Invalid("import jax\nx = jax.ops.index_add(x, jax.ops.index[0], 1.0)\n", lines=(2, 2)),
        Invalid("from jax import ops\nidx = ops.index[0]\n", lines=(2,)),
        Invalid("from jax.experimental import optimizers\n", lines=(1,)),
        Invalid("import jax.linear_util as lu\n", lines=(1,)),
        Invalid("from jax import lax\ny = lax.tie_in(x, y)\n", lines=(2,)),
        Invalid("from jax.api import jit\n", lines=(1,)),
        Invalid("import jax.api\nstep = jax.api.jit(f)\n", lines=(1, 2)),
        # Imports guarded by a narrower except clause are not compatibility code.
        Invalid("try:\n    from jax import tree_map\nexcept KeyError:\n    pass\n", lines=(2,)),
    ]

    def visit_Import(self, node: cst.Import) -> None:
        self._check_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._check_import(node)

    def _check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            entry = tables.removed_entry(full)
            if entry is not None and full not in tables.REPORTED_BY_OTHER_RULES:
                self.report(alias, removed_message(entry, imported=full))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value not in _LAST_COMPONENTS:
            return
        entry = self._entry(node)
        if entry is None:
            return
        # One finding per chain, on its most specific removed name: `jax.lib.xla_bridge.devices`
        # reports `devices`, not also `jax.lib.xla_bridge`; chains other rules own stay theirs.
        child: cst.CSTNode = node
        parent = self.model.parent(node)
        while isinstance(parent, cst.Attribute) and parent.value is child:
            names = self.model.qualified_names(parent)
            if not names.isdisjoint(tables.REPORTED_BY_OTHER_RULES):
                return
            if parent.attr.value in _LAST_COMPONENTS and not names.isdisjoint(tables.REMOVED_BY_NAME):
                return
            child, parent = parent, self.model.parent(parent)
        self.report(node, removed_message(entry))

    def _entry(self, node: cst.Attribute) -> tables.RemovedName | None:
        for name in sorted(self.model.qualified_names(node)):
            entry = tables.REMOVED_BY_NAME.get(name)
            if entry is not None:
                return entry
        return None
