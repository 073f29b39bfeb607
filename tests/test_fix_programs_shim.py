"""Pmaps whose program observes legacy pmap itself (its error messages, its object's attributes),
judged by running programs: every program in `fixtures/programs_shim/`, fixed with every rule and
unsafe fixes, keeps those pmaps on `runtime_shim.pmap` with the reason written beside them, and
prints on the current and the newest jax what the original printed on jax 0.7.2 (and the same on
jax 0.7.2 itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from tests.support import differential as diff
from tests.support.fixed_corpus import ENVS, EXACT, REFERENCE, FixedCorpus, batch

PROGRAMS = Path(__file__).resolve().parents[1] / "fixtures" / "programs_shim"
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.py"))
SOURCES = [PROGRAMS / f"{name}.py" for name in NAMES]


@pytest.fixture(scope="module")
def rewritten(corpus_runs) -> FixedCorpus:
    return corpus_runs.fixed(SOURCES)


@pytest.fixture(scope="module")
def runs(corpus_runs):
    return corpus_runs.differential(SOURCES, timeout=600)


def test_observed_pmaps_stay_on_the_shim_with_their_reason(rewritten):
    fixed = rewritten.path("expected_errors").read_text()
    assert fixed.count("kept on the legacy shim: the code expects it to raise") == 3, fixed
    assert "kept on the legacy shim: the code reads `counted._cache_size`" in fixed, fixed
    assert "double = jax.jit(_shard_mapped(lambda x: 2 * x))" in fixed, fixed
    again = fix_bytes(fixed.encode(), "expected_errors.py", all_rules(), unsafe=True)
    assert again.fixed is None, "a second fix changed it again"


def test_a_pmap_over_a_transform_passed_in_stays_on_the_shim(rewritten):
    fixed = rewritten.path("map_passed_in").read_text()
    words = " ".join(fixed.replace("#", " ").split())  # the comments as wrapped at the line length
    assert words.count("the function is made by `map2`, a parameter") == 3, fixed
    assert fixed.count("@partial(runtime_shim.pmap, axis_name=\"i\")") == 2, fixed
    assert "return runtime_shim.pmap(map2(partial(" in fixed, fixed


def test_the_reference_ran_on_the_legacy_jax(runs):
    assert batch(runs, REFERENCE).jax_version == "0.7.2"


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_fixed_program_prints_what_the_legacy_program_printed(runs, name, env_label):
    legacy = batch(runs, REFERENCE).programs[f"{name}.py"]
    actual = batch(runs, env_label).programs[f"{name}.py"]
    diff.assert_same_output(legacy, actual, "original, jax 0.7.2", f"fixed, {env_label}", exact=env_label in EXACT)
