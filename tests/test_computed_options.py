"""Options the wrapper takes where the signature or the value is known only at run time: static
broadcasted arguments of a signature the wrapper cannot repeat (programs: fixtures/programs/
static_unknown_signature.py), and a computed axis_name (computed_axis_name.py); what it cannot
express keeps the shim, with the reason."""

from __future__ import annotations

import pytest

from pmap_migrate.engine import lint_bytes
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

RULES = all_rules()
HEAD = "import jax\n\ndef make():\n    def step(x, n):\n        return x * n\n    return step\n\n"


def _fixed(code: str) -> str:
    outcome = fix_bytes(code.encode(), "m.py", RULES, unsafe=True)
    assert outcome.fixed is not None
    return outcome.fixed.decode()


def _summary(code: str) -> str:
    result = lint_bytes(code.encode(), "m.py", RULES)
    (finding,) = [d for d in result.diagnostics if d.code == "PM101"]
    assert finding.fix is not None
    return finding.fix.summary


def test_static_positions_of_an_unknown_signature_go_to_the_helper_and_to_jit():
    code = HEAD + "train = jax.pmap(make(), axis_name='i', static_broadcasted_argnums=(1,))\nout = train(xs, 2)\n"
    fixed = _fixed(code)
    assert "import runtime_shim" not in fixed and "runtime_shim.pmap(" not in fixed
    # make() is evaluated where pmap evaluated it; the helper leaves position 1 as it is, jit hashes it
    assert "train = jax.jit(_shard_mapped(make(), 'i', static_broadcasted_argnums=(1,)), static_argnums=(1,))\n" \
        in fixed
    compile(fixed, "fixed.py", "exec")


@pytest.mark.parametrize("code", [
    # keyword arguments: the helper maps them on axis 0 as legacy pmap did, whatever the signature
    HEAD + "train = jax.pmap(make(), static_broadcasted_argnums=(1,))\nout = train(xs, n=2)\n",
    HEAD + "train = jax.pmap(make(), static_broadcasted_argnums=(1,))\nrun(train)\n",
    # the helper's own names are its locals: a mapped function of the same name is the one called
    HEAD + "dynamic = make()\ntrain = jax.pmap(dynamic, static_broadcasted_argnums=(1,))\nout = train(xs, 2)\n",
])
def test_the_helper_applies_static_positions_at_run_time_whatever_the_signature(code):
    summary = _summary(code)
    assert "runtime_shim" not in summary, summary
    fixed = _fixed(code)
    assert "import runtime_shim" not in fixed and "static_broadcasted_argnums=(1,)), static_argnums=(1,))" in fixed


def test_a_multi_process_program_passes_static_positions_of_an_unknown_signature_on_too():
    """`_global_pmap` takes them as pmap did (program: fixtures/programs_multiprocess/
    computed_options.py, on two processes)."""
    code = (HEAD + "train = jax.pmap(make(), axis_name='i', static_broadcasted_argnums=(1,))\n"
            "out = train(xs, 2)\nprint(jax.process_index())\n")
    assert "runtime_shim" not in _summary(code)
    fixed = _fixed(code)
    assert "train = _global_pmap(make(), 'i', static_broadcasted_argnums=(1,))\n" in fixed, fixed
    assert "import runtime_shim" not in fixed and "runtime_shim.pmap(" not in fixed


def test_what_the_wrapper_cannot_express_keeps_the_shim():
    code = (HEAD.replace("(x, n)", "(x, y, n)") + "train = jax.pmap(make(), axis_name='i', "
            "static_broadcasted_argnums=(2,), in_axes=(0, None))\nout = train(xs, 1, 2)\n"
            "print(jax.process_index())\n")
    summary = _summary(code)
    reason = "a per-argument in_axes with an unknown signature"
    assert "runtime_shim.pmap" in summary and reason in summary, summary
    assert "import runtime_shim" in _fixed(code)


# A computed axis_name is read once where pmap read it; program fixtures/programs/computed_axis_name.
AXIS_HEAD = "import jax\nfrom jax import lax\n\ndef body(x):\n    return x\n\n"


def test_a_computed_axis_name_is_read_once_where_pmap_read_it():
    """A pmap built where it is used takes the compact form in place: its axis name is read there,
    once per use, as pmap read it (the helper gives the same function for the same options)."""
    fixed = _fixed(AXIS_HEAD + "def run(self, x):\n    return jax.pmap(body, axis_name=self.axis)(x)\n")
    assert "    return jax.jit(_shard_mapped(body, self.axis))(x)\n" in fixed, fixed
    assert "import runtime_shim" not in fixed
    fixed = _fixed(AXIS_HEAD + "def run(x):\n    name = 'rows'\n    return jax.pmap(body, name)(x)\n")
    assert "    return jax.jit(_shard_mapped(body, name))(x)\n" in fixed, fixed


