"""The PM303 fix (flax's pmap-era helpers) judged by running programs: every legacy program in
`fixtures/programs_flax/` uses real flax (`jax_utils.replicate` / `unreplicate`,
`common_utils.shard` / `shard_prng_key`) on jax 0.7.2; fixed with every rule and unsafe fixes, it
must print on the current and on the newest jax what the original printed, and the same on jax
0.7.2 itself.

The originals run in a jax 0.7.2 environment with flax (`jaxenv.LEGACY_FLAX`); the fixed copies
run in the plain environments of `fixed_corpus.ENVS`, without flax: the fix leaves no use of flax
in these programs, so they must not import it. Each environment runs the whole corpus in one
interpreter (`tests/support/differential.py`), once per session (`tests/support/fixed_corpus.py`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from tests.support import differential as diff
from tests.support.fixed_corpus import ENVS, EXACT, REFERENCE, FixedCorpus, batch
from tests.support.jaxenv import LEGACY_FLAX

PROGRAMS = Path(__file__).resolve().parents[1] / "fixtures" / "programs_flax"
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.py"))
SOURCES = [PROGRAMS / f"{name}.py" for name in NAMES]


@pytest.fixture(scope="module")
def rewritten(corpus_runs) -> FixedCorpus:
    """The corpus fixed as `pmap-migrate fix --unsafe-fixes` would, in a temporary directory."""
    return corpus_runs.fixed(SOURCES)


@pytest.fixture(scope="module")
def runs(corpus_runs):
    return corpus_runs.differential(SOURCES, timeout=600, reference_env=LEGACY_FLAX)


def imported_modules(source: str) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


def test_the_corpus_covers_the_helpers():
    assert len(NAMES) >= 4, NAMES
    text = "".join(p.read_text() for p in SOURCES)
    for helper in ("replicate(", "unreplicate(", "shard(", "shard_prng_key("):
        assert helper in text, helper


@pytest.mark.parametrize("name", NAMES)
def test_every_program_uses_flax_and_pm303_rewrites_it(name):
    source = (PROGRAMS / f"{name}.py").read_text()
    assert any(m == "flax" or m.startswith("flax.") for m in imported_modules(source)), name
    outcome = fix_bytes(source.encode(), f"{name}.py", all_rules(), unsafe=True)
    assert "PM303" in {d.code for d in outcome.applied}, f"{name}: PM303 fixed nothing"


def test_every_program_is_fixed_completely_and_the_fix_is_a_fixpoint(rewritten):
    for name in NAMES:
        outcome = rewritten.outcomes[name]
        assert outcome.changed, f"{name}: the fix changed nothing"
        left = [f"{d.line}:{d.code} {d.message}" for d in outcome.remaining]
        assert left == [], f"{name}: findings left after the fix: {left}"
        again = fix_bytes(rewritten.path(name).read_bytes(), f"{name}.py", all_rules(), unsafe=True)
        assert again.fixed is None and again.applied == [], f"{name}: a second fix changed it again"


def test_no_fixed_program_imports_flax(rewritten):
    for name in NAMES:
        left = sorted(m for m in imported_modules(rewritten.path(name).read_text())
                      if m == "flax" or m.startswith("flax."))
        assert left == [], f"{name}: the fixed program still imports {left}"


def test_the_reference_ran_on_the_legacy_jax_with_flax(runs):
    legacy = batch(runs, REFERENCE)
    assert legacy.jax_version == "0.7.2", legacy.jax_version
    assert legacy.legacy_pmap
    failed = {name: run.error for name, run in legacy.programs.items() if run.error is not None}
    assert failed == {}, failed


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_fixed_program_prints_what_the_legacy_program_printed(runs, name, env_label):
    legacy = batch(runs, REFERENCE).programs[f"{name}.py"]
    actual = batch(runs, env_label).programs[f"{name}.py"]
    diff.assert_same_output(legacy, actual, "original with flax, jax 0.7.2", f"fixed, {env_label}",
                            exact=env_label in EXACT)
