"""JAX API knowledge as data: which names mean what, and what replaced the removed ones.

Every name here is a fully qualified name as libcst's QualifiedNameProvider spells it.
`tests/test_tables.py` checks these tables against the installed jax.
"""

from __future__ import annotations

from dataclasses import dataclass

# Spellings of the legacy pmap (old module paths included: code written for jax<0.2 imports them).
PMAP = frozenset({"jax.pmap", "jax.api.pmap", "jax._src.api.pmap"})
JIT = frozenset({"jax.jit", "jax.api.jit", "jax._src.api.jit", "jax.experimental.pjit.pjit", "jax.pjit"})
PARTIAL = frozenset({"functools.partial"})
DEVICE_PUT = frozenset({"jax.device_put", "jax.api.device_put"})
DEVICE_PUT_REPLICATED = frozenset({"jax.device_put_replicated", "jax.api.device_put_replicated"})
DEVICE_PUT_SHARDED = frozenset({"jax.device_put_sharded", "jax.api.device_put_sharded"})
TREE_MAP = frozenset({
    "jax.tree_util.tree_map", "jax.tree.map", "jax.tree_map", "jax.tree_multimap",
    "jax.tree_util.tree_multimap",
})
SHARD_MAP = frozenset({"jax.shard_map", "jax.experimental.shard_map.shard_map"})
EXPERIMENTAL_SHARD_MAP = frozenset({"jax.experimental.shard_map.shard_map"})
EXPERIMENTAL_SHARD_MAP_MODULE = "jax.experimental.shard_map"
EXPERIMENTAL_MAPS_MODULE = "jax.experimental.maps"
EXPERIMENTAL_PJIT_MODULE = "jax.experimental.pjit"
PJIT = frozenset({"jax.experimental.pjit.pjit"})
REMOVED_SHARD_MAP_KEYWORDS = ("check_rep", "auto")
REMOVED_PJIT_KEYWORDS = {"in_axis_resources": "in_shardings", "out_axis_resources": "out_shardings"}

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


@dataclass(frozen=True)
class RemovedName:
    """A public name that pmap-era code uses and that a recent jax no longer has."""

    name: str  # fully qualified, as QualifiedNameProvider reports it
    absent_in: str  # a jax release verified not to have it (0.7.2: gone before the pmap switch)
    replacement: str | None  # fully qualified replacement, or None when there is no drop-in
    note: str = ""


REMOVED_NAMES: tuple[RemovedName, ...] = (
    RemovedName("jax.tree_map", "0.7.2", "jax.tree.map"),
    RemovedName("jax.tree_multimap", "0.7.2", "jax.tree.map"),
    RemovedName("jax.tree_util.tree_multimap", "0.7.2", "jax.tree.map"),
    RemovedName("jax.tree_leaves", "0.7.2", "jax.tree.leaves"),
    RemovedName("jax.tree_flatten", "0.7.2", "jax.tree.flatten"),
    RemovedName("jax.tree_unflatten", "0.7.2", "jax.tree.unflatten"),
    RemovedName("jax.tree_structure", "0.7.2", "jax.tree.structure"),
    RemovedName("jax.tree_transpose", "0.7.2", "jax.tree.transpose"),
    RemovedName("jax.xla_computation", "0.7.2", None, "use jax.jit(f).lower(*args) and its as_text()/compiler_ir()"),
    RemovedName("jax.interpreters.pxla.ShardedDeviceArray", "0.7.2", "jax.Array"),
    RemovedName("jax.interpreters.xla.DeviceArray", "0.7.2", "jax.Array"),
    RemovedName("jax.interpreters.pxla.PmapSharding", "0.7.2", "jax.sharding.NamedSharding"),
    RemovedName("jax.sharding.PmapSharding", "0.10.0", "jax.sharding.NamedSharding"),
    RemovedName("jax.experimental.PartitionSpec", "0.7.2", "jax.sharding.PartitionSpec"),
)
REMOVED_BY_NAME = {r.name: r for r in REMOVED_NAMES}

# Names whose use in an `if` test marks code written for several jax versions.
JAX_VERSION_NAMES = frozenset({"jax.__version__", "jax.version.__version__", "jax.__version_info__",
                               "jax.version._version", "jax.version.__version_info__"})
