"""The idiomatic rewrite (`fix --unsafe-fixes --idiomatic`), judged by running programs and by
what it recognises.

Programs: `fixtures/programs/training_loop.py` and the classic loops in
`fixtures/programs_idiomatic/`, rewritten idiomatically, must print the losses they printed under
the legacy pmap (jax 0.7.2) on jax 0.10.2 and the newest jax (and on 0.7.2 itself: the same file
runs there). The idiomatic form drops the stacked device axis, so a stacked value printed whole
shows one copy instead of one per device; losses are compared as numbers with replicated copies
collapsed, and the programs written for this test (which print only through `[0]` reads) must
print exactly the same text up to float32 last-digit noise. The expected rewritten sources are
`fixtures/programs_idiomatic/<case>.idiomatic.py` (regenerate with `--update-fixtures`, review
the diff).
"""

from __future__ import annotations

import concurrent.futures
import re
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from libcst.metadata import MetadataWrapper

from pmap_migrate.cli import main as cli
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.base import RuleContext
from pmap_migrate.rules.fixes.choices import RuleOptions
from tests.support import differential as diff
from tests.support.jaxenv import LEGACY, NEW_311, NEWEST, EnvUnavailable

ROOT = Path(__file__).resolve().parents[1]
IDIOMATIC = ROOT / "fixtures" / "programs_idiomatic"
SUFFIX = ".idiomatic.py"
CASES = {p.stem: p for p in sorted(IDIOMATIC.glob("*.py")) if not p.name.endswith(SUFFIX)}
CASES["training_loop"] = ROOT / "fixtures" / "programs" / "training_loop.py"
NAMES = sorted(CASES)
ENVS = {"jax-0.7.2": LEGACY, "jax-0.10.2": NEW_311, "newest": NEWEST}
IDIOMATIC_OPTIONS = RuleOptions(idiomatic=True)
MIN_STEPS = 5


def idiomatic_fix(data: bytes, name: str, *, unsafe: bool = True, options=IDIOMATIC_OPTIONS):
    outcome = fix_bytes(data, name, all_rules(), unsafe=unsafe, options=options)
    assert outcome.error is None, outcome.error
    return outcome


def expected_path(name: str) -> Path:
    return IDIOMATIC / f"{name}{SUFFIX}"


@pytest.fixture(scope="session")
def rewritten(tmp_path_factory):
    root = tmp_path_factory.mktemp("idiomatic")
    outcomes = {}
    for name in NAMES:
        outcome = idiomatic_fix(CASES[name].read_bytes(), f"{name}.py")
        (root / f"{name}.py").write_bytes(outcome.fixed if outcome.fixed is not None else CASES[name].read_bytes())
        outcomes[name] = outcome
    return root, outcomes


@pytest.fixture(scope="session")
def runs(rewritten):
    root, _ = rewritten
    jobs = {"legacy": (LEGACY, [CASES[n] for n in NAMES], False)}
    for label, env in ENVS.items():
        jobs[label] = (env, [root / f"{n}.py" for n in NAMES], True)

    def run(env, scripts, check):
        try:
            return diff.run_batch(env, scripts, check_import=check, rerun=check)
        except EnvUnavailable as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {label: pool.submit(run, *job) for label, job in jobs.items()}
        return {label: future.result() for label, future in futures.items()}


def _program(runs, label: str, name: str) -> diff.ProgramRun:
    result = runs[label]
    if isinstance(result, EnvUnavailable):
        pytest.skip(f"{label}: {result}")
    return result.programs[f"{name}.py"]


_LOSS = re.compile(r"\bloss\s+(\[[^\]]*\]|\S+)")


def losses(stdout: str) -> list[str]:
    """The printed loss of each step; a stacked loss (one copy per device) must be the same copy
    everywhere and counts once."""
    found = []
    for line in stdout.splitlines():
        match = _LOSS.search(line)
        if match is None:
            continue
        numbers = match.group(1).strip("[]").split()
        assert numbers and all(diff._same_number(n, numbers[0]) for n in numbers), f"per-device losses differ: {line}"
        found.append(numbers[0])
    return found


# ------------------------------------------------------------------------------------ the rewrite

def test_cases_exist():
    assert len(NAMES) >= 3


