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

from concurrent.futures import ThreadPoolExecutor

import pytest
from support import differential, jaxenv, shim_runs

REFERENCE = "legacy-0.7.2"  # jax 0.7.2's own pmap: the session fixture ``legacy_shim_checks``
RUNS = {  # run id -> (environment, run through `python -m runtime_shim`)
    REFERENCE: (jaxenv.LEGACY, False),
    "shim-0.7.2": (jaxenv.LEGACY, True),
    "shim-0.10.2": (jaxenv.NEW_311, True),
    "shim-newest": (jaxenv.NEWEST, True),
}
SHIM_RUNS = [run for run in RUNS if run != REFERENCE]

pytestmark = pytest.mark.jax_envs


def _python(run: str):
    try:
        return jaxenv.python_for(RUNS[run][0])
    except jaxenv.EnvUnavailable as e:  # no such interpreter on this machine
        pytest.skip(str(e))


def _runner(run: str) -> shim_runs.Runner:
    return shim_runs.Runner(_python(run), shim=RUNS[run][1])


@pytest.fixture(scope="module")
def single_process_runs() -> dict:
    """Every (program, shim run) pair, two at a time; unavailable interpreters skip later."""
    runs = {run: _runner(run) for run in SHIM_RUNS if _available(run)}
    with ThreadPoolExecutor(shim_runs.WORKERS) as pool:
        futures = {(p, r): pool.submit(runner.run, p) for p in shim_runs.SINGLE_PROCESS
                   for r, runner in runs.items()}
        return {job: f.result() for job, f in futures.items()}


def _available(run: str) -> bool:
    try:
        jaxenv.python_for(RUNS[run][0])
    except jaxenv.EnvUnavailable:
        return False
    return True


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("run", SHIM_RUNS)
@pytest.mark.parametrize("program", shim_runs.SINGLE_PROCESS)
def test_program_matches_legacy_pmap(legacy_shim_checks, single_process_runs, program, run):
    if (program, run) not in single_process_runs:
        pytest.skip(f"{run}: interpreter unavailable")
    candidate = shim_runs.checks(single_process_runs[program, run], f"{program} on {run}")
    shim_runs.assert_matches(legacy_shim_checks.single_process[program], candidate, f"{program} on {run}")


@pytest.mark.multiprocess
@pytest.mark.parametrize("run", SHIM_RUNS)
def test_two_process_data_parallel_matches_legacy_pmap(legacy_shim_checks, run):
    for i, proc in enumerate(_runner(run).run_two_processes()):
        what = f"{shim_runs.MULTI_PROCESS} process {i} on {run}"
        shim_runs.assert_matches(legacy_shim_checks.two_process[i], shim_runs.checks(proc, what), what)


# ---------------------------------------------------------------------- the rewriter's corpus

CORPUS = differential.program_names()


def _corpus_batch(run: str) -> dict[str, differential.ProgramRun]:
    scripts = [differential.legacy_path(name) for name in CORPUS]
    return differential.run_batch(_python(run), scripts, shim=RUNS[run][1], timeout=1800).programs


@pytest.fixture(scope="module")
def corpus_runs() -> dict:
    runs = [REFERENCE, "shim-newest"]
    with ThreadPoolExecutor(shim_runs.WORKERS) as pool:
        return dict(zip(runs, pool.map(_corpus_batch, runs)))


@pytest.mark.parametrize("case", CORPUS)
def test_rewrite_corpus_program_matches_legacy_pmap_on_newest_jax(corpus_runs, case):
    name = f"{case}.py"
    differential.assert_same_output(corpus_runs[REFERENCE][name], corpus_runs["shim-newest"][name],
                                    REFERENCE, "shim-newest", exact=False)
