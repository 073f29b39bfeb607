"""Run a library's own tests three ways: jax 0.7.2 unchanged, new jax unchanged, new jax after
`pmap-migrate fix --unsafe-fixes` of the library and its tests.

    python benchmarks/real_suites.py TREE [TEST ...] --name NAME [--pip REQ ...] [--extras E]
        [-k EXPR] [--grep TEXT] [--no-install] [--fix-path PATH ...] [--pmap-migrate EXE]
        [--shim SRC | --no-shim] [--shim-run] [--fixed-shim-run] [--devices N] [--one-process] [--jobs N]
        [--timeout S] [--brief] [--json FILE]

TREE is a checkout of the library at the release that goes with jax 0.7.2 (a scratch directory,
never a repository of this project). TESTs are paths relative to TREE; without them, every test
file (``*_test.py``, ``test_*.py``) whose text contains ``--grep`` (default ``pmap``) runs.

1. Three virtual environments are built once and cached under ``$PMAP_MIGRATE_SUITES_CACHE``
   (default ``~/.cache/pmap-migrate/suites``): ``legacy`` (jax 0.7.2), ``new`` (``--new-jax``,
   default 0.10.2) and ``fixed`` (the same new jax), each on Python 3.11 with pytest,
   pytest-timeout, pytest-xdist, the ``--pip`` requirements and, unless ``--no-install``, the
   library installed editable from its tree (``new``/``legacy``: TREE; ``fixed``: the fixed copy)
   with ``--extras``. ``legacy`` is resolved first; what it froze (all but jax and jaxlib)
   constrains the other two, so the three differ only in jax (and what jax itself needs).
2. TREE is copied to ``<cache>/NAME/fixed-tree`` (a fixed path: the ``fixed`` venv's editable
   install points at it) and ``EXE fix --unsafe-fixes --no-cache --show-fixes`` runs over the
   copy (``--fix-path``: only those paths of it; ``--fix-arg``: one more option of `fix`, such as
   ``--fix-arg=--no-shim``). The shim (``--shim``, default this repository's
   ``runtime_shim``) is (re)installed into ``fixed`` unless ``--no-shim``.
3. pytest runs the selected tests in each venv, from the tree it belongs to, with 8 CPU devices
   (``XLA_FLAGS=--xla_force_host_platform_device_count=8``, ``--devices``; ``JAX_PLATFORMS=cpu``):
   one process and one JUnit XML per test file (a module's setup may set the device count itself
   before jax starts, as chex's ``set_n_cpu_devices`` does; ``--one-process``: one for all). A
   process that dies without a report (jax aborting) is run again under pytest-xdist, which
   records the test that killed its worker as failed and goes on.
   ``--shim-run`` adds a fourth run, ``shim``: TREE unchanged in ``new`` with
   ``runtime_shim.install()`` called before collection (a pytest plugin; the shim on
   ``PYTHONPATH`` only for that run). ``--fixed-shim-run`` adds ``fixed+shim``: the fixed copy in
   ``fixed`` with the shim importable (on ``PYTHONPATH``), for a ``fixed`` venv without it.

Printed: the fix's summary, one line per test id with its outcome in each run (``+`` passed,
``F`` failed, ``E`` error, ``s`` skipped, ``.`` absent), the counts, then the tests that pass on
jax 0.7.2 but not after the fix and those that pass on new jax unchanged but not after the fix
(for ``fixed`` and ``fixed+shim``), each with the first line of its error and where it was raised. ``--json FILE`` writes the same.
Exit status: 0 when neither list has an entry, 1 otherwise, 2 when a venv or a run could not be set up.
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("PMAP_MIGRATE_SUITES_CACHE", Path.home() / ".cache" / "pmap-migrate" / "suites"))
DEFAULT_EXE = shutil.which("pmap-migrate") or "pmap-migrate"
LEGACY_JAX = "0.7.2"
TEST_TOOLS = ("pytest", "pytest-timeout", "pytest-xdist")
TEST_FILE = re.compile(r"(^test_.*|.*_test)\.py$")
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".venv", "build", "dist"}
# The frame that raised, as pytest's long report ends it: "path/to/file.py:123: NameError"
RAISED_AT = re.compile(r"^(\S+\.py):(\d+): (\w[\w.]*)", re.MULTILINE)
MARKS = {"passed": "+", "failed": "F", "error": "E", "skipped": "s", None: "."}
SHIM_PLUGIN = "pmap_migrate_suites_shim"
# A module that imports the shim (generated code also names it in messages: those do not count).
SHIM_IMPORT = re.compile(rb"^[ \t]*(?:import runtime_shim\b|from runtime_shim\b)", re.MULTILINE)


class SetupError(RuntimeError):
    pass


# --------------------------------------------------------------------------- venvs
@dataclass(frozen=True)
class VenvSpec:
    label: str
    jax: str
    python: str
    requirements: tuple[str, ...]
    editable: str | None  # the tree installed editable (with extras), or None
    constraints: str | None  # text of a constraints file


def venv_path(name: str, spec: VenvSpec) -> Path:
    key = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:12]
    return CACHE / name / f"venv-{spec.label}-jax{spec.jax}-{key}"


def build_venv(name: str, spec: VenvSpec, extras: str, log: Path) -> Path:
    """The venv of ``spec``, built on first use (a marker records a finished build; a lock
    serialises builders)."""
    target = venv_path(name, spec)
    python = target / "bin" / "python"
    marker = target / ".complete"
    if marker.exists():
        return python
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        if target.exists():
            shutil.rmtree(target)
        print(f"building venv {target} ...", flush=True)
        run_logged([spec.python, "-m", "venv", str(target)], log)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        command = [*pip, f"jax=={spec.jax}", f"jaxlib=={spec.jax}", *TEST_TOOLS, *spec.requirements]
        if spec.editable:
            command += ["-e", f"{spec.editable}[{extras}]" if extras else spec.editable]
        if spec.constraints is not None:
            constraints = target / "constraints.txt"
            constraints.write_text(spec.constraints)
            command += ["-c", str(constraints)]
        run_logged(command, log)
        marker.write_text(" ".join(command) + "\n")
    return python


def frozen_constraints(python: Path) -> str:
    """What ``python``'s venv holds, as constraints for the others: every distribution but jax,
    jaxlib and editable installs."""
    out = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    keep = []
    for line in out.splitlines():
        pkg = re.split(r"[=<>!~ @]", line, maxsplit=1)[0].strip().lower().replace("_", "-")
        if line and not line.startswith(("-e", "#")) and pkg not in ("jax", "jaxlib") and "==" in line:
            keep.append(line)
    return "\n".join(keep) + "\n"


def run_logged(command: list[str], log: Path, **kwargs) -> subprocess.CompletedProcess:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, text=True, **kwargs)
    if done.returncode != 0:
        raise SetupError(f"command failed ({done.returncode}), see {log}: {' '.join(command)}")
    return done


# --------------------------------------------------------------------------- tree, fix
def select_tests(tree: Path, grep: str) -> list[str]:
    found = []
    for path in sorted(tree.rglob("*.py")):
        rel = path.relative_to(tree)
        if SKIP_DIRS & set(rel.parts) or not TEST_FILE.match(path.name):
            continue
        if grep in path.read_text(errors="replace"):
            found.append(rel.as_posix())
    return found


def copy_tree(tree: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(tree, target, symlinks=True,
                    ignore=lambda _dir, names: [n for n in names if n in SKIP_DIRS or n.endswith(".egg-info")])


@dataclass
class FixSummary:
    command: list[str]
    returncode: int
    seconds: float
    files_changed: list[str]
    lines_added: int
    lines_removed: int
    shim_importers: list[str]  # files that mention runtime_shim after the fix and did not before
    last_lines: list[str]


def python_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.py")
            if not SKIP_DIRS & set(p.relative_to(root).parts) and p.is_file()}


def run_fix(exe: str, copy: Path, paths: list[str], log: Path, extra: list[str] = ()) -> FixSummary:
    before = python_files(copy)
    command = [exe, "fix", "--unsafe-fixes", "--no-cache", "--show-fixes", *extra, *paths]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=copy, capture_output=True, text=True, errors="replace")
    seconds = time.perf_counter() - start
    log.write_text(f"$ {' '.join(command)}  (in {copy})\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
    if done.returncode not in (0, 1) or "Traceback (most recent call last)" in done.stdout + done.stderr:
        raise SetupError(f"`{' '.join(command)}` failed ({done.returncode}), see {log}")
    after = python_files(copy)
    changed = sorted(p for p in after if before.get(p) != after[p])
    added = removed = 0
    for p in changed:
        old = before.get(p, b"").decode(errors="replace").splitlines()
        new = after[p].decode(errors="replace").splitlines()
        for line in difflib.unified_diff(old, new, lineterm="", n=0):
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
    shim = sorted(p for p in changed if SHIM_IMPORT.search(after[p]) and not SHIM_IMPORT.search(before.get(p, b"")))
    tail = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()][-3:]
    return FixSummary(command, done.returncode, round(seconds, 1), changed, added, removed, shim, tail)


# --------------------------------------------------------------------------- pytest runs
@dataclass
class Outcome:
    status: str  # passed / failed / error / skipped
    message: str = ""  # first line of the error
    where: str = ""  # "file.py:123" of the frame that raised, when pytest's report names it


@dataclass
class Run:
    label: str
    returncode: int
    seconds: float
    junit: str
    log: str
    tests: dict[str, Outcome] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for o in self.tests.values() if o.status == status)


def shim_plugin_dir(scratch: Path) -> Path:
    plugin = scratch / "shim-plugin"
    plugin.mkdir(parents=True, exist_ok=True)
    (plugin / f"{SHIM_PLUGIN}.py").write_text(
        '"""Loaded with `pytest -p`: the shim replaces jax.pmap before any test module is imported."""\n'
        "import runtime_shim\n\nruntime_shim.install()\n")
    return plugin


def run_pytest(label: str, python: Path, cwd: Path, tests: list[str], args, scratch: Path,
               pythonpath: list[Path] = (), plugins: list[str] = ()) -> Run:
    """pytest over ``tests`` in ``cwd``: one process per test file (a library's module setup may
    configure jax before its first use, as chex's ``set_n_cpu_devices`` does), or one for all
    with ``--one-process``."""
    log = scratch / f"pytest-{label}.log"
    log.write_text("")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_", "XLA_", "PYTHON", "VIRTUAL_ENV", "PYTEST_"))}
    env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}", JAX_PLATFORMS="cpu",
               PYTHONHASHSEED="0")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    batches = [tests] if args.one_process else [[t] for t in tests]
    print(f"running {label}: {len(tests)} test files in {cwd} ...", flush=True)
    start = time.perf_counter()
    run = Run(label, 0, 0.0, "", str(log))
    junits = []
    for number, batch in enumerate(batches):
        junit = scratch / f"junit-{label}-{number}.xml"
        # A process that dies (jax aborting in a test) writes no report: run the batch again under
        # pytest-xdist, which records the test that killed its worker as failed and goes on.
        for workers in ([args.jobs] if args.jobs > 1 else [0, 1]):
            junit.unlink(missing_ok=True)
            command = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
                       "-o", "junit_family=xunit1", "-o", "junit_logging=no", f"--junitxml={junit}",
                       f"--timeout={args.timeout}"]
            for plugin in plugins:
                command += ["-p", plugin]
            if workers:
                command += ["-n", str(workers), "--max-worker-restart=100"]
            if args.k:
                command += ["-k", args.k]
            command += [*args.pytest_arg, *batch]
            with open(log, "a") as out:
                out.write(f"\n$ {' '.join(command)}  (in {cwd})\n")
                out.flush()
                done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
            if junit.exists():
                break
            print(f"  pytest ({label}) died (exit {done.returncode}) without a report, see {log}", flush=True)
        if not junit.exists():
            raise SetupError(f"pytest ({label}) wrote no JUnit XML (exit {done.returncode}), see {log}")
        run.returncode = max(run.returncode, done.returncode)
        run.tests.update(parse_junit(junit))
        junits.append(str(junit))
    run.seconds = round(time.perf_counter() - start, 1)
    run.junit = " ".join(junits)
    return run


def reused_run(label: str, tests: list[str], args, scratch: Path) -> Run:
    """The outcomes of the previous ``label`` run, read from its JUnit reports in the cache."""
    batches = 1 if args.one_process else len(tests)
    junits = [scratch / f"junit-{label}-{number}.xml" for number in range(batches)]
    missing = [str(j) for j in junits if not j.exists()]
    if missing:
        raise SetupError(f"--reuse {label}: no report {missing[0]} from a previous run")
    run = Run(label, 0, 0.0, " ".join(map(str, junits)), str(scratch / f"pytest-{label}.log"))
    for junit in junits:
        run.tests.update(parse_junit(junit))
    print(f"reused {label}: {len(run.tests)} test ids from {len(junits)} JUnit reports", flush=True)
    return run


def first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def parse_junit(path: Path) -> dict[str, Outcome]:
    tests: dict[str, Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = Outcome("passed")
        for child in case:
            if child.tag in ("failure", "error"):
                text = child.text or ""
                raised = RAISED_AT.findall(text)
                where = f"{raised[-1][0]}:{raised[-1][1]}" if raised else ""
                message = first_line(child.get("message", "")) or first_line(text)
                if child.tag == "error" and outcome.status == "failed":
                    continue  # a teardown error after a failure: keep the failure
                outcome = Outcome("failed" if child.tag == "failure" else "error", message, where)
            elif child.tag == "skipped" and outcome.status == "passed":
                outcome = Outcome("skipped", first_line(child.get("message", "")))
        if test_id in tests and tests[test_id].status != "passed":
            continue  # the same id twice (a teardown error is its own testcase): keep the first problem
        tests[test_id] = outcome
    return tests


# --------------------------------------------------------------------------- report
def report(runs: list[Run], fix: FixSummary, args, tests: list[str]) -> dict:
    labels = [r.label for r in runs]
    by = {r.label: r for r in runs}
    ids = sorted(set().union(*(r.tests for r in runs)))

    def status(label: str, test_id: str) -> str | None:
        o = by[label].tests.get(test_id)
        return o.status if o else None

    print(f"\n{args.name}: {len(tests)} test files, {len(ids)} test ids")
    print(f"fix: exit {fix.returncode}, {fix.seconds} s, {len(fix.files_changed)} files changed, "
          f"+{fix.lines_added} -{fix.lines_removed} lines; runtime_shim newly in {len(fix.shim_importers)} files")
    for line in fix.last_lines:
        print(f"  | {line}")
    if not args.brief:
        print(f"\n{' '.join(f'{label[:6]:>6}' for label in labels)}  test id")
        for test_id in ids:
            print(f"{' '.join(f'{MARKS[status(label, test_id)]:>6}' for label in labels)}  {test_id}")
    print()
    width = max(len(label) for label in labels)
    for run in runs:
        print(f"{run.label:<{width}}  passed {run.count('passed'):>5}  failed {run.count('failed'):>4}  "
              f"error {run.count('error'):>4}  skipped {run.count('skipped'):>4}  "
              f"(pytest exit {run.returncode}, {run.seconds:.0f} s)")

    def passes(label: str) -> set[str]:
        return {t for t in ids if status(label, t) == "passed"}

    legacy, new = passes("legacy"), passes("new")
    result = {
        "name": args.name, "tree": str(args.tree), "test_files": tests, "k": args.k,
        "tool": tool_version(args.exe), "fix": asdict(fix),
        "runs": {r.label: {"passed": r.count("passed"), "failed": r.count("failed"), "error": r.count("error"),
                           "skipped": r.count("skipped"), "pytest_exit": r.returncode, "seconds": r.seconds,
                           "junit": r.junit, "log": r.log} for r in runs},
        "tests": {t: {label: asdict(by[label].tests[t]) if t in by[label].tests else None for label in labels}
                  for t in ids},
    }
    for after in (label for label in labels if label.startswith("fixed")):
        fixed = passes(after)
        broken_vs_legacy, broken_vs_new = sorted(legacy - fixed), sorted(new - fixed)
        print(f"\n[{after}] pass on jax {LEGACY_JAX}: {len(legacy)}; of those: fail on new jax unchanged "
              f"{len(legacy - new)}, fail after fix {len(broken_vs_legacy)} (the fix repairs "
              f"{len((legacy - new) & fixed)}, breaks {len(legacy & new - fixed)}, "
              f"leaves {len(legacy - new - fixed)} failing)")
        for title, items in ((f"pass on jax {LEGACY_JAX}, not after fix", broken_vs_legacy),
                             ("pass on new jax unchanged, not after fix", broken_vs_new)):
            print(f"\n[{after}] {title}: {len(items)}")
            for test_id in items:
                o = by[after].tests.get(test_id)
                if o is None:
                    print(f"  {test_id}\n      absent from the run")
                else:
                    print(f"  {test_id}\n      {o.status}: {o.message}{f' ({o.where})' if o.where else ''}")
        causes = Counter(by[after].tests[t].message.split(":")[0] if t in by[after].tests else "absent"
                         for t in set(broken_vs_legacy) | set(broken_vs_new))
        if causes:
            print(f"\n[{after}] by exception type: " + ", ".join(f"{k} {v}" for k, v in causes.most_common()))
        result[after] = {"pass_legacy_not_fixed": broken_vs_legacy, "pass_new_not_fixed": broken_vs_new,
                         "repaired": sorted((legacy - new) & fixed)}
    return result


def tool_version(exe: str) -> str:
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError as error:
        return f"unavailable: {error}"


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None, around_fix: tuple[Callable[[Path], None], Callable[[Path], None]] | None
         = None) -> int:
    """``around_fix``: what to do to the copy before and after `fix` runs on it (a caller's
    preparation that the fixer must not see, undone before and done again after)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path, help="the library's source tree (a scratch checkout)")
    parser.add_argument("tests", nargs="*", help="test paths relative to TREE (default: test files mentioning --grep)")
    parser.add_argument("--name", required=True, help="a name for the library: the cache's subdirectory")
    parser.add_argument("--pip", action="append", default=[], metavar="REQ",
                        help="a requirement for all three venvs (repeatable): test dependencies, pins")
    parser.add_argument("--extras", default="", help="extras of the library to install (e.g. test)")
    parser.add_argument("--no-install", action="store_true",
                        help="do not install TREE (its tests run against the installed packages)")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--grep", default="pmap", help="select the test files containing this text")
    parser.add_argument("--fix-path", action="append", default=[], help="paths of the copy to fix (default: all)")
    parser.add_argument("--fix-arg", action="append", default=[], metavar="ARG",
                        help="one more option of `fix` (repeatable; e.g. --fix-arg=--no-shim)")
    parser.add_argument("--pmap-migrate", dest="exe", default=DEFAULT_EXE, help="the pmap-migrate executable")
    parser.add_argument("--shim", type=Path, default=REPO / "runtime_shim", help="the runtime_shim source to install")
    parser.add_argument("--no-shim", action="store_true", help="do not install the shim into the fixed venv")
    parser.add_argument("--shim-run", action="store_true",
                        help="a fourth run: TREE unchanged on new jax with runtime_shim.install()")
    parser.add_argument("--fixed-shim-run", action="store_true",
                        help="one more run, fixed+shim: the fixed copy with the shim importable (not installed)")
    parser.add_argument("--new-jax", default="0.10.2")
    parser.add_argument("--python", default=sys.executable if sys.version_info[:2] == (3, 11) else "python3.11")
    parser.add_argument("--jobs", type=int, default=1, help="pytest-xdist workers per pytest process")
    parser.add_argument("--one-process", action="store_true", help="one pytest process for all test files")
    parser.add_argument("--devices", type=int, default=8, help="CPU devices (XLA_FLAGS)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test (pytest-timeout)")
    parser.add_argument("--pytest-arg", action="append", default=[], help="one more pytest argument (repeatable)")
    parser.add_argument("--reuse", action="append", default=[], choices=["legacy", "new"],
                        help="take this run's outcomes from the JUnit reports of the previous run in the"
                        " cache instead of running it again (repeatable; its venv and the tree must not"
                        " have changed)")
    parser.add_argument("--brief", action="store_true", help="no line per test id")
    parser.add_argument("--json", dest="json_out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.tree = args.tree.resolve()
    if not args.tree.is_dir():
        parser.error(f"not a directory: {args.tree}")
    tests = args.tests or select_tests(args.tree, args.grep)
    if not tests:
        parser.error(f"no test files under {args.tree} mention {args.grep!r}")
    try:
        return run(args, tests, around_fix)
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def run(args, tests: list[str], around_fix=None) -> int:
    scratch = CACHE / args.name
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "setup.log"
    copy = scratch / "fixed-tree"
    requirements = tuple(args.pip)
    editable = None if args.no_install else str(args.tree)

    legacy = build_venv(args.name, VenvSpec("legacy", LEGACY_JAX, args.python, requirements, editable, None),
                        args.extras, log)
    constraints = frozen_constraints(legacy)
    new = build_venv(args.name, VenvSpec("new", args.new_jax, args.python, requirements, editable, constraints),
                     args.extras, log)
    copy_tree(args.tree, copy)
    if around_fix:
        around_fix[0](copy)
    fix = run_fix(args.exe, copy, args.fix_path or ["."], scratch / "fix.log", args.fix_arg)
    if around_fix:
        around_fix[1](copy)
    fixed_editable = None if args.no_install else str(copy)
    fixed = build_venv(args.name, VenvSpec("fixed", args.new_jax, args.python, requirements, fixed_editable,
                                           constraints), args.extras, log)
    pip = [str(fixed), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    if args.no_shim:
        subprocess.run([str(fixed), "-m", "pip", "uninstall", "--yes", "--quiet", "pmap-migrate-shim"],
                       capture_output=True, check=False)
    else:
        run_logged([*pip, "--force-reinstall", str(args.shim)], log)

    runs = [reused_run(label, tests, args, scratch) if label in args.reuse
            else run_pytest(label, python, args.tree, tests, args, scratch)
            for label, python in (("legacy", legacy), ("new", new))]
    runs.append(run_pytest("fixed", fixed, copy, tests, args, scratch))
    if args.shim_run or args.fixed_shim_run:
        target = scratch / "shim-site"
        if target.exists():
            shutil.rmtree(target)
        run_logged([str(new), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--target", str(target), str(args.shim)], log)
        if args.fixed_shim_run:
            runs.append(run_pytest("fixed+shim", fixed, copy, tests, args, scratch, pythonpath=[target]))
        if args.shim_run:
            runs.append(run_pytest("shim", new, args.tree, tests, args, scratch,
                                   pythonpath=[shim_plugin_dir(scratch), target], plugins=[SHIM_PLUGIN]))
    result = report(runs, fix, args, tests)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["fixed"]["pass_legacy_not_fixed"] or result["fixed"]["pass_new_not_fixed"] else 0


if __name__ == "__main__":
    sys.exit(main())
