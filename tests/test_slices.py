"""`check` analyses large modules through their relevant slice (codemod/slices.py): the findings must
be those of the whole module, field for field. Every rule example, lint fixture, fix fixture and
differential program is analysed both ways with slicing forced on (whatever the file's size), and
on generated large modules that hide the legacy code among unrelated units. What the slice keeps
and blanks is pinned by small cases.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pmap_migrate import slices
from pmap_migrate.engine import lint_bytes
from pmap_migrate.prefilter import Gate
from pmap_migrate.rules import all_rules

ROOT = Path(__file__).resolve().parents[1]
RULES = all_rules()
GATE = Gate.of(RULES)
EXAMPLES = [ex.code for rule in RULES for ex in (*rule.VALID, *rule.INVALID)]
FILES = sorted(p for d in ("fixtures/lint", "fixtures/fix", "fixtures/programs", "fixtures/programs_api",
                           "fixtures/programs_idiomatic", "fixtures/programs_multiprocess", "fixtures/programs_flax",
                           "fixtures/example")
               for p in (ROOT / d).glob("*.py"))


@pytest.fixture
def always_slice(monkeypatch):
    monkeypatch.setattr(slices, "MIN_LINES", 0)


def _both(data: bytes, name: str = "m.py"):
    whole = lint_bytes(data, name, RULES, whole=True)
    cut = lint_bytes(data, name, RULES)
    return whole, cut


def _sliced(text: str) -> str | None:
    parsed = slices.parse_python(text.encode())
    assert parsed is not None
    return slices.relevant_source(parsed.text, parsed.tree, GATE)


def test_rule_examples_give_the_same_findings_sliced(always_slice):
    sliced = 0
    for code in EXAMPLES:
        whole, cut = _both(code.encode())
        assert cut.diagnostics == whole.diagnostics, code
        assert cut.error == whole.error, code
        sliced += _sliced(code) is not None if slices.parse_python(code.encode()) else 0
    assert sliced >= 50, f"only {sliced} examples had something to blank"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_gives_the_same_findings_sliced(always_slice, path):
    whole, cut = _both(path.read_bytes(), path.name)
    assert cut.diagnostics == whole.diagnostics
    assert cut.error == whole.error


UNRELATED = '''

def helper_{i}(values, scale=2.0):
    """Unrelated code: arithmetic on lists."""
    total = 0.0
    for value in values:
        total += value * scale
    return total


class Holder{i}:
    # Attribute names are matched by name alone (`x.size` anywhere would keep a class binding `size`).
    held_{i} = {i}

    def grow_{i}(self, by):
        self.held_{i} += by
        return self.held_{i}
'''


@pytest.mark.parametrize("path", [p for p in FILES if p.parent.name in ("lint", "fix")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_large_module_hiding_legacy_code_gives_the_same_findings(path):
    """A fixture with unrelated units before and after it: sliced by default, same findings, and the
    unrelated units are blanked."""
    text = path.read_text(encoding="utf-8")
    padding = "".join(UNRELATED.format(i=i) for i in range(8))
    head, _, rest = text.partition("\n\n")
    module = head + "\n\n" + padding + "\n\n" + rest + padding
    data = module.encode()
    whole, cut = _both(data, path.name)
    assert cut.diagnostics == whole.diagnostics
    assert cut.error == whole.error
    sliced = _sliced(module)
    if whole.diagnostics:
        assert sliced is not None and "helper_3" not in sliced and "Holder5" not in sliced


def test_blanked_lines_keep_every_position():
    text = (
        "import jax\n"
        "\n"
        "def unrelated():\n"
        "    return 1\n"
        "\n"
        "@decorate\n"
        "def also_unrelated(x):\n"
        "    return x\n"
        "\n"
        "step = jax.pmap(lambda x: x)\n"
        "out = step(x)[0]\n"
    ) + "\n" * 60
    sliced = _sliced(text)
    assert sliced is not None
    assert sliced.count("\n") == text.count("\n")
    lines = sliced.split("\n")
    assert lines[2:8] == ["", "", "", "", "", ""]
    assert lines[9] == "step = jax.pmap(lambda x: x)" and lines[10] == "out = step(x)[0]"
    ast.parse(sliced)


def test_the_analysed_slice_leaves_blanked_lines_out_and_knows_where_each_line_is():
    text = (
        "import jax\n"
        "\n"
        "def unrelated():\n"
        "    return 1\n"
        "\n"
        "class Box:\n"
        "    def unrelated(self):\n"
        "        return 2\n"
        "\n"
        "step = jax.pmap(lambda x: x)\n"
        "out = step(x)[0]\n"
    ) + "\n" * 60
    parsed = slices.parse_python(text.encode())
    cut = slices.relevant_slice(parsed.text, parsed.tree, GATE)
    blanked = slices.relevant_source(parsed.text, parsed.tree, GATE).split("\n")
    assert "unrelated" not in cut.text and cut.total == text.count("\n")
    for number, line in enumerate(cut.text.split("\n")[:-1], start=1):
        assert blanked[cut.line_in_file(number) - 1] == line  # every kept line, where it is in the file
    # What was blanked, and the blank lines (2, 5, 9, and the 60 at the end).
    assert [n for n in range(1, cut.total + 1) if n not in cut.lines] == [2, 3, 4, 5, 6, 7, 8, 9, *range(12, 72)]
    assert cut.line_in_file(len(cut.lines) + 1) == cut.total + 1
    ast.parse(cut.text)


def test_blank_and_comment_lines_are_left_out_except_inside_strings():
    text = (
        "import jax\n"
        "  # an indented comment\n"
        "\f\n"
        "def train(x):\n"
        '    """Doc.\n'
        "\n"
        "    # not a comment: the docstring's text\n"
        '    """\n'
        "\n"
        "    # a comment\n"
        "    step = jax.pmap(lambda v: v,  # trailing\n"
        "                    # inside brackets\n"
        "                    axis_name='i')\n"
        "    note = f'''{x}\n"
        "# in an f-string\n"
        "'''\n"
        "    return step(x)[0], note, b'''\n"
        "\t\n"
        "'''\n"
    ) + "\n" * 60
    parsed = slices.parse_python(text.encode())
    cut = slices.relevant_slice(parsed.text, parsed.tree, GATE)
    assert [n for n in range(1, 20) if n not in cut.lines] == [2, 3, 9, 10, 12]
    assert "# trailing" in cut.text  # a comment after code stays with its line
    original = [n.value for n in ast.walk(parsed.tree) if isinstance(n, ast.Constant)]
    assert [n.value for n in ast.walk(ast.parse(cut.text)) if isinstance(n, ast.Constant)] == original
    whole, sliced = _both(text.encode())
    assert sliced.diagnostics == whole.diagnostics and whole.diagnostics


