"""Nested pmaps: pmap of pmap, pmapped functions calling pmapped functions, collectives over
the inner axis, the outer axis and both, options on the inner pmap, three levels, siblings."""

import functools

import jax
import jax.numpy as jnp
from _report import devices_of, show, show_error
from jax import lax

n = jax.device_count()
x = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)


def stats(v, inner=4):
    return dict(
        inner_sum=lax.psum(v, "j"),
        outer_sum=lax.psum(v, "i"),
        both_sum=lax.psum(v, ("i", "j")),
        inner_mean=lax.pmean(v, "j"),
        inner_index=lax.axis_index("j"),
        outer_index=lax.axis_index("i"),
        counts=(lax.psum(1, "i"), lax.psum(1, "j")),
        gather_j=lax.all_gather(v, "j"),
        gather_i=lax.all_gather(v.sum(), "i"),
        shift_j=lax.ppermute(v, "j", [(k, (k + 1) % inner) for k in range(inner)]),
    )


nested = jax.pmap(jax.pmap(stats, "j"), "i")
out = nested(x)
show("pmap_of_pmap", out)
show("pmap_of_pmap_devices", devices_of(out["inner_sum"]))
show("pmap_of_pmap_again", nested(x + 1))
show("pmap_of_pmap_4x2", jax.pmap(jax.pmap(functools.partial(stats, inner=2), "j"), "i")(
    x.reshape(4, 2, 3)))


@functools.partial(jax.pmap, axis_name="j")
def normalize(v):
    return v - lax.pmean(v, "j")


@functools.partial(jax.pmap, axis_name="i")
def step(v, scale):
    centered = normalize(v * scale)  # a pmapped function called inside a pmapped one
    return centered + lax.psum(centered.sum(), "i"), lax.pmax(v, ("i",))


show("pmapped_calls_pmapped", step(x, jnp.arange(2.0) + 1))

# the inner pmap is applied to values the outer body computed
show("inner_on_computed", jax.pmap(
    lambda v: jax.pmap(lambda w: lax.psum(w * w, ("i", "j")), "j")(jnp.cos(v) + 1.0), "i")(x))

# options on the inner pmap
inner_opts = jax.pmap(lambda a, b: (a * b, lax.psum(a, "j")), "j",
                      in_axes=(1, None))
show("inner_options", jax.pmap(lambda a, b: inner_opts(a, b), "i", in_axes=(0, None))(
    x.transpose(0, 2, 1), 2.0))
show("inner_static", jax.pmap(lambda v: jax.pmap(
    lambda w, k: w ** k + lax.axis_index("i"), "j", static_broadcasted_argnums=1)(v, 2), "i")(x))
show("inner_kwargs", jax.pmap(lambda v: jax.pmap(lambda a, b: a - b, "j")(v, b=v * 2), "i")(x))

# three levels, 2 x 2 x 2
y = jnp.arange(2 * 2 * 2 * 2, dtype=jnp.float32).reshape(2, 2, 2, 2)
three = jax.pmap(jax.pmap(jax.pmap(
    lambda v: (lax.psum(v, "k"), lax.psum(v, ("i", "k")), lax.axis_index("j") * 10
               + lax.axis_index("k")), "k"), "j"), "i")
show("three_levels", three(y))

# smaller than the device count: 2 x 2 on 8 devices
small = jax.pmap(jax.pmap(lambda v: lax.psum(v, ("i", "j")), "j"), "i")(x[:, :2])
show("nested_small", small)
show("nested_small_devices", devices_of(small))

# sibling inner pmaps in one body
def siblings(v):
    a = jax.pmap(lambda w: lax.psum(w, "j"), "j")(v)
    b = jax.pmap(lambda w: lax.pmean(w, "j") * lax.psum(1, "i"), "j")(v * 2)
    c = jax.pmap(lambda w: lax.psum(w, "k"), "k")(v[:2])
    return a, b, c


show("siblings", jax.pmap(siblings, "i")(x))

# autodiff and jit around and inside nested pmaps
def loss(v):
    return jax.pmap(jax.pmap(lambda w: lax.pmean(w ** 2, ("i", "j")), "j"), "i")(v).sum()


show("grad_of_nested", jax.grad(loss)(x))
show("jit_of_nested", jax.jit(lambda v: nested(v)["both_sum"])(x))
show("nested_grad_inside", jax.pmap(jax.pmap(jax.grad(lambda w: (w * lax.psum(w, "j")).sum()),
                                             "j"), "i")(x))
cosine = jax.pmap(lambda z: jnp.cos(z) * 3.0, "j")
show("grad_through_inner", jax.pmap(lambda v: jax.grad(lambda w: cosine(w).sum())(v), "i")(x))
show("jvp_through_inner", jax.pmap(lambda v: jax.jvp(cosine, (v,), (v + 1,))[1], "i")(x))
show("vmap_of_inner", jax.pmap(lambda v: jax.vmap(cosine)(jnp.stack([v, v * 2])), "i")(x))
# the derivative taken around a traced function that calls the inner pmap (legacy's own pmap
# raises an AssertionError where that function is jitted)
show("grad_through_checkpoint_of_inner", jax.pmap(
    lambda v: jax.grad(lambda w: jax.checkpoint(cosine)(w).sum())(v), "i")(x))
show("grad_through_scan_of_inner", jax.pmap(lambda v: jax.grad(lambda w: lax.scan(
    lambda c, _: (cosine(c), None), w, None, length=2)[0].sum())(v), "i")(x))
show("scan_of_inner", jax.pmap(lambda v: lax.scan(
    lambda c, _: (cosine(c) + lax.psum(c, "i"), None), v, None, length=2)[0], "i")(x))

# the outer pmap names every device the nested computation uses
devs = jax.devices()
show("nested_outer_devices", jax.pmap(jax.pmap(lambda v: lax.psum(v, "j"), "j"), "i",
                                      devices=devs[::-1])(x))
show("nested_outer_devices_ids", devices_of(jax.pmap(jax.pmap(lambda v: v, "j"), "i",
                                                     devices=devs[4:])(x[:, :2])))

# errors
show_error("err_nested_devices_short", lambda: jax.pmap(jax.pmap(lambda v: v, "j"), "i",
                                                        devices=devs[:1])(x[:1]))
show_error("err_nested_devices_extra", lambda: jax.pmap(jax.pmap(lambda v: v, "j"), "i",
                                                        devices=devs)(x[:, :2]))
show_error("err_nested_too_big", lambda: jax.pmap(jax.pmap(lambda v: v, "j"), "i")(
    jnp.ones((4, 4, 2))))
show_error("err_nested_devices", lambda: jax.pmap(jax.pmap(
    lambda v: v, "j", devices=jax.devices()[:4]), "i")(x))

# outputs of nested pmaps as inputs of flat pmaps over fewer devices, and back
flat = jax.pmap(lambda v: v.sum(axis=0) * lax.psum(1, "i"), "i")(out["inner_sum"])
show("nested_into_flat", flat)
show("flat_into_nested", nested(jax.pmap(lambda v: v * 2)(x))["both_sum"])
