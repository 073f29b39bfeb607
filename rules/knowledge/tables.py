"""JAX API knowledge as data: which names mean what, and what replaced the removed ones.

Every name here is a fully qualified name as libcst's QualifiedNameProvider spells it.
`tests/test_tables.py` checks these tables against the installed jax. The table of removed names
(PM404's, `REMOVED_NAMES`) lives with the runtime shim, which puts back the names whose replacement
is exact (`runtime_shim/removed_api.py`, plain data: reading it imports no jax).
"""

from __future__ import annotations

from runtime_shim.removed_api import (  # the table PM404 and runtime_shim.install() share
    FORWARDING_WRAPPERS,
    REMOVED_BY_NAME,
    REMOVED_NAMES,
    RENAME_SAME,
    RENAME_SIMILAR,
    RemovedName,
    removed_entry,
)

__all__ = ["FORWARDING_WRAPPERS", "REMOVED_BY_NAME", "REMOVED_NAMES", "RENAME_SAME", "RENAME_SIMILAR", "RemovedName",
           "removed_entry"]

# Spellings of the legacy pmap (old module paths included: code written for jax<0.2 imports them).
PMAP = frozenset({"jax.pmap", "jax.api.pmap", "jax._src.api.pmap"})
JIT = frozenset({"jax.jit", "jax.api.jit", "jax._src.api.jit", "jax.experimental.pjit.pjit", "jax.pjit"})
PARTIAL = frozenset({"functools.partial"})
# What replaces `jax.pmap` while code runs (test fakes): a module that uses one keeps its pmaps going
# through `jax.pmap`, which the fake patches. The patchers replace whatever their arguments name.
PMAP_FAKES = frozenset({"chex.fake_pmap", "chex.fake_pmap_and_jit", "chex._src.fake.fake_pmap",
                        "chex._src.fake.fake_pmap_and_jit"})
PATCHERS = frozenset({"unittest.mock.patch", "mock.patch"})
ATTRIBUTE_PATCHERS = frozenset({"unittest.mock.patch.object", "mock.patch.object", "builtins.setattr"})
# Where a program expects an exception: a pmap called there is expected to raise legacy pmap's own
# errors (`self.assertRaisesRegex(ValueError, "pmap in_axes...")`), which only the shim reproduces.
EXPECTS_ERROR_METHODS = frozenset({"assertRaises", "assertRaisesRegex", "assertRaisesRegexp",
                                   "assertRaisesWithLiteralMatch", "assertRaisesWithPredicateMatch"})
EXPECTS_ERROR = frozenset({"pytest.raises"})
# Attributes of a legacy pmap object that its rewrite (a `jax.jit` object) lacks or has otherwise.
# (jax 0.7.2's pmap object: these and `lower`, which the rewrite keeps.)
LEGACY_PMAP_ATTRIBUTES = frozenset({"_axis_name", "_backend", "_cache_clear", "_cache_miss", "_cache_size",
                                    "_debug_cache_keys", "_donate_tuple", "_fun", "_prepare_pmap"})
