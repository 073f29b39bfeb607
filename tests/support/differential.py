"""Differential runs of the legacy programs in ``fixtures/programs`` and of their rewritten targets.

A *program* is ``fixtures/programs/<case>.py`` (legacy ``jax.pmap`` code), its *target* is
``<case>.target.py`` (the faithful rewrite, plain ``jax.jit(jax.shard_map(...))``). Both define
``main()`` behind an ``if __name__ == "__main__"`` guard and print their results as text, so two runs
compare as strings.

Starting jax costs seconds per process, so a whole corpus runs in ONE interpreter per environment:
this file is also the batch runner (``python differential.py --batch SPEC RESULT``), executed by the
interpreter of the environment under test with nothing from this repository imported. Each program
gets a fresh module namespace (``runpy.run_path``); jax's process-wide state (devices, caches) is
shared, which is what the programs expect of a single long-running process anyway.

Per program the runner records:
- ``stdout`` of ``main()`` (or the traceback, as ``error``);
- ``backends_initialized_on_import``: whether executing the module body (without ``main()``) made
  jax create its backends, i.e. queried devices at import. Only measured when asked and only
  meaningful if no earlier module of the batch did it already (``None`` otherwise);
- ``traces_on_rerun``: how many times jax traced a function (jit or legacy pmap) during a SECOND
  call of ``main()``. A program whose jitted functions are built once per signature traces nothing
  the second time.

Usable by hand, too::

    python tests/support/differential.py fixtures/programs/decorator_partial   # legacy vs target, all envs
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import math
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "fixtures" / "programs"
TARGET_SUFFIX = ".target.py"
# jax records this event each time it traces a Python function to a jaxpr (jit and legacy pmap
# alike); the name is the same in jax 0.7.2, 0.10.2 and 0.12 (jax/_src/dispatch.py).
JAXPR_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
IMPORT_RUN_NAME = "__pmap_migrate_import__"


@dataclass(frozen=True)
class BatchRun:
    jax_version: str
    legacy_pmap: bool  # True when jax.pmap is the legacy implementation (jax <= 0.7.x by default)
    programs: dict[str, ProgramRun]
    shim_path: str | None = None  # the file runtime_shim was imported from, if the batch imported it


@dataclass(frozen=True)
class ProgramRun:
    name: str
    stdout: str
    error: str | None
    seconds: float  # wall time of the first main()
    backends_initialized_on_import: bool | None = None
    traces_on_rerun: int | None = None


# --------------------------------------------------------------------------- corpus


def program_names() -> list[str]:
    """Names of the legacy programs (``<case>.py`` without the ``.target.py`` files)."""
    return sorted(p.stem for p in PROGRAMS.glob("*.py") if not p.name.endswith(TARGET_SUFFIX))


def legacy_path(name: str) -> Path:
    return PROGRAMS / f"{name}.py"


def target_path(name: str) -> Path:
    return PROGRAMS / f"{name}{TARGET_SUFFIX}"


# --------------------------------------------------------------------------- parent side


def python_of(env) -> str:
    """Interpreter for ``env``: a ``jaxenv.JaxEnv``, ``None`` for the interpreter running pytest, or
    an interpreter's path."""
    if env is None:
        return sys.executable
    if isinstance(env, (str, Path)):
        return str(env)
    from tests.support.jaxenv import python_for

    return str(python_for(env))


