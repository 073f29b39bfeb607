"""A corpus of legacy programs fixed as `pmap-migrate fix --unsafe-fixes` would, and run.

The program tests (``tests/test_rewrite_programs.py``, ``tests/test_fix_programs_api.py``) judge a
fix by running programs: the legacy originals on jax 0.7.2 (the reference, labelled ``"legacy"``)
and the fixed copies on every environment of ``ENVS``. Each run is one batch, the whole corpus in
one interpreter (``differential.run_batch``). ``CorpusRuns`` is the session's store: the fixture
``corpus_runs`` (``tests/conftest.py``) hands the same one to every test module, so each corpus is
fixed once and each batch (environment, scripts, options) runs once per session, however many
modules ask for it.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from pmap_migrate.fixer import FixOutcome, fix_bytes
from pmap_migrate.rules import all_rules
from tests.support import differential as diff
from tests.support.jaxenv import LEGACY, NEWEST, EnvUnavailable, JaxEnv

REFERENCE = "legacy"  # the originals on jax 0.7.2
ENVS: dict[str, JaxEnv | None] = {"jax-0.7.2": LEGACY, "current": None, "newest": NEWEST}  # None: this interpreter
EXACT = {"jax-0.7.2"}  # same XLA as the reference: the text must match exactly

Runs = dict[str, diff.BatchRun | EnvUnavailable]


@dataclass(frozen=True)
class FixedCorpus:
    root: Path  # the fixed copies, under the originals' file names
    outcomes: dict[str, FixOutcome]  # by program name (the file name without `.py`)

    def path(self, name: str) -> Path:
        return self.root / f"{name}.py"


def fix_corpus(sources: Sequence[Path], root: Path) -> FixedCorpus:
    """Every source fixed with every rule and unsafe fixes, written to ``root`` (unchanged when
    nothing applies)."""
    outcomes = {}
    for source in sources:
        outcome = fix_bytes(source.read_bytes(), source.name, all_rules(), unsafe=True)
        assert outcome.error is None, f"{source.stem}: {outcome.error}"
        (root / source.name).write_bytes(outcome.fixed if outcome.fixed is not None else outcome.original)
        outcomes[source.stem] = outcome
    return FixedCorpus(root, outcomes)


class CorpusRuns:
    """Fixed corpora and batch runs, each made once per session."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._fixed: dict[tuple[Path, ...], FixedCorpus] = {}
        self._runs: dict[tuple, diff.BatchRun | EnvUnavailable] = {}

    def fixed(self, sources: Sequence[Path]) -> FixedCorpus:
        key = tuple(sources)
        if key not in self._fixed:
            self._fixed[key] = fix_corpus(sources, self._tmp.mktemp(f"fixed-{sources[0].parent.name}"))
        return self._fixed[key]

    def differential(self, sources: Sequence[Path], *, check_import: bool = False, rerun: bool = False,
                     timeout: float = 900, reference_env: JaxEnv = LEGACY) -> Runs:
        """The run of the legacy ``sources`` on jax 0.7.2 (``REFERENCE``, in ``reference_env``: a
        corpus needing more than jax, e.g. flax, passes a jax 0.7.2 environment that has it) and of
        their fixed copies on each of ``ENVS``, by label. ``check_import`` applies to the fixed
        copies, ``rerun`` to every run (see ``differential.run_batch``)."""
        fixed = self.fixed(sources)
        jobs = {REFERENCE: (reference_env, sources, False)}
        for label, env in ENVS.items():
            jobs[label] = (env, [fixed.path(s.stem) for s in sources], check_import)
        return self.batches(jobs, rerun=rerun, timeout=timeout)

    def batches(self, jobs: dict[str, tuple[JaxEnv | None, Sequence[Path], bool]], *, rerun: bool = False,
                timeout: float = 900) -> Runs:
        """Each job, (environment, scripts, check_import) by label, run as one batch, two at a time
        (2 cores: more jax processes would only contend); a batch this session already ran is not
        run again. An environment that cannot be built gives its EnvUnavailable."""
        keys = {label: (env, tuple(scripts), check, rerun) for label, (env, scripts, check) in jobs.items()}

        def run(env, scripts, check):
            try:
                return diff.run_batch(env, scripts, check_import=check, rerun=rerun, timeout=timeout)
            except EnvUnavailable as exc:
                return exc

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = {key: pool.submit(run, *key[:3]) for key in dict.fromkeys(keys.values())
                       if key not in self._runs}
            for key, future in futures.items():
                self._runs[key] = future.result()
        return {label: self._runs[key] for label, key in keys.items()}


def batch(runs: Runs, label: str) -> diff.BatchRun:
    """The run labelled ``label``; the test is skipped when its environment is unavailable."""
    result = runs[label]
    if isinstance(result, EnvUnavailable):
        pytest.skip(f"{label}: {result}")
    return result