DEVICE_PUT = frozenset({"jax.device_put", "jax.api.device_put"})
DEVICE_PUT_REPLICATED = frozenset({"jax.device_put_replicated", "jax.api.device_put_replicated"})
DEVICE_PUT_SHARDED = frozenset({"jax.device_put_sharded", "jax.api.device_put_sharded"})
TREE_MAP = frozenset({
    "jax.tree_util.tree_map", "jax.tree.map", "jax.tree_map", "jax.tree_multimap",
    "jax.tree_util.tree_multimap",
})
SHARD_MAP = frozenset({"jax.shard_map", "jax.experimental.shard_map.shard_map"})
MESH = frozenset({"jax.sharding.Mesh"})
PARTITION_SPEC = frozenset({"jax.sharding.PartitionSpec", "jax.P"})
LOCAL_DEVICES = frozenset({"jax.local_devices"})
# The compact form's helper as `fix` writes it in a package's shared module (rules/fixes/shared.py),
# by the end of its qualified name (`pkg._pmap_compat._shard_mapped`, `._pmap_compat._shard_mapped`).
SHARED_LOCAL_ROWS = ("_pmap_compat._shard_mapped",)
# ... or defined in the module itself, recognised by its docstring.
SHARD_MAPPED_DOC = "pmap(f, axis_name, ...) as shard_map over the first local devices."
# The host-local view the multi-process rewrite reads global outputs through (rules/fixes/shared.py):
# its value is the stack it is given, rows per device (imported, or the module's own copy).
SHARED_HOST_LOCAL = ("_pmap_compat._host_local",)
HOST_LOCAL_DOC = "Global arrays -> this process's rows, as legacy pmap returned them."
# Its multi-process call: a wrapper returning the outputs of the jitted pmap it is given (the
# rows per device; with local=True, their host-local view).
SHARED_GLOBAL_CALL = ("_pmap_compat._global_call",)
GLOBAL_CALL_DOC = "Legacy pmap's call in a multi-process program: this process's rows in."
# The multi-process pmap site's helper: `_global_call` of the compact form's jit, under pmap's
# signature (its outputs likewise: rows per device, their host-local view unless local=False).
SHARED_GLOBAL_PMAP = ("_pmap_compat._global_pmap",)
GLOBAL_PMAP_DOC = "pmap(f, axis_name, ...) over the devices of every process."
# The stacks `fix` writes for `jax.device_put_replicated` / `device_put_sharded` (rules/fixes/shared.py):
# the helper imported from a package's shared module, by the end of its qualified name, or defined in
# the module itself, by the first line of its docstring.
STACKING_HELPERS = {
    "replicated": ("_pmap_compat._replicate", "jax.device_put_replicated(tree, devices): a row per device."),
    "sharded": ("_pmap_compat._put_sharded", "jax.device_put_sharded(shards, devices): shard k on device k."),
}
# Text of the faithful rewrite of a pmap (rules/fixes: its jitted shard_map of `per_device`, or the
# compact form's helper, by its docstring, or that helper's import from a package's shared module):
# a file that holds it may read rows of its outputs (PM201, PM202) with no pmap name left in it. tests/test_tables.py checks the forms hold them.
# `def per_device(` survives the project's line length (`jax.shard_map(` then `per_device,` on the next line).
REWRITTEN_PMAP = ("shard_map(per_device", "def per_device(", "as shard_map over the first local devices",
                  "_pmap_compat import")
# The experimental shard_map / maps / pjit tables (PM401-PM403) are below.

# Functions whose presence means the program runs several processes (PM501).
MULTI_PROCESS = frozenset({
    "jax.process_index", "jax.process_count", "jax.host_id", "jax.host_count",
    "jax.distributed.initialize", "jax.experimental.multihost_utils",
})
MULTI_PROCESS_PREFIXES = ("jax.distributed.", "jax.experimental.multihost_utils.")

# Helpers of the pmap era in flax (PM202 / PM303).
FLAX_UNREPLICATE = frozenset({"flax.jax_utils.unreplicate"})
FLAX_REPLICATE = frozenset({"flax.jax_utils.replicate"})
FLAX_PMAP_HELPERS = {
    "flax.jax_utils.replicate": "replicates a value onto every local device for a pmap",
    "flax.training.common_utils.shard": "reshapes a batch to (local_device_count, ...) for a pmap",
    "flax.training.common_utils.shard_prng_key": "splits a PRNG key per device for a pmap",
    "flax.jax_utils.prefetch_to_device": "stacks batches per device for a pmap",
}

# The configuration flag removed in jax 0.10.0 that switched between the two pmaps.
PMAP_SHMAP_MERGE_FLAG = "jax_pmap_shmap_merge"
REMOVED_PMAP_KEYWORDS = ("global_arg_shapes",)


# ----------------------------------------------------------------------------------------------
# PM401-PM404: experimental modules and names removed from jax. Every entry is checked against the
# installed jax and the legacy (0.7.2) / newest venvs by tests/test_tables.py.

