"""Nested pmaps in the compact form: every pmap of a nest becomes `_shard_mapped(..., nested=True)`
(the outermost mesh grows an axis for each pmap run in its body) or none does: a shard_map in a
pmap kept on the shim, or the shim's pmap in a shard_map, would not nest. The values are checked by
running `fixtures/programs/nested_compact.py` (legacy 0.7.2 vs fixed, tests/test_rewrite_programs.py)."""

from __future__ import annotations

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules


def _fixed(code: str) -> str:
    outcome = fix_bytes(code.encode(), "m.py", all_rules(), unsafe=True)
    assert outcome.fixed is not None
    return outcome.fixed.decode()


NEST_THROUGH_A_HELPER = """\
import jax
from jax import lax

inner = jax.pmap(lambda v: lax.psum(v, ("a", "b")), "b"{inner_options})


def body(v):
    return inner(v) * 2


outer = jax.pmap(body, "a"{outer_options})
"""


def test_a_nest_through_a_called_function_takes_the_compact_form_at_both_levels():
    fixed = _fixed(NEST_THROUGH_A_HELPER.format(inner_options="", outer_options=""))
    assert 'inner = jax.jit(_shard_mapped(lambda v: lax.psum(v, ("a", "b")), "b", nested=True))' in fixed
    assert 'outer = jax.jit(_shard_mapped(body, "a", nested=True))' in fixed
    assert "runtime_shim" not in fixed and "jax.pmap" not in fixed
    assert "def _shard_mapped(f, axis_name=None, nested=False):" in fixed


@pytest.mark.parametrize("inner_options, outer_options, why", [
    ("", ", devices=jax.devices()[:2]", "legacy refused nested pmaps given devices"),
    (', axis_size=2', "", "an option the compact form does not take"),
    ("", ', in_axes=AXES', "options that are not literals"),
])
def test_a_nest_one_pmap_of_which_cannot_take_the_compact_form_keeps_every_pmap_on_the_shim(
        inner_options, outer_options, why):
    fixed = _fixed(NEST_THROUGH_A_HELPER.format(inner_options=inner_options, outer_options=outer_options))
    assert "nested=True" not in fixed and "_shard_mapped" not in fixed, why
    assert fixed.count("runtime_shim.pmap(") == 2, why


def test_a_nest_that_names_one_axis_twice_keeps_the_shim():
    # legacy: the inner 'i' shadows the outer one; one mesh cannot hold two axes of one name
    fixed = _fixed("import jax\nstep = jax.pmap(jax.pmap(lambda x: x, 'i'), 'i')\n")
    assert "nested=True" not in fixed and fixed.count("runtime_shim.pmap(") == 2


def test_unnamed_nested_pmaps_get_an_axis_each():
    fixed = _fixed("import jax\nstep = jax.pmap(jax.pmap(lambda x: x, in_axes=1), in_axes=0)\n")
    assert "step = jax.jit(_shard_mapped(jax.jit(_shard_mapped(lambda x: x, in_axes=1, nested=True)), " \
        "in_axes=0, nested=True))" in fixed
    assert "axis = f\"i{id(getattr(f, '__code__', f))}\" if nested else \"i\"" in fixed  # (the helper's)


GROUPED_NEST = """\
import jax
from jax import lax


def step(x):
    f = lambda v: v - lax.psum(v, "i"{groups})
    return jax.pmap(jax.pmap(f, "i"), "j")(x)
"""


def test_a_nest_whose_function_holds_a_collective_over_replica_groups_keeps_the_shim():
    # legacy pmap ran `axis_index_groups` across a nest's devices; the vmap an inner pmap becomes
    # refuses it (JAX's testNestedPmapReplicaGroups), and so does shard_map
    grouped = _fixed(GROUPED_NEST.format(groups=", axis_index_groups=((0, 1),)"))
    assert "nested=True" not in grouped and grouped.count("runtime_shim.pmap(") == 2
    assert "# pmap-migrate: kept on the legacy shim: `axis_index_groups` in a nest of pmaps" in grouped
    plain = _fixed(GROUPED_NEST.format(groups=""))
    assert plain.count("nested=True") == 2 and "runtime_shim" not in plain
