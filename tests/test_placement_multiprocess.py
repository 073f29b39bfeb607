"""The placement fixes in a multi-process program, checked by a real two-process run.

In a module that runs several processes (PM501) the pmaps are rewritten over a global mesh of every
process's devices (`rules/fixes/multiprocess.py`): their outputs stay global arrays, and the row
reads of them (`loss[0]`, `tree_map(lambda v: v[0], params)`) become reads of this process's rows;
the stacking helpers still become the shim's drop-ins (PM301/PM302), whose host-local stacks the
rewritten pmaps take. `tests/shim_programs/data_parallel.py` (2 processes x 4 CPU devices, gloo
collectives) is fixed with every rule and unsafe fixes, then run on the newest jax; each process
must print what it printed under jax 0.7.2's legacy pmap.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import jaxenv
from support.shim_runs import differences, free_port, parse
from test_multiprocess_rewrite import gloo_free

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

PROGRAMS = Path(__file__).parent / "shim_programs"
PROGRAM = "data_parallel"

pytestmark = [pytest.mark.jax_envs, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def fixed_program(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("placement_multiprocess")
    shutil.copy(PROGRAMS / "_report.py", root / "_report.py")
    source = (PROGRAMS / f"{PROGRAM}.py").read_bytes()
    outcome = fix_bytes(source, f"{PROGRAM}.py", all_rules(), unsafe=True)
    assert outcome.error is None, outcome.error
    assert outcome.fixed is not None
    target = root / f"{PROGRAM}.py"
    target.write_bytes(outcome.fixed)
    return target


def _two_processes(env: jaxenv.JaxEnv, script: Path) -> list[subprocess.CompletedProcess]:
    try:
        python = jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as exc:
        pytest.skip(str(exc))
    port = str(free_port())
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(jaxenv.run_program, python, script, port, str(i), devices=4, timeout=600,
                            cwd=script.parent) for i in range(2)]
        return [run.result() for run in runs]


def _checks(proc: subprocess.CompletedProcess, what: str) -> dict:
    assert proc.returncode == 0, f"{what} failed:\n{proc.stderr[-4000:]}"
    checks = parse(gloo_free(proc.stdout))
    assert checks, f"{what} printed no checks:\n{proc.stdout[-2000:]}"
    return checks


def test_the_fix_rewrites_the_pmaps_and_reads_this_process_rows(fixed_program):
    text = fixed_program.read_text()
    assert "jax.pmap(" not in text and "jax.device_put_replicated(" not in text
    code = "\n".join(line.split("#")[0] for line in text.splitlines())  # the shim comments name the shim
    assert "runtime_shim.pmap(" not in code and "runtime_shim.device_put_replicated(" in code
    assert "jax.make_array_from_process_local_data" in text
    # `tree_map(lambda v: v[0], params)`: this process's row from the device that holds it
    assert "lambda v: v.addressable_shards[0].data.squeeze(0), params)" in text
    # `float(loss[0])`: loss is a pmean of `jax.value_and_grad`'s value, an array: the same read
    assert "float(loss.addressable_shards[0].data.squeeze(0))" in text


def test_fixed_program_matches_legacy_pmap_on_two_processes(fixed_program):
    reference = [_checks(p, f"legacy process {i}")
                 for i, p in enumerate(_two_processes(jaxenv.LEGACY, PROGRAMS / f"{PROGRAM}.py"))]
    for i, proc in enumerate(_two_processes(jaxenv.NEWEST, fixed_program)):
        candidate = _checks(proc, f"fixed, newest jax, process {i}")
        diff = differences(reference[i], candidate)
        assert not diff, f"process {i}: {len(diff)} checks differ:\n" + "\n".join(diff)
