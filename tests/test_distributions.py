"""The two distributions, built as wheels and installed the way users install them.

- **Wheels**: both are built from (a copy of) the working tree, so nothing is built inside the
  repository. ``pmap-migrate`` holds only the package ``pmap_migrate`` (the folders ``codemod/`` and
  ``rules/``, every module of them), ``pmap-migrate-shim`` only ``runtime_shim``; the linter requires
  the shim at the shim's version and does not need jax, the shim requires jax alone.
- **The shim alone**: a fresh venv holding only the shim's wheel (pip brings jax from the index), where
  neither libcst nor the linter can be imported. The shim's legacy programs (``tests/shim_programs``,
  copied outside the repository) and the rewriter's corpus (``fixtures/programs``, through its batch
  runner) run there under ``python -m runtime_shim``, from a temporary directory with the repository
  off ``PYTHONPATH``; both check that ``runtime_shim`` came from the venv's site-packages. They must
  print what jax 0.7.2's own pmap printed (compared as ``tests/test_shim_differential.py`` does).
- **Beside the owners of the folders' names**: ``rules`` (django-rules) and ``codemod`` are other
  distributions on the package index. A fresh venv gets them from the index first, then both wheels:
  every command works and exits as documented, ``import rules`` / ``import codemod`` still give
  theirs, and not one of their files changes, neither when ours are installed nor when ours are
  uninstalled.

Each venv is made once per module and deleted after it; pip's cache keeps reinstalling jax quick.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support import differential, jaxenv, shim_runs

if sys.version_info >= (3, 11):
    import tomllib
else:  # the linter depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# folder -> the import package it is installed as (package-dir in pyproject.toml)
LINTER_FOLDERS = {"codemod": "pmap_migrate", "rules": "pmap_migrate/rules"}
# What a working tree may hold beside the sources: none of it is copied to build from.
NOT_SOURCES = (".git", ".venv*", ".ci-venv", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache",
               ".hypothesis", ".pmap_migrate_cache")
# The distributions that own the folders' names on the package index, and their import packages.
THEIRS = {"rules": "rules", "codemod": "codemod"}

pytestmark = pytest.mark.distributions
# NO_COMPILE: ours and jax are installed with `pip install --no-compile`; Python writes the bytecode of
# what the programs import when they import it. Compiling all of jax at install and deleting it with the
# venv cost more than that (this module on the 2-core CI machine: 171 s with it, 141-166 s without).


def _version(pyproject: Path) -> str:
    return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]


LINTER_VERSION = _version(ROOT / "pyproject.toml")
SHIM_VERSION = _version(ROOT / "runtime_shim" / "pyproject.toml")


# ---------------------------------------------------------------------- venvs


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak the repository or jax settings into a
    venv's programs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("JAX_", "XLA_"))}
    env.update(extra)
    return env


@dataclass(frozen=True)
class Venv:
    root: Path

    @classmethod
    def create(cls, root: Path) -> Venv:
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, env=_clean_env())
        return cls(root)

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def pip(self, *args: str) -> str:
        proc = subprocess.run([str(self.python), "-m", "pip", "--disable-pip-version-check", *args],
                              capture_output=True, text=True, env=_clean_env(), cwd=self.root, timeout=1200)
        assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    def run(self, *argv: str | Path, cwd: Path, devices: int = 8) -> subprocess.CompletedProcess:
        env = _clean_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
                         NO_COLOR="1")
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=600)

    def probe(self, code: str, cwd: Path) -> dict:
        """Run ``code`` (which prints one JSON document) under this venv's python."""
        proc = self.run(self.python, "-c", textwrap.dedent(code), cwd=cwd)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    def site_packages(self) -> Path:
        return Path(self.probe("import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))",
                               cwd=self.root))

    def distributions(self) -> set[str]:
        return set(self.probe("""
            import importlib.metadata as m, json
            print(json.dumps(sorted(d.metadata["Name"].lower() for d in m.distributions())))
        """, cwd=self.root))


# ---------------------------------------------------------------------- wheels


