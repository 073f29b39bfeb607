"""A statement of several lines that a fix edited inside is laid out again, black's way, when an
edit made one of its lines longer than the project's line length (issue 25, point 4: no new E501);
statements the fix did not touch, and lines that were already too long, stay as they are."""

from __future__ import annotations

import io
import textwrap
import tokenize

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.relayout import joined, relayout
from pmap_migrate.rules import all_rules

ORIGINAL = textwrap.dedent('''\
    def g(f, x, axes):
        step = jax.pmap(f, axis_name="batch", in_axes=axes,
                        static_broadcasted_argnums=(1, 2))
        return step(x)
    ''')


def renamed(code: str) -> str:
    return code.replace("jax.pmap(", "runtime_shim.pmap(").replace(
        "\n                    static", "\n                             static")


def test_a_statement_pushed_past_the_limit_is_laid_out_again():
    out = relayout(renamed(ORIGINAL), ORIGINAL, 60, "    ")
    assert out == textwrap.dedent('''\
        def g(f, x, axes):
            step = runtime_shim.pmap(
                f,
                axis_name="batch",
                in_axes=axes,
                static_broadcasted_argnums=(1, 2),
            )
            return step(x)
        ''')
    compile(out, "<relaid>", "exec")
    # its contents on one line of their own where they fit (black's first try)
    original = 'step = jax.pmap(update_function, axis_name="batches",\n                donate_argnums=(0,))\n'
    fixed = original.replace("jax.pmap(", "runtime_shim.pmap(").replace("\n   ", "\n            ")
    assert relayout(fixed, original, 61, "    ") == (
        'step = runtime_shim.pmap(\n    update_function, axis_name="batches", donate_argnums=(0,)\n)\n')


def one_line(code: str) -> str | None:
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    piece = joined(tokens, code.splitlines(keepends=True))
    return None if piece is None else piece.line


def test_joined_on_one_line_trailing_commas_dropped_where_python_does_not_need_them():
    assert one_line("x = f(a,\n      b,)\n") == "x = f(a, b)"
    assert one_line("x = [\n    a,\n]\n") == "x = [a]"
    assert one_line("x = {\n    'k': v,\n}\n") == "x = {'k': v}"
    assert one_line("x = (a, b,\n     )\n") == "x = (a, b)"
    assert one_line("x = (1,\n     )\n") == "x = (1,)"  # a one-element tuple
    assert one_line("y = x[a,\n      ]\n") == "y = x[a,]"  # a tuple index
    assert one_line("y = (x\n     .sum(axis=0)\n     .mean())\n") == "y = (x.sum(axis=0).mean())"
    assert one_line("y = a + \\\n    b\n") == "y = a + b"
    assert one_line("y = f(a,  # why\n      b)\n") == "y = f(a, b)"  # its comment aside
    assert one_line("y = f(a,\n      # why\n      b)\n") is None  # a comment on a line of its own
    assert one_line("def f(a,  # type: int\n      b): pass\n") is None
    assert one_line('y = f("""a\nb""")\n') is None
    # an f-string as its source says it (Python 3.12 splits it into tokens, `{{` read as `{`)
    assert one_line("y = f(f'{{a}} {b!r:>{w}}',\n      c)\n") == "y = f(f'{{a}} {b!r:>{w}}', c)"


def test_untouched_statements_and_lines_already_too_long_stay():
    long_before = ORIGINAL.replace('"batch"', '"a_very_long_axis_name_that_was_too_long_already"')
    assert relayout(renamed(long_before), long_before, 64, "    ") == renamed(long_before)
    untouched = "y = some_function(argument_number_one,\n                  argument_number_two)\n"
    assert relayout(untouched + renamed(ORIGINAL), untouched + ORIGINAL, 30, "    ").startswith(untouched)
    fits = relayout(renamed(ORIGINAL), ORIGINAL, 100, "    ")
    assert fits == renamed(ORIGINAL)


def test_trailing_comments_stay_after_their_token_and_own_line_comments_keep_the_layout():
    original = ORIGINAL.replace("in_axes=axes,", "in_axes=axes,  # per argument").replace(
        "(1, 2))", "(1, 2))  # evaluated once")
    assert relayout(renamed(original), original, 75, "    ").splitlines()[1:8] == [
        "    step = runtime_shim.pmap(",
        "        f,",
        '        axis_name="batch",',
        "        in_axes=axes,  # per argument",
        "        static_broadcasted_argnums=(1, 2),",
        "    )  # evaluated once",
        "    return step(x)"]
    own = ORIGINAL.replace("in_axes=axes,\n", "in_axes=axes,\n                # per argument\n")
    assert relayout(renamed(own), own, 60, "    ") == renamed(own)


def test_a_comment_after_an_element_keeps_one_element_per_line_as_black_does():
    original = "x = jax.pmap(f,  # the function\n             d)\n"
    fixed = original.replace("jax.pmap(", "runtime_shim.pmap(")
    # the contents would fit on one line, but the comment belongs to `f,`: a magic trailing comma
    assert relayout(fixed, original, 35, "    ") == "x = runtime_shim.pmap(\n    f,  # the function\n    d,\n)\n"
    inside = "x = jax.pmap(a +  # a sum\n             d)\n"
    renamed_inside = inside.replace("jax.pmap(", "runtime_shim.pmap(")
    assert relayout(renamed_inside, inside, 25, "    ") == renamed_inside  # no line of its own for it


def test_targets_that_do_not_fit_go_in_parentheses():
    original = "def f(first, second):\n    return first\n"
    fixed = original + ("first_result, second_result, third_result = jax.tree.map(lambda leaf: leaf.squeeze(0),"
                        " (first, second, third))\n")
    assert relayout(fixed, original, 40, "    ").splitlines()[2:] == [
        "(",
        "    first_result,",
        "    second_result,",
        "    third_result,",
        ") = jax.tree.map(",
        "    lambda leaf: leaf.squeeze(0),",
        "    (first, second, third),",
        ")"]


def test_fix_lays_out_a_renamed_statement_within_the_projects_line_length(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 72\n")
    path = tmp_path / "m.py"
    source = "import jax\n\n\n" + ORIGINAL.replace('"batch"', '"batch_of_examples"')
    outcome = fix_bytes(source.encode(), str(path), all_rules(), unsafe=True)
    assert outcome.error is None and outcome.fixed is not None
    text = outcome.fixed.decode()
    assert "runtime_shim.pmap(" in text
    assert [line for line in text.splitlines() if len(line) > 72] == [], text
    assert "        static_broadcasted_argnums=(1, 2),\n    )\n" in text, text
