"""Legacy-compatible pmap built on jax.jit(jax.shard_map)."""