@dataclass(frozen=True)
class Wheel:
    path: Path
    expected_modules: frozenset[str]  # the .py files it must hold, as paths inside the wheel

    def names(self) -> list[str]:
        with zipfile.ZipFile(self.path) as z:
            return z.namelist()

    def dist_info(self, name: str) -> str:
        with zipfile.ZipFile(self.path) as z:
            (path,) = [n for n in z.namelist() if n.endswith(f".dist-info/{name}")]
            return z.read(path).decode()

    def metadata(self):
        return email.parser.Parser().parsestr(self.dist_info("METADATA"))

    def requirements(self) -> list[Requirement]:
        return [Requirement(r) for r in self.metadata().get_all("Requires-Dist") or []]


def _python_files(folder: Path, prefix: str) -> set[str]:
    return {f"{prefix}/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*.py")}


@pytest.fixture(scope="module")
def wheels():
    """(linter, shim): both wheels built with ``pip wheel --no-deps`` from a copy of the working
    tree (setuptools writes build/ and *.egg-info beside the sources it builds)."""
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-wheels-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "wheels"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCES))
        expected_linter = set().union(*(_python_files(src / folder, package)
                                        for folder, package in LINTER_FOLDERS.items()))
        expected_shim = _python_files(src / "runtime_shim", "runtime_shim")
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                               "-w", str(out), str(src / "runtime_shim"), str(src)],
                              capture_output=True, text=True, env=_clean_env(), cwd=tmp, timeout=900)
        assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        yield (Wheel(out / f"pmap_migrate-{LINTER_VERSION}-py3-none-any.whl", frozenset(expected_linter)),
               Wheel(out / f"pmap_migrate_shim-{SHIM_VERSION}-py3-none-any.whl", frozenset(expected_shim)))


def _only_under(names: list[str], package: str, dist_info: str) -> list[str]:
    return [n for n in names if not n.startswith((f"{package}/", f"{dist_info}/"))]


def test_the_linter_wheel_holds_only_pmap_migrate_and_every_module(wheels):
    linter, _ = wheels
    names = linter.names()
    assert _only_under(names, "pmap_migrate", f"pmap_migrate-{LINTER_VERSION}.dist-info") == []
    assert {n for n in names if n.endswith(".py")} == linter.expected_modules
    assert "pmap-migrate = pmap_migrate.cli:entry" in linter.dist_info("entry_points.txt")


def test_the_shim_wheel_holds_only_runtime_shim_and_every_module(wheels):
    _, shim = wheels
    names = shim.names()
    assert _only_under(names, "runtime_shim", f"pmap_migrate_shim-{SHIM_VERSION}.dist-info") == []
    assert {n for n in names if n.endswith(".py")} == shim.expected_modules


def test_the_linter_requires_the_shim_at_its_version_and_not_jax(wheels):
    linter, _ = wheels
    meta = linter.metadata()
    assert (meta["Name"], meta["Version"]) == ("pmap-migrate", LINTER_VERSION)
    unconditional = {r.name: r for r in linter.requirements() if r.marker is None or "extra" not in str(r.marker)}
    assert str(unconditional["pmap-migrate-shim"].specifier) == f"=={SHIM_VERSION}"
    assert "libcst" in unconditional and "jax" not in unconditional and "jaxlib" not in unconditional


def test_the_shim_requires_only_jax(wheels):
    _, shim = wheels
    meta = shim.metadata()
    assert (meta["Name"], meta["Version"]) == ("pmap-migrate-shim", SHIM_VERSION)
    assert [r.name for r in shim.requirements()] == ["jax"]
    assert meta.get_all("Provides-Extra") is None


# ---------------------------------------------------------------------- the shim alone

WHERE = """\
import json, sys
import runtime_shim
found = {"shim": runtime_shim.__file__, "path": sys.path}
for name in ("libcst", "pmap_migrate", "click", "rich"):
    try:
        __import__(name)
        found[name] = "imported"
    except ImportError as e:
        found[name] = type(e).__name__
print(json.dumps(found))
"""


