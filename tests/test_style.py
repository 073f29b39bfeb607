"""Generated code in the project's own style (issue 25, point 4): the line length read from the
project's configuration, lines wrapped the way black leaves them, imports where isort puts them,
blank lines around inserted definitions, continuation lines re-aligned after a rename."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.importorder import ImportOrder, add_import
from pmap_migrate.layout import continuation_unit, realign_continuations, wrap_new_lines
from pmap_migrate.projectstyle import DEFAULT_LINE_LENGTH, StyleFinder, import_order, line_length
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.fixes.spec import ImportSpec


# --------------------------------------------------------------------------- the line length
@pytest.mark.parametrize("name, text, expected", [
    ("pyproject.toml", "[tool.ruff]\nline-length = 100\n", 100),
    ("pyproject.toml", "[tool.ruff]\nline-length = 100\n[tool.ruff.lint.pycodestyle]\nmax-line-length = 110\n", 110),
    ("pyproject.toml", "[tool.black]\nline-length = 79\n", 79),
    ("pyproject.toml", "[tool.pyink]\nline-length = 80\n", 80),
    ("pyproject.toml", "[tool.ruff]\nline-length = 99\n[tool.black]\nline-length = 79\n", 99),
    ("ruff.toml", "line-length = 101\n", 101),
    (".ruff.toml", "[lint.pycodestyle]\nmax-line-length = 102\n", 102),
    ("setup.cfg", "[flake8]\nmax-line-length = 120\n", 120),
    ("tox.ini", "[flake8]\nmax_line_length = 90\n", 90),
    (".flake8", "[flake8]\nmax-line-length = 95\n", 95),
    ("pyproject.toml", "[project]\nname = 'x'\n", DEFAULT_LINE_LENGTH),
    ("setup.cfg", "[metadata]\nname = x\n", DEFAULT_LINE_LENGTH),
    ("pyproject.toml", "not toml [", DEFAULT_LINE_LENGTH),
])
def test_the_line_length_comes_from_the_projects_configuration(tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    (tmp_path / "pkg").mkdir()
    assert StyleFinder().line_length(tmp_path / "pkg" / "mod.py", tmp_path).length == expected


def test_the_nearest_directory_that_sets_one_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 79\n")
    inner = tmp_path / "sub"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'sub'\n")  # sets none: the parent's applies
    (inner / "deeper").mkdir()
    (inner / "deeper" / "setup.cfg").write_text("[flake8]\nmax-line-length = 100\n")
    finder = StyleFinder()
    assert finder.line_length(inner / "mod.py", tmp_path).length == 79
    assert finder.line_length(inner / "deeper" / "mod.py", tmp_path).length == 100
    assert line_length(str(inner / "deeper" / "mod.py")) == 100
    assert line_length("-") == DEFAULT_LINE_LENGTH


def test_each_directory_is_read_once(tmp_path, monkeypatch):
    from pmap_migrate import projectstyle

    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    reads = []
    real = projectstyle.line_length_in
    monkeypatch.setattr(projectstyle, "line_length_in", lambda d: reads.append(d) or real(d))
    finder = StyleFinder()
    for name in ("a.py", "b.py", "c.py"):
        assert finder.line_length(tmp_path / name, tmp_path).length == 100
    assert reads == [tmp_path]


def test_the_benchmark_reads_line_lengths_with_the_products_code():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import fix_quality
    finally:
        sys.path.pop(0)
    from pmap_migrate import projectstyle

    assert fix_quality.line_length_in is projectstyle.line_length_in


def test_the_benchmark_lints_with_the_projects_isort_settings(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import fix_quality
    finally:
        sys.path.pop(0)
    (tmp_path / "pyproject.toml").write_text("[tool.isort]\nforce_sort_within_sections = true\n"
                                             "known_first_party = ['helpers']\n")
    (tmp_path / "pkg").mkdir()
    path = tmp_path / "pkg" / "mod.py"
    path.write_text("from abc import ABC\nimport os\n\nprint(ABC, os)\n")
    settings = fix_quality.SettingsFinder().settings(path, tmp_path)
    assert dict(settings.isort) == {"force-sort-within-sections": "true", "known-first-party": '["helpers"]'}
    assert settings.isort == tuple(sorted(settings.isort))
    findings, errors = fix_quality.run_ruff(_ruff(), tmp_path, {"pkg/mod.py": path.read_bytes()},
                                            {"pkg/mod.py": settings})
    assert errors == [] and findings == {"pkg/mod.py": []}  # by module name: sorted
    plain = fix_quality.LintSettings(settings.line_length, settings.source, settings.project)
    findings, errors = fix_quality.run_ruff(_ruff(), tmp_path, {"pkg/mod.py": path.read_bytes()},
                                            {"pkg/mod.py": plain})
    assert errors == [] and [f.code for f in findings["pkg/mod.py"]] == ["I001"]  # ruff's default order


# --------------------------------------------------------------------------- wrapping
def wrapped(code: str, limit: int = 79, unit: str = "    ", original: str = "") -> str:
    out = wrap_new_lines(textwrap.dedent(code), original, limit, unit)
    compile(out, "<wrapped>", "exec")
    assert all(len(line) <= limit for line in out.splitlines()), out
    return out


def test_a_call_too_long_gets_its_arguments_on_a_line_of_their_own_as_black_does():
    assert wrapped("train = jax.jit(_shard_mapped(update_the_model, 'batch'), donate_argnums=(0, 1, 2, 3, 4))\n") == (
        "train = jax.jit(\n"
        "    _shard_mapped(update_the_model, 'batch'), donate_argnums=(0, 1, 2, 3, 4)\n"
        ")\n")


def test_arguments_that_do_not_fit_on_one_line_get_one_per_line_and_a_magic_trailing_comma():
    assert wrapped("train = jax.jit(_shard_mapped(update_the_model_with_a_much_longer_name, 'batch'), "
                   "donate_argnums=(0, 1, 2, 3, 4))\n") == (
        "train = jax.jit(\n"
        "    _shard_mapped(update_the_model_with_a_much_longer_name, 'batch'),\n"
        "    donate_argnums=(0, 1, 2, 3, 4),\n"
        ")\n")


GOOGLE_STYLE = textwrap.dedent("""\
    def train(config):
      steps = get_num_training_steps(
          config, dataset.meta_data)
      return steps, log(
          steps)
    """)


def test_where_the_file_closes_brackets_on_the_last_line_a_call_holding_one_call_is_split_inside_it():
    """`jax.jit(_shard_mapped(...))` too long: in a file that closes brackets on their last line
    (yapf's way), both openings stay on the first line, the inner call's arguments below, `))` after
    them; a call whose one call fits on the next line whole is split as any other."""
    code = "def f():\n  pos = jax.jit(_shard_mapped(lambda x: lax.psum_scatter(x, 'i', tiled=True), 'i'))(x)\n"
    assert wrap_new_lines(code, GOOGLE_STYLE, 70, "  ", hug=True) == (
        "def f():\n  pos = jax.jit(_shard_mapped(\n      lambda x: lax.psum_scatter(x, 'i', tiled=True), 'i'))(x)\n")
    assert wrap_new_lines(code, "", 70, "  ") == (  # black's way
        "def f():\n  pos = jax.jit(\n      _shard_mapped(\n          lambda x: lax.psum_scatter(x, 'i', tiled=True), 'i'\n"
        "      ),\n  )(x)\n")


def test_where_the_file_closes_brackets_on_the_last_line_the_wrapped_code_does_too():
    from pmap_migrate.layout import closes_on_last_line

    assert closes_on_last_line(GOOGLE_STYLE)
    assert not closes_on_last_line(GOOGLE_STYLE[: GOOGLE_STYLE.index("  return")])  # once: black's
    assert not closes_on_last_line("x = f(\n    a,\n)\ny = g(\n    b\n)\nz = h(\n    c)\n")
    code = "def f():\n  state = train_utils.sync_model_state_across_replicas(_host_local(train_state))\n"
    out = wrap_new_lines(code, GOOGLE_STYLE, 72, "  ", hug=True)
    assert out == ("def f():\n  state = train_utils.sync_model_state_across_replicas(\n"
                   "      _host_local(train_state))\n")
    # one element per line: the last takes the bracket, without a trailing comma
    out = wrap_new_lines("x = jax.jit(_shard_mapped(update_the_model_with_a_much_longer_name, 'batch'), "
                         "donate_argnums=(0, 1, 2, 3, 4))\n", GOOGLE_STYLE, 79, "  ", hug=True)
    assert out == ("x = jax.jit(\n"
                   "    _shard_mapped(update_the_model_with_a_much_longer_name, 'batch'),\n"
                   "    donate_argnums=(0, 1, 2, 3, 4))\n")
    compile(out, "<wrapped>", "exec")
    # black's file, black's layout
    assert wrap_new_lines(code, "", 72, "  ") == ("def f():\n  state = train_utils.sync_model_state_across_replicas(\n"
                                                  "      _host_local(train_state)\n"
                                                  "  )\n")


def test_a_tools_comment_stays_on_the_first_line_of_a_wrapped_statement():
    code = "def f(x):\n    return jax.jit(_shard_mapped(lambda v: v - lax.pmean(v, AXIS), 'data'))(x)  # noqa: F405\n"
    out = wrap_new_lines(code, "", 72, "    ")
    assert out.splitlines()[1].endswith("(  # noqa: F405"), out
    assert out.count("# noqa: F405") == 1
    # a line whose code fits, long only by such a comment, stays as it is (linters ignore the comment)
    fits = "def f(x):\n    return jax.jit(_shard_mapped(g, 'data'))(x)  # type: ignore[arg-type]  # long comment\n"
    assert wrap_new_lines(fits, "", 60, "    ") == fits
    # ruff counts a pytype comment in the line's length: the code is split so that the first line
    # holds it within the limit
    pytype = "def f():\n    return _host_local(state), summary, metrics  # pytype: disable=bad-return-type\n"
    out = wrap_new_lines(pytype, "", 79, "    ")
    assert out.splitlines()[1].endswith("(  # pytype: disable=bad-return-type"), out
    assert all(len(line) <= 79 for line in out.splitlines()), out
    compile(out, "<wrapped>", "exec")


def test_a_pmap_written_over_several_lines_is_rewritten_in_its_lines():
    code = textwrap.dedent("""\
        import functools

        import jax


        def train(step, config):
          p_step = jax.pmap(
              functools.partial(
                  step,
                  config=config),
              axis_name='batch',
              # the state's buffers are donated
              donate_argnums=(0, 1),
          )  # pytype: disable=wrong-arg-types
          return p_step
        """)
    out = fix_bytes(code.encode(), "mod.py", all_rules(), unsafe=True).fixed.decode()
    assert out[out.index("def train"):] == textwrap.dedent("""\
        def train(step, config):
          p_step = jax.jit(_shard_mapped(
              functools.partial(
                  step,
                  config=config),
              axis_name='batch'),
              # the state's buffers are donated
              donate_argnums=(0, 1),
          )  # pytype: disable=wrong-arg-types
          return p_step
        """)


def test_the_split_is_at_the_last_bracket_whose_opening_line_fits():
    code = ("def f(args, kwargs):\n"
            "    return jax.shard_map(per_device, mesh=mesh, in_specs=P(axis), out_specs=P(axis))(args, kwargs)\n")
    assert wrapped(code).splitlines()[1:] == [
        "    return jax.shard_map(",
        "        per_device, mesh=mesh, in_specs=P(axis), out_specs=P(axis)",
        "    )(args, kwargs)",
    ]


def test_a_long_trailing_comment_goes_above_the_statement_and_above_a_definitions_decorators():
    code = ("@functools.cache\n"
            "def per_device(args, kwargs):  # each device holds a (1, ...) block; the pmap body saw its slice\n"
            "    return args\n")
    assert wrapped(code).splitlines()[:3] == [
        "# each device holds a (1, ...) block; the pmap body saw its slice",
        "@functools.cache",
        "def per_device(args, kwargs):",
    ]


def test_conditions_and_tuples_split_in_the_parentheses_black_makes_visible():
    code = ("def f(value):\n"
            "    if isinstance(value, jax.Array) and value.sharding.is_equivalent_to(local, value.ndim) and ok:\n"
            "        first_value_with_a_long_name = 'default' if first_value_with_a_long_name is None else x\n"
            "        return first_value_with_a_long_name, second_value_with_a_long_name, third_value_xx\n")
    assert wrapped(code).splitlines()[1:] == [
        "    if (",
        "        isinstance(value, jax.Array)",
        "        and value.sharding.is_equivalent_to(local, value.ndim)",
        "        and ok",
        "    ):",
        "        first_value_with_a_long_name = (",
        "            'default' if first_value_with_a_long_name is None else x",
        "        )",
        "        return (",
        "            first_value_with_a_long_name,",
        "            second_value_with_a_long_name,",
        "            third_value_xx,",
        "        )",
    ]


def test_no_comma_where_it_would_change_the_meaning():
    # a subscript's one index would become a tuple; a generator argument would not parse
    out = wrapped("value = table_with_a_long_name[compute_the_index_of_the_entry(first_argument, second_arg)]\n"
                  "total = sum_all_of_them(value_of_entry * 2 for value_of_entry in the_entries_of_the_table_x)\n")
    assert "second_arg)\n]" in out
    assert "the_entries_of_the_table_x\n)" in out


def test_a_long_from_import_gets_parentheses():
    assert wrapped("from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding\n") == (
        "from jax.sharding import (\n    Mesh,\n    NamedSharding,\n    PartitionSpec as P,\n"
        "    SingleDeviceSharding,\n)\n")


def test_only_new_lines_are_wrapped_and_a_line_that_cannot_be_split_stays():
    old = "x = 'https://example.com/a/string/literal/far/longer/than/the/limit/of/this/file/without/a/space'\n"
    code = old + "y = f(aaaaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbbbbbbb, cccccccccccccccccccccccccccccccc)\n"
    out = wrap_new_lines(code, old, 79, "    ")
    assert out.startswith(old)
    assert out[len(old):].splitlines() == [
        "y = f(", "    aaaaaaaaaaaaaaaaaaaaaaa,", "    bbbbbbbbbbbbbbbbbbbbbbbbbbbb,",
        "    cccccccccccccccccccccccccccccccc,", ")"]
    assert wrap_new_lines(old, "", 79, "    ") == old


def test_the_files_own_continuation_indent():
    google = "def f(x):\n  return g(\n      x,\n  )\n"
    assert continuation_unit(google, "  ") == "    "
    assert continuation_unit("def f(x):\n  return x\n", "  ") == "    "  # pyink's default for 2-space code
    assert continuation_unit("def f(x):\n    return x\n", "    ") == "    "
    code = "def f(x):\n  return jax.jit(_shard_mapped(update_the_model_with_a_long_name, 'b'), donate_argnums=(0,))\n"
    assert wrapped(code, original=google, unit="    ").splitlines()[1:3] == [
        "  return jax.jit(", "      _shard_mapped(update_the_model_with_a_long_name, 'b'),"]


def test_continuation_lines_follow_a_renamed_opening():
    original = ("step = jax.pmap(f,\n                axis_name='i',\n                in_axes=(0,\n"
                "                         1))\nx = 1\n")
    renamed = original.replace("jax.pmap(", "runtime_shim.pmap(")
    assert realign_continuations(renamed, original) == (
        "step = runtime_shim.pmap(f,\n"
        "                         axis_name='i',\n"
        "                         in_axes=(0,\n"
        "                                  1))\n"
        "x = 1\n")
    hanging = "step = jax.pmap(\n    f, axis_name='i')\n"
    assert realign_continuations(hanging.replace("jax.pmap", "runtime_shim.pmap"), hanging) == (
        hanging.replace("jax.pmap", "runtime_shim.pmap"))


# --------------------------------------------------------------------------- imports
def with_import(code: str, *specs: ImportSpec, order: ImportOrder | None = None) -> str:
    module = cst.parse_module(textwrap.dedent(code))
    for spec in specs:
        module = add_import(module, spec, order or ImportOrder())
    return module.code


def test_a_name_joins_the_modules_from_import_at_isorts_place():
    mesh, spec, device = (ImportSpec("jax.sharding", "Mesh"), ImportSpec("jax.sharding", "PartitionSpec", "P"),
                          ImportSpec("jax.sharding", "SingleDevice"))
    # isort's default: an `as` import on a line of its own
    assert with_import("import jax\nfrom jax.sharding import NamedSharding\n", mesh, spec) == (
        "import jax\nfrom jax.sharding import Mesh, NamedSharding\nfrom jax.sharding import PartitionSpec as P\n")
    # unless the block combines them already
    assert with_import("from jax.sharding import NamedSharding, PositionalSharding as PS\n", mesh, spec) == (
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, PositionalSharding as PS\n")
    parenthesized = "from jax.sharding import (\n    NamedSharding,\n    PartitionSpec,\n)\n"
    assert with_import(parenthesized, mesh, device) == (
        "from jax.sharding import (\n    Mesh,\n    NamedSharding,\n    PartitionSpec,\n    SingleDevice,\n)\n")


def test_a_new_line_goes_to_its_sorted_place_in_its_section():
    code = "import functools\n\nimport jax\nfrom jax import lax\n\nx = 1\n"
    assert with_import(code, ImportSpec("numpy", None, "np")) == (
        "import functools\n\nimport jax\nimport numpy as np\nfrom jax import lax\n\nx = 1\n")
    assert with_import(code, ImportSpec("os"), ImportSpec("jax.sharding", "Mesh")) == (
        "import functools\nimport os\n\nimport jax\nfrom jax import lax\nfrom jax.sharding import Mesh\n\nx = 1\n")


def test_a_missing_section_gets_a_group_of_its_own():
    code = '"""Doc."""\n\n# third party\nimport jax\n\nx = 1\n'
    assert with_import(code, ImportSpec("functools")) == (
        '"""Doc."""\n\nimport functools\n\n# third party\nimport jax\n\nx = 1\n')
    assert with_import("import os\n\nx = 1\n", ImportSpec("jax")) == "import os\n\nimport jax\n\nx = 1\n"


def test_first_party_and_a_force_sorted_block():
    order = ImportOrder(first_party=lambda name: name == "mylib")
    assert with_import("import jax\n\nimport mylib\n", ImportSpec("numpy", None, "np"), order=order) == (
        "import jax\nimport numpy as np\n\nimport mylib\n")
    google = "from absl import app\nimport jax\nfrom jax import lax\nimport optax\n"  # from and import lines mixed
    assert with_import(google, ImportSpec("numpy", None, "np"), ImportSpec("jax.sharding", "Mesh")) == (
        "from absl import app\nimport jax\nfrom jax import lax\nfrom jax.sharding import Mesh\nimport numpy as np\n"
        "import optax\n")


def test_the_projects_isort_settings(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ruff.lint.isort]\nforce-sort-within-sections = true\n"
                                             "known-first-party = ['helpers']\n")
    (tmp_path / "mypkg").mkdir()
    order = import_order(str(tmp_path / "mypkg" / "mod.py"))
    assert order.force_sort_within_sections and not order.force_single_line
    assert order.first_party("helpers") and order.first_party("mypkg") and not order.first_party("jax")
    (tmp_path / "mypkg" / "pyproject.toml").write_text("[tool.isort]\nforce_single_line = true\n")
    order = import_order(str(tmp_path / "mypkg" / "mod.py"))
    assert order.force_single_line and not order.force_sort_within_sections
    assert with_import("import jax\nfrom jax.sharding import Mesh\n", ImportSpec("jax.sharding", "NamedSharding"),
                       order=order) == ("import jax\nfrom jax.sharding import Mesh\n"
                                        "from jax.sharding import NamedSharding\n")


# --------------------------------------------------------------------------- the fix, end to end
LEGACY = '''\
"""A module of a project whose line length is 79."""

import functools
import os

import jax
import jax.numpy as jnp
from jax import lax


def update(parameters_of_the_model, optimizer_state_of_the_model, batch_of_examples):
    return lax.pmean(parameters_of_the_model, "batch"), optimizer_state_of_the_model


class Trainer:
    def __init__(self, axis_name_chosen_at_run_time):
        self.p_update_with_a_long_attribute_name = jax.pmap(update, axis_name="batch", donate_argnums=(0, 1))
        self.p_update_on_axis_chosen_at_run_time = jax.pmap(lambda a, b, c: update(a, b, c),
                                                            axis_name=axis_name_chosen_at_run_time,
                                                            static_broadcasted_argnums=(2,))
        self.home = os.environ.get("HOME")
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 79\n")
    (tmp_path / "pkg").mkdir()
    path = tmp_path / "pkg" / "train.py"
    path.write_text(LEGACY)
    return path


def test_fixed_code_keeps_the_projects_line_length_and_blank_lines(project):
    outcome = fix_bytes(project.read_bytes(), str(project), all_rules(), unsafe=True)
    assert outcome.error is None and outcome.fixed is not None
    text = outcome.fixed.decode()
    new = set(text.splitlines()) - set(LEGACY.splitlines())
    assert [line for line in new if len(line) > 79] == []
    assert all(line == line.rstrip() for line in text.splitlines())
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "@")) and not lines[k - 1].lstrip().startswith(("@", "class ")):
            assert lines[k - 1] == "" or lines[k - 1].lstrip().startswith("#"), "\n".join(lines[k - 3:k + 1])
    assert text.count("import functools") == 1
    again = fix_bytes(outcome.fixed, str(project), all_rules(), unsafe=True)
    assert again.fixed is None or again.fixed == outcome.fixed


def _ruff() -> str:
    """ruff, which the `[test]` extra installs beside the running Python."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    assert found is not None, "ruff is not installed: pip install -e '.[test]'"
    return found


def test_the_fixed_file_gets_no_lint_finding_it_did_not_have(project):
    outcome = fix_bytes(project.read_bytes(), str(project), all_rules(), unsafe=True)
    fixed = project.with_name("fixed.py")
    fixed.write_bytes(outcome.fixed)

    def findings(path: Path) -> list[str]:
        done = subprocess.run([_ruff(), "check", "--isolated", "--no-cache", "--select", "E,W,F,I",
                               "--line-length", "79", "--output-format", "concise", str(path)],
                              capture_output=True, text=True, cwd=project.parent)
        return sorted(line.split(" ", 2)[1] for line in done.stdout.splitlines() if line.startswith(path.name + ":"))

    before, after = Counter(findings(project)), Counter(findings(fixed))
    assert before["E501"] and before["I001"] == 0  # the original's own long lines count, not as new
    assert after - before == Counter(), after - before


def test_a_long_string_argument_is_cut_into_literals_that_concatenate_to_it():
    code = ('def check(args, static):\n'
            '    raise ValueError(f"pmapped function has static_broadcasted_argnums={static} but was called with '
            'only {len(args)} positional arguments; {{braces}} stay \\\\ as they were")\n')
    out = wrapped(code)
    assert '        "\\\\ as they were",\n' in out  # a piece without a replacement field: no `f`

    def message(source: str) -> str:
        namespace: dict = {}
        exec(source, namespace)
        with pytest.raises(ValueError) as raised:
            namespace["check"]((1, 2), (0,))
        return str(raised.value)

    assert message(out) == message(textwrap.dedent(code))


def test_a_long_comment_line_is_reflowed():
    code = ("def f():\n    # this process's rows in and out, as legacy pmap had them (global arrays over every "
            "process's devices)\n    return 1\n")
    assert wrapped(code).splitlines()[1:3] == [
        "    # this process's rows in and out, as legacy pmap had them (global arrays",
        "    # over every process's devices)",
    ]


def test_the_helper_goes_after_the_import_block_even_when_a_fix_edits_one_of_its_lines(tmp_path):
    path = tmp_path / "experiment.py"
    path.write_text("import functools\n\nimport jax\nfrom jax.config import config as jax_config\n"
                    "import jax.numpy as jnp\nimport numpy as np\n\n\ndef f(x):\n    return jnp.sum(x) + np.pi\n\n\n"
                    "step = jax.pmap(f, axis_name='i')\n")
    outcome = fix_bytes(path.read_bytes(), str(path), all_rules(), unsafe=True)
    text = outcome.fixed.decode()
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("def _shard_mapped("))
    assert lines.index(head) > lines.index("import numpy as np")
    assert lines[lines.index(head) - 2:][:2] == ["", ""]


def test_an_expression_moved_to_a_statement_of_its_own_is_laid_out_again_not_left_at_its_old_columns(tmp_path):
    """A pmap's function written over several lines, evaluated before the pmap (a multi-process
    wrapper built through an alias): its statement is written on one line and wrapped as the file
    wraps code, not with continuation lines aligned with where the expression used to stand."""
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent('''\
        import functools

        import jax

        pmap = functools.partial(jax.pmap, axis_name="i")


        def make():
            copy_tree = pmap(
                functools.partial(jax.tree_util.tree_map,
                                  lambda x: (1.0 * x).astype(x.dtype)))
            return copy_tree


        print(jax.process_index())
        '''))
    outcome = fix_bytes(path.read_bytes(), str(path), all_rules(), unsafe=True)
    text = outcome.fixed.decode()
    assert "    _copy_tree = functools.partial(\n        jax.tree_util.tree_map, lambda x: (1.0 * x).astype(x.dtype))\n" \
        in text, text
    assert max(len(line) for line in text.splitlines()) <= 88
