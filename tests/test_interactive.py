"""`pmap-migrate fix --interactive`: one question per fix, as a diff; apply / skip / quit."""

from __future__ import annotations

import datetime
import json
import re
import shutil
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.config import Settings
from pmap_migrate.interactive import Answer, Decision, parse_answer, review_file
from pmap_migrate.rules.base import Rule
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.spec import FixSpec

ROOT = Path(__file__).resolve().parents[1]
TWO = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\nother = jax.pmap(lambda x: x + 1)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def fix(*args, input=""):
    return CliRunner().invoke(main, ["fix", "--interactive", *args], input=input, catch_exceptions=False)


SKIPS = ".pmap-migrate-skips.json"
TODAY = datetime.date.today().isoformat()  # (the run started that day)


def recorded_today(date: str) -> str:
    """``date`` when it is the day this run started or today (a run may span midnight), else a
    value no assertion accepts."""
    return date if date in (TODAY, datetime.date.today().isoformat()) else f"not today: {date}"


def recorded(project) -> list[dict]:
    return json.loads((project / SKIPS).read_text())["skips"]


def pm101_sites(*paths) -> list[dict]:
    result = CliRunner().invoke(main, ["report", "--no-cache", "--format", "json", *paths], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [s for s in json.loads(result.output)["sites"] if s["code"] == "PM101"]


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


FORM_FEED = ("import jax\n\n\ndef f(x):\n    y = x\n\x0c    return y\n\n\nstep = jax.pmap(f)\n"
             "other = jax.pmap(lambda x: x + 1)\n\n\ndef g(x):\n    z = x\n\x0c    return z\n")


def test_a_line_no_fix_touched_keeps_its_bytes_in_review_as_in_fix(project):
    """libcst renders a form feed before an indented statement away; `fix` puts it back, and so do
    the review's proposals, what it writes, and plain `fix` with recorded skips."""
    (project / "batch.py").write_bytes(FORM_FEED.encode())
    (project / "reviewed.py").write_bytes(FORM_FEED.encode())
    CliRunner().invoke(main, ["fix", "--no-cache", "batch.py"], catch_exceptions=False)
    batch = (project / "batch.py").read_bytes()
    assert batch.count(b"\x0c    return") == 2 and b"jax.pmap" not in batch
    result = fix("reviewed.py", input="a\n" * 10)
    assert result.output.count("Apply this fix?") == 2
    assert "\x0c" not in "".join(line for line in result.output.splitlines() if line.startswith(("-", "+")))
    assert (project / "reviewed.py").read_bytes() == batch

    (project / "skipped.py").write_bytes(FORM_FEED.encode())
    fix("skipped.py", input="s\ns\n")  # both skipped, and recorded
    (project / "skipped.py").write_bytes(FORM_FEED.replace("other", "more").encode())  # a new site to fix
    plain = CliRunner().invoke(main, ["fix", "--no-cache", "skipped.py"], catch_exceptions=False)
    assert "Fixed 1 of 2 legacy patterns in 1 file." in plain.output
    fixed = (project / "skipped.py").read_bytes()
    assert fixed.count(b"\x0c    return") == 2 and b"step = jax.pmap(f)" in fixed and b"more = jax.pmap" not in fixed


def test_skip_apply_and_the_skips_are_reported(project):
    (project / "a.py").write_text(TWO)
    result = fix("a.py", input="s\na\n")
    assert result.output.count("Apply this fix?") == 2
    assert "--- a/a.py\n+++ b/a.py\n" in result.output  # each question shows the fix as a diff
    text = (project / "a.py").read_text()
    assert "step = jax.pmap(lambda x: x * 2)" in text  # skipped
    assert "other = jax.jit(_shard_mapped(" in text and "jax.pmap(lambda x: x + 1)" not in text  # applied
    assert "Fixed 1 of 2 legacy patterns in 1 file." in result.output
    assert "Skipped 1 fix (still reported below):\n  a.py:3:8: PM101 rewrite `step`" in result.output
    assert result.exit_code == 1  # the skipped site is still a finding
    assert "a.py:" in result.output.split("Skipped 1 fix")[1] and "PM101 `jax.pmap` is the legacy pmap" in result.output


def test_quit_keeps_what_was_applied_and_stops(project):
    (project / "a.py").write_text(TWO)
    (project / "b.py").write_text(TWO)
    result = fix(".", input="a\nq\n")
    assert result.output.count("Apply this fix?") == 2
    assert "step = jax.jit(_shard_mapped(" in (project / "a.py").read_text()
    assert "other = jax.pmap(lambda x: x + 1)" in (project / "a.py").read_text()
    assert (project / "b.py").read_text() == TWO  # never asked about


def test_end_of_input_is_quit(project):
    (project / "a.py").write_text(TWO)
    result = fix("a.py", input="a\n")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "step = jax.jit(_shard_mapped(" in (project / "a.py").read_text()


def test_a_notebook_is_reviewed_by_cell(project):
    shutil.copy(ROOT / "fixtures" / "notebooks" / "training.ipynb", project / "nb.ipynb")
    result = fix("nb.ipynb", input="a\n")
    assert "nb.ipynb:cell 4:1:1: PM101" in result.output
    assert "--- a/nb.ipynb:cell 4\n+++ b/nb.ipynb:cell 4\n" in result.output
    cells = json.loads((project / "nb.ipynb").read_text())["cells"]
    assert "_shard_mapped" in "".join(cells[3]["source"])


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


def test_unsafe_fixes_are_asked_only_with_the_flag(tmp_path):
    asked = []

    def decide(proposal):
        asked.append(proposal)
        return Decision.APPLY

    settings = Settings(root=tmp_path)
    outcome = review_file(b"v = wrap(wrap(3))\n", "m.py", (Wrap,), settings, unsafe=False, decide=decide).outcome
    assert asked == [] and outcome.fixed is None and [d.code for d in outcome.remaining] == ["PM991", "PM991"]
    reviewed = review_file(b"v = wrap(wrap(3))\n", "m.py", (Wrap,), settings, unsafe=True, decide=decide)
    assert len(asked) == 2  # inner first, then the outer one in the next round, built on it
    assert asked[0].diagnostic.column == 10 and "+v = wrap([3])" in asked[0].diff
    outcome = reviewed.outcome
    assert outcome.fixed == b"v = [[3]]\n" and outcome.remaining == [] and not reviewed.skipped and not reviewed.quit
    assert reviewed.skips == []  # nothing skipped, nothing to remember


# --- remembered skips ------------------------------------------------------------------------------

def test_a_skip_is_remembered_reported_and_not_asked_again(project):
    (project / "a.py").write_text(TWO)
    first = fix("a.py", input="s not on TPU yet\na\n")
    assert first.output.count("Apply this fix?") == 2
    assert "Remembered in .pmap-migrate-skips.json" in first.output
    [entry] = recorded(project)
    assert re.fullmatch(r"[0-9a-f]{16}", entry.pop("fingerprint"))
    day = recorded_today(entry["date"])
    assert entry == {"path": "a.py", "code": "PM101", "occurrence": 0, "source": "step = jax.pmap(lambda x: x * 2)",
                     "date": day, "reason": "not on TPU yet"}
    # the report lists it as skipped in review, where it is now (imports were added above it)
    [site] = pm101_sites("a.py")
    line = (project / "a.py").read_text().splitlines().index("step = jax.pmap(lambda x: x * 2)") + 1
    assert (site["line"], site["state"]) == (line, "skipped")
    assert site["skipped"] == {"date": day, "reason": "not on TPU yet"}
    assert site["reason"].startswith(f"skipped in review on {day}: not on TPU yet; the fix: rewrite `step`")

    fixed = (project / "a.py").read_text()
    again = fix("a.py")
    assert "Apply this fix?" not in again.output  # not asked again
    assert f"Left 1 fix skipped in an earlier review (--review-skipped asks again):\n  a.py:{line}:8: PM101" in again.output
    assert (project / "a.py").read_text() == fixed and again.exit_code == 1  # still a finding

    # lines added above the site: still the same site, still skipped
    moved = fixed.replace("\nstep = ", "\nSCALE = 2\n\n\n# the step\nstep = ")
    (project / "a.py").write_text(moved)
    assert "Apply this fix?" not in fix("a.py").output
    assert (project / "a.py").read_text() == moved
    [site] = pm101_sites("a.py")
    assert (site["line"], site["state"]) == (line + 4, "skipped")
    assert recorded(project) == [{**entry, "fingerprint": recorded(project)[0]["fingerprint"]}]  # date and reason kept

    # plain `fix` leaves it alone too; --review-skipped applies it
    plain = CliRunner().invoke(main, ["fix", "--no-cache", "a.py"], catch_exceptions=False)
    assert (project / "a.py").read_text() == moved and "Fixed 0 of 1 legacy pattern in 0 files." in plain.output
    assert "Left 1 fix skipped in an earlier review (--review-skipped applies them)" in plain.output
    diff = CliRunner().invoke(main, ["fix", "--no-cache", "--diff", "a.py"], catch_exceptions=False)
    assert diff.exit_code == 0 and diff.stdout == ""

    # --review-skipped asks again; applying the fix drops the record
    last = fix("--review-skipped", "a.py", input="a\n")
    assert last.output.count("Apply this fix?") == 1
    assert "step = jax.pmap" not in (project / "a.py").read_text() and last.exit_code == 0
    assert recorded(project) == [] and pm101_sites("a.py") == []


def test_fixes_skipped_in_review_are_not_counted_as_fixable(project):
    """`check` and `fix` do not promise that `fix` applies a fix it leaves alone."""
    (project / "a.py").write_text(TWO)
    skipping = fix("a.py", input="s\nq\n")  # skip one, quit: nothing written, one skip recorded
    assert len(recorded(project)) == 1
    assert skipping.output.rstrip().endswith(
        "[*] 1 fixable with `pmap-migrate fix`.\n"
        "1 fix skipped in review: `pmap-migrate fix` leaves it alone (`fix --review-skipped` applies it).")

    def summary(*args):
        result = CliRunner().invoke(main, [*args, "a.py"], catch_exceptions=False)
        return result.output.rstrip().split("\n")[-2:]

    for args in (["check", "--no-cache"], ["check"], ["check"], ["check", "--statistics"], ["check", "--output-format", "concise"]):
        assert summary(*args) == [
            "[*] 1 fixable with `pmap-migrate fix`.",
            "1 fix skipped in review: `pmap-migrate fix` leaves it alone (`fix --review-skipped` applies it)."], args
    assert summary("fix", "--no-cache") == [  # the other fix applied: the skipped one is the only finding left
        "Found 1 legacy pattern in 1 file.",
        "1 fix skipped in review: `pmap-migrate fix` leaves it alone (`fix --review-skipped` applies it)."]
    assert summary("check") == summary("check", "--no-cache") == [
        "Found 1 legacy pattern in 1 file.",
        "1 fix skipped in review: `pmap-migrate fix` leaves it alone (`fix --review-skipped` applies it)."]
    (project / SKIPS).unlink()
    assert summary("check") == ["Found 1 legacy pattern in 1 file.", "[*] 1 fixable with `pmap-migrate fix`."]
    (project / SKIPS).write_text("not json")  # a broken record: a warning, the check goes on
    broken = CliRunner().invoke(main, ["check", "a.py"], catch_exceptions=False)
    assert broken.exit_code == 1 and "warning:" in broken.stderr and "[*] 1 fixable" in broken.stdout


def test_plain_fix_with_review_skipped_applies_the_skipped_fixes(project):
    (project / "a.py").write_text(TWO)
    fix("a.py", input="s\ns\n")
    assert len(recorded(project)) == 2
    CliRunner().invoke(main, ["fix", "--no-cache", "--review-skipped", "a.py"], catch_exceptions=False)
    assert "jax.pmap" not in (project / "a.py").read_text()


def test_a_site_edited_since_is_asked_about_again_and_its_stale_record_dropped(project):
    (project / "a.py").write_text(TWO)
    (project / "b.py").write_text(TWO)
    fix(".", input="s\ns\ns\ns\n")
    assert sorted((e["path"], e["source"]) for e in recorded(project)) == [
        ("a.py", "other = jax.pmap(lambda x: x + 1)"), ("a.py", "step = jax.pmap(lambda x: x * 2)"),
        ("b.py", "other = jax.pmap(lambda x: x + 1)"), ("b.py", "step = jax.pmap(lambda x: x * 2)")]
    (project / "a.py").write_text(TWO.replace("x * 2", "x * 3"))  # the site itself changed
    (project / "b.py").unlink()  # the sites went away
    result = fix(".", input="s\n")
    assert result.output.count("Apply this fix?") == 1 and "a.py:3:8: PM101" in result.output
    assert sorted((e["path"], e["source"]) for e in recorded(project)) == [
        ("a.py", "other = jax.pmap(lambda x: x + 1)"), ("a.py", "step = jax.pmap(lambda x: x * 3)")]


def test_identical_sites_are_told_apart(project):
    """Two identical lines: applying the first and skipping the second (or the reverse) asks once
    about each, and the one skipped stays skipped."""
    source = "import jax\n\n\ndef f(x):\n    return x\n\n\ny = jax.pmap(f)(x)\ny = jax.pmap(f)(x)\n"
    rewritten = "y = jax.jit(_shard_mapped(f))(x)"
    for answers, left in (("a\ns\n", [rewritten, "y = jax.pmap(f)(x)"]), ("s\na\n", ["y = jax.pmap(f)(x)", rewritten])):
        (project / "a.py").write_text(source)
        (project / SKIPS).unlink(missing_ok=True)
        result = fix("a.py", input=answers)
        assert result.output.count("Apply this fix?") == 2, result.output
        text = (project / "a.py").read_text()
        assignments = re.findall(r"(?m)^y = .*", text)
        assert len(assignments) == 2 and all(a.startswith(start) for a, start in zip(assignments, left)), text
        assert [e["occurrence"] for e in recorded(project)] == [0]
        assert "Apply this fix?" not in fix("a.py").output


def test_a_notebook_skip_is_remembered_by_cell(project):
    shutil.copy(ROOT / "fixtures" / "notebooks" / "training.ipynb", project / "nb.ipynb")
    first = fix("nb.ipynb", input="s\nq\n")
    assert "nb.ipynb:cell 4:1:1: PM101" in first.output
    [entry] = recorded(project)
    assert (entry["path"], entry["code"]) == ("nb.ipynb", "PM101")
    [site] = [s for s in pm101_sites("nb.ipynb") if s["state"] == "skipped"]
    assert (site["cell"], site["line"], recorded_today(site["skipped"]["date"])) == (4, 1, site["skipped"]["date"])
    second = fix("nb.ipynb", input="q\n")
    assert "cell 4:1:1: PM101" not in second.output.split("Fixed")[0]  # not asked about again
    assert "Left 1 fix skipped in an earlier review" in second.output


class Wrap(Rule):
    """Unsafe: `wrap(x)` -> `[x]`."""

    CODE = "PM991"
    NAME = "test-wrap"
    MESSAGE = "wrap"
    TRIGGERS = ("wrap",)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "wrap" and node.args:
            self.report(node, fix=FixSpec(Applicability.UNSAFE, "assumes wrap builds a list",
                                          replacement=cst.List([cst.Element(node.args[0].value)])))


def test_a_recorded_skip_outlives_runs_that_do_not_ask_about_it(tmp_path):
    """An unsafe fix skipped with --unsafe-fixes stays recorded through a review without the flag;
    with it, it is not asked about again, unless review_skipped."""
    settings, data = Settings(root=tmp_path), b"\n\nv = wrap(3)\n"
    asked = []

    def answer(decision):
        def decide(proposal):
            asked.append(proposal)
            return decision
        return decide

    first = review_file(data, "m.py", (Wrap,), settings, unsafe=True, decide=answer(Answer(Decision.SKIP, "later")))
    [skip] = first.skips
    assert len(asked) == 1 and first.outcome.fixed is None and (skip.source, skip.reason) == ("v = wrap(3)", "later")
    remembered = {skip.key: skip}
    safe_only = review_file(data, "m.py", (Wrap,), settings, unsafe=False, decide=answer(Decision.APPLY),
                            remembered=remembered)
    assert safe_only.skips == [skip] and safe_only.held == []  # not askable here, still recorded
    again = review_file(b"x = 1\n" + data, "m.py", (Wrap,), settings, unsafe=True, decide=answer(Decision.APPLY),
                        remembered=remembered)
    assert len(asked) == 1 and again.outcome.fixed is None and again.skips == [skip]
    assert [(d.code, d.line) for d in again.held] == [("PM991", 4)]
    reviewed = review_file(data, "m.py", (Wrap,), settings, unsafe=True, decide=answer(Decision.APPLY),
                           remembered=remembered, review_skipped=True)
    assert len(asked) == 2 and reviewed.outcome.fixed == b"\n\nv = [3]\n" and reviewed.skips == []


@pytest.mark.parametrize("text, answer", [
    ("a", Answer(Decision.APPLY)), ("APPLY", Answer(Decision.APPLY)), ("s", Answer(Decision.SKIP)),
    ("skip", Answer(Decision.SKIP)), ("s waits for the TPU  port ", Answer(Decision.SKIP, "waits for the TPU port")),
    ("skip: flaky on CPU", Answer(Decision.SKIP, "flaky on CPU")), (" q ", Answer(Decision.QUIT)),
    ("quit", Answer(Decision.QUIT)),
])
def test_answers(text, answer):
    assert parse_answer(text) == answer


@pytest.mark.parametrize("text", ["", "x", "apply now", "q later", "sk"])
def test_other_answers_are_refused(text):
    with pytest.raises(ValueError):
        parse_answer(text)


def test_a_wrong_answer_is_asked_again(project):
    (project / "a.py").write_text(TWO)
    result = fix("a.py", input="maybe\ns\ns\n")
    assert "Error: answer a, s" in result.output and result.output.count("Apply this fix?") == 3
    assert (project / "a.py").read_text() == TWO


def test_a_broken_record_is_an_error_not_a_silent_loss(project):
    (project / "a.py").write_text(TWO)
    (project / SKIPS).write_text("<<<<<<< HEAD\n")
    for result in (fix("a.py", input="a\na\n"), CliRunner().invoke(main, ["report", "a.py"])):
        assert result.exit_code == 2 and ".pmap-migrate-skips.json: not a record of skipped fixes" in result.output
    assert (project / "a.py").read_text() == TWO


def test_idiomatic_fixes_are_offered_with_the_option(tmp_path, monkeypatch):
    """`fix --interactive --unsafe-fixes --idiomatic`, saying yes to everything, writes what
    `fix --unsafe-fixes --idiomatic` writes: the idiomatic rewrite, not the faithful one."""
    from tests.test_idiomatic import CLASSIC

    for side in ("batch", "reviewed"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
        (tmp_path / side / "train.py").write_text(CLASSIC)
    monkeypatch.chdir(tmp_path / "batch")
    CliRunner().invoke(main, ["fix", "--no-cache", "--unsafe-fixes", "--idiomatic", "."], catch_exceptions=False)
    monkeypatch.chdir(tmp_path / "reviewed")
    result = fix("--unsafe-fixes", "--idiomatic", ".", input="a\n" * 20)
    assert "PM101 idiomatic rewrite of `step`" in result.output
    text = (tmp_path / "reviewed" / "train.py").read_text()
    assert "batch_mesh()" in text and "per_device" not in text
    assert text == (tmp_path / "batch" / "train.py").read_text()
    # the config switch too; and without --unsafe-fixes the faithful rewrite is offered
    (tmp_path / "reviewed" / "pyproject.toml").write_text("[tool.pmap-migrate]\nidiomatic = true\n")
    (tmp_path / "reviewed" / "train.py").write_text(CLASSIC)
    assert "idiomatic rewrite of `step`" in fix("--unsafe-fixes", ".", input="q\n").output
    assert "idiomatic rewrite" not in fix(".", input="q\n").output
