from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.imports import imported_names
from pmap_migrate.rules.base import Fixable, ImportRule, Invalid, Valid
from pmap_migrate.rules.fixes.api import (
    FixParts,
    Unfixable,
    alias_index,
    import_reads,
    in_annotation,
    isinstance_class,
    parenthesized,
    qualified_expression,
    reads_summary,
    rename_to,
    replace_dotted_import,
    replace_expression,
    rewrite_import,
    rewrite_import_from,
    rewrite_reads,
)
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.spec import Edit, FixSpec
from pmap_migrate.rules.knowledge import gates, tables

_LAST_COMPONENTS = frozenset(entry.last for entry in tables.REMOVED_NAMES)
# Replacements that are types: in an annotation the rename means exactly what the old name meant.
_SAFE_IN_ANNOTATIONS = frozenset({"jax.Array", "jax.sharding.Sharding"})
_XLA_COMPUTATION = "jax.xla_computation"
_TIE_IN = "jax.lax.tie_in"
# Where an expression stands whole (no operator around it): no parentheses needed.
_WHOLE_EXPRESSION = (cst.Return, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Arg, cst.Element, cst.Expr, cst.Index)


def new_name(entry: tables.RemovedName, full: str) -> str | None:
    """What ``full`` (the entry's name, or a name inside the entry's module) becomes, if the
    entry may be renamed by a fix."""
    if entry.rename is None or entry.replacement is None:
        return None
    return entry.replacement + full[len(entry.name):]


def removed_message(entry: tables.RemovedName, imported: str | None = None) -> str:
    """`jax.tree_map` was removed from jax; use `jax.tree.map` -- naming the replacement or what to do."""
    if imported is not None:
        imported = imported.removesuffix(".*")  # `from removed.module import *`
    # (a name jax 0.10.2 still has is gone from the newest jax only)
    removed = "was removed from jax after 0.10.2" if entry.absent_in == "0.12" else "was removed from jax"
    if imported is not None and imported != entry.name:
        head = f"`{imported}` cannot be imported: `{entry.name}` {removed}"
    elif imported is not None:
        head = f"`{entry.name}` {removed} (the import fails)"
    else:
        head = f"`{entry.name}` {removed}"
    if entry.replacement is not None:
        message = f"{head}; use `{entry.replacement}`"
        return f"{message} ({entry.note})" if entry.note else message
    return f"{head}; {entry.note}"


