"""Inputs legacy pmap resharded silently: committed to one device, replicated, on another
mesh or device order, outputs of jit and of pmaps over other devices, the removed
device_put_* helpers, and a cheap unreplicate (``x[0]`` of pmap outputs)."""

import jax
import jax.numpy as jnp
import numpy as np
from _report import devices_of, show, show_error
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

n = jax.device_count()
devs = jax.devices()
x = jnp.arange(n * 2, dtype=jnp.float32).reshape(n, 2)
center = jax.pmap(lambda v: v - lax.pmean(v, "i"), "i")
add = jax.pmap(lambda a, b: a + b * lax.axis_index("i"), "i")

mesh = Mesh(np.array(devs), ("data",))
inputs = {
    "on_device_0": jax.device_put(x, devs[0]),
    "on_device_5": jax.device_put(x, devs[5]),
    "replicated": jax.device_put(x, NamedSharding(mesh, P())),
    "sharded_other_name": jax.device_put(x, NamedSharding(mesh, P("data"))),
    "sharded_other_order": jax.device_put(
        x, NamedSharding(Mesh(np.array(devs[::-1]), ("r",)), P("r"))),
    "column_sharded": jax.device_put(
        jnp.arange(n * n, dtype=jnp.float32).reshape(n, n), NamedSharding(mesh, P(None, "data"))),
    "jit_output": jax.jit(lambda v: v * 1.0)(jax.device_put(x, devs[1])),
    "numpy": np.asarray(x),
}
for name, value in inputs.items():
    out = center(value)
    show(f"center[{name}]", out)
    show(f"center_devices[{name}]", devices_of(out))
    show(f"again[{name}]", center(value))  # the same committed input a second time

# pmap outputs over other devices feeding pmaps
tail = jax.pmap(lambda v: v * 2, devices=devs[4:])(x[:4])
show("tail_into_default", jax.pmap(lambda v: v + 1)(tail))
show("tail_into_default_devices", devices_of(jax.pmap(lambda v: v + 1)(tail)))
head = jax.pmap(lambda v: v * 3)(x[:4])
show("head_into_tail", jax.pmap(lambda v: v - 1, devices=devs[4:])(head))
rev = jax.pmap(lambda v: v * 5, devices=devs[::-1])(x)
show("reversed_into_default", center(rev))
none_out = jax.pmap(lambda v: lax.psum(v, "i"), "i", out_axes=None)(x)
show("out_axes_none_into_in_axes_none",
     jax.pmap(lambda a, b: a * b, in_axes=(0, None))(x, none_out))
show("unmapped_committed_elsewhere", jax.pmap(lambda a, b: a * b.sum(), in_axes=(0, None))(
    x, jax.device_put(jnp.arange(2.0), devs[3])))
show("mixed_inputs", add(jax.device_put(x, devs[3]), center(x)))
show("mixed_inputs_numpy", add(np.asarray(x), jax.device_put(x, NamedSharding(mesh, P()))))

# the removed helpers, and their outputs as pmap inputs
rep = jax.device_put_replicated(jnp.arange(3.0), devs)
show("replicated", rep)
show("replicated_devices", devices_of(rep))
show("replicated_into_pmap", center(rep))
tree = jax.device_put_replicated({"w": np.ones((2, 2)), "b": 1.5}, devs[:4])
show("replicated_tree", tree)
shards = jax.device_put_sharded([np.full((2,), float(i)) for i in range(n)], devs)
show("sharded", shards)
show("sharded_into_pmap", center(shards))
pairs = jax.device_put_sharded([(i, np.arange(i, i + 2)) for i in range(4)], devs[4:])
show("sharded_tree", pairs)
show("sharded_tree_devices", devices_of(pairs[1]))
# Python numbers stay weakly typed (so a pmap computes in the bfloat16 of its other operand);
# shards of mixed weak and strong types are refused, as mismatched shapes and dtypes are.
show("weak_types", jax.tree_util.tree_map(lambda v: v.aval.weak_type, (tree, pairs)))
lr = jax.device_put_replicated(0.5, devs)
show("weak_into_pmap", jax.pmap(lambda a, b: (a * b).dtype == jnp.bfloat16)(lr, jnp.ones((n, 2), jnp.bfloat16)))
show_error("mixed_weak_shards", lambda: jax.device_put_sharded([1.5, np.float32(2.5)], devs[:2]))
show_error("mismatched_shards", lambda: jax.device_put_sharded([np.ones((2, 3)), np.ones((3, 2))], devs[:2]))

# x[0] / tree_map(x[0]) on pmap outputs (what flax's unreplicate does)
out = center(x)
show("index_0", out[0])
show("index_3", out[3])
show("tree_first", jax.tree_util.tree_map(lambda v: v[0], {"a": out, "b": tail}))
show("first_of_out_axes_1", jax.pmap(lambda v: v * 2, out_axes=1)(x)[0])