# PM401: `jax.experimental.shard_map.shard_map` still imports (with a DeprecationWarning) in 0.10.2
# and 0.12; `jax.shard_map` (in 0.7.2 and newer) takes mesh/in_specs/out_specs as keywords only.
EXPERIMENTAL_SHARD_MAP = frozenset({"jax.experimental.shard_map.shard_map"})
EXPERIMENTAL_SHARD_MAP_MODULE = "jax.experimental.shard_map"
SHARD_MAP_REPLACEMENT = "jax.shard_map"
# Keywords `jax.shard_map` rejects -> the parameter that took over their role. `check_rep` was
# renamed; `auto` (the mesh axes left to the compiler) became its complement `axis_names` (the
# manual axes). The experimental shard_map itself lost `auto` between 0.7.2 and 0.10.2.
SHARD_MAP_KEYWORD_CHANGES = {"check_rep": "check_vma", "auto": "axis_names"}
REMOVED_SHARD_MAP_KEYWORDS = tuple(SHARD_MAP_KEYWORD_CHANGES)

# PM403: `jax.experimental.pjit.pjit` still imports (deprecated) and is `jax.jit` under another
# name; `jax.pjit` (imported by some code as `from jax import pjit`) exists in none of the checked
# releases. `in_axis_resources=` / `out_axis_resources=` are gone from both (before 0.7.2).
EXPERIMENTAL_PJIT_MODULE = "jax.experimental.pjit"
PJIT = frozenset({"jax.experimental.pjit.pjit", "jax.pjit"})
PJIT_GONE = frozenset({"jax.pjit"})  # spellings that no longer import at all
PJIT_REPLACEMENT = "jax.jit"
REMOVED_PJIT_KEYWORDS = {"in_axis_resources": "in_shardings", "out_axis_resources": "out_shardings"}


# PM402: the whole `jax.experimental.maps` module is gone (before 0.7.2); `import` itself fails.
EXPERIMENTAL_MAPS_MODULE = "jax.experimental.maps"
_NO_XMAP = "xmap has no drop-in; use jax.shard_map over a Mesh (or jax.vmap with spmd_axis_name)"
EXPERIMENTAL_MAPS_NAMES: tuple[RemovedName, ...] = (
    RemovedName("jax.experimental.maps.Mesh", "0.7.2", "jax.sharding.Mesh", rename=RENAME_SAME),
    RemovedName("jax.experimental.maps.mesh", "0.7.2", "jax.sharding.Mesh",
                "`with maps.mesh(devices, names):` becomes `with jax.sharding.Mesh(devices, names):`",
                rename=RENAME_SIMILAR,
                assumes="every use is `with mesh(devices, names):` (maps.mesh bound None to an `as` target)"),
    RemovedName("jax.experimental.maps.xmap", "0.7.2", None, _NO_XMAP),
    RemovedName("jax.experimental.maps.thread_resources", "0.7.2", None,
                "pass the Mesh explicitly, or read the context mesh with jax.sharding.get_abstract_mesh()"),
    RemovedName("jax.experimental.maps.ResourceEnv", "0.7.2", None, "pass the Mesh explicitly"),
    RemovedName("jax.experimental.maps.EMPTY_ENV", "0.7.2", None, "pass the Mesh explicitly"),
    RemovedName("jax.experimental.maps.SerialLoop", "0.7.2", None, _NO_XMAP),
    RemovedName("jax.experimental.maps.serial_loop", "0.7.2", None, _NO_XMAP),
)
EXPERIMENTAL_MAPS_BY_NAME = {r.name: r for r in EXPERIMENTAL_MAPS_NAMES}

# Names PM404 leaves to other rules even where a REMOVED_NAMES module entry would cover them.
REPORTED_BY_OTHER_RULES = PMAP | DEVICE_PUT_REPLICATED | DEVICE_PUT_SHARDED | PJIT | EXPERIMENTAL_SHARD_MAP


# Names whose use in an `if` test marks code written for several jax versions.
JAX_VERSION_NAMES = frozenset({"jax.__version__", "jax.version.__version__", "jax.__version_info__",
                               "jax.version._version", "jax.version.__version_info__"})

# ----------------------------------------------------------------------------------------------
# PM104: the state object behind the removed `jax_pmap_shmap_merge` flag, as code reached it
# (`jax._src.config.pmap_shmap_merge`, also visible as `jax.config.pmap_shmap_merge` through
# `from jax import config`). Absent from jax 0.10.0 on, like the flag.
PMAP_SHMAP_MERGE_STATE = frozenset({"jax._src.config.pmap_shmap_merge", "jax.config.pmap_shmap_merge"})
