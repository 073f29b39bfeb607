"""Two-process data-parallel training with legacy pmap (run once per process).

usage: data_parallel.py COORDINATOR_PORT PROCESS_ID

Each process owns 4 CPU devices and feeds host-local batches sized by
``local_device_count()``; gradients are averaged over all 8 devices.
"""

import functools
import sys

import jax

jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{sys.argv[1]}", num_processes=2,
                           process_id=int(sys.argv[2]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _report import devices_of, show  # noqa: E402
from jax import lax  # noqa: E402

me = jax.process_index()
local = jax.local_device_count()
show("topology", [jax.process_count(), jax.device_count(), local])

# collectives span both processes; inputs and outputs are host-local
ids = jnp.arange(local, dtype=jnp.float32) + local * me
collect = jax.pmap(lambda v: (lax.psum(v, "i"), lax.axis_index("i"), lax.all_gather(v, "i"),
                              lax.pmax(v, "i")), "i")
out = collect(ids)
show("collectives", out)
show("output_is_host_local", [list(out[0].shape), devices_of(out[0])])
show("out_axes_none", jax.pmap(lambda v: lax.psum(v * v, "i"), "i", out_axes=None)(ids))
show("in_axes_none", jax.pmap(lambda v, s: v * s + lax.psum(1, "i"), "i", in_axes=(0, None))(
    np.asarray(ids), 3.0))
show("numpy_input", jax.pmap(lambda v: lax.pmean(v, "i"), "i")(np.arange(local * 2.0).reshape(
    local, 2) + 10 * me))
show("committed_one_device", jax.pmap(lambda v: lax.psum(v, "i"), "i")(
    jax.device_put(ids, jax.local_devices()[1])))

# data-parallel SGD: each process has its own slice of the data
rng = np.random.RandomState(0)
w_true = rng.normal(size=(4,)).astype(np.float32)
all_x = rng.normal(size=(2 * local, 8, 4)).astype(np.float32)
all_y = all_x @ w_true
xs, ys = all_x[me * local:(me + 1) * local], all_y[me * local:(me + 1) * local]


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, xb, yb):
    def loss_fn(p):
        return jnp.mean((xb @ p["w"] + p["b"] - yb) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = lax.pmean(grads, "batch")
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), lax.pmean(
        loss, "batch")


params = jax.device_put_replicated({"w": jnp.zeros(4), "b": jnp.zeros(())}, jax.local_devices())
losses = []
for _ in range(15):
    params, loss = train_step(params, xs, ys)
    losses.append(float(loss[0]))
show("losses", losses)
show("params", jax.tree_util.tree_map(lambda v: v[0], params))
show("params_shape", list(params["w"].shape))
show("params_devices", devices_of(params["w"]))