@dataclass
class ShimAlone:
    venv: Venv
    site: Path
    runner: shim_runs.Runner  # the programs, copied outside the repository, under `python -m runtime_shim`
    distributions: set[str]


@pytest.fixture(scope="module")
def shim_alone(wheels):
    _, shim = wheels
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-shim-alone-") as tmp:
        venv = Venv.create(Path(tmp) / "venv")
        venv.pip("install", "--quiet", "--no-compile", str(shim.path))  # (see NO_COMPILE)
        programs = Path(tmp) / "programs"
        shutil.copytree(shim_runs.PROGRAMS, programs, ignore=shutil.ignore_patterns("__pycache__"))
        (programs / "where.py").write_text(WHERE)
        runner = shim_runs.Runner(venv.python, shim=True, programs=programs, repo_on_path=False, cwd=Path(tmp))
        yield ShimAlone(venv, venv.site_packages(), runner, venv.distributions())


def test_the_shim_wheel_alone_brings_no_linter(shim_alone):
    assert {"pmap-migrate-shim", "jax"} <= shim_alone.distributions
    assert not {"pmap-migrate", "libcst", "click", "rich", "pathspec"} & shim_alone.distributions
    proc = shim_alone.runner.run("where")
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = json.loads(proc.stdout)
    # the programs below run exactly like this: the shim is the wheel's, the repository is not on the path
    assert Path(where["shim"]) == shim_alone.site / "runtime_shim" / "__init__.py"
    assert [p for p in where["path"] if p and Path(p).resolve().is_relative_to(ROOT)] == []
    assert {k: where[k] for k in ("libcst", "pmap_migrate", "click", "rich")} == dict.fromkeys(
        ("libcst", "pmap_migrate", "click", "rich"), "ModuleNotFoundError")


@pytest.fixture(scope="module")
def shim_wheel_runs(shim_alone) -> dict:
    return shim_alone.runner.run_all()


@pytest.mark.jax_envs
@pytest.mark.parametrize("program", shim_runs.SINGLE_PROCESS)
def test_shim_wheel_program_matches_legacy_pmap(legacy_shim_checks, shim_wheel_runs, program):
    candidate = shim_runs.checks(shim_wheel_runs[program], f"{program} under the shim wheel")
    shim_runs.assert_matches(legacy_shim_checks.single_process[program], candidate,
                             f"{program} under the shim wheel")


@pytest.mark.jax_envs
@pytest.mark.multiprocess
def test_shim_wheel_two_process_data_parallel_matches_legacy_pmap(legacy_shim_checks, shim_alone):
    for i, proc in enumerate(shim_alone.runner.run_two_processes()):
        what = f"{shim_runs.MULTI_PROCESS} process {i} under the shim wheel"
        shim_runs.assert_matches(legacy_shim_checks.two_process[i], shim_runs.checks(proc, what), what)


def test_shim_wheel_only_behaviour(shim_alone):
    # run directly, as tests/test_shim_api.py runs it: the program installs the shim itself
    direct = replace(shim_alone.runner, shim=False)
    shim_runs.assert_expected_behaviour(direct.run(shim_runs.BEHAVIOUR), "under the shim wheel")


CORPUS = differential.program_names()


@pytest.fixture(scope="module")
def corpus_under_shim_wheel(shim_alone) -> differential.BatchRun:
    scripts = [differential.legacy_path(name) for name in CORPUS]
    return differential.run_batch(shim_alone.venv.python, scripts, shim=True, repo_on_path=False, timeout=1800)


@pytest.fixture(scope="module")
def legacy_corpus(corpus_runs) -> differential.BatchRun:
    """The corpus on jax 0.7.2's own pmap, from the session's store: the same batch (run twice per
    program) as the reference of tests/test_rewrite_programs.py, so it runs once per session."""
    from tests.support.fixed_corpus import batch

    scripts = [differential.legacy_path(name) for name in CORPUS]
    return batch(corpus_runs.batches({"legacy": (jaxenv.LEGACY, scripts, False)}, rerun=True), "legacy")


