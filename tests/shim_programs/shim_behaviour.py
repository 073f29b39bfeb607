"""What only the shim has: lazy device queries, the linter-free import, install/uninstall,
a gather-free unreplicate, nested pmaps laid out on a multi-axis mesh, caching, and the
accepted-and-ignored ``global_arg_shapes``. Prints checks; tests/test_shim_api.py knows
the expected values."""

import sys
import warnings

import jax
from jax._src import xla_bridge

import runtime_shim

# Nothing so far may have created a backend: multi-process programs call
# jax.distributed.initialize() after their imports and after defining their pmaps.
decorated = runtime_shim.pmap(lambda v: v * 2, axis_name="i")
runtime_shim.install()
from jax import pmap  # noqa: E402 - after install() on purpose

also_decorated = jax.pmap(lambda v: v + 1)
from _report import devices_of, show  # noqa: E402

show("backends_after_import_and_decorate", xla_bridge.backends_are_initialized())
show("linter_modules_imported", " ".join(
    sorted(m for m in sys.modules if m.split(".")[0] in ("libcst", "pmap_migrate", "codemod", "rules"))))
show("installed_pmap_is_shim", [jax.pmap is runtime_shim.pmap, pmap is runtime_shim.pmap])
show("installed_helpers_are_shim", [
    jax.device_put_replicated is runtime_shim.device_put_replicated,
    jax.device_put_sharded is runtime_shim.device_put_sharded])

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

n = jax.device_count()
x = jnp.arange(n * 2.0).reshape(n, 2)
show("decorated_before_devices_existed", decorated(x))

# unreplicate: one local block, no computation over all devices
out = decorated(x)
first = runtime_shim.unreplicate(out)
show("unreplicate_value", first)
show("unreplicate_devices", len(first.devices()))
# legacy's x[0] was not committed to its device: it mixes with arrays committed elsewhere
elsewhere = jax.device_put(jnp.ones(2), jax.devices()[1])
show("unreplicate_committed", first.committed)
show("unreplicate_with_elsewhere", [jax.jit(lambda a, b: a + b)(first, elsewhere), first + elsewhere])
show("index_0_devices", len(out[0].devices()))  # what x[0] costs under this jax
tree = runtime_shim.unreplicate({"a": out, "b": (jax.pmap(lambda v: v.sum())(x),)})
show("unreplicate_tree", tree)
show("unreplicate_tree_devices", [len(tree["a"].devices()), len(tree["b"][0].devices())])
nested_out = jax.pmap(jax.pmap(lambda v: lax.psum(v, ("i", "j")), "j"), "i")(
    jnp.arange(8.0).reshape(2, 4))
show("unreplicate_nested", runtime_shim.unreplicate(nested_out))
show("unreplicate_out_axes_1", runtime_shim.unreplicate(jax.pmap(lambda v: v, out_axes=1)(x)))
show("unreplicate_numpy", runtime_shim.unreplicate([jnp.ones((3, 2)).__array__()]))

# nested pmaps run on a 2-D mesh, in parallel; a sibling that does not fit is vectorised
show("nested_mesh", sorted(nested_out.sharding.mesh.shape.items()))
show("nested_devices", devices_of(nested_out))
lowered = jax.pmap(jax.pmap(lambda v: lax.psum(v, "j"), "j"), "i").lower(
    jnp.arange(8.0).reshape(2, 4))
show("nested_partitions", "num_partitions = 8" in lowered.as_text())

# one trace and one executable per signature
traces = []
cached = runtime_shim.pmap(lambda v: traces.append(1) or v - 1)
for _ in range(100):
    cached(x)
cached(x[:2])
show("cache_traces", len(traces))
show("cache_size", cached._cache_size())

# lowering and compiling
compiled = runtime_shim.pmap(lambda v: lax.psum(v, "i"), "i").lower(x).compile()
show("lower_compile_call", compiled(x))

# global_arg_shapes: legacy raised; the shim warns and ignores it
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    g = runtime_shim.pmap(lambda v: v * 3, global_arg_shapes=((2,),))
show("global_arg_shapes_warning", [w.category.__name__ for w in caught])
show("global_arg_shapes_result", g(x))

runtime_shim.uninstall()
show("uninstalled", [jax.pmap is runtime_shim.pmap, runtime_shim.installed()])