@pytest.mark.parametrize("name", NAMES)
def test_the_whole_loop_is_rewritten_idiomatically(rewritten, name):
    root, outcomes = rewritten
    outcome = outcomes[name]
    pm101 = [d for d in outcome.applied if d.code == "PM101"]
    assert pm101 and all(d.fix.summary.startswith("idiomatic rewrite") for d in pm101), \
        [d.fix.summary for d in pm101]
    assert outcome.remaining == []
    text = (root / f"{name}.py").read_text()
    text = text.split('"""', 2)[2] if text.startswith('"""') else text  # the code, not the docstring
    for legacy in ("jax.pmap", "device_put_replicated", "[0]", "per_device", "squeeze(0)", "addressable_shards"):
        assert legacy not in text, f"{legacy!r} left in the idiomatic form"
    assert text.count("Mesh(") == 1, "one mesh"
    assert "jax.shard_map(" in text and "NamedSharding(" in text


@pytest.mark.parametrize("name", NAMES)
def test_the_rewrite_is_as_checked_in(rewritten, name, request):
    root, _ = rewritten
    actual = (root / f"{name}.py").read_text()
    expected = expected_path(name)
    if request.config.getoption("--update-fixtures"):
        expected.write_text(actual)
    assert expected.exists(), f"missing {expected.name}; run with --update-fixtures"
    assert actual == expected.read_text(), f"{name}: the rewrite changed; review and run with --update-fixtures"


@pytest.mark.parametrize("name", NAMES)
def test_fixing_again_changes_nothing(rewritten, name):
    root, _ = rewritten
    again = idiomatic_fix((root / f"{name}.py").read_bytes(), f"{name}.py")
    assert again.fixed is None and again.applied == []


# ----------------------------------------------------------------------------------- the numbers

@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_prints_the_legacy_losses(runs, name, env_label):
    legacy = _program(runs, "legacy", name)
    actual = _program(runs, env_label, name)
    for run, label in ((legacy, "legacy pmap, jax 0.7.2"), (actual, f"idiomatic, {env_label}")):
        assert run.error is None, f"{name} raised under {label}:\n{run.error}"
    expected, found = losses(legacy.stdout), losses(actual.stdout)
    assert len(expected) >= MIN_STEPS
    assert len(found) == len(expected), f"{len(found)} losses printed, legacy printed {len(expected)}"
    different = [(i, e, f) for i, (e, f) in enumerate(zip(expected, found)) if not diff._same_number(e, f)]
    assert different == [], f"(step, legacy, idiomatic): {different}"
    if name in CASES and CASES[name].parent == IDIOMATIC:  # written to print through `[0]` only
        diff.assert_same_output(legacy, actual, "legacy pmap, jax 0.7.2", f"idiomatic, {env_label}", exact=False)


@pytest.mark.parametrize("env_label", list(ENVS))
@pytest.mark.parametrize("name", NAMES)
def test_importing_the_rewrite_queries_no_device(runs, name, env_label):
    run = _program(runs, env_label, name)
    assert run.backends_initialized_on_import is False


# ---------------------------------------------------------------------------------- recognition

def _why_not(source: str) -> str | None:
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    return RuleContext("example.py", SemanticModel(wrapper), options=IDIOMATIC_OPTIONS).fixes.idiomatic.reason


FLAX_LOOP = '''
import jax
from jax import lax
from flax.jax_utils import replicate, unreplicate
from flax.training.common_utils import shard


def train_step(state, batch):
    grads = jax.grad(loss_fn)(state, batch)
    grads = lax.pmean(grads, "batch")
    return update(state, grads), lax.pmean(metrics_of(state, batch), "batch")


def train(state, batches):
    p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))
    state = replicate(state)
    for batch in batches:
        state, metrics = p_train_step(state, shard(batch))
        metrics = unreplicate(metrics)
        print(metrics["loss"])
    return unreplicate(state)
'''

FLAX_EXPECTED = '''
import functools

import jax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def train_step(state, batch):
    grads = jax.grad(loss_fn)(state, batch)
    grads = lax.pmean(grads, "batch")
    return update(state, grads), lax.pmean(metrics_of(state, batch), "batch")


@functools.cache
def batch_mesh():  # the program's one mesh, built on first use: importing the module queries no device
    return Mesh(jax.local_devices(), ("batch",))


def train(state, batches):
    @functools.partial(jax.jit, donate_argnums=(0,))
    def p_train_step(state, batch):
        # check_vma=False keeps legacy autodiff: with True, grads of the P() values would arrive
        # already summed over "batch", and the body's pmean would scale them by the device count.
        return jax.shard_map(train_step, mesh=batch_mesh(), in_specs=(P(), P("batch")),
                             out_specs=(P(), P()), check_vma=False)(state, batch)
    state = jax.device_put(state, NamedSharding(batch_mesh(), P()))
    for batch in batches:
        state, metrics = p_train_step(state, jax.device_put(batch, NamedSharding(batch_mesh(), P("batch"))))
        print(metrics["loss"])
    return state
'''


