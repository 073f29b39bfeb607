"""`pmap-migrate fix --interactive`: one question per fix, as a diff; apply / skip / quit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner

from codemod.cli import main
from codemod.config import Settings
from codemod.interactive import Decision, review_file
from rules.base import FixSpec, Rule

ROOT = Path(__file__).resolve().parents[1]
TWO = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\nother = jax.pmap(lambda x: x + 1)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def fix(*args, input=""):
    return CliRunner().invoke(main, ["fix", "--interactive", *args], input=input, catch_exceptions=False)


def test_apply_to_everything_writes_what_fix_writes(tmp_path, monkeypatch):
    """The review follows `fix`'s rounds: saying yes to every question gives the same files."""
    for side in ("batch", "reviewed"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
        # nested pmaps (shimmed, several rounds), pjit keyword and name fixes on the same call,
        # the example, a notebook
        for source in [ROOT / "fixtures" / "lint" / "nested_pmaps.py", ROOT / "fixtures" / "lint" / "pm4_pjit_xmap_training.py",
                       ROOT / "fixtures" / "example" / "train.py", ROOT / "fixtures" / "notebooks" / "training.ipynb"]:
            shutil.copy(source, tmp_path / side / source.name)
    monkeypatch.chdir(tmp_path / "batch")
    CliRunner().invoke(main, ["fix", "--no-cache", "."], catch_exceptions=False)
    monkeypatch.chdir(tmp_path / "reviewed")
    result = fix(".", input="a\n" * 500)
    asked = result.output.count("Apply this fix?")
    assert asked >= 10, result.output
    for path in sorted((tmp_path / "batch").iterdir()):
        assert path.read_bytes() == (tmp_path / "reviewed" / path.name).read_bytes(), path.name


def test_skip_apply_and_the_skips_are_reported(project):
    (project / "a.py").write_text(TWO)
    result = fix("a.py", input="s\na\n")
    assert result.output.count("Apply this fix?") == 2
    assert "--- a/a.py\n+++ b/a.py\n" in result.output  # each question shows the fix as a diff
    text = (project / "a.py").read_text()
    assert "step = jax.pmap(lambda x: x * 2)" in text  # skipped
    assert "def other(x):" in text and "jax.pmap(lambda x: x + 1)" not in text  # applied
    assert "Fixed 1 finding in 1 file." in result.output
    assert "Skipped 1 fix (still reported below):\n  a.py:3:8: PM101 rewrite `step`" in result.output
    assert result.exit_code == 1  # the skipped site is still a finding
    assert "a.py:" in result.output.split("Skipped 1 fix")[1] and "PM101 `jax.pmap` is the legacy pmap" in result.output


def test_quit_keeps_what_was_applied_and_stops(project):
    (project / "a.py").write_text(TWO)
    (project / "b.py").write_text(TWO)
    result = fix(".", input="a\nq\n")
    assert result.output.count("Apply this fix?") == 2
    assert "def step(x):" in (project / "a.py").read_text()
    assert "other = jax.pmap(lambda x: x + 1)" in (project / "a.py").read_text()
    assert (project / "b.py").read_text() == TWO  # never asked about


def test_end_of_input_is_quit(project):
    (project / "a.py").write_text(TWO)
    result = fix("a.py", input="a\n")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "def step(x):" in (project / "a.py").read_text()


def test_a_notebook_is_reviewed_by_cell(project):
    shutil.copy(ROOT / "fixtures" / "notebooks" / "training.ipynb", project / "nb.ipynb")
    result = fix("nb.ipynb", input="a\n")
    assert "nb.ipynb:cell 4:1:1: PM101" in result.output
    assert "--- a/nb.ipynb:cell 4\n+++ b/nb.ipynb:cell 4\n" in result.output
    cells = json.loads((project / "nb.ipynb").read_text())["cells"]
    assert "jax.shard_map" in "".join(cells[3]["source"])


def test_the_diff_is_coloured_on_a_terminal(project, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    (project / "a.py").write_text(TWO)
    out = fix("a.py", input="s\ns\n").output
    assert "\x1b[32m+" in out and "\x1b[31m-" in out  # green additions, red removals


def test_interactive_and_diff_do_not_mix(project):
    (project / "a.py").write_text(TWO)
    assert fix("a.py", "--diff").exit_code == 2


def test_per_file_ignores_are_not_offered(project):
    (project / "pyproject.toml").write_text('[tool.pmap-migrate]\n[tool.pmap-migrate.per-file-ignores]\n"a.py" = ["PM101"]\n')
    (project / "a.py").write_text(TWO)
    result = fix("a.py")
    assert "Apply this fix?" not in result.output and (project / "a.py").read_text() == TWO


class Wrap(Rule):
    """Unsafe: `wrap(x)` -> `[x]`."""

    CODE = "PM991"
    NAME = "test-wrap"
    MESSAGE = "wrap"
    TRIGGERS = ("wrap",)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "wrap" and node.args:
            self.report(node, fix=FixSpec("unsafe", "assumes wrap builds a list",
                                          replacement=cst.List([cst.Element(node.args[0].value)])))


def test_unsafe_fixes_are_asked_only_with_the_flag(tmp_path):
    asked = []

    def decide(proposal):
        asked.append(proposal)
        return Decision.APPLY

    settings = Settings(root=tmp_path)
    outcome, skipped, quit_ = review_file(b"v = wrap(wrap(3))\n", "m.py", (Wrap,), settings, unsafe=False, decide=decide)
    assert asked == [] and outcome.fixed is None and [d.code for d in outcome.remaining] == ["PM991", "PM991"]
    outcome, skipped, quit_ = review_file(b"v = wrap(wrap(3))\n", "m.py", (Wrap,), settings, unsafe=True, decide=decide)
    assert len(asked) == 2  # inner first, then the outer one in the next round, built on it
    assert asked[0].diagnostic.column == 10 and "+v = wrap([3])" in asked[0].diff
    assert outcome.fixed == b"v = [[3]]\n" and outcome.remaining == [] and not skipped and not quit_
