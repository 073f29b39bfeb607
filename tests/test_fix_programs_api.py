"""The PM4xx fixes judged by running programs: every legacy program in `fixtures/programs_api/`
(experimental shard_map with check_rep= / auto=, experimental pjit, jax.lib.xla_bridge, the renames
of names jax 0.10.0 removed), fixed with every rule and unsafe fixes, must print on the current and
on the newest jax what the original printed on jax 0.7.2; the same fixed file must also print it
on jax 0.7.2 itself.

Names removed before jax 0.7.2 (jax.tree_map, jax.experimental.maps, in_axis_resources=, ...)
cannot run there: their fixes are covered by `fixtures/fix/` instead. Each environment runs the
whole corpus in one interpreter (`tests/support/differential.py`), once per session
(`tests/support/fixed_corpus.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from tests.support import differential as diff
from tests.support.fixed_corpus import ENVS, EXACT, REFERENCE, FixedCorpus, batch

PROGRAMS = Path(__file__).resolve().parents[1] / "fixtures" / "programs_api"
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.py"))
SOURCES = [PROGRAMS / f"{name}.py" for name in NAMES]


@pytest.fixture(scope="module")
def rewritten(corpus_runs) -> FixedCorpus:
    """The corpus fixed as `pmap-migrate fix --unsafe-fixes` would, in a temporary directory."""
    return corpus_runs.fixed(SOURCES)


@pytest.fixture(scope="module")
def runs(corpus_runs):
    return corpus_runs.differential(SOURCES, timeout=600)


def test_every_program_is_fixed_completely_and_the_fix_is_a_fixpoint(rewritten):
    for name in NAMES:
        outcome = rewritten.outcomes[name]
        assert outcome.changed, f"{name}: the fix changed nothing"
        left = [f"{d.line}:{d.code} {d.message}" for d in outcome.remaining]
        assert left == [], f"{name}: findings left after the fix: {left}"
        again = fix_bytes(rewritten.path(name).read_bytes(), f"{name}.py", all_rules(), unsafe=True)
        assert again.fixed is None and again.applied == [], f"{name}: a second fix changed it again"


def test_the_reference_ran_on_the_legacy_jax(runs):
    legacy = batch(runs, REFERENCE)
    assert legacy.jax_version == "0.7.2", legacy.jax_version


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_fixed_program_prints_what_the_legacy_program_printed(runs, name, env_label):
    legacy = batch(runs, REFERENCE).programs[f"{name}.py"]
    actual = batch(runs, env_label).programs[f"{name}.py"]
    diff.assert_same_output(legacy, actual, "original, jax 0.7.2", f"fixed, {env_label}", exact=env_label in EXACT)
