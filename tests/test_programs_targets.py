"""The differential corpus: legacy programs and their faithful rewrites (`fixtures/programs/`).

Every `<case>.py` is legacy `jax.pmap` code; run on jax 0.7.2 (the last release whose `jax.pmap` is
the legacy one) its output is the reference. `<case>.target.py` is the rewrite the codemod must emit
(the forms are specified in `fixtures/programs/README.md`); it must print the same on jax 0.7.2, on
the jax of the interpreter running pytest (CI: Python 3.11, jax 0.10.2) and on the newest jax
(jax 0.12, Python 3.12 venv), import without touching a device, and not retrace once warm.

Each environment runs the whole corpus in one interpreter (`tests/support/differential.py`); the
four batches run once per session, two at a time, and the tests below read their results.
"""

from __future__ import annotations

import ast
import concurrent.futures
import textwrap
import warnings

import pytest

from tests.support import differential as diff
from tests.support.jaxenv import LEGACY, NEWEST, EnvUnavailable, python_for, run_program

NAMES = diff.program_names()
# Label -> environment (None: this interpreter). Only jax 0.7.2 shares XLA with the reference run, so
# only there must the text match exactly; other releases may move a float32 ulp across a printed digit.
TARGET_ENVS = {"jax-0.7.2": LEGACY, "current": None, "newest": NEWEST}
EXACT = {"jax-0.7.2"}
# Names of legacy APIs that must not survive a rewrite (the idempotence requirement).
LEGACY_NAMES = {"pmap", "device_put_replicated", "device_put_sharded", "PmapSharding"}
PROJECT_PACKAGES = {"runtime_shim", "pmap_migrate", "codemod", "rules"}


class LastDigitDifference(UserWarning):
    pass


@pytest.fixture(scope="session")
def batches():
    """Run the legacy corpus and the target corpus per environment, concurrently, once per session."""
    jobs = {"legacy": (LEGACY, [diff.legacy_path(n) for n in NAMES], False)}
    for label, env in TARGET_ENVS.items():
        jobs[label] = (env, [diff.target_path(n) for n in NAMES], True)

    def run(env, scripts, check_import):
        try:
            return diff.run_batch(env, scripts, check_import=check_import, rerun=True)
        except EnvUnavailable as exc:
            return exc

    # Two workers for CI's 2 cores: each batch is ~6-7 s of CPU (measured; ~25 s for all four),
    # so more concurrent jax processes would only contend.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {label: pool.submit(run, *job) for label, job in jobs.items()}
        return {label: future.result() for label, future in futures.items()}


def batch(batches, label) -> diff.BatchRun:
    result = batches[label]
    if isinstance(result, EnvUnavailable):
        pytest.skip(f"{label}: {result}")
    return result


def test_corpus_is_complete():
    assert len(NAMES) >= 26
    for name in NAMES:
        assert diff.target_path(name).exists(), f"{name}.py has no {name}.target.py"
        for path in (diff.legacy_path(name), diff.target_path(name)):
            source = path.read_text()
            # The runner calls main() after importing the module, so both must be separable.
            assert "\ndef main():" in source and '\nif __name__ == "__main__":\n    main()' in source, path.name
    orphans = {p.name for p in diff.PROGRAMS.glob(f"*{diff.TARGET_SUFFIX}")} - {f"{n}.target.py" for n in NAMES}
    assert not orphans


def test_reference_runs_use_the_legacy_pmap(batches):
    legacy = batch(batches, "legacy")
    assert legacy.jax_version == "0.7.2" and legacy.legacy_pmap


@pytest.mark.parametrize("name", NAMES)
def test_legacy_program_runs(batches, name):
    run = batch(batches, "legacy").programs[f"{name}.py"]
    assert run.error is None, run.error
    assert run.stdout.strip(), "prints nothing to compare"


@pytest.mark.parametrize("label", TARGET_ENVS)
@pytest.mark.parametrize("name", NAMES)
def test_target_prints_what_legacy_printed(batches, label, name):
    reference = batch(batches, "legacy")
    runs = batch(batches, label)
    tolerated = diff.assert_same_output(
        reference.programs[f"{name}.py"], runs.programs[f"{name}.target.py"],
        f"legacy pmap, jax {reference.jax_version}", f"target, jax {runs.jax_version}", exact=label in EXACT)
    if tolerated:
        # A pass, but worth seeing in the summary: which printed digits moved between XLA releases.
        warnings.warn(LastDigitDifference(f"{name} on {label}:\n{tolerated}"))


@pytest.mark.parametrize("label", TARGET_ENVS)
@pytest.mark.parametrize("name", NAMES)
def test_target_import_queries_no_device(batches, label, name):
    # All targets are imported (module body only) before any main() runs, so each check starts clean
    # unless an earlier module already initialised the backends (reported as None, failing there first).
    run = batch(batches, label).programs[f"{name}.target.py"]
    assert run.backends_initialized_on_import is False, (
        "importing the module initialised jax backends" if run.backends_initialized_on_import
        else "an earlier target initialised the backends at import; see its failure")


@pytest.mark.parametrize("label", TARGET_ENVS)
@pytest.mark.parametrize("name", NAMES)
def test_target_does_not_retrace_when_warm(batches, label, name):
    legacy = batch(batches, "legacy").programs[f"{name}.py"]
    target = batch(batches, label).programs[f"{name}.target.py"]
    assert legacy.traces_on_rerun is not None and target.traces_on_rerun is not None
    if legacy.traces_on_rerun == 0:
        # Every pmap of the program was built once: a second main() must trace nothing.
        assert target.traces_on_rerun == 0
    else:
        # The program builds pmaps inside main() (lambdas, per-instance methods), which legacy
        # retraces too. A fresh jit traces once per kind of input sharding (host array, then
        # mesh-sharded output), as jax.pmap does on jax >= 0.8, so at most twice legacy's count.
        assert target.traces_on_rerun <= 2 * legacy.traces_on_rerun


@pytest.mark.parametrize("name", NAMES)
def test_target_is_plain_jax_with_nothing_pmap_like_left(name):
    tree = ast.parse(diff.target_path(name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            assert node.attr not in LEGACY_NAMES, f"line {node.lineno}: .{node.attr}"
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in PROJECT_PACKAGES, f"line {node.lineno}"
            assert not LEGACY_NAMES & {a.name for a in node.names}, f"line {node.lineno}"
        elif isinstance(node, ast.Import):
            assert not PROJECT_PACKAGES & {a.name.split(".")[0] for a in node.names}, f"line {node.lineno}"
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "shard_map":
            # pmap semantics for autodiff and out_axes=None need the unchecked form (JAX_FACTS.md).
            assert any(k.arg == "check_vma" and getattr(k.value, "value", None) is False for k in node.keywords), (
                f"line {node.lineno}: shard_map without check_vma=False")


def test_legacy_pmap_rejects_negative_axes():
    """Why the corpus has no negative in_axes/out_axes: legacy pmap raises, so no working program has one."""
    try:
        python = python_for(LEGACY)
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    script = textwrap.dedent("""
        import jax, numpy as np
        x = np.zeros((2, 8), np.float32)
        for options in ({"in_axes": -1}, {"out_axes": -1}):
            try:
                jax.pmap(lambda v: v + 1, **options)(x if "in_axes" in options else x.T)
                print(options, "accepted")
            except AssertionError:
                print(options, "AssertionError")
    """)
    proc = run_program(python, "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["{'in_axes': -1} AssertionError", "{'out_axes': -1} AssertionError"]