def test_closure_keeps_definitions_and_uses_of_what_pmap_touches():
    text = (
        "import jax\n"
        "import numpy as np\n"
        "\n"
        "def body(x):\n"
        "    return x * 2\n"
        "\n"
        "def unrelated(x):\n"
        "    x = 3\n"
        "    return x\n"
        "\n"
        "step = jax.pmap(body)\n"
        "\n"
        "def run(data):\n"
        "    return step(data)[0]\n"
        "\n"
        "class Trainer:\n"
        "    def __init__(self):\n"
        "        self.p_step = jax.pmap(body)\n"
        "\n"
        "    def other(self):\n"
        "        return 0\n"
        "\n"
        "    def train(self, batch):\n"
        "        return self.p_step(batch)\n"
        "\n"
        "class Plain:\n"
        "    def method(self):\n"
        "        return 1\n"
        "\n"
        "if __name__ == '__main__':\n"
        "    print(unrelated(1))\n"
    ) + "\n" * 60
    sliced = _sliced(text)
    assert sliced is not None
    for kept in ("def body(x):", "def run(data):", "class Trainer:", "def train(self, batch):",
                 "self.p_step = jax.pmap(body)", "if __name__ == '__main__':"):
        assert kept in sliced, kept
    # `unrelated` is read by the kept __main__ block: kept (one level back); `other` and `Plain` go.
    assert "def other(self):" not in sliced and "class Plain:" not in sliced
    ast.parse(sliced)


def test_a_module_name_bound_through_global_keeps_its_readers():
    text = (
        "import jax\n"
        "\n"
        "def build(g):\n"
        "    global step\n"
        "    step = jax.pmap(g)\n"
        "\n"
        "def unrelated():\n"
        "    return 1\n"
        "\n"
        "def run(x):\n"
        "    return step(x)[0]\n"
    ) + "\n" * 60
    sliced = _sliced(text)
    assert sliced is not None
    assert "def run(x):" in sliced and "def unrelated():" not in sliced


