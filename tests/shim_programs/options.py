"""Legacy pmap options: collectives, in_axes / out_axes, statics, donation, devices,
backend, axis_size, keyword arguments, small leading axes, lowering, legacy errors."""

import functools
from collections import namedtuple

import jax
import jax.numpy as jnp
import numpy as np
from _report import devices_of, show, show_error
from jax import lax

n = jax.device_count()
devs = jax.devices()
x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3)


def collectives(v):
    perm = [(k, (k + 1) % n) for k in range(n)]
    return dict(psum=lax.psum(v, "i"), pmean=lax.pmean(v, "i"), pmax=lax.pmax(v, "i"),
                index=lax.axis_index("i"), gather=lax.all_gather(v, "i"),
                shift=lax.ppermute(v, "i", perm), count=lax.psum(1, "i"))


show("collectives", jax.pmap(collectives, axis_name="i")(x))
show("devices_default", devices_of(jax.pmap(lambda v: v)(x)))

# in_axes
show("in_axes_none", jax.pmap(lambda a, b: a * b, in_axes=(0, None))(x, jnp.arange(3.0)))
show("in_axes_1", jax.pmap(lambda a: a.sum(), in_axes=1)(x.T))
show("in_axes_2", jax.pmap(lambda a: a[0] * 2, in_axes=2)(jnp.stack([x.T, -x.T])))
show("in_axes_pytree", jax.pmap(lambda d, s: d["a"] + d["b"][0].sum() * d["b"][1] + s,
                                in_axes=({"a": 0, "b": (1, None)}, None))(
    {"a": x, "b": (x.T, 5.0)}, jnp.float32(0.5)))
show("in_axes_list_arg", jax.pmap(lambda xs: xs[0] - xs[1])([x, 2 * x]))
show("scalar_broadcast", jax.pmap(lambda a, s: a + s, in_axes=(0, None))(x, 2.5))
show("numpy_input", jax.pmap(lambda a: a * a)(np.arange(n, dtype=np.int32)))

# out_axes
show("out_axes_1", jax.pmap(lambda a: a * 2, out_axes=1)(x))
show("out_axes_none", jax.pmap(lambda a: lax.psum(a, "i"), "i", out_axes=None)(x))
show("out_axes_pytree", jax.pmap(lambda a: {"m": a, "r": lax.pmean(a, "i")}, "i",
                                 out_axes={"m": 0, "r": None})(x))
show("out_axes_tuple", jax.pmap(lambda a: (a, a.sum(), lax.psum(a.sum(), "i")), "i",
                                out_axes=(1, 0, None))(x))
Pair = namedtuple("Pair", "left right")
show("out_namedtuple", jax.pmap(lambda a: Pair(a + 1, a.sum()))(x))
show("out_scalar_python", jax.pmap(lambda a: 3.0)(x))

# dtypes, weak types, typed PRNG keys, empty outputs
show("bool_input", jax.pmap(lambda a: ~a)(x > 10))
show("int8_times_python_int", jax.pmap(lambda a, s: a * s, in_axes=(0, None))(
    jnp.arange(n, dtype=jnp.int8), 3))
show("complex_output", jax.pmap(lambda a: (a * 1j).imag)(x))
show("typed_keys", jax.random.key_data(jax.pmap(lambda k: jax.random.split(k)[0])(
    jax.random.split(jax.random.key(0), n))))
show("returns_none", jax.pmap(lambda a: None)(x))
show("returns_empty_tuple", jax.pmap(lambda a: ())(x))

# keyword arguments are mapped over axis 0
show("kwargs", jax.pmap(lambda a, b: a - b)(x, b=x * 3))
show("kwargs_in_axes", jax.pmap(lambda a, b, c: a * b + c, in_axes=(1, None))(x.T, 2.0, c=x))

# static_broadcasted_argnums: one trace per distinct value, like legacy
traces = []


@functools.partial(jax.pmap, axis_name="i", static_broadcasted_argnums=(1,))
def scaled(a, k):
    traces.append(k)
    return a * k + lax.axis_index("i")


show("static_2", scaled(x, 2))
show("static_3", scaled(x, 3))
show("static_2_again", scaled(x, 2))
show("static_traces", len(traces))
calls = []
counted = jax.pmap(lambda a: calls.append(a.shape) or a * 2)
for _ in range(50):
    counted(x)
counted(x[:4])
counted(jnp.ones((n, 5)))
show("traces_over_52_calls", len(calls))
show("static_middle", jax.pmap(lambda a, op, b: op(a, b), static_broadcasted_argnums=1,
                               in_axes=(0, None, 0))(x, jnp.subtract, x * 2))
