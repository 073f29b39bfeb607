"""The PM4xx fixes judged by running programs: every legacy program in `fixtures/programs_api/`
(experimental shard_map with check_rep= / auto=, experimental pjit, jax.lib.xla_bridge), fixed
with every rule and unsafe fixes, must print on the current and on the newest jax what the
original printed on jax 0.7.2; the same fixed file must also print it on jax 0.7.2 itself.

Names removed before jax 0.7.2 (jax.tree_map, jax.experimental.maps, in_axis_resources=, ...)
cannot run there: their fixes are covered by `fixtures/fix/` instead. Each environment runs the
whole corpus in one interpreter (`tests/support/differential.py`).
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from codemod.fixer import fix_bytes
from rules import all_rules
from tests.support import differential as diff
from tests.support.jaxenv import LEGACY, NEWEST, EnvUnavailable

PROGRAMS = Path(__file__).resolve().parents[1] / "fixtures" / "programs_api"
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.py"))
ENVS = {"jax-0.7.2": LEGACY, "current": None, "newest": NEWEST}
EXACT = {"jax-0.7.2"}  # same XLA as the reference: the text must match exactly


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """The corpus fixed as `pmap-migrate fix --unsafe-fixes` would, in a temporary directory."""
    root = tmp_path_factory.mktemp("programs_api")
    outcomes = {}
    for name in NAMES:
        outcome = fix_bytes((PROGRAMS / f"{name}.py").read_bytes(), f"{name}.py", all_rules(), unsafe=True)
        assert outcome.error is None, f"{name}: {outcome.error}"
        (root / f"{name}.py").write_bytes(outcome.fixed if outcome.fixed is not None else outcome.original)
        outcomes[name] = outcome
    return root, outcomes


@pytest.fixture(scope="module")
def runs(rewritten):
    root, _ = rewritten
    jobs = {"legacy": (LEGACY, [PROGRAMS / f"{n}.py" for n in NAMES])}
    for label, env in ENVS.items():
        jobs[label] = (env, [root / f"{n}.py" for n in NAMES])

    def run(env, scripts):
        try:
            return diff.run_batch(env, scripts, timeout=600)
        except EnvUnavailable as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {label: pool.submit(run, *job) for label, job in jobs.items()}
        return {label: future.result() for label, future in futures.items()}


def _batch(runs, label) -> diff.BatchRun:
    result = runs[label]
    if isinstance(result, EnvUnavailable):
        pytest.skip(f"{label}: {result}")
    return result


def test_every_program_is_fixed_completely_and_the_fix_is_a_fixpoint(rewritten):
    root, outcomes = rewritten
    for name in NAMES:
        outcome = outcomes[name]
        assert outcome.changed, f"{name}: the fix changed nothing"
        left = [f"{d.line}:{d.code} {d.message}" for d in outcome.remaining]
        assert left == [], f"{name}: findings left after the fix: {left}"
        again = fix_bytes((root / f"{name}.py").read_bytes(), f"{name}.py", all_rules(), unsafe=True)
        assert again.fixed is None and again.applied == [], f"{name}: a second fix changed it again"


def test_the_reference_ran_on_the_legacy_jax(runs):
    legacy = _batch(runs, "legacy")
    assert legacy.jax_version == "0.7.2", legacy.jax_version


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_fixed_program_prints_what_the_legacy_program_printed(runs, name, env_label):
    legacy = _batch(runs, "legacy").programs[f"{name}.py"]
    actual = _batch(runs, env_label).programs[f"{name}.py"]
    diff.assert_same_output(legacy, actual, "original, jax 0.7.2", f"fixed, {env_label}", exact=env_label in EXACT)
