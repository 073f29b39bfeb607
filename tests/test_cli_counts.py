"""`check` ([*]), `fix --diff`, `report` and `fix` count the same findings as fixed, through the real
CLI (subprocesses), on trees where a fix takes away more than its own finding: an index into the
output of a pmap that its fix routes to `runtime_shim.pmap` (PM201, no fix of its own; code calling
the shim is migrated as far as `check` is concerned), in one file and across two modules (an alias
kept on the shim), and an index into the output of a pmap rewritten to plain JAX, which stays."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fixtures" / "counts" / "shimmed_outputs"

# `**options`: the pmap goes to the shim; the rows read in a comprehension have no fix of their own.
SHIMMED = '''import jax
import jax.numpy as jnp


def loss_fn(x):
    return jnp.mean(x ** 2)


def main(batches, options):
    step = jax.pmap(loss_fn, **options)
    for batch in batches:
        loss = step(batch)
        print([loss[i] for i in range(jax.local_device_count())])
'''
# The package's importer calling the alias with `*args` outside a multi-process program: the use is
# rewritten to plain JAX (the compact form, in place), whose output rows are still a gather: the
# finding stays, and `check` still sees it in the fixed file.
REWRITTEN = '''import jax
import jax.numpy as jnp

from pkg import constants


def mean_fn(x):
    return jax.lax.pmean(jnp.mean(x), constants.AXIS)


def evaluate(*args):
    out = constants.pmap(mean_fn)(*args)
    return [out[i] for i in range(jax.local_device_count())]
'''

# A multi-process program (PM501's global-mesh rewrite): `loss[0]` becomes this process's row read
# from its device (the rewrite's own edit: the finding is fixed with it); the other two reads go
# through `_host_local(...)` (an output fed back, a pmap kept at the boundary), still a stack whose
# rows are gathered: their findings stay, before and after the fix.
MULTI_PROCESS = '''import jax
import jax.numpy as jnp


def update(params, batch):
    loss = jnp.mean((batch - params) ** 2)
    return params - 0.1 * loss, loss


class Evaluator:
    def __init__(self):
        self.predict_fn = jax.pmap(lambda p, b: p * b, axis_name="data")

    def run(self, params, batch):
        out = self.predict_fn(params, batch)
        return jax.tree.map(lambda x: x[0], out)


def main(params, batches, log):
    step = jax.pmap(update, axis_name="batch")
    for batch in batches:
        params, loss = step(params, batch)
        log("loss", loss[0])
    host = jax.tree.map(lambda x: x[0], params)
    print(Evaluator().run(params, batches[0]), host)


if jax.process_index() == 0:
    print("first process")
'''


def run(*args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "pmap_migrate", *args], cwd=cwd, env=env, capture_output=True,
                          text=True)


def _found(text: str) -> int:
    found = re.search(r"Found (\d+) legacy patterns? in", text)
    return int(found[1]) if found else 0


def _trial(root: Path) -> dict:
    """check (JSON and text), report, fix --diff, fix and check again on ``root``: what each says,
    after checking that they agree with each other."""
    found = json.loads(run("check", "--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    safe = [d for d in found if d["fix"] and d["fix"]["applicability"] == "safe"]
    text = run("check", "--no-cache", ".", cwd=root).stdout
    assert _found(text) == len(found) and f"[*] {len(safe)} fixable with `pmap-migrate fix`." in text, text
    report = json.loads(run("report", "--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    assert (report["counts"]["legacy_patterns"], report["counts"]["fixable_safe"]) == (len(found), len(safe))
    diff = run("fix", "--no-cache", "--diff", ".", cwd=root)
    would = re.search(r"Would fix (\d+) of (\d+) legacy patterns?", diff.stderr)
    assert would and (int(would[1]), int(would[2])) == (len(safe), len(found)), diff.stderr
    fixed = run("fix", "--no-cache", ".", cwd=root)
    done = re.search(r"Fixed (\d+) of (\d+) legacy patterns?", fixed.stdout)
    assert done and (int(done[1]), int(done[2])) == (len(safe), len(found)), fixed.stdout
    after = run("check", "--no-cache", "--output-format", "json", ".", cwd=root)
    left = json.loads(after.stdout)
    assert len(left) == len(found) - len(safe) == _found(fixed.stdout)
    states = {(d["path"], d["line"], d["column"], d["code"]): d["state"] for d in report["sites"]}
    return {"found": found, "left": left, "states": states}


def test_one_file_an_index_into_a_shimmed_pmap_output_is_fixed_by_the_pmap_fix(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (tmp_path / "train.py").write_text(SHIMMED)
    trial = _trial(tmp_path)
    index = next(d for d in trial["found"] if d["code"] == "PM201")
    assert index["fix"]["applicability"] == "safe"
    assert "runtime_shim.pmap" in index["fix"]["summary"] and "options passed with * or **" in index["fix"]["summary"]
    assert trial["states"][("train.py", index["line"], index["column"], "PM201")] == "shimmed"
    assert [d["code"] for d in trial["found"]] == ["PM101", "PM201"] and trial["left"] == []
    assert "runtime_shim.pmap(loss_fn, **options)" in (tmp_path / "train.py").read_text()


def test_one_file_multi_process_the_host_local_inputs_of_a_shimmed_pmap_go_with_its_fix(tmp_path):
    """PM501 (host-local inputs) on a pmap its fix routes to the shim: the shim takes them as
    legacy pmap did; the finding carries that fix, as the index does."""
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (tmp_path / "train.py").write_text(SHIMMED + "\n\nif jax.process_index() == 0:\n    main([], {})\n")
    trial = _trial(tmp_path)
    assert [d["code"] for d in trial["found"]] == ["PM101", "PM501", "PM201"]
    host_local = next(d for d in trial["found"] if d["code"] == "PM501")
    assert host_local["fix"]["applicability"] == "safe" and "host-local" in host_local["fix"]["summary"]
    assert set(trial["states"].values()) == {"shimmed"} and trial["left"] == []


def test_package_an_index_into_a_rewritten_pmap_output_stays_and_check_sees_it(tmp_path):
    root = tmp_path / "rewritten"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("expected*"))
    (root / "pkg" / "train.py").write_text(REWRITTEN)
    trial = _trial(root)
    index = next(d for d in trial["found"] if d["code"] == "PM201")
    assert index["fix"] is None
    assert trial["states"][("pkg/train.py", index["line"], index["column"], "PM201")] == "manual"
    fixed = (root / "pkg" / "train.py").read_text()
    assert "out = jax.jit(_shard_mapped(mean_fn, constants.AXIS))(*args)\n" in fixed, fixed  # the compact form
    assert [(d["path"], d["code"]) for d in trial["left"]] == [("pkg/train.py", "PM201")]


def test_package_an_index_into_the_output_of_an_alias_kept_on_the_shim(tmp_path):
    root = tmp_path / "shimmed_outputs"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("expected*"))
    trial = _trial(root)
    assert sorted(d["code"] for d in trial["found"]) == ["PM101", "PM101", "PM201", "PM501"]
    index = next(d for d in trial["found"] if d["code"] == "PM201")
    assert index["path"] == "pkg/train.py" and index["fix"]["applicability"] == "safe"
    assert "called with *args" in index["fix"]["summary"]
    assert set(trial["states"].values()) == {"shimmed"} and trial["left"] == []
    assert "runtime_shim.pmap" in (root / "pkg" / "constants.py").read_text()
    assert "constants.pmap(mean_fn)(*batches)" in (root / "pkg" / "train.py").read_text()


def test_package_an_index_into_the_rows_a_multi_process_pmap_returns_stays_reported_after_its_fix(tmp_path):
    """The pmap's outputs are read whole (a list of rows built in a comprehension, returned): the
    multi-process rewrite writes it in the boundary form, which returns this process's rows as
    legacy pmap did; reading a row of them by a variable index is a gather across this process's
    devices on new jax, as for a single-process pmap's outputs: the index has no fix, `check`
    reports it before and after `fix` (also where the pmap is applied where it is made), and
    `check`, `fix --diff`, `report` and `fix` count it alike."""
    root = tmp_path / "host_local_rows"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("expected*"))
    train = root / "pkg" / "train.py"
    train.write_text(train.read_text().replace("def evaluate(*batches):", "def evaluate(batch):").replace(
        "out = constants.pmap(mean_fn)(*batches)", 'out = jax.pmap(mean_fn, axis_name="batch")(batch)'))
    trial = _trial(root)
    index = next(d for d in trial["found"] if d["code"] == "PM201")
    assert index["fix"] is None
    assert [d["code"] for d in trial["left"]] == ["PM201"]  # (one line lower: an import added)
    assert 'out = _global_pmap(mean_fn, "batch")(batch)\n' in train.read_text()


@pytest.mark.parametrize("unsafe", [False, True])
def test_the_index_takes_the_applicability_of_its_pmap_fix(tmp_path, unsafe):
    """Nothing changes for the index with --unsafe-fixes: `fix --unsafe-fixes --diff` counts it too."""
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (tmp_path / "train.py").write_text(SHIMMED)
    args = ["fix", "--no-cache", "--diff", *(["--unsafe-fixes"] if unsafe else []), "."]
    assert "Would fix 2 of 2 legacy patterns in 1 file." in run(*args, cwd=tmp_path).stderr


def test_multi_process_reads_the_global_rewrite_takes_rows_from_are_fixed_with_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (tmp_path / "train.py").write_text(MULTI_PROCESS)
    trial = _trial(tmp_path)
    index = next(d for d in trial["found"] if d["code"] == "PM201")
    assert index["fix"]["applicability"] == "safe" and "multi-process rewrite" in index["fix"]["summary"]
    fixed = (tmp_path / "train.py").read_text()
    assert 'log("loss", loss.addressable_shards[0].data.squeeze(0))' in fixed
    # The pmaps return host-local rows (`params` is read whole): a row read of an output bound once
    # is fixed with them; `params`, also the function's parameter, is reported before (no fix) and after.
    assert [d["fix"] is None for d in trial["found"] if d["code"] == "PM202"] == [False, True]
    assert "return jax.tree.map(lambda x: x.addressable_shards[0].data.squeeze(0), out)" in fixed
    assert [d["code"] for d in trial["left"]] == ["PM202"]
    left = {fixed.splitlines()[d["line"] - 1].strip() for d in trial["left"]}
    assert left == {"host = jax.tree.map(lambda x: x[0], params)"}


def test_project_counts_agree_and_reads_of_imported_rewritten_pmaps_stay_reported(tmp_path):
    """fixtures/projects/shared_alias: an alias still used in its own module is fixable once its
    uses are (`fix` removes it in its next round); the nesting of a pmap of another module in one
    that goes to the shim goes with it; and after the fix, reads of the outputs of an imported
    pmapped function, now its faithful rewrite in the other module, are still gathers, and still
    reported there (the project index knows the rewritten form)."""
    root = tmp_path / "shared_alias"
    shutil.copytree(ROOT / "fixtures" / "projects" / "shared_alias", root,
                    ignore=shutil.ignore_patterns("expected*"))
    trial = _trial(root)
    alias = next(d for d in trial["found"] if d["code"] == "PM101" and d["path"] == "pkg/constants.py"
                 and d["line"] == 8)
    assert alias["fix"]["applicability"] == "safe" and "once its uses are rewritten" in alias["fix"]["summary"]
    assert "p_stats = jax.jit(" in (root / "pkg" / "constants.py").read_text() or \
        "@functools.partial(_shard_mapped" in (root / "pkg" / "constants.py").read_text()
    left = sorted((d["path"], d["code"]) for d in trial["left"])
    assert ("pkg/sub/loop.py", "PM202") in left and ("pkg/sub/loop.py", "PM201") in left, left
