"""Running the shim's legacy programs (``tests/shim_programs``) and comparing what they print.

Each program is ordinary legacy-pmap code that prints one JSON line per check (values, shapes,
dtypes, device ids, trace counts, error types and messages). Run with jax 0.7.2's own pmap it gives
the reference; run under ``python -m runtime_shim`` on any jax it must print the same. The
two-process data-parallel program runs as two processes with four CPU devices each.
``shim_behaviour.py`` checks what legacy jax had no equivalent of: it is compared with
``EXPECTED_BEHAVIOUR`` instead.

Used by ``tests/test_shim_differential.py`` (the repository's shim in the cached jax environments)
and ``tests/test_distributions.py`` (the shim installed from its wheel alone). The reference runs
once per session (``legacy_shim_checks`` in ``tests/conftest.py``).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import jaxenv

PROGRAMS = Path(__file__).resolve().parents[1] / "shim_programs"
SINGLE_PROCESS = ("options", "resharding", "nested", "composition")
MULTI_PROCESS = "data_parallel"
BEHAVIOUR = "shim_behaviour"
WORKERS = 2  # CI machines have two cores

Checks = dict[str, dict]


# ---------------------------------------------------------------------- running


@dataclass(frozen=True)
class Runner:
    """How to run the programs: an interpreter, through ``python -m runtime_shim`` or not, and
    from which copy of ``tests/shim_programs``. ``repo_on_path=False`` runs them with the
    repository off ``PYTHONPATH`` (the shim must then come from the interpreter's own
    site-packages); ``cwd`` is where they run (None: this process's)."""

    python: Path | str
    shim: bool
    programs: Path = PROGRAMS
    repo_on_path: bool = True
    cwd: Path | None = None

    def command(self, program: str) -> list[str]:
        script = str(self.programs / f"{program}.py")
        return ["-m", "runtime_shim", script] if self.shim else [script]

    def run(self, program: str, *args: str, devices: int = 8) -> subprocess.CompletedProcess:
        return jaxenv.run_program(self.python, *self.command(program), *args, devices=devices,
                                  timeout=600, repo_on_path=self.repo_on_path, cwd=self.cwd)

    def run_all(self, programs: tuple[str, ...] = SINGLE_PROCESS) -> dict[str, subprocess.CompletedProcess]:
        """Each of ``programs``, two at a time."""
        with ThreadPoolExecutor(WORKERS) as pool:
            futures = {p: pool.submit(self.run, p) for p in programs}
            return {p: f.result() for p, f in futures.items()}

    def run_two_processes(self) -> list[subprocess.CompletedProcess]:
        """The multi-process program as processes 0 and 1 of one job, four devices each."""
        port = str(free_port())
        with ThreadPoolExecutor(2) as pool:
            procs = [pool.submit(self.run, MULTI_PROCESS, port, str(i), devices=4) for i in range(2)]
            return [p.result() for p in procs]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Reference:
    """What the programs printed under jax 0.7.2's own pmap."""

    single_process: dict[str, Checks]  # by program
    two_process: list[Checks]  # by process index


def legacy_reference() -> Reference:
    """Run every program with jax 0.7.2's legacy pmap (raises ``jaxenv.EnvUnavailable``)."""
    runner = Runner(jaxenv.python_for(jaxenv.LEGACY), shim=False)
    single = {p: checks(proc, f"{p} on legacy jax 0.7.2") for p, proc in runner.run_all().items()}
    two = [checks(proc, f"{MULTI_PROCESS} process {i} on legacy jax 0.7.2")
           for i, proc in enumerate(runner.run_two_processes())]
    return Reference(single, two)


# ---------------------------------------------------------------------- comparing

_DEVICE_NAME = re.compile(r"\b(?:TFRT_CPU_|cpu:)(\d+)\b")  # str(device) changed in 0.8


def parse(stdout: str) -> Checks:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "message" in record:
                record["message"] = _DEVICE_NAME.sub(r"cpu:\1", record["message"])
            found[record.pop("check")] = record
    return found


def _same_value(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    try:
        return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                           rtol=1e-5, atol=1e-6, equal_nan=True)
    except (TypeError, ValueError):
        return a == b


def differences(reference: Checks, candidate: Checks) -> list[str]:
    """Every check that is missing, extra, or printed differently (values within float32 noise)."""
    out = []
    for check, want in reference.items():
        got = candidate.get(check)
        if got is None:
            out.append(f"{check}: missing")
        elif want.keys() != got.keys() or any(
                want[k] != got[k] for k in want if k != "value") or not _same_value(
                want.get("value"), got.get("value")):
            out.append(f"{check}:\n    legacy: {json.dumps(want)[:400]}\n    shim:   "
                       f"{json.dumps(got)[:400]}")
    out += [f"{check}: not printed by the legacy run"
            for check in candidate.keys() - reference.keys()]
    return out


def checks(proc: subprocess.CompletedProcess, what: str) -> Checks:
    """The checks a successful run printed (an assertion error otherwise)."""
    assert proc.returncode == 0, f"{what} failed:\n{proc.stderr[-4000:]}"
    found = parse(proc.stdout)
    assert found, f"{what} printed no checks:\n{proc.stdout[-2000:]}"
    return found


def assert_matches(reference: Checks, candidate: Checks, what: str) -> None:
    diff = differences(reference, candidate)
    assert not diff, f"{what}: {len(diff)} of {len(reference)} checks differ:\n" + "\n".join(diff)


# ---------------------------------------------------------------------- shim_behaviour.py


def values(stdout: str) -> dict:
    """check -> printed value (or the whole record when it has none), for ``shim_behaviour``."""
    return {r.pop("check"): r.get("value", r)
            for r in map(json.loads, (s for s in stdout.splitlines() if s.startswith("{")))}


EXPECTED_BEHAVIOUR = {
    # lazy: importing, decorating and install() create no backend
    "backends_after_import_and_decorate": False,
    "linter_modules_imported": "",
    "installed_pmap_is_shim[0]": True,
    "installed_pmap_is_shim[1]": True,
    "installed_helpers_are_shim[0]": True,
    "installed_helpers_are_shim[1]": True,
    "decorated_before_devices_existed": [[4.0 * i, 4.0 * i + 2] for i in range(8)],
    # unreplicate hands over device 0's block; x[0] is an 8-device computation (new jax)
    "unreplicate_value": [0.0, 2.0],
    "unreplicate_devices": 1,
    "unreplicate_committed": False,
    "unreplicate_with_elsewhere[0]": [1.0, 3.0],
    "unreplicate_with_elsewhere[1]": [1.0, 3.0],
    "unreplicate_tree['a']": [0.0, 2.0],
    "unreplicate_tree['b'][0]": 1.0,
    "unreplicate_tree_devices[0]": 1,
    "unreplicate_tree_devices[1]": 1,
    "unreplicate_nested": [28.0, 28.0, 28.0, 28.0],
    "unreplicate_out_axes_1": [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0],
    "unreplicate_numpy[0]": [1.0, 1.0],
    # pmap(pmap(f, 'j'), 'i') on a (2, 4) mesh of 8 devices: the inner axis is parallel
    "nested_mesh[0][0]": "i", "nested_mesh[0][1]": 2,
    "nested_mesh[1][0]": "j", "nested_mesh[1][1]": 4,
    **{f"nested_devices[{i}]": i for i in range(8)},
    "nested_partitions": True,
    # 100 calls of one shape and 1 of another: two traces, two executables
    "cache_traces": 2,
    "cache_size": 2,
    "lower_compile_call": [[56.0, 64.0]] * 8,
    "global_arg_shapes_warning[0]": "UserWarning",
    "global_arg_shapes_result": [[6.0 * i, 6.0 * i + 3] for i in range(8)],
    "uninstalled[0]": False,
    "uninstalled[1]": False,
}


def assert_expected_behaviour(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, f"{what}:\n{proc.stderr[-4000:]}"
    found = values(proc.stdout)
    got = {k: found.get(k, "<not printed>") for k in EXPECTED_BEHAVIOUR}
    assert got == EXPECTED_BEHAVIOUR, what
    # why unreplicate exists: x[0] of a NamedSharding array is a computation on all devices
    assert found["index_0_devices"] == 8, what
