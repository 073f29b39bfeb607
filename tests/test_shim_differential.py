"""runtime_shim reproduces jax 0.7.2's legacy pmap, checked by running real programs.

Each legacy program in ``tests/shim_programs`` runs with jax 0.7.2's own pmap (the
reference) and under ``python -m runtime_shim`` on jax 0.7.2, 0.10.2 (Python 3.11) and the
newest jax (Python 3.12). Programs print one JSON line per check (values, shapes, dtypes,
device ids, trace counts, error types and messages); every run must print what the
reference printed. The two-process data-parallel program runs the same way, as two
processes with four CPU devices each.

The rewriter's corpus of legacy programs (``fixtures/programs/<case>.py``) also runs under
the shim on the newest jax, through the corpus's own batch runner
(``tests/support/differential.py --batch``), and must print what jax 0.7.2's pmap printed.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from support import differential, jaxenv

PROGRAMS = Path(__file__).parent / "shim_programs"
SINGLE_PROCESS = ("options", "resharding", "nested", "composition")
MULTI_PROCESS = "data_parallel"
REFERENCE = "legacy-0.7.2"
RUNS = {  # run id -> (environment, run through `python -m runtime_shim`)
    REFERENCE: (jaxenv.LEGACY, False),
    "shim-0.7.2": (jaxenv.LEGACY, True),
    "shim-0.10.2": (jaxenv.NEW_311, True),
    "shim-newest": (jaxenv.NEWEST, True),
}
SHIM_RUNS = [run for run in RUNS if run != REFERENCE]
WORKERS = 2  # CI machines have two cores

pytestmark = pytest.mark.jax_envs


# ---------------------------------------------------------------------- running


def _python(run: str) -> Path:
    try:
        return jaxenv.python_for(RUNS[run][0])
    except jaxenv.EnvUnavailable as e:  # no such interpreter on this machine
        pytest.skip(str(e))


def _command(run: str, program: str) -> list[str]:
    script = str(PROGRAMS / f"{program}.py")
    return ["-m", "runtime_shim", script] if RUNS[run][1] else [script]


def _run(run: str, program: str, *args: str, devices: int = 8) -> subprocess.CompletedProcess:
    return jaxenv.run_program(_python(run), *_command(run, program), *args, devices=devices,
                              timeout=600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_processes(run: str) -> list[subprocess.CompletedProcess]:
    python, port = _python(run), str(_free_port())
    with ThreadPoolExecutor(2) as pool:
        procs = [pool.submit(jaxenv.run_program, python, *_command(run, MULTI_PROCESS), port,
                             str(i), devices=4, timeout=600) for i in range(2)]
        return [p.result() for p in procs]


@pytest.fixture(scope="module")
def single_process_runs() -> dict:
    """Every (program, run) pair, two at a time; unavailable interpreters skip later."""
    available = {run for run in RUNS if _available(run)}
    jobs = [(p, r) for p in SINGLE_PROCESS for r in RUNS if r in available]
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {job: pool.submit(_run, job[1], job[0]) for job in jobs}
        return {job: f.result() for job, f in futures.items()}


def _available(run: str) -> bool:
    try:
        jaxenv.python_for(RUNS[run][0])
    except jaxenv.EnvUnavailable:
        return False
    return True


# ---------------------------------------------------------------------- comparing

_DEVICE_NAME = re.compile(r"\b(?:TFRT_CPU_|cpu:)(\d+)\b")  # str(device) changed in 0.8


def parse(stdout: str) -> dict[str, dict]:
    checks = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "message" in record:
                record["message"] = _DEVICE_NAME.sub(r"cpu:\1", record["message"])
            checks[record.pop("check")] = record
    return checks


def _same_value(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    try:
        return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                           rtol=1e-5, atol=1e-6, equal_nan=True)
    except (TypeError, ValueError):
        return a == b


def differences(reference: dict[str, dict], candidate: dict[str, dict]) -> list[str]:
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


def _checks(proc: subprocess.CompletedProcess, what: str) -> dict[str, dict]:
    assert proc.returncode == 0, f"{what} failed:\n{proc.stderr[-4000:]}"
    checks = parse(proc.stdout)
    assert checks, f"{what} printed no checks:\n{proc.stdout[-2000:]}"
    return checks


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("run", SHIM_RUNS)
@pytest.mark.parametrize("program", SINGLE_PROCESS)
def test_program_matches_legacy_pmap(single_process_runs, program, run):
    if (program, run) not in single_process_runs:
        pytest.skip(f"{run}: interpreter unavailable")
    reference = _checks(single_process_runs[program, REFERENCE], f"{program} on {REFERENCE}")
    candidate = _checks(single_process_runs[program, run], f"{program} on {run}")
    diff = differences(reference, candidate)
    assert not diff, f"{program}: {len(diff)} of {len(reference)} checks differ on {run}:\n" + \
        "\n".join(diff)


@pytest.fixture(scope="module")
def reference_two_process_run() -> list[dict]:
    return [_checks(p, f"{MULTI_PROCESS} process {i} on {REFERENCE}")
            for i, p in enumerate(_run_two_processes(REFERENCE))]


@pytest.mark.multiprocess
@pytest.mark.parametrize("run", SHIM_RUNS)
def test_two_process_data_parallel_matches_legacy_pmap(reference_two_process_run, run):
    for i, proc in enumerate(_run_two_processes(run)):
        candidate = _checks(proc, f"{MULTI_PROCESS} process {i} on {run}")
        diff = differences(reference_two_process_run[i], candidate)
        assert not diff, f"process {i}: {len(diff)} checks differ on {run}:\n" + "\n".join(diff)


# ---------------------------------------------------------------------- the rewriter's corpus

CORPUS = differential.program_names()


def _corpus_batch(run: str) -> dict[str, differential.ProgramRun]:
    scripts = [str(differential.legacy_path(name)) for name in CORPUS]
    with tempfile.TemporaryDirectory(prefix="shim-corpus-") as tmp:
        spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec.write_text(json.dumps({"scripts": scripts, "check_import": False, "rerun": False}))
        shim = ["-m", "runtime_shim"] if RUNS[run][1] else []
        proc = jaxenv.run_program(_python(run), *shim, differential.__file__, "--batch",
                                  str(spec), str(result), cwd=tmp, timeout=1800)
        assert proc.returncode == 0 and result.exists(), proc.stderr[-4000:]
        programs = json.loads(result.read_text())["programs"]
    return {p["name"]: differential.ProgramRun(**p) for p in programs}


@pytest.fixture(scope="module")
def corpus_runs() -> dict:
    runs = [REFERENCE, "shim-newest"]
    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(runs, pool.map(_corpus_batch, runs)))


@pytest.mark.parametrize("case", CORPUS)
def test_rewrite_corpus_program_matches_legacy_pmap_on_newest_jax(corpus_runs, case):
    name = f"{case}.py"
    differential.assert_same_output(corpus_runs[REFERENCE][name], corpus_runs["shim-newest"][name],
                                    REFERENCE, "shim-newest", exact=False)
