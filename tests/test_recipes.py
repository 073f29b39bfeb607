"""The README's and the docs' recipes, run as written: the quickstart in a fresh venv, the shim
command on the bundled example, the pre-commit configuration from a local clone at a commit, the
GitHub workflow's `run:` steps, and the composite action's steps (action.yml).

Only the placeholders a user fills in are replaced (`https://github.com/<owner>/pmap-migrate` by a
local clone, `<tag or commit>` by its commit); everything else runs as the page says. Each recipe
installs the tool into a fresh virtual environment from a checkout of the working tree (packages
from the index, or pip's cache)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOT_SOURCES = (".git", ".venv*", ".ci-venv", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache",
               ".hypothesis", ".pmap_migrate_cache")
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "pmap-migrate tests", "GIT_AUTHOR_EMAIL": "tests@example.invalid",
    "GIT_COMMITTER_NAME": "pmap-migrate tests", "GIT_COMMITTER_EMAIL": "tests@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}
OWNER_URL = "https://github.com/<owner>/pmap-migrate"
REV = "<tag or commit>"
LEGACY = "import jax\n\nstep = jax.pmap(lambda x: x * 2)\n"
CLEAN = "import jax\n\nstep = jax.jit(lambda x: x * 2)\n"

pytestmark = [pytest.mark.recipes,
              pytest.mark.skipif(shutil.which("git") is None, reason="the recipes clone with git")]


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak the repository, a venv or jax settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("JAX_", "XLA_", "PRE_COMMIT"))}
    env.update(GIT_IDENTITY, NO_COLOR="1", **extra)
    return env


def _bash(script: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """``script`` as GitHub runs a `run:` step with `shell: bash` (and a shell runs a README block)."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=_env(), check=True, capture_output=True,
                          text=True).stdout.strip()


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)\n```", page.read_text(encoding="utf-8"), re.S)


def _venv_path(venv: Path) -> dict[str, str]:
    """What activating ``venv`` does to the environment (`python`, `pip` and the tool are its own)."""
    return _env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, str]:
    """A clone of this repository: the working tree's sources committed in a fresh git repository,
    and that commit."""
    clone = tmp_path_factory.mktemp("recipes") / "pmap-migrate"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    _git(clone, "init", "-q", "-b", "main")
    _git(clone, "add", "-A")
    _git(clone, "commit", "-q", "-m", "pmap-migrate under test")
    return clone, _git(clone, "rev-parse", "HEAD")


def _filled(text: str, clone: Path, commit: str) -> str:
    return text.replace(OWNER_URL, str(clone)).replace(REV, commit)


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "a project")
    return root


def test_the_readme_quickstart_and_the_shim_command_run_as_written(checkout):
    clone, _ = checkout
    readme = clone / "README.md"
    [quickstart] = [b for b in _blocks(readme, "bash") if "pmap-migrate check fixtures/example" in b]
    done = _bash(quickstart, clone, _env())
    assert done.returncode == 1, done.stderr[-3000:]  # "it exits with code 1: it finds legacy patterns"
    assert "fixtures/example/train.py:16:1: PM101" in done.stdout
    assert re.search(r"^Found \d+ legacy patterns in 1 file\.$", done.stdout, re.M), done.stdout
    # the shim recipe, in the venv the quickstart made ("with the venv activated")
    [shim] = [b for b in _blocks(readme, "bash") if b.startswith("python -m runtime_shim fixtures/")]
    ran = _bash(shim, clone, _venv_path(clone / ".venv"))
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    assert [line.split()[0] for line in lines[:5]] == ["0", "1", "2", "3", "4"] and len(lines) == 6, ran.stdout
    # the same command is on the shim's page
    assert shim in _blocks(clone / "docs" / "shim.md", "bash")


def test_the_pre_commit_configuration_runs_as_written(checkout, tmp_path):
    """docs/ci.md's `.pre-commit-config.yaml`, naming a local clone and its commit."""
    pre_commit = shutil.which("pre-commit") or str(Path(sys.executable).parent / "pre-commit")
    if not Path(pre_commit).exists():
        pytest.skip("needs pre-commit (the `test` extra)")
    clone, commit = checkout
    [config] = [b for b in _blocks(clone / "docs" / "ci.md", "yaml") if "repos:" in b]
    project = _project(tmp_path / "project", {"legacy.py": LEGACY, "clean.py": CLEAN})
    (project / ".pre-commit-config.yaml").write_text(_filled(config, clone, commit) + "\n")
    env = _env(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"))
    failed = subprocess.run([pre_commit, "run", "--all-files", "--color", "never"], cwd=project, env=env,
                            capture_output=True, text=True, timeout=900)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "legacy.py:3:8: PM101" in failed.stdout and "Failed" in failed.stdout
    (project / "legacy.py").write_text(CLEAN)
    passed = subprocess.run([pre_commit, "run", "--all-files", "--color", "never"], cwd=project, env=env,
                            capture_output=True, text=True, timeout=900)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_the_github_workflow_steps_run_as_written(checkout, tmp_path):
    """docs/ci.md's workflow: each `run:` step in bash, in order, in a fresh venv (what
    actions/setup-python gives); `uses:` steps are GitHub's own. The baseline is written first, as
    the page says, with the command it gives."""
    clone, commit = checkout
    page = clone / "docs" / "ci.md"
    [workflow] = [b for b in _blocks(page, "yaml") if "jobs:" in b and "run:" in b]
    steps = [step for job in yaml.safe_load(_filled(workflow, clone, commit))["jobs"].values() for step in job["steps"]]
    [write_baseline] = [line.split("#")[0].strip() for b in _blocks(page, "bash") for line in b.splitlines()
                        if "--write-baseline" in line]
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "python")], check=True)
    runner_temp, summary = tmp_path / "runner-temp", tmp_path / "step-summary.md"
    runner_temp.mkdir()
    env = _venv_path(tmp_path / "python")
    env.update(RUNNER_TEMP=str(runner_temp), GITHUB_STEP_SUMMARY=str(summary))
    project = _project(tmp_path / "workspace", {"src/train.py": LEGACY, "src/clean.py": CLEAN})
    runs = [step for step in steps if "run" in step]
    assert [step["name"] for step in runs][0].startswith("Install")
    installed = _bash(runs[0]["run"], project, env)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert _bash(write_baseline, project, env).returncode == 0
    for step in runs[1:]:
        done = _bash(step["run"], project, env)
        assert done.returncode == 0, (step["name"], done.stdout[-2000:], done.stderr[-2000:])
    sarif = json.loads((project / "pmap-migrate.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["PM101"]
    assert {rule.get("helpUri") for rule in sarif["runs"][0]["tool"]["driver"]["rules"]} >= {
        f"{clone}/blob/{commit}/docs/rules/pm101.md"}  # the page's template, its placeholders filled
    assert summary.read_text().startswith("# pmap-migrate: migration report")
    # the gate fails on a new finding, with an annotation
    (project / "src" / "new.py").write_text(LEGACY)
    [gate] = [step for step in runs if "--baseline" in step["run"]]
    failed = _bash(gate["run"], project, env)
    assert failed.returncode == 1 and failed.stdout.startswith("::error file=src/new.py,line=3,col=8,"), failed.stdout


def _action_steps(action: dict, inputs: dict[str, str], action_path: Path) -> list[tuple[str, dict[str, str]]]:
    """Each `run:` step of a composite action with GitHub's expressions filled in: (script, env)."""
    values = {name: inputs.get(name, spec.get("default", "")) for name, spec in action["inputs"].items()}

    def fill(text: str) -> str:
        text = text.replace("${{ github.action_path }}", str(action_path))
        return re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: values[m[1]], text)

    steps = []
    for step in action["runs"]["steps"]:
        assert step["shell"] == "bash"
        steps.append((fill(step["run"]), {k: fill(str(v)) for k, v in step.get("env", {}).items()}))
    return steps


def test_the_action_installs_from_its_checkout_and_annotates(checkout, tmp_path):
    clone, _ = checkout
    action = yaml.safe_load((clone / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    project = _project(tmp_path / "workspace", {"legacy.py": LEGACY, "clean.py": CLEAN})

    def run_action(**inputs) -> subprocess.CompletedProcess:
        (install, install_env), (check, check_env) = _action_steps(action, inputs, clone)
        if not (runner_temp / "pmap-migrate-venv").exists():  # one runner, one install
            done = _bash(install, project, _env(RUNNER_TEMP=str(runner_temp), **install_env))
            assert done.returncode == 0, done.stderr[-3000:]
        return _bash(check, project, _env(RUNNER_TEMP=str(runner_temp), **check_env))

    found = run_action()
    assert found.returncode == 1, found.stderr[-3000:]
    assert found.stdout.startswith("::error file=legacy.py,line=3,col=8,endLine=3,endColumn=33,title=PM101::PM101 ")
    # installed from the action's checkout, not from an index
    origin = next((runner_temp / "pmap-migrate-venv").glob("lib/python*/site-packages/pmap_migrate-*.dist-info"))
    assert json.loads((origin / "direct_url.json").read_text())["url"] == clone.as_uri()
    assert run_action(paths="clean.py").returncode == 0
    both = run_action(paths="clean.py legacy.py")
    assert both.returncode == 1 and both.stdout.count("::error ") == 1
    assert run_action(args="--exit-zero").returncode == 0
    assert run_action(args="--select PM4").returncode == 0  # the options reach `check`: no PM4 finding here
