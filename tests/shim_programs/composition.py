"""pmap composed with jit, grad, vmap, scan, cond, remat, custom_vjp and PRNG keys, and
a small data-parallel training loop in the style of pmap-era code."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from _report import show
from jax import lax

n = jax.device_count()
x = jnp.linspace(-1.0, 1.0, n * 4, dtype=jnp.float32).reshape(n, 4)
body = lambda v: jnp.sin(v) * lax.psum(v, "i") - lax.pmean(v ** 2, "i")  # noqa: E731
p = jax.pmap(body, "i")

show("jit_of_pmap", jax.jit(p)(x))
show("jit_of_pmap_arith", jax.jit(lambda v: p(v * 2).sum(axis=0))(x))
show("grad_of_pmap", jax.grad(lambda v: p(v).sum())(x))
show("value_and_grad_of_pmap", jax.value_and_grad(lambda v: (p(v) ** 2).mean())(x))
show("jvp_of_pmap", jax.jvp(p, (x,), (jnp.ones_like(x),)))
show("vmap_of_pmap", jax.vmap(p)(jnp.stack([x, 2 * x, -x])))
show("vmap_of_pmap_axis1", jax.vmap(p, in_axes=1, out_axes=1)(jnp.stack([x, -x], axis=1)))
show("pmap_of_jit", jax.pmap(jax.jit(body), "i")(x))
show("pmap_of_grad", jax.pmap(jax.grad(lambda v: (body(v) ** 2).sum()), "i")(x))
show("pmap_of_vmap", jax.pmap(jax.vmap(lambda r: r * lax.psum(r, "i")), "i")(x))
show("pmap_of_vmap_named", jax.pmap(jax.vmap(lambda r: lax.psum(r, ("i", "b")), axis_name="b"),
                                    "i")(x))
show("pmap_of_scan", jax.pmap(lambda v: lax.scan(
    lambda c, r: (c + lax.psum(r, "i"), c * r), 0.0, v), "i")(x))
show("pmap_of_cond", jax.pmap(lambda v: lax.cond(lax.axis_index("i") % 2 == 0,
                                                 lambda t: t * 10, lambda t: -t, v), "i")(x))
show("scan_of_pmap", lax.scan(lambda c, _: (jax.pmap(lambda v: v + 1)(c), c.sum()), x, None,
                              length=3))
show("cond_of_pmap", lax.cond(True, lambda v: jax.pmap(lambda t: t * 2)(v), lambda v: v, x))
show("pmap_of_remat", jax.pmap(jax.grad(jax.checkpoint(lambda v: jnp.sum(body(v) ** 2))), "i")(x))


@jax.custom_vjp
def clip_gradient(v):
    return v


clip_gradient.defvjp(lambda v: (v, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))
show("pmap_custom_vjp", jax.pmap(jax.grad(lambda v: jnp.sum(clip_gradient(v) * 3.0)))(x))

# PRNG keys: split per device, fold in the axis index
keys = jax.random.split(jax.random.PRNGKey(0), n)
show("random_per_device", jax.pmap(lambda k: jax.random.normal(k, (3,)))(keys))
show("random_fold_in", jax.pmap(lambda k, v: v + jax.random.uniform(
    jax.random.fold_in(k, lax.axis_index("i")), (4,)), "i", in_axes=(None, 0))(
        jax.random.PRNGKey(1), x))
show("key_outputs", jax.random.key_data(jax.pmap(lambda k: jax.random.split(k, 2))(keys)))

# data-parallel SGD on a linear model, pmap-era style
rng = np.random.RandomState(0)
w_true = rng.normal(size=(3,)).astype(np.float32)
inputs = rng.normal(size=(n, 16, 3)).astype(np.float32)
targets = inputs @ w_true + 0.01 * rng.normal(size=(n, 16)).astype(np.float32)


def loss_fn(params, xb, yb):
    pred = xb @ params["w"] + params["b"]
    return jnp.mean((pred - yb) ** 2)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, xb, yb):
    loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
    grads = lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p_, g: p_ - 0.1 * g, params, grads)
    return params, lax.pmean(loss, "batch")


params = jax.device_put_replicated({"w": jnp.zeros(3), "b": jnp.zeros(())}, jax.local_devices())
losses = []
for _ in range(20):
    params, loss = train_step(params, inputs, targets)
    losses.append(loss[0])
show("train_losses", jnp.stack(losses))
show("train_params", jax.tree_util.tree_map(lambda v: v[0], params))
show("train_params_replicas_equal", bool(jnp.all(params["w"] == params["w"][0])))

eval_step = jax.pmap(lambda params, xb: xb @ params["w"] + params["b"], in_axes=(None, 0))
show("eval_unreplicated_params", eval_step(jax.tree_util.tree_map(lambda v: v[0], params), inputs))
