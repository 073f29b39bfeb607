"""`axis_name` held by a module constant: the rewrite names the mesh axis by the same constant
(`fixtures/programs/positional_axis_name.py` runs it); anything else that is not a literal is read
once, where pmap read it (`fixtures/programs/computed_axis_name.py`)."""

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
    assert "(AXIS,))" in text and "in_specs=(P(AXIS),), out_specs=P(AXIS)" in text


def test_a_rebound_or_non_literal_name_is_read_where_pmap_read_it():
    # Not one constant: the wrapper reads the value pmap read (tests/test_computed_options.py).
    for head in ('AXIS = "data"\nAXIS = "batch"\n', "AXIS = make_name()\n", 'AXIS = "data"\ndef g():\n    global AXIS\n    AXIS = "x"\n'):
        text = fixed(head + BODY)
        assert "runtime_shim.pmap(" not in text, head
        assert "step_axis = AXIS  # pmap's axis_name, read once where pmap read it" in text, head
        assert ("(step_axis,))" in text and "in_specs=(P(step_axis),), out_specs=P(step_axis)" in text), head
    text = fixed('def build(AXIS):\n    return jax.pmap(lambda x: x, axis_name=AXIS)\n')
    assert "runtime_shim.pmap(" not in text and "    pmapped_mapped_axis = AXIS  # pmap's axis_name" in text