def test_the_flax_helpers_are_recognised_and_their_imports_dropped():
    assert _why_not(FLAX_LOOP) is None
    outcome = idiomatic_fix(FLAX_LOOP.encode(), "example.py")
    assert outcome.fixed.decode() == FLAX_EXPECTED


# Each variation of the training loop below breaks one piece of the pattern: PM101 must then
# offer the faithful rewrite, never a guess.
CLASSIC = '''
import functools
import jax
import numpy as np
from jax import lax


@functools.partial(jax.pmap, axis_name="batch")
def step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    grads = lax.pmean(grads, "batch")
    return update(params, grads), lax.pmean(loss, "batch")


def main(params, data):
    n = jax.local_device_count()
    params = jax.device_put_replicated(params, jax.local_devices())
    for batch in data:
        x = batch.reshape(n, -1, *batch.shape[1:])
        params, loss = step(params, x)
        print(loss[0])
'''

FALLBACKS = {
    "params passed to another function": ("        print(loss[0])\n", "        print(loss[0])\n        save(params)\n",
                                          "`save(params)` reads the device axis of `params`"),
    "a per-device output read whole": ("print(loss[0])", "history.append(loss)", "reads the device axis of `loss`"),
    "a row other than 0": ("print(loss[0])", "print(loss[1])", "reads the device axis of `loss`"),
    "the batch read after the reshape": ("        params, loss = step(params, x)\n",
                                         "        params, loss = step(params, x)\n        log(x)\n",
                                         "per-device batch `x` is read by something other than a step"),
    "no reduction over the axis": ('grads = lax.pmean(grads, "batch")', "grads = grads", "no pmapped training step"),
    "a reduction over another axis": ('grads = lax.pmean(grads, "batch")', 'grads = lax.pmean(grads, "other")',
                                      "no pmapped training step"),
    "in_axes=None": ('axis_name="batch")', 'axis_name="batch", in_axes=(None, 0))', "no pmapped training step"),
    "static arguments": ('axis_name="batch")', 'axis_name="batch", static_broadcasted_argnums=(1,))',
                         "no pmapped training step"),
    "params replicated on some devices": ("jax.device_put_replicated(params, jax.local_devices())",
                                          "jax.device_put_replicated(params, jax.local_devices()[:4])",
                                          "fed back to a step but not replicated"),
    "the step passed around": ("        print(loss[0])\n", "        print(loss[0])\n    return step\n",
                               "no pmapped training step"),
    "a keyword argument": ("= step(params, x)", "= step(params, x=x)", "one positional argument per parameter"),
    "different device counts": ("batch.reshape(n,", "batch.reshape(4,", "different device counts"),
    "params rebound in the loop": ("        print(loss[0])\n",
                                   "        print(loss[0])\n        params = clip(params)\n",
                                   "rebound after its replication"),
    "an unpacked output": ("params, loss = step(params, x)", "out = step(params, x)", "not unpacked into one name"),
    "a per-device output printed whole": ([('lax.pmean(loss, "batch")', "loss"), ("print(loss[0])", "print(loss)")],
                                          "`print(loss)` reads the device axis"),
    "no training step": ([("loss, grads = jax.value_and_grad(loss_fn)(params, x)", "loss = loss_fn(params, x)"),
                          ("grads = lax.pmean(grads, \"batch\")", "grads = 0"),
                          ("params, loss = step(params, x)", "loss = step(params, x)"),
                          ("return update(params, grads), lax.pmean(loss, \"batch\")",
                           "return lax.pmean(loss, \"batch\")")],
                         "no pmapped training step"),
    "a multi-process program": ("def main(params, data):\n",
                                "def main(params, data):\n    jax.distributed.initialize()\n",
                                "several processes"),
}


def test_the_classic_loop_is_recognised():
    assert _why_not(CLASSIC) is None
    # exact variations: `[0]` of an unreduced output is device 0's value, which `out_specs=P()`
    # with check_vma=False returns; a batch created with its device axis is merged before the step
    assert _why_not(CLASSIC.replace('lax.pmean(loss, "batch")', "loss")) is None
    assert _why_not(CLASSIC.replace("x = batch.reshape(n, -1, *batch.shape[1:])", "x = batch")) is None


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_anything_that_does_not_fit_falls_back_to_the_faithful_rewrite(case):
    *change, reason = FALLBACKS[case]
    source = CLASSIC
    for old, new in change[0] if len(change) == 1 else [change]:
        assert old in source
        source = source.replace(old, new)
    found = _why_not(source)
    assert found is not None and reason in found, found
    outcome = idiomatic_fix(source.encode(), "example.py")
    pm101 = [d for d in outcome.applied if d.code == "PM101"]
    assert pm101 and not any(d.fix.summary.startswith("idiomatic") for d in pm101)