def test_the_corpus_ran_the_shim_wheel(shim_alone, corpus_under_shim_wheel):
    assert Path(corpus_under_shim_wheel.shim_path) == shim_alone.site / "runtime_shim" / "__init__.py"


@pytest.mark.jax_envs
@pytest.mark.parametrize("case", CORPUS)
def test_shim_wheel_runs_the_rewrite_corpus_as_legacy_pmap(legacy_corpus, corpus_under_shim_wheel, case):
    name = f"{case}.py"
    differential.assert_same_output(legacy_corpus.programs[name], corpus_under_shim_wheel.programs[name],
                                    "legacy jax 0.7.2", "the shim wheel", exact=False)


# ---------------------------------------------------------------------- beside rules and codemod

LEGACY_PROGRAM = """\
import jax
import jax.numpy as jnp


def double(x):
    return x * 2


out = jax.pmap(double)(jnp.arange(jax.local_device_count() * 1.0).reshape(-1, 1))
print(out.tolist())
"""
LEGACY_OUTPUT = f"{[[2.0 * i] for i in range(8)]}\n"  # on 8 CPU devices
FINDING = "legacy.py:9:7: PM101"

# id -> (argv, where: "read-only" (runs never change legacy.py) or "fix" (in order), exit code,
# text stdout must hold); "{python}" is the venv's interpreter, "{bin}/" its scripts.
COMMANDS = {
    "check": (["{bin}/pmap-migrate", "check", "legacy.py"], "read-only", 1, FINDING),
    "python -m pmap_migrate check": (["{python}", "-m", "pmap_migrate", "check", "legacy.py"], "read-only", 1,
                                     FINDING),
    "fix --diff": (["{bin}/pmap-migrate", "fix", "--diff", "legacy.py"], "read-only", 1,
                   "-out = jax.pmap(double)("),
    "report": (["{bin}/pmap-migrate", "report", "legacy.py"], "read-only", 0, "| PM101 `pmap-call` | 1 |"),
    "rules": (["{bin}/pmap-migrate", "rules"], "read-only", 0, "PM101"),
    "explain PM101": (["{bin}/pmap-migrate", "explain", "PM101"], "read-only", 0, "# PM101 (pmap-call)"),
    "--version": (["{bin}/pmap-migrate", "--version"], "read-only", 0, f"version {LINTER_VERSION}"),
    "python -m runtime_shim": (["{python}", "-m", "runtime_shim", "legacy.py"], "read-only", 0, LEGACY_OUTPUT),
    "fix": (["{bin}/pmap-migrate", "fix", "legacy.py"], "fix", 0, "Fixed 1 of 1 legacy pattern in 1 file"),
    "check after fix": (["{bin}/pmap-migrate", "check", "legacy.py"], "fix", 0, "All checks passed!"),
    "run the fixed program": (["{python}", "legacy.py"], "fix", 0, LEGACY_OUTPUT),
}

IMPORTS = """\
import importlib, json
found = {}
for name in ("rules", "codemod", "pmap_migrate", "pmap_migrate.rules", "runtime_shim"):
    try:
        module = importlib.import_module(name)
        found[name] = {"file": module.__file__, "names": sorted(n for n in vars(module) if not n.startswith("_"))}
    except ImportError as e:
        found[name] = {"error": type(e).__name__}
print(json.dumps(found))
"""


def _hashes(paths: list[str]) -> dict[str, str | None]:
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() if Path(p).is_file() else None for p in paths}


@dataclass
class Collision:
    site: Path
    their_files: dict[str, str | None]  # every file their RECORDs list -> sha256, before ours came
    after_install: dict[str, str | None]
    after_uninstall: dict[str, str | None]
    commands: dict[str, subprocess.CompletedProcess]
    fixed_source: str
    read_only_source: str
    imports_with_ours: dict
    imports_after_uninstall: dict
    scripts_after_uninstall: list[str]