show_error("static_too_few", lambda: jax.pmap(lambda a, k: a, static_broadcasted_argnums=1)(x))

# donation (the donated input is invalidated on CPU too)
y = x + 1
show("donate", jax.pmap(lambda a, b: a * 2 + b, donate_argnums=0)(y, x))
show("donate_deleted", [y.is_deleted(), x.is_deleted()])

# devices / backend / axis_size
tail = jax.pmap(lambda a: lax.psum(a, "i"), "i", devices=devs[4:])(x[:4])
show("devices_tail", tail)
show("devices_tail_ids", devices_of(tail))
rev = jax.pmap(lambda a: a + lax.axis_index("i"), "i", devices=devs[::-1])(x)
show("devices_reversed", rev)
show("backend_cpu", jax.pmap(lambda a: a * 3, backend="cpu")(x))
show("axis_size", jax.pmap(lambda a: lax.psum(a, "i"), "i", axis_size=n)(x))

# leading axis smaller than the device count
small = jax.pmap(lambda a: lax.psum(a, "i") + lax.axis_index("i"), "i")(x[:3])
show("small_3", small)
show("small_3_ids", devices_of(small))
show("small_1", jax.pmap(lambda a: lax.psum(a, "i"), "i")(x[:1]))

# decorator forms and lowering
@jax.pmap
def plain(a):
    return a ** 2


@functools.partial(jax.pmap, axis_name="batch", in_axes=(0, None))
def partial_form(a, b):
    return lax.pmean(a * b, "batch")


show("decorator", plain(x))
show("partial_decorator", partial_form(x, 3.0))
lowered = partial_form.lower(x, 3.0)
show("lower_compile", lowered.compile()(x, 3.0))
show("lower_text_is_str", isinstance(lowered.as_text(), str))
show("wraps_name", plain.__name__)
show("eval_shape", jax.eval_shape(plain, x).shape)

# errors legacy pmap raised
show_error("err_too_many", lambda: jax.pmap(lambda a: a)(jnp.ones((n + 1, 2))))
show_error("err_inconsistent", lambda: jax.pmap(lambda a, b: a + b)(x, x[:4]))
show_error("err_rank0", lambda: jax.pmap(lambda a: a)(jnp.float32(1.0)))
show_error("err_not_prefix", lambda: jax.pmap(lambda a, b: a, in_axes=(0, 0, 0))(x, x))
show_error("err_no_mapped", lambda: jax.pmap(lambda a: a, in_axes=None)(x))
show_error("err_no_args", lambda: jax.pmap(lambda: 1.0)())
show_error("err_devices_count", lambda: jax.pmap(lambda a: a, devices=devs[:2])(x[:4]))
show_error("err_devices_empty", lambda: jax.pmap(lambda a: a, devices=[])(x))
show_error("err_bad_in_axes", lambda: jax.pmap(lambda a: a, in_axes=0.5))
show_error("err_not_callable", lambda: jax.pmap(3))
show_error("err_axis_size", lambda: jax.pmap(lambda a: a, axis_size=3)(x))
show_error("err_out_not_prefix", lambda: jax.pmap(lambda a: (a, a), out_axes=(0, 0, 0))(x))


def empty_axis_with_a_collective():
    """Legacy: a ZeroDivisionError when lowering the psum (a body without a collective aborted
    the process in XLA: not run); jaxline's tests expect that error."""
    try:
        jax.pmap(lambda a: lax.psum(a, "i"), axis_name="i")({"a": jnp.zeros((0,))})
    except ZeroDivisionError:
        return "ZeroDivisionError"
    return "nothing raised"


show("err_empty_axis_psum", empty_axis_with_a_collective())
show_error("err_unbound_axis", lambda: jax.pmap(lambda a: lax.psum(a, "k"), "i")(x))
show_error("err_not_prefix_kw", lambda: jax.pmap(lambda a, b: a, in_axes=(0, 0, 0))(x, b=x))
show_error("err_not_prefix_dict",
           lambda: jax.pmap(lambda a, b: a, in_axes=({"a": 0}, 0))({"b": x}, x))
show_error("err_not_prefix_type",
           lambda: jax.pmap(lambda a: a, in_axes=([0],))((x,)))
show_error("err_inconsistent_kw", lambda: jax.pmap(lambda a, b: a)(x, b={"q": x[:4]}))
show_error("err_inconsistent_many", lambda: jax.pmap(lambda *a: a[0])(x, x, x[:4], x[:2], x[:2]))
