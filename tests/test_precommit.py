"""The pre-commit hooks, run by the real `pre-commit` against temporary git repositories.

pre-commit installs the hook's package into its own virtualenv with pip (libcst, click, rich and
pathspec come from the package index, or pip's cache). `try-repo` builds that environment afresh
on every call, so it runs once; the other scenarios use a `.pre-commit-config.yaml` naming a copy
of this repository at a deterministic commit, with PRE_COMMIT_HOME under
``$PMAP_MIGRATE_PRECOMMIT_CACHE`` (default ``~/.cache/pmap-migrate/pre-commit``) so the
environment is built once per version of the sources and reused afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("PMAP_MIGRATE_PRECOMMIT_CACHE", Path.home() / ".cache" / "pmap-migrate" / "pre-commit"))
# What pip needs to install the package: the hook repository is a copy of exactly these.
PACKAGE_FILES = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml")
PACKAGE_DIRS = ("codemod", "rules", "runtime_shim")
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "pmap-migrate tests", "GIT_AUTHOR_EMAIL": "tests@example.invalid",
    "GIT_COMMITTER_NAME": "pmap-migrate tests", "GIT_COMMITTER_EMAIL": "tests@example.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
}

LEGACY = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\n"
CLEAN = "import jax\n\nstep = jax.jit(lambda x: x * 2)\n"

pre_commit = shutil.which("pre-commit") or (
    str(Path(sys.executable).parent / "pre-commit") if (Path(sys.executable).parent / "pre-commit").exists() else None)
needs_pre_commit = pytest.mark.skipif(pre_commit is None or shutil.which("git") is None,
                                      reason="needs pre-commit (the `test` extra) and git")


def _package_files() -> list[Path]:
    files = [Path(name) for name in PACKAGE_FILES]
    for directory in PACKAGE_DIRS:
        files += sorted(p.relative_to(REPO) for p in (REPO / directory).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return files


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def hook_repo():
    """A committed copy of the package at a stable path, with a commit id that depends only on the
    content (fixed identity and dates): same sources, same rev, same pre-commit environment."""
    files = _package_files()
    digest = hashlib.sha256()
    for relative in files:
        digest.update(relative.as_posix().encode() + b"\0" + (REPO / relative).read_bytes() + b"\0")
    target = CACHE / "hook-repos" / digest.hexdigest()[:16]
    if not (target / ".git").exists():
        staging = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        for relative in files:
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / relative, staging / relative)
        _git(staging, "init", "-q", "-b", "main")
        _git(staging, "add", "-A")
        _git(staging, "commit", "-q", "-m", "pmap-migrate under test")
        try:
            staging.rename(target)
        except OSError:  # another test process got there first
            shutil.rmtree(staging, ignore_errors=True)
    yield target
    # Every edit of the sources makes a new copy and a new environment: drop the old copies and let
    # pre-commit collect the environments no existing config uses any more.
    for old in target.parent.iterdir():
        if old != target and ".tmp" not in old.name:
            shutil.rmtree(old, ignore_errors=True)
    _pre_commit(target.parent, "gc", home=CACHE / "home")


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "add", "-A")
    return root


def _notebook(*cells: str) -> str:
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": c.splitlines(keepends=True)} for c in cells],
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5,
    }, indent=1) + "\n"


def _pre_commit(cwd: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PRE_COMMIT", "VIRTUAL_ENV"))}
    env.update(GIT_IDENTITY, PRE_COMMIT_HOME=str(home), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
               NO_COLOR="1")
    color = ["--color", "never"] if args[0] in ("run", "try-repo") else []
    return subprocess.run([pre_commit, *args, *color], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _configure(project: Path, hook_repo: Path, *hooks: str) -> None:
    rev = _git(hook_repo, "rev-parse", "HEAD")
    lines = ["repos:", f"  - repo: {hook_repo}", f"    rev: {rev}", "    hooks:"]
    lines += [f"      - id: {hook}" for hook in hooks]
    (project / ".pre-commit-config.yaml").write_text("\n".join(lines) + "\n")
    _git(project, "add", ".pre-commit-config.yaml")


@needs_pre_commit
def test_try_repo_runs_both_hooks(tmp_path, hook_repo):
    """`pre-commit try-repo` (a fresh environment: the slow one): the check hook fails on the legacy
    module and on the notebook, the fix hook rewrites them, and other files are never handed over."""
    project = _project(tmp_path / "project", {
        "legacy.py": LEGACY,
        "clean.py": CLEAN,
        "analysis.ipynb": _notebook("import jax", "f = jax.pmap(lambda x: x + 1)"),
        "NOTES.md": "We still call jax.pmap(f) here.\n",
    })
    result = _pre_commit(project, "try-repo", str(hook_repo), "--all-files", "--verbose", home=tmp_path / "home")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "legacy.py:3:8: PM101" in output
    assert "analysis.ipynb:cell 2:1:5: PM101" in output
    assert "NOTES.md" not in output
    assert "files were modified by this hook" in output  # the fix hook rewrote them
    fixed = (project / "legacy.py").read_text()
    assert "jax.pmap" not in fixed and "jax.jit(" in fixed
    notebook = json.loads((project / "analysis.ipynb").read_text())
    cell = "".join(notebook["cells"][1]["source"])
    assert "jax.pmap" not in cell and "jax.jit(" in cell
    assert (project / "NOTES.md").read_text() == "We still call jax.pmap(f) here.\n"


@needs_pre_commit
def test_check_hook_gates_the_commit(tmp_path, hook_repo):
    """Under a cached environment: a legacy file fails the hook, a clean one passes, a file that is
    excluded by the project's configuration is not checked even though pre-commit passes it."""
    project = _project(tmp_path / "project", {
        "pyproject.toml": '[tool.pmap-migrate]\nexclude = ["vendored"]\n',
        "clean.py": CLEAN,
        "vendored/old.py": LEGACY,
    })
    _configure(project, hook_repo, "pmap-migrate")
    home = CACHE / "home"
    passed = _pre_commit(project, "run", "--all-files", home=home)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout

    (project / "legacy.py").write_text(LEGACY)
    _git(project, "add", "legacy.py")
    failed = _pre_commit(project, "run", "--files", "legacy.py", "clean.py", home=home)
    assert failed.returncode == 1
    assert "legacy.py:3:8: PM101" in failed.stdout and "Failed" in failed.stdout

    # no file of the hook's types: pre-commit skips the hook, and the run passes
    (project / "notes.txt").write_text("jax.pmap\n")
    _git(project, "add", "notes.txt")
    skipped = _pre_commit(project, "run", "--files", "notes.txt", home=home)
    assert skipped.returncode == 0 and "no files to check" in skipped.stdout, skipped.stdout


