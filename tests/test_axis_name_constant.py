"""`axis_name` held by a module constant or computed: the rewrite reads it where pmap read it --
in the compact form it is the helper's argument at the site (`jax.jit(_shard_mapped(f, AXIS))`);
`fixtures/programs/positional_axis_name.py` and `fixtures/programs/computed_axis_name.py` run it."""

from __future__ import annotations

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

BODY = ("def f(x):\n    return lax.psum(x, axis_name=AXIS)\n"
        "step = jax.pmap(f, axis_name=AXIS)\nout = step(xs)\n")


def fixed(source: str) -> str:
    outcome = fix_bytes(("import jax\nfrom jax import lax\n" + source).encode(), "m.py", all_rules(), unsafe=True)
    assert outcome.error is None, outcome.error
    return outcome.fixed.decode()


def test_a_module_constant_names_the_mesh_axis():
    text = fixed('AXIS = "data"\n' + BODY)
    assert "import runtime_shim" not in text and "runtime_shim.pmap(" not in text
    assert "step = jax.jit(_shard_mapped(f, AXIS))" in text


def test_a_rebound_or_non_literal_name_is_read_where_pmap_read_it():
    for head in ('AXIS = "data"\nAXIS = "batch"\n', "AXIS = make_name()\n", 'AXIS = "data"\ndef g():\n    global AXIS\n    AXIS = "x"\n'):
        text = fixed(head + BODY)
        assert "runtime_shim.pmap(" not in text, head
        # evaluated at the site, when the statement runs: the value pmap read
        assert "step = jax.jit(_shard_mapped(f, AXIS))" in text, head
    text = fixed('def build(AXIS):\n    return jax.pmap(lambda x: x, axis_name=AXIS)\n')
    assert "runtime_shim.pmap(" not in text and "return jax.jit(_shard_mapped(lambda x: x, AXIS))" in text
