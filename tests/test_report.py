"""`pmap-migrate report`: the ledger of every legacy site, nothing dropped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.diagnostics import Applicability, Diagnostic, FixInfo, State
from pmap_migrate.report import Report, SiteState, classify, to_markdown
from pmap_migrate.rules import all_rules
from pmap_migrate.runner import lint_file

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\n[tool.pmap-migrate.per-file-ignores]\n"tests/*" = ["PM101"]\n')
    files = {
        "src/train.py": "import functools\nimport jax\n\n\n@functools.partial(jax.pmap, axis_name='i')\n"
                        "def step(x):\n    return jax.lax.psum(x, 'i')\n",
        "src/compat.py": "import jax\n\nif hasattr(jax, 'device_put_replicated'):\n"
                         "    p = jax.device_put_replicated(x, jax.devices())\n"
                         "q = jax.pmap(f)  # noqa: PM101\n",
        "src/shimmed.py": "import runtime_shim\nfrom runtime_shim import pmap\n\nstep = pmap(f, axis_name='i')\n"
                          "other = runtime_shim.pmap(g)\nrp = runtime_shim.device_put_replicated(x, devs)\n",
        "tests/test_step.py": "import jax\nstep = jax.pmap(lambda x: x)\n",
        "broken.py": "import jax\ndef (jax.pmap\n",
        "clean.py": "import jax\nstep = jax.jit(lambda x: x)\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def report(*args):
    return CliRunner().invoke(main, ["report", "--no-cache", *args], catch_exceptions=False)


def ledger(*args) -> dict:
    result = report("--output-format", "json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def states(document) -> dict[tuple[str, int, str], str]:
    return {(s["path"], s["line"], s["code"]): s["state"] for s in document["sites"]}


def test_every_state_is_recorded(project):
    found = states(ledger("."))
    assert found[("src/train.py", 5, "PM101")] == "fixable-safe"
    assert found[("src/compat.py", 4, "PM301")] == "guarded"
    assert found[("src/compat.py", 5, "PM101")] == "suppressed"
    assert found[("tests/test_step.py", 2, "PM101")] == "suppressed"  # per-file-ignores
    assert not any(path == "broken.py" for path, _, _ in found)  # not a site: a file that could not be checked
    # code already on the shim: no finding for `check`, listed as shimmed here
    assert found[("src/shimmed.py", 4, "PM101")] == "shimmed"
    assert found[("src/shimmed.py", 5, "PM101")] == "shimmed"
    assert found[("src/shimmed.py", 6, "PM301")] == "shimmed"
    assert not any(path == "clean.py" for path, _, _ in found)


def test_site_fields_and_summaries_add_up(project):
    document = ledger(".")
    site = next(s for s in document["sites"] if s["path"] == "src/train.py")
    assert {"path", "line", "column", "code", "name", "state", "reason", "message", "fix"} <= set(site)
    assert site["reason"] == site["fix"] and "jax.jit" in site["reason"]
    total = document["summary"]["total"]
    assert total["total"] == len(document["sites"])
    assert sum(v["total"] for v in document["summary"]["by_rule"].values()) == total["total"]
    assert sum(v["total"] for v in document["summary"]["by_directory"].values()) == total["total"]
    assert set(document["summary"]["by_directory"]) == {"src", "tests"}
    assert document["files_checked"] == 6
    assert document["files_with_sites"] == 4
    assert document["not_checked"] == [{"path": "broken.py", "code": "PM000", "message": document["not_checked"][0]["message"]}]
    # the counts `check` prints: the active findings (src/train.py's pmap), the file that does not parse
    assert document["counts"] == {"legacy_patterns": 1, "files_with_patterns": 1, "files_not_checked": 1,
                                  "fixable_safe": 1, "fixable_unsafe": 0, "skipped_in_review": 0}


def test_markdown_to_stdout_and_to_a_file(project):
    out = report(".").output
    assert report(".", "--format", "json").output == report(".", "--output-format", "json").output  # kept hidden
    assert out.startswith("# pmap-migrate: migration report\n")
    for heading in ("## Summary by rule", "## Summary by directory", "## Sites"):
        assert heading in out
    assert "| `src/train.py` | 5:1 | PM101 `pmap-call` | fixable (safe) |" in out
    assert "| **total** |" in out
    assert out.splitlines()[2] == ("**1 legacy pattern** in 1 of 6 files checked (1 fixable with `pmap-migrate fix`); "
                                   "**1 file could not be checked**.")
    assert "## Files that could not be checked" in out and "| `broken.py` | PM000 |" in out
    for option in ("-o", "--output-file", "--output"):  # --output: the earlier spelling, kept hidden
        (project / "MIGRATION.md").unlink(missing_ok=True)
        result = report(".", option, "MIGRATION.md")
        assert result.stdout == "" and "Wrote the migration report" in result.stderr
        assert (project / "MIGRATION.md").read_text() == out
        assert report(".", option, "MIGRATION.md", "-q").stderr == ""


def test_the_report_drops_nothing_the_linter_saw(tmp_path, monkeypatch):
    """Over the lint fixtures, the example and the notebooks: every finding of every state, and
    is a site in the ledger, in the state its fix and state say; every file error is listed apart."""
    for directory in ("lint", "example", "notebooks"):
        shutil.copytree(ROOT / "fixtures" / directory, tmp_path / directory)
    monkeypatch.chdir(tmp_path)
    document = ledger("lint", "example", "notebooks")
    sites = {(s["path"], s.get("cell"), s["line"], s["column"], s["code"]): s for s in document["sites"]}
    expected = unchecked = 0
    for path in sorted(p for p in tmp_path.rglob("*") if p.suffix in (".py", ".ipynb")):
        shown = path.relative_to(tmp_path).as_posix()
        result = lint_file(path.read_bytes(), shown, all_rules())
        for d in result.diagnostics:
            key = (d.path, d.cell, d.line, d.column, d.code)
            assert key in sites, f"{key} missing from the report"
            assert sites[key]["state"] == classify(d).state.value
            expected += 1
        if result.error is not None:
            assert {"path": shown, "code": result.error.code, "message": result.error.message} in \
                document["not_checked"]
            unchecked += 1
    shimmed_already = sum(1 for s in document["sites"] if s["reason"].startswith("uses `runtime_shim"))
    assert len(document["sites"]) == expected + shimmed_already
    assert len(document["not_checked"]) == unchecked
    assert any(s.get("cell") for s in document["sites"])  # notebooks are in it, by cell


def test_select_narrows_the_ledger(project):
    document = ledger(".", "--select", "PM3")
    assert {s["code"] for s in document["sites"]} <= {"PM301", "PM302", "PM303", "PM304"}
    assert ("src/shimmed.py", 6, "PM301") in states(document)


def _diagnostic(**changes) -> Diagnostic:
    base = dict(code="PM101", name="pmap-call", message="legacy | pmap", path="a/b.py", line=3, column=1,
                end_line=3, end_column=9)
    return Diagnostic(**{**base, **changes})


@pytest.mark.parametrize("changes, state", [
    ({}, SiteState.MANUAL),
    ({"fix": FixInfo(Applicability.SAFE, "rewrite")}, SiteState.FIXABLE_SAFE),
    ({"fix": FixInfo(Applicability.UNSAFE, "assumes positional args")}, SiteState.FIXABLE_UNSAFE),
    ({"fix": FixInfo(Applicability.SAFE, "use runtime_shim.pmap: nested", shimmed=True)}, SiteState.SHIMMED),
    ({"state": State.SUPPRESSED, "fix": FixInfo(Applicability.SAFE, "rewrite")}, SiteState.SUPPRESSED),
    ({"state": State.GUARDED}, SiteState.GUARDED),
])
def test_classification(changes, state):
    site = classify(_diagnostic(**changes))
    assert site.state is state
    if state is SiteState.MANUAL:
        assert site.reason == "legacy | pmap"  # the reason of a manual site is the rule's message
    if state is SiteState.FIXABLE_UNSAFE:
        assert site.reason == "assumes positional args"


def test_markdown_escapes_table_cells():
    text = to_markdown(Report([classify(_diagnostic())], files_checked=1))
    assert "legacy \\| pmap" in text
    assert "| `a` |  |  |  | 1 |  |  |  | 1 |" in text  # the directory summary: one manual site under a/


def test_notebook_sites_carry_their_cell(project):
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
             for source in (["import jax, runtime_shim\n"], ["f = runtime_shim.pmap(g)\n", "h = jax.pmap(k)"])]
    (project / "nb.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    sites = ledger("nb.ipynb")["sites"]
    assert [(s["cell"], s["line"], s["code"]) for s in sites] == [(2, 1, "PM101"), (2, 2, "PM101")]
    assert sites[0]["state"] == "shimmed" and sites[0]["reason"].startswith("uses `runtime_shim.pmap`")
    assert "| `nb.ipynb` | cell 2:1:5 | PM101 `pmap-call` | shimmed |" in report("nb.ipynb").output


# --- fixes skipped in review ----------------------------------------------------------------------

SKIPS = ".pmap-migrate-skips.json"


def review(*args, input):
    return CliRunner().invoke(main, ["fix", "--interactive", *args], input=input, catch_exceptions=False)


def test_a_fix_skipped_in_review_is_listed_and_counted_in_every_table(project):
    before = ledger(".")
    review("src/train.py", input="s waiting for the TPU port\n")
    assert (project / "src/train.py").read_text().count("jax.pmap") == 1  # not fixed
    document = ledger(".")
    # nothing dropped, nothing else changed: one site changed state
    after = states(document)
    assert len(document["sites"]) == len(before["sites"])
    assert {k: v for k, v in after.items() if v != "skipped"} == {k: v for k, v in states(before).items()
                                                                  if k != ("src/train.py", 5, "PM101")}
    site = next(s for s in document["sites"] if s["state"] == "skipped")
    assert (site["path"], site["line"], site["code"]) == ("src/train.py", 5, "PM101")
    assert site["skipped"]["reason"] == "waiting for the TPU port" and site["fix"].startswith("rewrite `step`")
    summary = document["summary"]
    assert summary["total"]["skipped"] == 1 and summary["total"]["fixable-safe"] == 0
    assert summary["by_rule"]["PM101"]["skipped"] == 1 and summary["by_directory"]["src"]["skipped"] == 1
    assert sum(v["total"] for v in summary["by_rule"].values()) == summary["total"]["total"] == len(document["sites"])
    assert document["skips"] == {"file": SKIPS, "stale": 0}

    out = report(".").output
    assert "1 skipped in review." in out.split("\n\n")[2]
    assert "(1 skipped in review)" in out.split("\n\n")[1]  # the headline: not fixable by `fix`
    assert document["counts"]["fixable_safe"] == 0 and document["counts"]["skipped_in_review"] == 1
    assert out.count("| fixable (safe) | fixable (unsafe) | shimmed | manual | suppressed | guarded | "
                     "skipped in review | total |") == 2
    assert "| PM101 `pmap-call` |  |  | 2 |  | 2 |  | 1 | 5 |" in out
    assert "| `src` |  |  | 3 |  | 1 | 1 | 1 | 6 |" in out
    assert "| `src/train.py` | 5:1 | PM101 `pmap-call` | skipped in review | skipped in review on " in out
    assert ": waiting for the TPU port; the fix: rewrite `step`" in out


def test_stale_skips_are_counted_never_shown_as_sites(project):
    (project / "src/other.py").write_text("import jax\nother = jax.pmap(g)\n")
    review("src/train.py", "src/other.py", input="s\ns\n")
    assert len(json.loads((project / SKIPS).read_text())["skips"]) == 2
    train = project / "src/train.py"
    train.write_text(train.read_text().replace("axis_name='i'", "axis_name='batch'"))  # the site changed
    (project / "src/other.py").unlink()  # the site went away
    document = ledger(".")
    assert states(document)[("src/train.py", 5, "PM101")] == "fixable-safe"
    assert "skipped" not in {s["state"] for s in document["sites"]}
    assert document["skips"]["stale"] == 2
    assert "2 recorded skips in `.pmap-migrate-skips.json` match no site any more" in report(".").output


def test_a_skipped_site_suppressed_since_is_suppressed(project):
    review("src/train.py", input="s\n")
    train = project / "src/train.py"
    train.write_text(train.read_text().replace("'i')\ndef", "'i')  # noqa: PM101\ndef"))
    document = ledger(".")
    assert states(document)[("src/train.py", 5, "PM101")] == "suppressed"
    assert document["skips"]["stale"] == 0  # the site is still there