@needs_pre_commit
def test_fix_hook_rewrites_and_a_second_run_passes(tmp_path, hook_repo):
    project = _project(tmp_path / "project", {"legacy.py": LEGACY})
    _configure(project, hook_repo, "pmap-migrate-fix")
    home = CACHE / "home"
    first = _pre_commit(project, "run", "--all-files", home=home)
    assert first.returncode == 1 and "files were modified by this hook" in first.stdout, first.stdout
    fixed = (project / "legacy.py").read_text()
    assert "jax.pmap" not in fixed and "jax.jit(" in fixed
    _git(project, "add", "-A")
    second = _pre_commit(project, "run", "--all-files", home=home)
    assert second.returncode == 0, second.stdout


def test_under_pre_commit_the_work_is_serial(tmp_path, monkeypatch):
    """pre-commit runs hooks in parallel batches: the tool must not start a process pool of its own."""
    import concurrent.futures

    from click.testing import CliRunner

    from pmap_migrate import runner
    from pmap_migrate.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    for i in range(runner.PARALLEL_THRESHOLD):  # enough to be worth a pool; cheap: parsed, nothing found
        (tmp_path / f"m{i}.py").write_text("# no jax.pmap here\n")

    class NoPool:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a process pool was started under pre-commit")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", NoPool)  # what the runner imports
    monkeypatch.setenv("PRE_COMMIT", "1")
    assert runner.default_jobs() == 1
    for command in ("check", "fix"):
        result = CliRunner().invoke(main, [command, "--no-cache", "--force-exclude", *sorted(p.name for p in tmp_path.glob("*.py"))],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output


def test_files_that_all_are_excluded_pass(tmp_path, monkeypatch):
    """pre-commit hands over staged files; when the configuration excludes all of them (or none is
    Python), the hook passes and says so."""
    from click.testing import CliRunner

    from pmap_migrate.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nexclude = ["vendored"]\n')
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "old.py").write_text(LEGACY)
    for command in ("check", "fix"):
        result = CliRunner().invoke(main, [command, "--no-cache", "--force-exclude", "vendored/old.py"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
    assert "All checks passed! (0 files checked)" in CliRunner().invoke(
        main, ["check", "--no-cache", "--force-exclude", "vendored/old.py"]).output


def test_the_hook_on_an_importer_alone_reads_the_module_it_imports_from_the_tree(tmp_path, monkeypatch):
    """pre-commit passes only the changed files: an importer that never spells pmap, passed alone,
    gets the findings on the outputs of the pmapped function it imports (the module that defines
    it read from the tree), and again from the cache once that module changes."""
    from click.testing import CliRunner

    from pmap_migrate.cli import main

    root = tmp_path / "project"
    shutil.copytree(REPO / "fixtures" / "projects" / "importers_without_pmap", root,
                    ignore=shutil.ignore_patterns("expected*"))
    monkeypatch.chdir(root)
    monkeypatch.setenv("PRE_COMMIT", "1")
    steps = root / "pkg" / "steps.py"
    pmapped = steps.read_text()
    steps.write_text("def p_double(x):\n    return 2 * x\n")
    hook = ["check", "--force-exclude", "--output-format", "concise", "pkg/use2.py"]
    assert CliRunner().invoke(main, hook).exit_code == 0
    stat = steps.stat()
    steps.write_text(pmapped)
    os.utime(steps, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000_000))
    result = CliRunner().invoke(main, hook)
    assert result.exit_code == 1 and "pkg/use2.py:8:12: PM201" in result.output, result.output