@pytest.fixture(scope="module")
def collision(wheels):
    """Theirs from the index, then ours, every command, then ours uninstalled: what each step left."""
    linter, shim = wheels
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-collision-") as tmp:
        tmp = Path(tmp)
        venv = Venv.create(tmp / "venv")
        venv.pip("install", "--quiet", *THEIRS)
        their_paths = venv.probe(f"""
            import importlib.metadata as m, json
            print(json.dumps(sorted(str(f.locate()) for d in {list(THEIRS)!r} for f in m.distribution(d).files)))
        """, cwd=tmp)
        their_files = _hashes(their_paths)
        venv.pip("install", "--quiet", "--no-compile", str(shim.path), str(linter.path))  # (see NO_COMPILE)
        after_install = _hashes(their_paths)

        commands = {}
        for workdir in ("read-only", "fix"):
            (tmp / workdir).mkdir()
            (tmp / workdir / "legacy.py").write_text(LEGACY_PROGRAM)
        for name, (argv, workdir, _, _) in COMMANDS.items():
            argv = [a.format(python=venv.python, bin=venv.root / "bin") for a in argv]
            commands[name] = venv.run(*argv, cwd=tmp / workdir)
        imports_with_ours = venv.probe(IMPORTS, cwd=tmp)

        venv.pip("uninstall", "--yes", "pmap-migrate", "pmap-migrate-shim")
        yield Collision(
            site=venv.site_packages(), their_files=their_files, after_install=after_install,
            after_uninstall=_hashes(their_paths), commands=commands,
            fixed_source=(tmp / "fix" / "legacy.py").read_text(),
            read_only_source=(tmp / "read-only" / "legacy.py").read_text(),
            imports_with_ours=imports_with_ours, imports_after_uninstall=venv.probe(IMPORTS, cwd=tmp),
            scripts_after_uninstall=sorted(p.name for p in (venv.root / "bin").iterdir()))


def test_their_packages_are_installed_from_the_index(collision):
    site = collision.site
    for package in THEIRS.values():
        assert collision.their_files[str(site / package / "__init__.py")] is not None, package


def test_installing_ours_changes_none_of_their_files(collision):
    assert collision.after_install == collision.their_files


def test_uninstalling_ours_leaves_their_files(collision):
    assert collision.after_uninstall == collision.their_files


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_works_beside_them(collision, command):
    _, _, exit_code, output = COMMANDS[command]
    proc = collision.commands[command]
    assert (proc.returncode, "Traceback" in proc.stderr) == (exit_code, False), proc.stdout + proc.stderr
    assert output in proc.stdout, proc.stdout


def test_only_fix_changes_the_file(collision):
    assert collision.read_only_source == LEGACY_PROGRAM
    assert collision.fixed_source != LEGACY_PROGRAM and "jax.pmap" not in collision.fixed_source


def _files(imports: dict) -> dict:
    return {name: found.get("file", found.get("error")) for name, found in imports.items()}


def test_each_import_name_gives_its_own_package(collision):
    site = collision.site
    assert _files(collision.imports_with_ours) == {
        "rules": str(site / "rules" / "__init__.py"),
        "codemod": str(site / "codemod" / "__init__.py"),
        "pmap_migrate": str(site / "pmap_migrate" / "__init__.py"),
        "pmap_migrate.rules": str(site / "pmap_migrate" / "rules" / "__init__.py"),
        "runtime_shim": str(site / "runtime_shim" / "__init__.py"),
    }
    # django-rules' and codemod's own API, not ours
    assert {"predicate", "add_perm"} <= set(collision.imports_with_ours["rules"]["names"])
    assert {"Patch", "Query"} <= set(collision.imports_with_ours["codemod"]["names"])


def test_after_uninstalling_ours_theirs_still_import(collision):
    site = collision.site
    assert _files(collision.imports_after_uninstall) == {
        "rules": str(site / "rules" / "__init__.py"),
        "codemod": str(site / "codemod" / "__init__.py"),
        "pmap_migrate": "ModuleNotFoundError",
        "pmap_migrate.rules": "ModuleNotFoundError",
        "runtime_shim": "ModuleNotFoundError",
    }
    assert "codemod" in collision.scripts_after_uninstall
    assert "pmap-migrate" not in collision.scripts_after_uninstall
