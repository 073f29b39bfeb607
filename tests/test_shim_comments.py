"""A site the fix keeps on `runtime_shim` says why in the code: a comment above its statement, which
`report` reads back as the site's reason."""

from __future__ import annotations

import textwrap

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.report import shim_sites
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.fixes.edits import SHIM_COMMENT

SOURCE = textwrap.dedent('''\
    import jax


    def run(f, axes, x):
        g = jax.pmap(f, in_axes=axes)
        return g(x)


    class T:
        def go(self, f, x):
            if x is not None:
                return jax.pmap(f, axis_name="i", static_broadcasted_argnums=self.static)(x)


    def use(h):
        return h(jax.pmap)
    ''')


def fixed(source: str = SOURCE, path: str = "m.py") -> str:
    outcome = fix_bytes(source.encode(), path, all_rules(), unsafe=True)
    return source if outcome.fixed is None else outcome.fixed.decode()


def in_project(tmp_path, line_length: int) -> str:
    """A module path in a project whose configuration sets ``line_length`` (a directory of its own:
    each directory's configuration is read once per process)."""
    tmp_path = tmp_path / str(line_length)
    tmp_path.mkdir()
    (tmp_path / "pyproject.toml").write_text(f"[tool.black]\nline-length = {line_length}\n")
    return str(tmp_path / "m.py")


def test_each_shimmed_statement_carries_its_reason_above_it(tmp_path):
    lines = fixed(path=in_project(tmp_path, 79)).splitlines()
    at = {line.strip(): i for i, line in enumerate(lines)}
    shimmed = [i for i, line in enumerate(lines) if "runtime_shim.pmap" in line]
    assert len(shimmed) == 3
    for i in shimmed:
        above = lines[i - 1].strip()
        assert above.startswith("#"), (i, lines[i - 1])
    assert at["# pmap-migrate: kept on the legacy shim: `axes` is not a literal axis"] == shimmed[0] - 1
    assert lines[shimmed[2] - 1].strip() == "# pmap-migrate: kept on the legacy shim: `jax.pmap` passed as a value"
    # the nested one is wrapped to 79 columns at its indentation, continuation lines indented
    assert lines[shimmed[1] - 2].strip() == SHIM_COMMENT.strip()
    assert lines[shimmed[1] - 1].strip() == "#   `static_broadcasted_argnums` is not a literal"
    assert all(len(line) <= 79 for line in lines if line.lstrip().startswith("#"))
    assert lines[shimmed[1] - 1].startswith(" " * 12 + "#")


def test_the_comment_is_wrapped_at_the_files_line_length(tmp_path):
    comment = "            # pmap-migrate: kept on the legacy shim: `static_broadcasted_argnums` is not a literal"
    assert len(comment) == 98
    wide = fixed(path=in_project(tmp_path, 100)).splitlines()
    assert comment in wide  # it fits: one line, not cut at 79
    narrow = fixed(path=in_project(tmp_path, 60)).splitlines()
    comments = [line for line in narrow if line.lstrip().startswith("# pmap-migrate") or line.lstrip().startswith("#   ")]
    assert comments and all(len(line) <= 60 for line in comments), comments
    nested = [line.strip() for line in narrow if line.startswith(" " * 12 + "#")]
    assert nested == ["# pmap-migrate: kept on the legacy shim:", "#   `static_broadcasted_argnums` is not a", "#   literal"]


def test_the_comment_is_written_once():
    once = fixed()
    assert once != SOURCE
    assert fixed(once) == once
    assert once.count(SHIM_COMMENT.strip()) == 3


def test_a_decorated_definition_gets_the_comment_above_its_decorators():
    source = textwrap.dedent('''\
        import functools

        import jax

        AXES = (0, None)


        @functools.partial(jax.pmap, in_axes=AXES, static_broadcasted_argnums=(2,))
        def step(x, y, k):
            return x + y
        ''')
    lines = fixed(source).splitlines()
    decorator = next(i for i, line in enumerate(lines) if line.startswith("@") and "runtime_shim.pmap" in line)
    assert lines[decorator - 1].startswith(SHIM_COMMENT.strip()), lines[decorator - 1]


def test_report_lists_a_shimmed_site_with_the_reason_of_its_comment():
    codes = {rule.CODE: rule.NAME for rule in all_rules()}
    sites = shim_sites(fixed().encode(), "m.py", codes)
    assert [site.code for site in sites] == ["PM101", "PM101", "PM101"]
    assert sites[0].reason.startswith("kept on the legacy shim: `axes` is not a literal axis")
    assert sites[1].reason.startswith("kept on the legacy shim: `static_broadcasted_argnums` is not a literal")
    assert sites[2].reason.startswith("kept on the legacy shim: `jax.pmap` passed as a value")
    # without the comment, the site is still listed, with what the shim does
    bare = shim_sites(b"import runtime_shim\n\ng = runtime_shim.pmap(f, in_axes=axes)\n", "m.py", codes)
    assert len(bare) == 1 and bare[0].reason.startswith("uses `runtime_shim.pmap`")


def test_a_value_of_global_arg_shapes_gives_way_to_another_options_reason():
    """flax's `nnx.pmap` forwards every option, `global_arg_shapes` among them, which PM104's
    unsafe fix drops in the same run: the comment gives the reason that stays true after it (a
    computed option), and only where there is none, `global_arg_shapes` itself."""
    source = textwrap.dedent('''\
        import jax


        def pmap(f, static=(), global_arg_shapes=None):
            return jax.pmap(f, axis_name="i", static_broadcasted_argnums=static,
                            global_arg_shapes=global_arg_shapes)


        def simple(f, shapes):
            return jax.pmap(f, axis_name="i", global_arg_shapes=shapes)
        ''')
    text = fixed(source)
    first, second = text.split("def simple")
    assert f"{SHIM_COMMENT}`static_broadcasted_argnums` is not a literal" in first, text
    assert f"{SHIM_COMMENT}`global_arg_shapes`" not in first and "global_arg_shapes=" not in first.split("):")[1], text
    assert f"{SHIM_COMMENT}`global_arg_shapes` is given a value" in second, text
