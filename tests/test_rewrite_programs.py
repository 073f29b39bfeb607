"""The rewriter, judged by running programs: every legacy program in `fixtures/programs/`, after
`pmap-migrate fix --unsafe-fixes`, must print on the newest jax what it printed under the legacy
pmap (jax 0.7.2), and the same rewritten file must still run unchanged on jax 0.7.2.

The legacy reference runs once per session; each environment runs the whole rewritten corpus in
one interpreter (`tests/support/differential.py`, `tests/support/fixed_corpus.py`).
"""

from __future__ import annotations

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from tests.support import differential as diff
from tests.support.fixed_corpus import ENVS, EXACT, REFERENCE, FixedCorpus, batch

NAMES = diff.program_names()
SOURCES = [diff.legacy_path(name) for name in NAMES]
# Programs whose rewrite needs a fix that is not written yet: they must fail; strict xfail turns a
# pass into a failure so the list is kept honest. Empty: every program's rewrite passes.
PENDING: dict[str, str] = {}


@pytest.fixture(scope="session")
def rewritten(corpus_runs) -> FixedCorpus:
    """The corpus fixed with every rule and unsafe fixes, as `fix --unsafe-fixes` would."""
    return corpus_runs.fixed(SOURCES)


@pytest.fixture(scope="session")
def runs(corpus_runs):
    # Rewritten modules are all imported before any main() runs (does an import touch a device?)
    # and main() runs twice (does a warm call retrace?).
    return corpus_runs.differential(SOURCES, check_import=True, rerun=True)


def test_every_program_is_changed_and_the_fix_is_a_fixpoint(rewritten):
    for name in NAMES:
        assert rewritten.outcomes[name].changed, f"{name}: fix changed nothing"
        again = fix_bytes(rewritten.path(name).read_bytes(), f"{name}.py", all_rules(), unsafe=True)
        assert again.fixed is None and again.applied == [], f"{name}: a second fix changed it again"


def test_no_pmap_finding_survives_the_fix(rewritten):
    left = {name: [f"{d.line}:{d.code}" for d in o.remaining if d.code.startswith("PM1")]
            for name, o in rewritten.outcomes.items()}
    assert {n: v for n, v in left.items() if v} == {}


# The programs that exercise the placement fixes, and the rules whose fixes each must receive: the
# differential checks those fixes only if they were applied (`out[0]` still runs on new jax, slowly).
PLACEMENT_FIXES = {
    "committed_input": {"PM304"},
    "device_put_replicated": {"PM301"},
    "device_put_sharded": {"PM302"},
    "index_output": {"PM201"},
    "index_rows": {"PM201", "PM202", "PM301", "PM302"},
    "placement_inputs": {"PM302", "PM304"},
    "replicated_keys": {"PM201", "PM301", "PM302"},
    "row_flows": {"PM201"},
    "removed_flags": {"PM104"},
    "unreplicate_tree_map": {"PM202"},
    "loss_read": {"PM201", "PM202", "PM301"},
    "weak_scalars": {"PM301", "PM302"},
}


def test_placement_fixes_are_applied_and_leave_no_finding(rewritten):
    outcomes = rewritten.outcomes
    pmap_rules = {"PM101", "PM102", "PM103"}
    applied = {name: {d.code for d in outcomes[name].applied} - pmap_rules for name in NAMES}
    assert {n: applied[n] for n in PLACEMENT_FIXES} == PLACEMENT_FIXES
    assert {n: codes for n, codes in applied.items() if codes and n not in PLACEMENT_FIXES} == {}
    # What stays is reported, without a fix: rows read from outputs of the rewritten pmaps where the row
    # read from its shard would be committed (passed to a pmap, stacked with other devices' rows,
    # combined with a stacked array), which legacy's `out[k]` was not: the gather stays, and so does
    # its finding (a safe fix must not hide one).
    left = {name: [f"{d.code}{'' if d.fix is None else ' fixable'}" for d in o.remaining]
            for name, o in outcomes.items()}
    assert {n: v for n, v in left.items() if v} == {"loss_read": ["PM201", "PM201"], "row_flows": ["PM201", "PM201"]}


def test_most_programs_become_plain_jax(rewritten):
    """The shim is the fallback, not the rule: count what still imports it."""
    shimmed = sorted(n for n in NAMES if "import runtime_shim" in rewritten.path(n).read_text())
    assert shimmed == [], shimmed


def _legacy_and_rewritten(runs, name: str, env_label: str, request) -> tuple[diff.ProgramRun, diff.ProgramRun]:
    """The reference run of ``name`` and the run of its rewrite on ``env_label``; a PENDING
    program must fail there."""
    if name in PENDING and (env_label != "jax-0.7.2" or name == "committed_input"):
        # the removed helpers still exist on jax 0.7.2; a committed input fails jit(shard_map) there too
        request.applymarker(pytest.mark.xfail(reason=PENDING[name], strict=True))
    return batch(runs, REFERENCE).programs[f"{name}.py"], batch(runs, env_label).programs[f"{name}.py"]


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_rewritten_program_prints_what_legacy_printed(runs, name, env_label, request):
    legacy, actual = _legacy_and_rewritten(runs, name, env_label, request)
    diff.assert_same_output(legacy, actual, "legacy pmap, jax 0.7.2", f"rewritten, {env_label}",
                            exact=env_label in EXACT)


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_importing_a_rewritten_module_queries_no_device(runs, name, env_label):
    run = batch(runs, env_label).programs[f"{name}.py"]
    assert run.backends_initialized_on_import is False, (
        "importing the rewritten module initialised jax backends" if run.backends_initialized_on_import
        else "an earlier module initialised the backends at import; see its failure")


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_rewritten_program_does_not_retrace_when_warm(runs, name, env_label, request):
    legacy, actual = _legacy_and_rewritten(runs, name, env_label, request)
    assert actual.error is None, actual.error
    if legacy.traces_on_rerun == 0:
        assert actual.traces_on_rerun == 0, "a warm main() traced again: the jitted wrapper is rebuilt"
    else:
        # pmaps built inside main() retrace under legacy pmap too; a fresh jit traces once per kind
        # of input sharding (host array, then its own sharded output)
        assert actual.traces_on_rerun <= 2 * legacy.traces_on_rerun


def test_the_import_check_can_fail():
    """The legacy module evaluates `jax.devices()` at import: the same check must catch it."""
    run = diff.run_batch(None, [diff.legacy_path("import_time_defs")], check_import=True)
    assert run.programs["import_time_defs.py"].backends_initialized_on_import is True