class RemovedJaxApi(ImportRule):
    """Use of a jax API that pmap-era code relies on and that current jax no longer has.

    ## What it does
    Finds every name of the removed-API table (`REMOVED_NAMES` in `runtime_shim/removed_api.py`, which
    `runtime_shim.install()` reads too) however it is spelled: attribute access (`jax.tree_map`,
    `jnp.DeviceArray`, `pxla.ShardedDeviceArray`, `jax.lib.xla_bridge.get_backend()`), and imports
    (`from jax import tree_map`,
    `from jax.interpreters.pxla import ShardedDeviceArray`, `import jax.experimental.host_callback`).
    A name imported from a removed module (`from jax.lib.xla_bridge import get_compile_options`)
    is reported at the import. The table covers the tree aliases (`jax.tree_map`, `tree_leaves`,
    ...), `jax.xla_computation`, the pmap-era array types (`ShardedDeviceArray`, `DeviceArray`,
    `GlobalDeviceArray`, `KeyArray`), `PmapSharding` and the other old shardings, pmap's
    `ShardingSpec` machinery, `jax.lib.xla_bridge`, `jax.experimental.host_callback`,
    `jax.ops.index_update`, `from jax.config import config`, what jax 0.10.0 removed with the
    legacy pmap (its machinery in `jax.interpreters.pxla`: `parallel_callable`, `PmapExecutable`,
    `MapTracer`, `shard_args`; `jax.ad_checkpoint.checkpoint` / `remat`, `jax.core.get_aval` and
    other `jax.core` internals, `jax.lax.pvary`, `jnp.fix`, `jax.scipy.special.sph_harm`), what jax
    0.11.0 removed (35 more `jax.core` internals such as `valid_jaxtype`, `new_jaxpr_eqn`,
    `check_jaxpr`, most of them now in `jax.extend.core`; the mesh machinery left in
    `jax.interpreters.pxla`: `MeshExecutable`, `op_sharding_to_indices`, ...; the
    `jax.cloud_tpu_init` module) and more, each with its replacement.

    A name used through a reported import (`tree_map(f, x)` after `from jax import tree_map`) is
    not reported again: the import is what fails. Names other rules own are left to them:
    `jax.device_put_replicated` / `device_put_sharded` (PM301/PM302), `jax.experimental.maps`
    (PM402), the experimental `shard_map` (PM401) and `pjit` (PM403).

    ## Why is this bad?
    These names raise `AttributeError` or `ImportError` on the jax releases without the legacy pmap
    (0.10 and later; those removed in 0.11.0 only warn on 0.10); most were gone even earlier. Code
    that still names them cannot be imported or crashes on first use after an upgrade.

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
    Each table entry says whether its replacement may be substituted (`rename` in
    `runtime_shim/removed_api.py`). Safe: the same function under its new name (`jax.tree_map` ->
    `jax.tree.map` and the other tree aliases, `xla_bridge.get_backend` ->
    `jax.extend.backend.get_backend`, `xla_bridge.device_count` -> `jax.device_count`, the
    experimental `PartitionSpec`, `from jax.config import config` -> `from jax import config`, the
    moved `optimizers` / `stax` modules, `jax.core.get_aval` -> `jax.typeof`, and
    `jax.ad_checkpoint.checkpoint` / `remat` -> `jax.checkpoint` / `jax.remat`, wrappers that pass
    every argument the old functions took to them, ...). A from-import of a name that kept its
    name elsewhere is imported from the new module (`from jax.sharding import PartitionSpec as
    P`); otherwise its uses are rewritten (`tree_map(f, x)` -> `jax.tree.map(f, x)`) and the
    import goes once unused, as does an unused import of a removed name. `lax.tie_in(x, y)` becomes `y`.
    Unsafe: the old array types (`ShardedDeviceArray`, `DeviceArray`, `KeyArray`, ...) ->
    `jax.Array` outside annotations (isinstance checks accept every array now),
    `jax.xla_computation(f)(*args)` -> `jax.jit(f).lower(*args).compiler_ir("hlo")` (the same
    XlaComputation type; module name and details differ), the `jax.api` / `jax.linear_util`
    module moves, `jnp.fix` -> `jnp.trunc` (assumes no `out=`). A removed class without a
    replacement tested by `isinstance` (`isinstance(x.sharding, jax.sharding.PmapSharding)`) is
    looked up where it is tested, `getattr(jax.sharding, "PmapSharding", ())`: the same test where
    jax has it, false where it was removed (safe); not a class that moved (`jax.core.DropVar`, now
    `jax.extend.core.DropVar`, which 0.7.2 lacks), whose objects are still instances. No fix, with
    the manual route in the message: other uses of `PmapSharding` and the other old shardings,
    `ShardingSpec`, `host_callback`,
    `jax.ops.index_update` & co., `xla_computation` with other options, the pmap machinery,
    `pvary` (its replacement `pcast` is not in 0.7.2), `sph_harm` (arguments reorder). Uses under
    `if hasattr(jax, ...)`, a jax version test (`jax.__version__`, or a call naming the package:
    `version("jax")`), or `try: ... except (ImportError, AttributeError)` are compatibility code and
    not reported.

    ## References
    - https://docs.jax.dev/en/latest/changelog.html
    - https://docs.jax.dev/en/latest/jax.tree.html
    - https://docs.jax.dev/en/latest/jax_array_migration.html
    - https://docs.jax.dev/en/latest/external-callbacks.html
    """

    CODE = "PM404"
    NAME = "removed-jax-api"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("a jax API removed by current jax (e.g. `jax.tree_map` -> `jax.tree.map`, "
               "`ShardedDeviceArray` -> `jax.Array`); each finding names its replacement")
    TRIGGERS = gates.PM404.TRIGGERS
    NAMES = gates.PM404.NAMES

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
        # A version test naming the package (netket's own helper, importlib.metadata).
        Valid(
            "import jax\nfrom mylib import module_version\n"
            "def pcast(x, axis_name):\n"
            "    if module_version('jax') < (0, 8, 2):\n"
            "        return jax.lax.pvary(x, axis_name)\n"
            "    return jax.lax.pcast(x, axis_name, to='varying')\n"
        ),
        Valid(
            "import importlib.metadata\nimport jax\n"
            "if importlib.metadata.version(\"jax\") < \"0.4.26\":\n"
            "    out = jax.tree_map(f, tree)\n"
        ),
        # The version of the module itself (netket), or a name holding a version test (kfac-jax).
        Valid(
            "import jax\nfrom mylib import module_version\n"
            "if module_version(jax) >= (0, 10):\n"
            "    from jax.extend.core import concrete_or_error\n"
            "else:\n"
            "    from jax.core import concrete_or_error\n"
        ),
        Valid(
            "import jax\n"
            "jax_version = (\n"
            "    jax.__version_info__ if hasattr(jax, '__version_info__')\n"
            "    else tuple(map(int, jax.__version__.split('.'))))\n"
            "if jax_version >= (0, 10, 0):\n"
            "    gensym = jax.extend.core.gensym\n"
            "else:\n"
            "    gensym = jax.core.gensym\n"
        ),
    ]
    INVALID = [
        # Removed with the legacy pmap in 0.10.0: checkpoint's old home, a jax.core alias, jnp.fix.
        Invalid("from jax.ad_checkpoint import checkpoint\nf = checkpoint(g, policy=p)\n", lines=(1,),
                expected="from jax import checkpoint\nf = checkpoint(g, policy=p)\n"),
        Invalid("import jax\naval = jax.core.get_aval(x)\n", lines=(2,),
                expected="import jax\naval = jax.typeof(x)\n"),
        Invalid("import jax.numpy as jnp\ny = jnp.fix(x)\n", lines=(2,),  # unsafe: assumes no out=
                expected="import jax.numpy as jnp\ny = jnp.trunc(x)\n"),
        Invalid("import jax\ny = jax.numpy.fix(x)\n", lines=(2,),
                expected="import jax\ny = jax.numpy.trunc(x)\n"),
        Invalid("from jax.interpreters import pxla\nrun = pxla.parallel_callable(f, *args)\n", lines=(2,),
                expected="from jax.interpreters import pxla\nrun = pxla.parallel_callable(f, *args)\n"),
        Invalid("import jax\nimport jax.numpy as jnp\ny = jax.lax.pvary(jnp.ones(3), 'i')\n", lines=(3,)),
        # Removed in jax 0.11.0 (still in 0.10.2).
        Invalid("import jax\nnew = jax.device_count() > 1\nif new:\n    v = jax.core.gensym()\n", lines=(4,)),
        Invalid("import jax\nif isinstance(x, int) and True:\n    v = jax.core.gensym()\n", lines=(3,)),
        Invalid("import jax\nv = jax.__version__\nv = 'x'\nif v:\n    g = jax.core.gensym()\n", lines=(5,)),
        Invalid("from jax.core import valid_jaxtype\nok = valid_jaxtype(x)\n", lines=(1,)),
        Invalid("import jax\nfor eqn in jaxpr.eqns:\n    v = jax.core.gensym()\n", lines=(3,)),
        Invalid("from jax.interpreters import pxla\nindices = pxla.op_sharding_to_indices(s, shape)\n", lines=(2,)),
        Invalid("import jax.cloud_tpu_init\n", lines=(1,)),
        Invalid("import jax\nout = jax.tree_map(f, tree)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "out = jax.tree.map(f, tree)\n"
                )),
        Invalid("import jax as J\nout = J.tree_multimap(f, a, b)\n", lines=(2,),
                expected=(
                    "import jax as J\n"
                    "out = J.tree.map(f, a, b)\n"
                )),
        Invalid("import jax.tree_util as tu\nout = tu.tree_multimap(f, a, b)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "out = jax.tree.map(f, a, b)\n"
                )),
        # The import fails: the import is reported, not each later use.
        Invalid("from jax import tree_map, tree_leaves\nout = tree_map(f, tree)\nn = len(tree_leaves(tree))\n",
                lines=(1, 1),
                expected=(
                    "import jax\n"
                    "out = jax.tree.map(f, tree)\n"
                    "n = len(jax.tree.leaves(tree))\n"
                )),
        Invalid("from jax import tree_flatten as flatten\nleaves, treedef = flatten(tree)\n", lines=(1,),
                expected=(
                    "import jax\n"
                    "leaves, treedef = jax.tree.flatten(tree)\n"
                )),
        Invalid(
            "import jax\n"
            "leaves = jax.tree_leaves(tree)\n"
            "treedef = jax.tree_structure(tree)\n"
            "tree2 = jax.tree_unflatten(treedef, leaves)\n"
            "t = jax.tree_transpose(outer, inner, tree)\n",
            lines=(2, 3, 4, 5),
            expected=(
                "import jax\n"
                "leaves = jax.tree.leaves(tree)\n"
                "treedef = jax.tree.structure(tree)\n"
                "tree2 = jax.tree.unflatten(treedef, leaves)\n"
                "t = jax.tree.transpose(outer, inner, tree)\n"
            ),
        ),
        Invalid("import jax\nhlo = jax.xla_computation(f)(x).as_hlo_text()\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "hlo = jax.jit(f).lower(x).compiler_ir(\"hlo\").as_hlo_text()\n"
                )),
        Invalid("from jax.interpreters.pxla import ShardedDeviceArray\n", lines=(1,),
                expected="\n"),
        Invalid("from jax.interpreters import pxla\nisinstance(x, pxla.ShardedDeviceArray)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "isinstance(x, jax.Array)\n"
                )),
        Invalid("import jax\nisinstance(x, jax.interpreters.pxla.ShardedDeviceArray)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "isinstance(x, jax.Array)\n"
                )),
        Invalid("import jax.numpy as jnp\ndef f(x: jnp.DeviceArray) -> jnp.DeviceArray:\n    return x\n",
                lines=(2, 2),
                expected=(
                    "import jax\n"
                    "def f(x: jax.Array) -> jax.Array:\n"
                    "    return x\n"
                )),
        Invalid("import jax\nkey: jax.random.KeyArray = jax.random.PRNGKey(0)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "key: jax.Array = jax.random.PRNGKey(0)\n"
                )),
        Invalid("import jax\ns = jax.sharding.PmapSharding.default((8,), 0)\n", lines=(2,)),
        # A class test: false where the class was removed, the same test where jax still has it.
        Invalid("import jax\nif isinstance(x.sharding, (jax.sharding.PmapSharding, str)):\n    pass\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "if isinstance(x.sharding, (getattr(jax.sharding, \"PmapSharding\", ()), str)):\n"
                    "    pass\n"
                )),
        Invalid("from jax.sharding import PmapSharding, NamedSharding\n", lines=(1,),
                expected="from jax.sharding import NamedSharding\n"),
        Invalid("from jax.experimental import PartitionSpec as P\nspec = P('data')\n", lines=(1,),
                expected=(
                    "from jax.sharding import PartitionSpec as P\n"
                    "spec = P('data')\n"
                )),
        Invalid("from jax.experimental.pjit import pjit, with_sharding_constraint\n", lines=(1,),
                expected=(
                    "from jax.experimental.pjit import pjit\n"
                    "from jax.lax import with_sharding_constraint\n"
                )),
        Invalid("from jax.experimental import pjit\ny = pjit.with_sharding_constraint(x, spec)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "y = jax.lax.with_sharding_constraint(x, spec)\n"
                )),
        Invalid("from jax.experimental.global_device_array import GlobalDeviceArray\n", lines=(1,),
                expected="\n"),
        Invalid("import jax.experimental.global_device_array as gda\n", lines=(1,),
                expected="\n"),
        Invalid("from jax.interpreters import pxla\nspec = pxla.ShardingSpec(sharding=s, mesh_mapping=m)\n",
                lines=(2,)),
        Invalid("from jax.lib import xla_bridge\nprint(xla_bridge.get_backend().platform)\n", lines=(1, 2),
                expected=(
                    "import jax.extend.backend\n"
                    "print(jax.extend.backend.get_backend().platform)\n"
                )),
        Invalid("import jax\nplatform = jax.lib.xla_bridge.get_backend().platform\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "import jax.extend.backend\n"
                    "platform = jax.extend.backend.get_backend().platform\n"
                )),
        # A name without its own entry is reported through its removed module, once per chain.
        Invalid("import jax\nopts = jax.lib.xla_bridge.get_compile_options(1, 1)\n", lines=(2,)),
        Invalid("from jax.lib.xla_bridge import get_compile_options\n", lines=(1,),
                expected="\n"),
        Invalid("from jax.lib.xla_bridge import *\n", lines=(1,)),
        Invalid("import jax\nn = jax.lib.xla_bridge.device_count()\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "n = jax.device_count()\n"
                )),
        Invalid(
            "import jax.experimental.host_callback as hcb\n"
            "hcb.id_tap(lambda x, t: print(x), y)\n"
            "hcb.barrier_wait()\n",
            lines=(1, 2, 3),
        ),
        Invalid("from jax.experimental.host_callback import id_print\n", lines=(1,),
                expected="\n"),
        Invalid("from jax.config import config\nconfig.update('jax_enable_x64', True)\n", lines=(1,),
                expected=(
                    "from jax import config\n"
                    "config.update('jax_enable_x64', True)\n"
                )),
        Invalid("from jax.ops import index_update, index\nx = index_update(x, index[0], 1.0)\n", lines=(1, 1)),
        Invalid("import jax\nx = jax.ops.index_add(x, jax.ops.index[0], 1.0)\n", lines=(2, 2)),
        Invalid("from jax import ops\nidx = ops.index[0]\n", lines=(2,)),
        Invalid("from jax.experimental import optimizers\n", lines=(1,),
                expected="from jax.example_libraries import optimizers\n"),
        Invalid("import jax.linear_util as lu\n", lines=(1,),
                expected="import jax.extend.linear_util as lu\n"),
        Invalid("from jax import lax\ny = lax.tie_in(x, y)\n", lines=(2,),
                expected="y = y\n"),
        Invalid("from jax.api import jit\n", lines=(1,),
                expected="from jax import jit\n"),
        Invalid("import jax.api\nstep = jax.api.jit(f)\n", lines=(1, 2),
                expected=(
                    "import jax\n"
                    "step = jax.jit(f)\n"
                )),
        # Imports guarded by a narrower except clause are not compatibility code.
        Invalid("try:\n    from jax import tree_map\nexcept KeyError:\n    pass\n", lines=(2,),
                expected=(
                    "try:\n"
                    "    pass\n"
                    "except KeyError:\n"
                    "    pass\n"
                )),
        # xla_computation(f)(*args) has a fix (unsafe); with other options it has none.
        Invalid("from jax import xla_computation\nc = xla_computation(f, static_argnums=1)(x, 2)\n", lines=(1,),
                expected=(
                    "import jax\n"
                    "c = jax.jit(f, static_argnums=1).lower(x, 2).compiler_ir(\"hlo\")\n"
                )),
        Invalid("import jax\nc = jax.xla_computation(f, axis_env=[('i', 8)])(x)\n", lines=(2,)),
    ]

    def check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            entry = tables.removed_entry(full)
            if entry is not None and full not in tables.REPORTED_BY_OTHER_RULES:
                fix = self._import_fix(node, alias, full, entry) if isinstance(alias, cst.ImportAlias) else None
                self.report(alias, removed_message(entry, imported=full), fix=fix)

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
        self.report(node, removed_message(entry), fix=self._use_fix(node, entry))

    def _entry(self, node: cst.Attribute) -> tables.RemovedName | None:
        for name in sorted(self.model.qualified_names(node)):
            entry = tables.REMOVED_BY_NAME.get(name)
            if entry is not None:
                return entry
        return None

    # ------------------------------------------------------------------------------ fixes
    def _use_fix(self, node: cst.BaseExpression, entry: tables.RemovedName) -> FixSpec | None:
        try:
            parts, summary = self._rewrite_use(node, entry)
        except Unfixable:
            return None
        return parts.spec(summary)

    def _rewrite_use(self, node: cst.BaseExpression, entry: tables.RemovedName) -> tuple[FixParts, str]:
        """One use (a Name bound by an import, or an Attribute) of ``entry``'s name."""
        new = new_name(entry, entry.name)
        if new is not None:
            parts = rename_to(self.model, node, new)
            if entry.rename == tables.RENAME_SIMILAR and not (
                    new in _SAFE_IN_ANNOTATIONS and in_annotation(self.model, node)):
                parts.assumptions.append(entry.assumes)
            return parts, f"use `{new}`"
        if entry.name == _XLA_COMPUTATION:
            return self._xla_computation(node), "lower with `jax.jit(f).lower(*args).compiler_ir(\"hlo\")`"
        if entry.name == _TIE_IN:
            return self._tie_in(node), "drop `tie_in` (a no-op since omnistaging)"
        if isinstance(node, cst.Attribute) and isinstance_class(self.model, node) and entry.moved_to is None:
            # (a moved class still has instances: `jax.extend.core.DropVar`'s would fail the test)
            return self._absent_class(node), (
                f"test `{node.attr.value}` only where jax has it: nothing is an instance of a removed class")
        raise Unfixable(entry.note)

    @staticmethod
    def _absent_class(use: cst.Attribute) -> FixParts:
        """`isinstance(x, jax.sharding.PmapSharding)` -> `isinstance(x, getattr(jax.sharding,
        "PmapSharding", ()))`: the same test where jax has the class, false where it was removed
        (an empty tuple of classes), instead of an AttributeError."""
        absent = cst.parse_expression(f'getattr({code_of(use.value)}, "{use.attr.value}", ())')
        return FixParts([Edit(use, replace_expression(use, absent))])

    def _xla_computation(self, use: cst.BaseExpression) -> FixParts:
        """`xla_computation(f)(*args)` -> `jax.jit(f).lower(*args).compiler_ir("hlo")`: the same
        XlaComputation object, so `.as_hlo_text()` & co. keep working."""
        call = self.model.parent(use)
        outer = self.model.parent(call) if isinstance(call, cst.Call) and call.func is use else None
        if not isinstance(outer, cst.Call) or outer.func is not call:
            raise Unfixable("only `xla_computation(f)(*args)` is rewritten")
        positional = [a for a in call.args if a.keyword is None]
        if len(positional) != 1 or positional[0].star or any(
                a.keyword is not None and a.keyword.value != "static_argnums" for a in call.args):
            raise Unfixable("xla_computation options other than static_argnums have no jit equivalent")
        jit, imports = qualified_expression(self.model, use, "jax.jit")
        lowered = cst.Call(cst.Attribute(cst.Call(jit, call.args), cst.Name("lower")), outer.args)
        hlo = cst.Call(cst.Attribute(lowered, cst.Name("compiler_ir")), [cst.Arg(cst.SimpleString('"hlo"'))])
        parts = FixParts([Edit(outer, replace_expression(outer, hlo))], list(imports),
                         assumptions=["nothing depends on the HLO module's name (`jit_<f>` now) or "
                                      "on details in which jit's lowering differs from xla_computation's"])
        parts.drop_import_of(self.model, use)
        return parts

    def _tie_in(self, use: cst.BaseExpression) -> FixParts:
        call = self.model.parent(use)
        if not isinstance(call, cst.Call) or call.func is not use or len(call.args) != 2 or any(
                a.keyword is not None or a.star for a in call.args):
            raise Unfixable("only `tie_in(x, y)` calls are rewritten")
        x, y = call.args[0].value, call.args[1].value
        if call.lpar:
            value = y.with_changes(lpar=call.lpar, rpar=call.rpar)
        elif isinstance(self.model.parent(call), _WHOLE_EXPRESSION):
            value = y
        else:
            value = parenthesized(y)
        parts = FixParts([Edit(call, value)])
        if not isinstance(x, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
            parts.assumptions.append(f"dropping the evaluation of `{code_of(x)}` changes nothing")
        parts.drop_import_of(self.model, use)
        return parts

    def _import_fix(self, statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias, full: str,
                    entry: tables.RemovedName) -> FixSpec | None:
        try:
            if isinstance(statement, cst.Import):
                return self._module_import_fix(statement, alias, full, entry)
            new = new_name(entry, full)
            if new is not None and "." in new and new.rsplit(".", 1)[1] == alias.evaluated_name:
                return self._reimport_fix(statement, alias)
            local = alias.evaluated_alias or alias.evaluated_name
            result = rewrite_reads(self.model, statement, alias, lambda read: self._rewrite_use(read, entry)[0])
            if not result.rewritten:
                what = f"remove the unused import of `{full}`"
            elif new is not None:
                what = f"rewrite the uses of `{local}` as `{new}`"
            else:
                what = f"rewrite the uses of `{local}`"
            return result.parts.spec(reads_summary(what, result))
        except Unfixable:
            return None

    def _reimport(self, statement: cst.ImportFrom, alias: cst.ImportAlias) -> tuple[str, str, bool] | None:
        """(module, name, safe) when ``alias`` can be imported from its replacement's module under
        the same name (`from jax.experimental import PartitionSpec` -> `from jax.sharding ...`)."""
        if statement.relative or statement.module is None:
            return None
        full = f"{code_of(statement.module)}.{alias.evaluated_name}"
        entry = tables.removed_entry(full)
        if entry is None or full in tables.REPORTED_BY_OTHER_RULES:
            return None
        new = new_name(entry, full)
        if new is None or "." not in new or new.rsplit(".", 1)[1] != alias.evaluated_name:
            return None
        safe = entry.rename == tables.RENAME_SAME
        if not safe and new in _SAFE_IN_ANNOTATIONS:
            reads = import_reads(self.model, statement, alias)
            safe = reads is not None and all(in_annotation(self.model, r) for r in reads)
        module, name = new.rsplit(".", 1)
        return module, name, safe

    def _reimport_fix(self, statement: cst.ImportFrom, alias: cst.ImportAlias) -> FixSpec | None:
        """Every name of the statement that moved under the same name is imported from its new
        module in one edit (safe ones only, when this one is safe)."""
        mine = self._reimport(statement, alias)
        assert mine is not None
        moves, assumptions, names = {}, [], []
        for index, other in enumerate(statement.names):
            found = self._reimport(statement, other)
            if found is None or (mine[2] and not found[2]):
                continue
            module, name, safe = found
            moves[index] = (module, name)
            names.append(f"`{name}` from `{module}`")
            if not safe:
                full = f"{code_of(statement.module)}.{other.evaluated_name}"
                assumptions.append(tables.removed_entry(full).assumes)
        parts = FixParts(list(rewrite_import_from(self.model, statement, moves)), assumptions=assumptions)
        return parts.spec("import " + ", ".join(names))

    def _module_import_fix(self, statement: cst.Import, alias: cst.ImportAlias, full: str,
                           entry: tables.RemovedName) -> FixSpec | None:
        index = alias_index(statement, alias)
        new = new_name(entry, full)
        if new is not None:
            parts = FixParts(list(rewrite_import(self.model, statement, {index: new})))
            if entry.rename == tables.RENAME_SIMILAR:
                parts.assumptions.append(entry.assumes)
            return parts.spec(f"import `{new}` instead")
        if alias.asname is not None:
            reads = import_reads(self.model, statement, alias)
            if reads != []:
                return None  # the uses are findings of their own
            return FixParts(list(rewrite_import(self.model, statement, {index: None}))).spec(
                f"remove the unused import of `{full}`")
        # `import jax.lib.xla_bridge` also binds `jax`: once nothing reads the removed module it
        # becomes `import jax`.
        if self.model.references({full}, {full.rsplit(".", 1)[1]}):
            return None
        return replace_dotted_import(self.model, statement, alias).spec(
            f"drop the import of the removed `{full}` (nothing reads it), keeping `jax` imported")