def test_a_computed_axis_name_used_by_position_keeps_the_wrapper_where_it_is_read():
    # `name` is local: the pmap must not be hoisted to module level, where it is unbound
    fixed = _fixed(AXIS_HEAD + "def run(x, name):\n    return jax.pmap(body, name)(x)\n")
    assert fixed.index("def run(x, name):") < fixed.index("jax.jit(_shard_mapped(body, name))(x)")


def test_a_computed_axis_name_in_a_multi_process_program_is_read_where_pmap_read_it():
    """`_global_pmap` takes the expression as pmap did, evaluated in its place (program:
    fixtures/programs_multiprocess/computed_options.py, on two processes)."""
    code = AXIS_HEAD + "step = jax.pmap(body, axis_name=make_axis())\nout = step(xs)\nprint(jax.process_index())\n"
    assert "runtime_shim" not in _summary(code)
    assert "step = _global_pmap(body, make_axis())\n" in _fixed(code)


def test_a_computed_axis_name_of_a_decorator_in_a_multi_process_program_is_passed_as_written():
    """The decorator's pmap becomes `@functools.partial(_global_pmap, axis_name=<expression>)`,
    read where the decorator read it; no name bound to the axis before it."""
    code = ("import functools\nimport jax\nfrom jax import lax\n\nAXES = {'b': 'data'}\n\n\n"
            "@functools.partial(jax.pmap, axis_name=AXES['b'])\ndef total(x):\n    return lax.psum(x, AXES['b'])\n\n\n"
            "print(jax.process_index(), total(xs))\n")
    fixed = _fixed(code)
    assert "@functools.partial(_global_pmap, axis_name=AXES['b'])\ndef total(x):\n" in fixed, fixed
    assert "_axis = " not in fixed and "runtime_shim" not in _summary(code)


# Options computed from literals are taken as their values; program fixtures/programs/folded_options.
FOLD_HEAD = "import jax\n\ndef f(a, b, c):\n    return a + b + c\n\n"


def test_options_computed_from_literals_are_taken_as_their_values():
    fixed = _fixed(FOLD_HEAD + "step = jax.pmap(f, in_axes=(0,) * 2 + (None,), donate_argnums=list(range(2)))\n"
                   "out = step(x, y, z)\n")
    assert "import runtime_shim" not in fixed
    assert "step = jax.jit(_shard_mapped(f, in_axes=(0, 0, None)), donate_argnums=(0, 1))" in fixed
    # argnums take any iterable (legacy accepted `donate_argnums=range(2)`, checked on 0.7.2)
    fixed = _fixed(FOLD_HEAD + "step = jax.pmap(f, donate_argnums=range(2))\nout = step(x, y, z)\n")
    assert "import runtime_shim" not in fixed and "step = jax.jit(_shard_mapped(f), donate_argnums=(0, 1))" in fixed
    # `range` is not the builtin here: not folded; jit's own option, it moves there as written
    # (evaluated once, where pmap evaluated it, to what legacy pmap was given)
    fixed = _fixed("range = lambda n: [0]\n" + FOLD_HEAD
                   + "step = jax.pmap(f, donate_argnums=list(range(2)))\nout = step(x, y, z)\n")
    assert "import runtime_shim" not in fixed
    assert "step = jax.jit(_shard_mapped(f), donate_argnums=list(range(2)))" in fixed, fixed


@pytest.mark.parametrize("code, reason", [
    # a list prefix matches list outputs only: legacy refused tuple outputs with it
    (FOLD_HEAD + "step = jax.pmap(lambda v: (v, v), out_axes=[0, 0])\nout = step(x)\n",
     "an out_axes list (legacy pmap matched it to list outputs only)"),
    # the arguments are a tuple: legacy refused a list in_axes (a ValueError at the call, 0.7.2)
    (FOLD_HEAD + "step = jax.pmap(f, in_axes=[0, None, 0])\nout = step(x, y, z)\n",
     "an in_axes list (legacy pmap refused it: the arguments are a tuple)"),
    (FOLD_HEAD + "step = jax.pmap(f, in_axes=list((0, None, 0)))\nout = step(x, y, z)\n",
     "an in_axes list (legacy pmap refused it: the arguments are a tuple)"),
    # a range is no container of axes: legacy raised TypeError for `in_axes=range(3)` (0.7.2)
    (FOLD_HEAD + "step = jax.pmap(f, in_axes=range(3))\nout = step(x, y, z)\n", "`range(3)` is not a literal axis"),
])
def test_what_is_not_a_literal_in_disguise_keeps_the_shim(code, reason):
    summary = _summary(code)
    assert "runtime_shim.pmap" in summary and reason in summary, summary
