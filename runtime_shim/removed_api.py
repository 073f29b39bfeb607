"""The public jax names that pmap-era code uses and that current jax no longer has, with what
replaced each: one table, read by the linter's PM404 (``pmap_migrate.rules.knowledge.tables``) and
by :func:`runtime_shim.install`, which puts back the names whose replacement is exact
(:func:`exact_replacements`).

Plain data: importing this module imports nothing else (the linter reads it without jax).
Every entry is checked against jax 0.7.2, 0.10.2 and the newest jax by the linter's tests
(tests/test_tables.py). Names are fully qualified, as libcst's QualifiedNameProvider spells them.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a removed name may be rewritten to its replacement by a fix:
# the replacement is the same object, or a function with the same parameters and results (a safe fix);
RENAME_SAME = "same"
# the replacement stands in for it but differs in a way the entry's `assumes` names (an unsafe fix).
RENAME_SIMILAR = "similar"


@dataclass(frozen=True)
class RemovedName:
    """A public name that pmap-era code uses and that a recent jax no longer has.

    A module entry (``jax.lib.xla_bridge``) also covers everything imported from that module."""

    name: str  # fully qualified, as QualifiedNameProvider reports it
    # The oldest checked release without it: "0.7.2" (gone before the pmap switch), "0.10.2"
    # (still in the legacy 0.7.2, gone by 0.10.2) or "0.12" (still in 0.10.2, gone from the newest
    # jax). Absent in the newest jax either way.
    absent_in: str
    replacement: str | None  # fully qualified, in 0.7.2 and the newest jax; None: no drop-in
    note: str = ""
    # What the fix may do with a use (see RENAME_SAME / RENAME_SIMILAR); None: no automatic fix, the
    # message (replacement / note) says the manual route.
    rename: str | None = None
    # For RENAME_SIMILAR: what the unsafe rename assumes (shown in the fix summary).
    assumes: str = ""
    # Where the object itself lives on in newer jax (`jax.extend.core.DropVar`), when no release
    # from 0.7.2 on has it under one name: objects are still instances of a moved class.
    moved_to: str | None = None

    @property
    def last(self) -> str:
        return self.name.rsplit(".", 1)[-1]


# PM404. Not here on purpose, because another rule reports them: jax.device_put_replicated /
# device_put_sharded (PM301/PM302), anything under jax.experimental.maps (PM402), the
# experimental shard_map (PM401) and pjit (PM403), the pmap spellings (PM101).
_SHARDING_SPEC = ("the legacy pmap's layout descriptions are gone; "
                  "use jax.sharding.NamedSharding(mesh, PartitionSpec(...))")
_TRANSLATION = "XLA translation rules are gone; register a lowering with jax.interpreters.mlir.register_lowering"
_AT = "use the indexed-update syntax x.at[idx]"
_ARRAY_TYPE = ("isinstance checks accept every jax.Array now, not only the old array type "
               "(annotations are unaffected)")
_X64 = "use jax.config.update('jax_enable_x64', ...) (newer jax also has the jax.enable_x64 context manager)"
_PMAP_MACHINERY = "the legacy pmap's machinery is gone: jax.pmap now traces to jit + shard_map"
# RENAME_SAME entries whose replacement is not the same object but a `functools.wraps` wrapper of it
# (`__wrapped__`, checked on 0.7.2 by tests/test_tables.py): jax.checkpoint / jax.remat are
# `checkpoint_wrapper`, which only rejects `concrete=True` (an argument the removed function did not
# take) and passes every other argument to it.
FORWARDING_WRAPPERS = frozenset({"jax.ad_checkpoint.checkpoint", "jax.ad_checkpoint.remat"})
REMOVED_NAMES: tuple[RemovedName, ...] = (
    # Tree utilities: top-level aliases removed in favour of jax.tree.* (= jax.tree_util.tree_*).
    RemovedName("jax.tree_map", "0.7.2", "jax.tree.map", rename=RENAME_SAME),
    RemovedName("jax.tree_multimap", "0.7.2", "jax.tree.map", rename=RENAME_SAME),
    RemovedName("jax.tree_util.tree_multimap", "0.7.2", "jax.tree.map", rename=RENAME_SAME),
    RemovedName("jax.tree_leaves", "0.7.2", "jax.tree.leaves", rename=RENAME_SAME),
    RemovedName("jax.tree_flatten", "0.7.2", "jax.tree.flatten", rename=RENAME_SAME),
    RemovedName("jax.tree_unflatten", "0.7.2", "jax.tree.unflatten", rename=RENAME_SAME),
    RemovedName("jax.tree_structure", "0.7.2", "jax.tree.structure", rename=RENAME_SAME),
    RemovedName("jax.tree_transpose", "0.7.2", "jax.tree.transpose", rename=RENAME_SAME),
    RemovedName("jax.tree_reduce", "0.7.2", "jax.tree.reduce", rename=RENAME_SAME),
    RemovedName("jax.tree_all", "0.7.2", "jax.tree.all", rename=RENAME_SAME),
    # Transformations and collectives of the pmap era.
    RemovedName("jax.xla_computation", "0.7.2", None, "use jax.jit(f).lower(*args) and its as_text() / compiler_ir()"),
    RemovedName("jax.soft_pmap", "0.7.2", None, "use jax.jit(jax.shard_map(...)) over a Mesh, or jax.vmap"),
    RemovedName("jax.lax.tie_in", "0.7.2", None, "it is a no-op since omnistaging: replace tie_in(x, y) by y"),
    RemovedName("jax.lax.pdot", "0.7.2", None, "use jnp.dot / jnp.einsum on the local blocks, then lax.psum"),
    # Array types: every array is a jax.Array now.
    RemovedName("jax.interpreters.pxla.ShardedDeviceArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.interpreters.xla.DeviceArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.interpreters.xla._DeviceArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.numpy.DeviceArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.random.KeyArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.random.PRNGKeyArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.interpreters.pxla.make_sharded_device_array", "0.7.2",
                "jax.make_array_from_single_device_arrays"),
    RemovedName("jax.experimental.global_device_array", "0.7.2", None,
                "GlobalDeviceArray became jax.Array; build one with jax.make_array_from_callback"),
    RemovedName("jax.experimental.global_device_array.GlobalDeviceArray", "0.7.2", "jax.Array",
                rename=RENAME_SIMILAR, assumes=_ARRAY_TYPE),
    RemovedName("jax.experimental.gda_serialization", "0.7.2", "jax.experimental.array_serialization"),
    # Shardings and the pmap machinery behind ShardedDeviceArray.
    RemovedName("jax.interpreters.pxla.PmapSharding", "0.7.2", "jax.sharding.NamedSharding"),
    RemovedName("jax.sharding.PmapSharding", "0.10.2", "jax.sharding.NamedSharding",
                "removed with the legacy pmap in jax 0.10.0"),
    RemovedName("jax.sharding.PositionalSharding", "0.7.2", "jax.sharding.NamedSharding"),
    RemovedName("jax.sharding.GSPMDSharding", "0.7.2", "jax.sharding.NamedSharding"),
    RemovedName("jax.sharding.XLACompatibleSharding", "0.7.2", "jax.sharding.Sharding",
                rename=RENAME_SIMILAR,
                assumes="isinstance checks accept every jax.sharding.Sharding now (annotations are unaffected)"),
    RemovedName("jax.experimental.PartitionSpec", "0.7.2", "jax.sharding.PartitionSpec", rename=RENAME_SAME),
    RemovedName("jax.experimental.pjit.PartitionSpec", "0.7.2", "jax.sharding.PartitionSpec", rename=RENAME_SAME),
    RemovedName("jax.experimental.pjit.with_sharding_constraint", "0.7.2", "jax.lax.with_sharding_constraint",
                rename=RENAME_SAME),
    RemovedName("jax.experimental.pjit.FROM_GDA", "0.7.2", None,
                "drop it: jax.Array inputs carry their own sharding (or pass in_shardings)"),
    RemovedName("jax.experimental.sharding", "0.7.2", "jax.sharding"),
    RemovedName("jax.experimental.sharding.MeshPspecSharding", "0.7.2", "jax.sharding.NamedSharding",
                rename=RENAME_SAME),
    RemovedName("jax.interpreters.pxla.Mesh", "0.7.2", "jax.sharding.Mesh", rename=RENAME_SAME),
    RemovedName("jax.interpreters.pxla.ShardingSpec", "0.10.2", None, _SHARDING_SPEC),
    RemovedName("jax.interpreters.pxla.Chunked", "0.10.2", None, _SHARDING_SPEC),
    RemovedName("jax.interpreters.pxla.Unstacked", "0.10.2", None, _SHARDING_SPEC),
    RemovedName("jax.interpreters.pxla.NoSharding", "0.10.2", None, _SHARDING_SPEC),
    RemovedName("jax.interpreters.pxla.Replicated", "0.10.2", None, _SHARDING_SPEC),
    RemovedName("jax.interpreters.pxla.ShardedAxis", "0.10.2", None, _SHARDING_SPEC),
    RemovedName("jax.interpreters.pxla.spec_to_indices", "0.10.2", None,
                "use sharding.devices_indices_map(shape) of a jax.sharding.Sharding"),
    RemovedName("jax.interpreters.pxla.xla_pmap_p", "0.10.2", None,
                "the legacy pmap primitive is gone: jax.pmap now traces to jit + shard_map"),
    RemovedName("jax.interpreters.pxla.xla_pmap", "0.7.2", None,
                "the legacy pmap primitive is gone: jax.pmap now traces to jit + shard_map"),
    RemovedName("jax.interpreters.xla.device_put", "0.7.2", "jax.device_put"),
    # Not the same function: xla.canonicalize_dtype canonicalized values (checked on 0.7.2).
    RemovedName("jax.interpreters.xla.canonicalize_dtype", "0.10.2", "jax.dtypes.canonicalize_dtype",
                "for a value rather than a dtype, check it with jax.extend.core.valid_jaxtype "
                "(jax.core.valid_jaxtype on jax 0.7.2; jax 0.12 has only the former)"),
    RemovedName("jax.interpreters.xla.translations", "0.7.2", None, _TRANSLATION),
    RemovedName("jax.interpreters.xla.backend_specific_translations", "0.7.2", None, _TRANSLATION),
    # Backend helpers: jax.lib.xla_bridge and the raw XLA client modules.
    RemovedName("jax.lib.xla_bridge", "0.10.2", None,
                "use jax.devices(), jax.default_backend(), jax.extend.backend.get_backend()"),
    RemovedName("jax.lib.xla_bridge.get_backend", "0.10.2", "jax.extend.backend.get_backend",
                "for the platform name, jax.default_backend()", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.device_count", "0.7.2", "jax.device_count", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.local_device_count", "0.7.2", "jax.local_device_count", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.process_index", "0.7.2", "jax.process_index", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.host_id", "0.7.2", "jax.process_index", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.default_backend", "0.7.2", "jax.default_backend", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.devices", "0.7.2", "jax.devices", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_bridge.local_devices", "0.7.2", "jax.local_devices", rename=RENAME_SAME),
    RemovedName("jax.lib.xla_client", "0.10.2", None,
                "use the public types: jax.Device, jax.sharding, jax.stages, jax.extend"),
    RemovedName("jax.lib.xla_extension", "0.10.2", None,
                "use the public types: jax.Device, jax.sharding, jax.stages, jax.extend"),
    # Host callbacks: jax.experimental.host_callback was removed in favour of jax.debug / jax.*_callback.
    RemovedName("jax.experimental.host_callback", "0.10.2", None,
                "id_tap -> jax.debug.callback, id_print -> jax.debug.print, call -> jax.pure_callback"),
    RemovedName("jax.experimental.host_callback.id_tap", "0.10.2", "jax.debug.callback"),
    RemovedName("jax.experimental.host_callback.id_print", "0.7.2", "jax.debug.print"),
    RemovedName("jax.experimental.host_callback.call", "0.10.2", "jax.pure_callback",
                "jax.experimental.io_callback for side effects"),
    RemovedName("jax.experimental.host_callback.barrier_wait", "0.7.2", "jax.effects_barrier"),
    # Modules that moved.
    RemovedName("jax.abstract_arrays", "0.7.2", None, "ShapedArray lives in jax.core"),
    RemovedName("jax.abstract_arrays.ShapedArray", "0.7.2", "jax.core.ShapedArray", rename=RENAME_SAME),
    RemovedName("jax.linear_util", "0.7.2", "jax.extend.linear_util",
                rename=RENAME_SIMILAR, assumes="only names that jax.extend.linear_util still has are used"),
    RemovedName("jax.experimental.optimizers", "0.7.2", "jax.example_libraries.optimizers", rename=RENAME_SAME),
    RemovedName("jax.experimental.stax", "0.7.2", "jax.example_libraries.stax", rename=RENAME_SAME),
    RemovedName("jax.api", "0.7.2", "jax", "its public names are exported by the top-level jax module",
                rename=RENAME_SIMILAR, assumes="only names that the top-level jax module still exports are used"),
    RemovedName("jax.config.config", "0.7.2", "jax.config",
                "the same object as `from jax import config`",
                rename=RENAME_SAME),
    RemovedName("jax.experimental.compilation_cache.compilation_cache.initialize_cache", "0.10.2",
                "jax.experimental.compilation_cache.compilation_cache.set_cache_dir",
                "or set the jax_compilation_cache_dir option"),
    RemovedName("jax.experimental.enable_x64", "0.10.2", None, _X64),
    RemovedName("jax.experimental.disable_x64", "0.10.2", None, _X64),
    # Removed in jax 0.10.0 with the legacy pmap (each checked present in 0.7.2, absent in 0.10.2
    # and the newest jax): the legacy pmap's machinery, checkpoint's old home, jax.core internals
    # whose public home (jax.extend.core) 0.7.2 lacks, and a few numerical functions.
    RemovedName("jax.interpreters.pxla.MapTracer", "0.10.2", None, _PMAP_MACHINERY + " (values inside a pmap "
                "are ordinary tracers)"),
    RemovedName("jax.interpreters.pxla.PmapExecutable", "0.10.2", None, _PMAP_MACHINERY + "; lower and compile "
                "through jax.jit: jax.jit(f).lower(*args).compile()"),
    RemovedName("jax.interpreters.pxla.parallel_callable", "0.10.2", None, _PMAP_MACHINERY + "; use "
                "jax.jit(jax.shard_map(...)) over a Mesh"),
    RemovedName("jax.interpreters.pxla.shard_args", "0.10.2", None, "use jax.device_put(x, sharding)"),
    RemovedName("jax.ad_checkpoint.checkpoint", "0.10.2", "jax.checkpoint", rename=RENAME_SAME),
    RemovedName("jax.ad_checkpoint.remat", "0.10.2", "jax.remat", rename=RENAME_SAME),
    RemovedName("jax.lax.pvary", "0.10.2", None, "use jax.lax.pcast(x, axis_name, to='varying') (jax 0.8 and later)"),
    RemovedName("jax.core.get_aval", "0.10.2", "jax.typeof", rename=RENAME_SAME),
    *(RemovedName(f"jax.core.{name}", "0.10.2", None, f"use jax.extend.core.{name} (jax 0.8 and later)",
                  moved_to=f"jax.extend.core.{name}")
      for name in ("AbstractToken", "TraceTag", "mapped_aval", "unmapped_aval", "set_current_trace",
                   "take_current_trace", "subjaxprs")),
    RemovedName("jax.core.call_impl", "0.10.2", None, "no public replacement in the newest jax"),
    RemovedName("jax.core.traverse_jaxpr_params", "0.10.2", None, "no public replacement"),
    RemovedName("jax.interpreters.batching.NotMapped", "0.10.2", None,
                "no public replacement (an unmapped axis is spelled None)"),
    RemovedName("jax.interpreters.ad.reducing_transposes", "0.10.2", None, "jax no longer reads it: delete the "
                "registration"),
    RemovedName("jax.cloud_tpu_init.cloud_tpu_init", "0.10.2", None, "delete the call: jax initialises Cloud "
                "TPUs itself"),
    RemovedName("jax.numpy.fix", "0.10.2", "jax.numpy.trunc", rename=RENAME_SIMILAR,
                assumes="no `out=` argument (the same values, dtypes and signs of zero otherwise; checked on 0.7.2)"),
    RemovedName("jax.scipy.special.sph_harm", "0.10.2", "jax.scipy.special.sph_harm_y",
                "sph_harm(m, n, theta, phi) is sph_harm_y(n, m, phi, theta): the degree and order swap, and "
                "so do the two angles"),
    # Removed in jax 0.11.0 (each checked present in 0.7.2 and 0.10.2, absent in the newest jax):
    # jax.core internals, most of which moved to jax.extend.core in 0.10.0 (which 0.7.2 lacks, so
    # the move is a message, not a fix), and the mesh machinery left in jax.interpreters.pxla.
    *(RemovedName(f"jax.core.{name}", "0.12", None, f"use jax.extend.core.{name} (jax 0.10 and later)",
                  moved_to=f"jax.extend.core.{name}")
      for name in ("CallPrimitive", "DebugInfo", "DropVar", "Effect", "Effects", "check_jaxpr",
                   "concrete_or_error", "find_top_trace", "gensym", "get_opaque_trace_state",
                   "jaxprs_in_params", "new_jaxpr_eqn", "no_effects", "nonempty_axis_env_DO_NOT_USE",
                   "primal_dtype_to_tangent_dtype", "unsafe_am_i_under_a_jit_DO_NOT_USE",
                   "unsafe_am_i_under_a_vmap_DO_NOT_USE", "unsafe_get_axis_names_DO_NOT_USE", "valid_jaxtype")),
    *(RemovedName(f"jax.core.{name}", "0.12", None, f"use jax.errors.{name} (jax 0.10 and later)",
                  moved_to=f"jax.errors.{name}")
      for name in ("InconclusiveDimensionOperation", "JaxprTypeError")),
    *(RemovedName(f"jax.core.{name}", "0.12", None, "no public replacement")
      for name in ("JaxprPpContext", "JaxprPpSettings", "OutputType", "abstract_token", "aval_mapping_handlers",
                   "call", "concretization_function_error", "custom_typechecks", "is_concrete",
                   "is_constant_dim", "is_constant_shape", "literalable_types", "no_axis_name", "trace_ctx")),
    RemovedName("jax.interpreters.pxla.MeshExecutable", "0.12", None,
                "lower and compile through jax.jit: jax.jit(f).lower(*args).compile()"),
    RemovedName("jax.interpreters.pxla.MeshAxisName", "0.12", None, "an axis name is a str: use the Mesh's axis names"),
    RemovedName("jax.interpreters.pxla.op_sharding_to_indices", "0.12", None,
                "ask the sharding: sharding.devices_indices_map(shape)"),
    RemovedName("jax.interpreters.pxla.are_hlo_shardings_equal", "0.12", None,
                "compare the jax shardings: a.is_equivalent_to(b, ndim)"),
    RemovedName("jax.interpreters.pxla.is_hlo_sharding_replicated", "0.12", None,
                "ask the jax sharding: sharding.is_fully_replicated"),
    *(RemovedName(f"jax.interpreters.pxla.{name}", "0.12", None, "jax internals; no public replacement")
      for name in ("Index", "ArrayMapping", "array_mapping_to_axis_resources", "global_aval_to_result_handler",
                   "global_result_handlers")),
    RemovedName("jax.cloud_tpu_init", "0.12", None, "the module is gone: delete the import (jax initialises "
                "Cloud TPUs itself)"),
    # Functional index updates.
    RemovedName("jax.ops.index_update", "0.7.2", None, f"{_AT}.set(y)"),
    RemovedName("jax.ops.index_add", "0.7.2", None, f"{_AT}.add(y)"),
    RemovedName("jax.ops.index_mul", "0.7.2", None, f"{_AT}.multiply(y)"),
    RemovedName("jax.ops.index_min", "0.7.2", None, f"{_AT}.min(y)"),
    RemovedName("jax.ops.index_max", "0.7.2", None, f"{_AT}.max(y)"),
    RemovedName("jax.ops.index", "0.7.2", None, _AT),
)
REMOVED_BY_NAME = {r.name: r for r in REMOVED_NAMES}


def removed_entry(name: str, table: dict[str, RemovedName] | None = None) -> RemovedName | None:
    """The entry for ``name`` or for the removed module that contains it (the longest match)."""
    table = REMOVED_BY_NAME if table is None else table
    while True:
        entry = table.get(name)
        if entry is not None:
            return entry
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]


def exact_replacements() -> tuple[RemovedName, ...]:
    """The entries whose replacement is the same object, or a function with the same parameters and
    results (``RENAME_SAME``): what :func:`runtime_shim.install` may put back under the old name."""
    return tuple(entry for entry in REMOVED_NAMES if entry.rename == RENAME_SAME and entry.replacement is not None)