def test_class_with_no_member_left_gets_a_pass():
    text = (
        "import jax\n"
        "\n"
        "class Base(jax.pmap(f).__class__):\n"
        "    def a(self):\n"
        "        return 1\n"
        "\n"
        "    def b(self):\n"
        "        return 2\n"
    ) + "\n" * 60
    sliced = _sliced(text)
    assert sliced is not None
    assert "    pass" in sliced and "def a" not in sliced
    ast.parse(sliced)


def test_file_wide_noqa_inside_a_blanked_unit_still_applies(always_slice):
    text = (
        "import jax\n"
        "\n"
        "def unrelated():\n"
        "    # pmap-migrate: noqa: PM101\n"
        "    return 1\n"
        "\n"
        "step = jax.pmap(lambda x: x)\n"
    )
    assert "noqa" not in (_sliced(text) or "noqa")
    whole, cut = _both(text.encode())
    assert whole.diagnostics == cut.diagnostics
    assert all(d.code != "PM101" or d.state.value == "suppressed" for d in cut.diagnostics)


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings_and_form_feeds(always_slice, newline):
    lines = ["import jax", "", "def unrelated():", "\x0c    return 1", "", "step = jax.pmap(lambda x: x)",
             "out = step(x)[0]", ""]
    data = newline.join(lines).encode()
    whole, cut = _both(data)
    assert whole.diagnostics and cut.diagnostics == whole.diagnostics


def test_syntax_errors_and_odd_bytes_are_reported_as_for_whole_files(always_slice):
    cases = [
        b"import jax\nstep = jax.pmap(f\n",
        b"\xef\xbb\xbfimport jax\nstep = jax.pmap(f)\n",
        b"# -*- coding: latin-1 -*-\nimport jax\ns = '\xe9'\nstep = jax.pmap(f)\n",
        b"import jax\nstep = jax.pmap(f)\ns = '\xff'\n",
        b"import jax\nx = " + b"(" * 250 + b")" * 250 + b"\nstep = jax.pmap(f)\n",
    ]
    for data in cases:
        whole, cut = _both(data)
        assert cut.error == whole.error, data[:40]
        assert cut.diagnostics == whole.diagnostics, data[:40]


def test_a_unit_passing_a_reported_keyword_is_kept_and_one_naming_it_in_text_is_not(always_slice):
    """PM401/PM403 report keywords on calls of any shard_map/jit: the unit that passes one is kept
    (and what it uses), a unit that only spells the word in a string is blanked."""
    text = (
        "import jax\n"
        "from jax.sharding import PartitionSpec as P\n"
        "\n"
        "def documented():\n"
        "    return 'check_rep= and in_axis_resources= are gone'\n"
        "\n"
        "SPEC = P('i')\n"
        "\n"
        "def build(g, m):\n"
        "    return jax.shard_map(g, mesh=m, in_specs=SPEC, out_specs=SPEC,\n"
        "                check_rep=False)\n"
        "\n"
        "def jitted(g):\n"
        "    return jax.jit(g, in_axis_resources=P('x'))\n"
    )
    sliced = _sliced(text)
    assert sliced is not None and "check_rep=False" in sliced and "in_axis_resources=P" in sliced
    assert "SPEC = P('i')" in sliced and "documented" not in sliced
    whole, cut = _both(text.encode())
    assert sorted(d.code for d in cut.diagnostics) == ["PM401", "PM403"]
    assert cut.diagnostics == whole.diagnostics


def test_readers_of_a_name_an_import_with_a_trigger_binds_are_kept():
    """After `fix`, a pmap is `jax.jit(_shard_mapped(f, axis))` with the helper imported from the
    package's shared module: only the import spells a trigger. The function that calls the helper
    and indexes its outputs (PM201) is kept; a function reading other imported names is not."""
    path = ROOT / "fixtures/lint/shared_helper_outputs.py"
    text = path.read_text()
    assert len(text.splitlines()) >= slices.MIN_LINES  # sliced by default, as `check` does
    sliced = _sliced(text)
    assert sliced is not None
    assert "step = jax.jit(_shard_mapped(step, constants.PMAP_AXIS_NAME))" in sliced
    assert "def clip(" not in sliced and "def summarise(" in sliced  # `pretrain` calls `summarise`
    whole, cut = _both(path.read_bytes(), path.name)
    assert [d.code for d in whole.diagnostics] == ["PM201"] * 3
    assert cut.diagnostics == whole.diagnostics