PRINTS = {  # a print of a replicated value: shown once instead of once per device, or refused
    "print(loss)": True, 'print(f"loss {loss:.3f}")': True, "print(np.asarray(loss).round(3))": True,
    "print(float(loss))": True, "print(params['w'].shape, params['w'].dtype)": True,
    "print(np.asarray(params['w']).round(2).ravel())": True,
    "print(params['w'][0])": False, "print(params['w'].sum())": False, "print(np.asarray(loss).sum())": False,
    "print(loss + 1)": False,
}


@pytest.mark.parametrize("statement", list(PRINTS))
def test_printing_a_replicated_value_is_accepted_only_when_it_shows_the_same_numbers(statement):
    found = _why_not(CLASSIC.replace("print(loss[0])", f"print(loss[0])\n        {statement}"))
    assert (found is None) == PRINTS[statement], found


def test_without_the_option_the_rewrite_is_faithful():
    outcome = fix_bytes(CLASSIC.encode(), "example.py", all_rules(), unsafe=True)
    assert "per_device" in outcome.fixed.decode()


def test_without_unsafe_fixes_the_option_gives_the_faithful_rewrite():
    outcome = idiomatic_fix(CLASSIC.encode(), "example.py", unsafe=False)
    assert "per_device" in outcome.fixed.decode()


# ------------------------------------------------------------------------------------------ CLI

@pytest.fixture()
def project(tmp_path):
    (tmp_path / "train.py").write_text(CLASSIC)
    return tmp_path


def _pm101_summary(runner, project, *args):
    result = runner.invoke(cli, ["check", "--no-cache", "--output-format", "json", *args, str(project / "train.py")])
    import json

    found = [d for d in json.loads(result.output) if d["code"] == "PM101"]
    assert len(found) == 1, result.output
    return found[0]["fix"]


def test_check_shows_which_fixes_would_be_idiomatic(project, monkeypatch):
    monkeypatch.chdir(project)
    runner = CliRunner()
    assert _pm101_summary(runner, project)["applicability"] == "safe"
    fix = _pm101_summary(runner, project, "--idiomatic")
    assert fix["applicability"] == "unsafe" and fix["summary"].startswith("idiomatic rewrite of `step`")
    text = runner.invoke(cli, ["check", "--no-cache", "--idiomatic", "train.py"]).output
    assert "idiomatic fix: the whole data-parallel loop" in text


def test_the_config_switch_and_the_flag_that_overrides_it(project, monkeypatch):
    monkeypatch.chdir(project)
    (project / "pyproject.toml").write_text("[tool.pmap-migrate]\nidiomatic = true\n")
    runner = CliRunner()
    assert _pm101_summary(runner, project)["summary"].startswith("idiomatic")
    assert not _pm101_summary(runner, project, "--no-idiomatic")["summary"].startswith("idiomatic")
    # the result cache must not hand a faithful answer to an idiomatic run (or back)
    result = runner.invoke(cli, ["check", "--output-format", "json", "--no-idiomatic", "train.py"])
    assert '"summary": "idiomatic' not in result.output
    result = runner.invoke(cli, ["check", "--output-format", "json", "train.py"])
    assert '"summary": "idiomatic' in result.output


def test_fix_applies_it_with_unsafe_fixes_only(project, monkeypatch):
    monkeypatch.chdir(project)
    runner = CliRunner()
    result = runner.invoke(cli, ["fix", "--idiomatic", "train.py"])
    assert "need --unsafe-fixes" in result.output
    assert "per_device" in (project / "train.py").read_text()
    (project / "train.py").write_text(CLASSIC)
    result = runner.invoke(cli, ["fix", "--unsafe-fixes", "--idiomatic", "train.py"])
    assert result.exit_code == 0, result.output
    text = (project / "train.py").read_text()
    assert "jax.shard_map(_step, mesh=batch_mesh()" in text and "print(loss)" in text


def test_the_checked_in_expectations_have_no_strays():
    stray = [p.name for p in IDIOMATIC.glob(f"*{SUFFIX}") if p.name.removesuffix(SUFFIX) not in CASES]
    assert stray == []

