from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of fixtures from the current behaviour (review the diff)",
    )


@pytest.fixture(scope="session")
def corpus_runs(tmp_path_factory):
    """Legacy corpora fixed with every rule and run on each jax, each corpus and batch once per
    session (``tests/support/fixed_corpus.py``)."""
    # imported here: it loads the rules, which only the tests that run programs need
    from tests.support.fixed_corpus import CorpusRuns

    return CorpusRuns(tmp_path_factory)


@pytest.fixture(scope="session", autouse=True)
def libcst_patched():
    """The tests analyse with libcst patched as the runner patches it (pmap_migrate.libcst_patches);
    tests/test_fastwalk.py and tests/test_parsing.py compare the patches with libcst's own code."""
    from pmap_migrate import libcst_patches

    return libcst_patches.install()


@pytest.fixture(scope="session")
def legacy_shim_checks():
    """What each program of ``tests/shim_programs`` printed under jax 0.7.2's own pmap, the reference
    of every run under the shim (``tests/support/shim_runs.py``), run once per session."""
    from tests.support import jaxenv, shim_runs

    try:
        return shim_runs.legacy_reference()
    except jaxenv.EnvUnavailable as e:
        pytest.skip(str(e))
