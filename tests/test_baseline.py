"""The CI gate: the baseline ratchet, and the GitHub Actions recipe of docs/ci.md."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main

ROOT = Path(__file__).resolve().parents[1]
ONE = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\n"
TWO = ONE + "other = jax.pmap(lambda x: x + 1)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text(ONE)
    (tmp_path / "src" / "b.py").write_text(TWO)
    return tmp_path


def check(*args):
    return CliRunner().invoke(main, ["check", "--no-cache", *args], catch_exceptions=False)


def test_write_baseline_records_counts_per_file_and_rule(project):
    result = check(".", "--write-baseline", "ci/baseline.json")
    assert result.exit_code == 0
    document = json.loads((project / "ci" / "baseline.json").read_text())
    assert document["version"] == 1
    # paths are relative to the baseline's directory
    assert document["findings"] == {"../src/a.py": {"PM101": 1}, "../src/b.py": {"PM101": 2}}


def test_unchanged_or_moved_findings_pass(project):
    check(".", "--write-baseline", "baseline.json")
    result = check(".", "--baseline", "baseline.json")
    assert result.exit_code == 0, result.output
    assert "3 findings within the baseline baseline.json not shown." in result.output
    # edits that move the findings do not make them new
    (project / "src" / "b.py").write_text("# a comment\n\n" + TWO)
    assert check(".", "--baseline", "baseline.json").exit_code == 0


@pytest.mark.parametrize("change", ["more of the same rule", "another rule", "a new file"])
def test_growth_fails_and_shows_the_group(project, change):
    check(".", "--write-baseline", "baseline.json")
    if change == "more of the same rule":
        (project / "src" / "a.py").write_text(TWO)
        expected = {("src/a.py", "PM101")}
    elif change == "another rule":
        (project / "src" / "a.py").write_text(ONE + "p = jax.device_put_replicated(x, jax.devices())\n")
        expected = {("src/a.py", "PM301")}
    else:
        (project / "src" / "c.py").write_text(ONE)
        expected = {("src/c.py", "PM101")}
    result = check(".", "--baseline", "baseline.json", "--output-format", "json")
    assert result.exit_code == 1
    found = json.loads(result.output)
    assert {(d["path"], d["code"]) for d in found} == expected
    if change == "more of the same rule":
        assert len(found) == 2  # counts cannot tell which one is new: the whole group is shown
        text = check(".", "--baseline", "baseline.json").output
        assert "src/a.py: 2 x PM101, the baseline allows 1" in text


def test_fewer_findings_pass_and_suggest_tightening(project):
    check(".", "--write-baseline", "baseline.json")
    (project / "src" / "b.py").write_text(ONE)
    result = check(".", "--baseline", "baseline.json")
    assert result.exit_code == 0
    assert "1 fewer finding than the baseline allows" in result.output
    # a run over some files (as under pre-commit) does not count the others as fixed
    only_a = check("src/a.py", "--baseline", "baseline.json")
    assert only_a.exit_code == 0 and "fewer" not in only_a.output


def test_the_baseline_works_from_another_directory(project, monkeypatch):
    check(".", "--write-baseline", "baseline.json")
    monkeypatch.chdir(project / "src")
    assert check(".", "--baseline", "../baseline.json").exit_code == 0
    (project / "src" / "a.py").write_text(TWO)
    assert check(".", "--baseline", "../baseline.json").exit_code == 1


def test_baseline_errors_are_usage_errors(project):
    assert check(".", "--baseline", "missing.json").exit_code == 2
    (project / "bad.json").write_text("{}")
    assert check(".", "--baseline", "bad.json").exit_code == 2
    (project / "bad.json").write_text("not json")
    assert "invalid JSON" in check(".", "--baseline", "bad.json").output
    assert check(".", "--baseline", "a.json", "--write-baseline", "b.json").exit_code == 2


def test_syntax_errors_count_like_findings(project):
    (project / "broken.py").write_text("import jax\nx = (jax.pmap\n")
    check(".", "--write-baseline", "baseline.json")
    assert json.loads((project / "baseline.json").read_text())["findings"]["broken.py"] == {"PM000": 1}
    assert check(".", "--baseline", "baseline.json").exit_code == 0


def _documented_workflow() -> str:
    page = (ROOT / "docs" / "ci.md").read_text()
    return next(b for b in re.findall(r"```yaml\n(.*?)\n```", page, re.S)
                if "pmap-migrate" in b and "jobs:" in b and "run:" in b)


def test_documented_workflow_is_valid_and_its_commands_run(project):
    """The GitHub Actions recipe in docs/ci.md: valid YAML, and every pmap-migrate command in it
    runs here with the exit code the workflow relies on."""
    import yaml

    # the placeholders filled in, as a user does (tests/test_recipes.py runs every step)
    workflow = yaml.safe_load(_documented_workflow().replace("<owner>", "owner").replace("<tag or commit>", "v1"))
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    commands = [line.strip() for step in steps if "run" in step for line in step["run"].splitlines()
                if line.strip().startswith("pmap-migrate")]
    assert any("--baseline" in c for c in commands) and any("sarif" in c for c in commands)
    assert any(c.startswith("pmap-migrate report") for c in commands)
    assert any(step.get("uses", "").startswith("github/codeql-action/upload-sarif") for step in steps)
    baseline_name = next(re.search(r"--baseline (\S+)", c).group(1) for c in commands if "--baseline" in c)
    check(".", "--write-baseline", baseline_name)
    for command in commands:
        words = shlex.split(command.split(">")[0].split("&&")[0].split("|")[0])[1:]
        result = CliRunner().invoke(main, words, catch_exceptions=False)
        assert result.exit_code == 0, (command, result.output)
        (project / "src" / "a.py").write_text(ONE)  # the report's -o FILE may have been written
    gate = next(c for c in commands if "--baseline" in c)
    (project / "src" / "new.py").write_text(ONE)
    assert CliRunner().invoke(main, shlex.split(gate)[1:]).exit_code == 1
