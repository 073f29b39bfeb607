"""Generated code reuses a name the module already binds to the same thing (issue 25, point 4):
`partial` where `from functools import partial` exists, not a second `import functools`."""

from __future__ import annotations

import textwrap

import libcst as cst

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.importreuse import reuse_bound_names
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.fixes.spec import ImportSpec

FUNCTOOLS = ImportSpec("functools")
P = ImportSpec("jax.sharding", "PartitionSpec", "P")


def reused(code: str, *adds: ImportSpec) -> tuple[str, list[ImportSpec]]:
    module, left = reuse_bound_names(cst.parse_module(textwrap.dedent(code)), list(adds))
    return module.code, left


def test_functools_partial_becomes_the_modules_partial():
    code, left = reused('''\
        from functools import partial as bind
        import jax

        @functools.partial(jax.jit, donate_argnums=(0,))
        def step(x):
            return x
        ''', FUNCTOOLS, ImportSpec("jax"))
    assert "@bind(jax.jit, donate_argnums=(0,))" in code and "functools." not in code
    assert left == [ImportSpec("jax")]


def test_a_name_bound_to_the_same_thing_replaces_the_alias_the_fix_wanted():
    code, left = reused('''\
        from jax.sharding import PartitionSpec
        import jax

        def f(x):
            return jax.shard_map(g, in_specs=P("i"), out_specs=P())(x)
        ''', P)
    assert 'in_specs=PartitionSpec("i"), out_specs=PartitionSpec()' in code and left == []


def test_nothing_is_reused_where_it_could_mean_something_else():
    cases = [
        # functools is also needed for another attribute that the module does not bind
        ("from functools import partial\n@functools.partial(g)\n@functools.wraps(h)\ndef f(): pass\n", FUNCTOOLS),
        # `partial` is rebound in a function: the generated use there would see that one
        ("from functools import partial\ndef f(partial):\n    return functools.partial(g, partial)\n", FUNCTOOLS),
        # the import comes after the module-level code that uses it
        ("x = functools.partial(g, 1)\nfrom functools import partial\n", FUNCTOOLS),
        # the module binds `functools` itself (the fix's import is then not needed anyway)
        ("import functools as functools\nfrom functools import partial\nx = functools.partial(g)\n", FUNCTOOLS),
        # `P` is the module's own variable somewhere: its uses are not all the fix's
        ("from jax.sharding import PartitionSpec\ndef f(P):\n    return P\ny = P('i')\n", P),
        # no import binds the same thing
        ("from jax.sharding import NamedSharding\ny = P('i')\n", P),
    ]
    for code, spec in cases:
        out, left = reused(code, spec)
        assert (out, left) == (code, [spec]), code


def test_fix_writes_partial_and_adds_no_import_functools(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    path = package / "train.py"
    source = textwrap.dedent('''\
        from functools import partial

        import jax
        from jax import lax


        def add(a, b):
            return a + b


        inc = partial(add, 1)


        @partial(jax.pmap, axis_name="i", donate_argnums=(0,))
        def step(x):
            return lax.psum(x, "i")
        ''')
    outcome = fix_bytes(source.encode(), str(path), all_rules(), unsafe=True, shared=True)
    assert outcome.error is None and outcome.fixed is not None
    text = outcome.fixed.decode()
    assert "@partial(jax.jit, donate_argnums=(0,))" in text, text
    assert "functools" not in text.replace("from functools import partial", ""), text