def run_batch(env, scripts: Sequence[Path], *, check_import: bool = False, rerun: bool = False,
              timeout: float = 900, shim: bool = False, repo_on_path: bool = True) -> BatchRun:
    """Run every script's ``main()`` in one interpreter of ``env``; results keyed by file name.

    ``shim``: the runner itself runs under ``python -m runtime_shim``. ``repo_on_path=False``: the
    repository is not on ``PYTHONPATH`` (the runner runs from a temporary directory either way).
    """
    from tests.support.jaxenv import run_program

    with tempfile.TemporaryDirectory(prefix="pmap-migrate-diff-") as tmp:
        spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec.write_text(json.dumps({"scripts": [str(s) for s in scripts],
                                    "check_import": check_import, "rerun": rerun}))
        shim_args = ["-m", "runtime_shim"] if shim else []
        proc = run_program(python_of(env), *shim_args, Path(__file__), "--batch", str(spec), str(result),
                           timeout=timeout, cwd=tmp, repo_on_path=repo_on_path)
        if proc.returncode != 0 or not result.exists():
            raise RuntimeError(f"batch runner failed under {python_of(env)} (exit {proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        data = json.loads(result.read_text())
        return BatchRun(jax_version=data["jax_version"], legacy_pmap=data["legacy_pmap"],
                        programs={r["name"]: ProgramRun(**r) for r in data["programs"]},
                        shim_path=data.get("shim_path"))


def program_stdout(env, script: Path, timeout: float = 300) -> str:
    """stdout of one program run as ``__main__`` in its own process (slower than ``run_batch``)."""
    from tests.support.jaxenv import run_program

    proc = run_program(python_of(env), script, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} failed under {python_of(env)}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def output_diff(expected: str, actual: str, expected_label: str, actual_label: str) -> str:
    """A unified diff of two program outputs; empty when they are equal."""
    if expected == actual:
        return ""
    return "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                        fromfile=expected_label, tofile=actual_label))


# Printed numbers may differ in the last digit between XLA releases (a float32 ulp moves a value
# across a rounding boundary of the 6 printed decimals). Array printing also re-aligns columns when
# a width changes, so such outputs are compared as token streams, numbers within this tolerance.
ULP_ABS, ULP_REL = 1.01e-6, 1e-6
_TOKEN = re.compile(r"[^\s\[\](),]+")


def _same_number(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= ULP_ABS + ULP_REL * max(abs(x), abs(y))


def same_up_to_last_digit(expected: str, actual: str) -> bool:
    """True if the outputs differ at most in printed numbers, by float32 rounding noise."""
    a, b = _TOKEN.findall(expected), _TOKEN.findall(actual)
    return len(a) == len(b) and all(x == y or _same_number(x, y) for x, y in zip(a, b))


def assert_same_output(expected: ProgramRun, actual: ProgramRun, expected_label: str, actual_label: str,
                       *, exact: bool = True) -> str:
    """Fail with a diff unless ``actual`` printed what ``expected`` printed.

    ``exact=False`` (runs on different XLA releases) accepts last-digit differences and returns
    their diff, so a caller can report them; an exact match returns ``""``.
    """
    for run, label in ((expected, expected_label), (actual, actual_label)):
        if run.error is not None:
            raise AssertionError(f"{run.name} raised under {label}:\n{run.error}\nstdout so far:\n{run.stdout}")
    if not expected.stdout.strip():
        raise AssertionError(f"{expected.name} printed nothing under {expected_label}: nothing to compare")
    diff = output_diff(expected.stdout, actual.stdout, f"{expected.name} [{expected_label}]",
                       f"{actual.name} [{actual_label}]")
    if not diff:
        return ""
    if exact or not same_up_to_last_digit(expected.stdout, actual.stdout):
        raise AssertionError("outputs differ:\n" + diff)
    return diff


# --------------------------------------------------------------------------- child side (batch runner)


def _batch_main(spec_file: str, result_file: str) -> int:
    import runpy

    spec = json.loads(Path(spec_file).read_text())
    scripts = [Path(s) for s in spec["scripts"]]
    traces = [0]

    def count_traces(event, duration, *args, **kwargs):
        if event == JAXPR_TRACE_EVENT:
            traces[0] += 1

    import jax
    from jax._src import xla_bridge

    jax.monitoring.register_event_duration_secs_listener(count_traces)
    namespaces: dict[str, dict | str] = {}
    on_import: dict[str, bool | None] = {}

    def load(script: Path) -> None:
        # Executes the module body only: main() is behind the __name__ guard.
        was_initialized = xla_bridge.backends_are_initialized()
        try:
            namespaces[script.name] = runpy.run_path(str(script), run_name=IMPORT_RUN_NAME)
        except BaseException:
            namespaces[script.name] = traceback.format_exc()
        on_import[script.name] = None if was_initialized else xla_bridge.backends_are_initialized()

    if spec["check_import"]:
        # Import everything before any main() runs: the first main() initialises the backends.
        for script in scripts:
            load(script)

    results = []
    for script in scripts:
        if script.name not in namespaces:
            load(script)
        ns = namespaces[script.name]
        out = io.StringIO()
        error, rerun_traces, seconds = None, None, 0.0
        start = time.perf_counter()
        if isinstance(ns, str):
            error = "import failed:\n" + ns
        elif not callable(ns.get("main")):
            error = "the program defines no main()"
        else:
            try:
                with contextlib.redirect_stdout(out):
                    ns["main"]()
            except BaseException:
                error = traceback.format_exc()
            seconds = time.perf_counter() - start
            if error is None and spec["rerun"]:
                before = traces[0]
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        ns["main"]()
                    rerun_traces = traces[0] - before
                except BaseException:
                    error = "second run of main() failed:\n" + traceback.format_exc()
        results.append(ProgramRun(
            name=script.name, stdout=out.getvalue(), error=error, seconds=round(seconds, 3),
            backends_initialized_on_import=on_import[script.name] if spec["check_import"] else None,
            traces_on_rerun=rerun_traces))
    # jax <= 0.7 has the flag (False: legacy pmap); 0.8-0.9 have it True; 0.10 removed it.
    legacy_pmap = getattr(jax.config, "jax_pmap_shmap_merge", True) is False
    shim = sys.modules.get("runtime_shim")
    Path(result_file).write_text(json.dumps({"jax_version": jax.__version__, "legacy_pmap": legacy_pmap,
                                             "programs": [asdict(r) for r in results],
                                             "shim_path": getattr(shim, "__file__", None)}))
    return 0


def _compare_main(case: str) -> int:
    """Print the diff of ``<case>.py`` on legacy jax against ``<case>.target.py`` on every env."""
    from tests.support.jaxenv import LEGACY, NEW_311, NEWEST

    name = Path(case).name.removesuffix(".py").removesuffix(".target")
    legacy = program_stdout(LEGACY, legacy_path(name))
    status = 0
    for env in (LEGACY, NEW_311, NEWEST):
        target = program_stdout(env, target_path(name))
        diff = output_diff(legacy, target, f"{name}.py [{LEGACY.name}]", f"{name}.target.py [{env.name}]")
        if not diff:
            print(f"{env.name}: same output")
        elif env is not LEGACY and same_up_to_last_digit(legacy, target):
            print(f"{env.name}: same up to float32 rounding of the last printed digit\n{diff}")
        else:
            print(f"{env.name}: DIFFERENT\n{diff}")
            status = 1
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--batch"]:
        sys.exit(_batch_main(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 2:
        sys.path.insert(0, str(REPO))
        os.chdir(REPO)
        sys.exit(_compare_main(sys.argv[1]))
    print(__doc__)
    sys.exit(2)
