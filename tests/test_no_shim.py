"""`--no-shim` / `shim = false`: fix only what plain JAX can do; a site whose only fix is the
shim keeps its legacy code and its finding says why (for projects that will not install
pmap-migrate-shim)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main

SOURCE = '''import jax
import numpy as np


def apply(transform, f):
    return transform(f)


g = apply(jax.pmap, lambda x: x * 2)
h = jax.pmap(lambda x: x + 1, axis_name="i")
print(g(np.ones((2, 3))), h(np.ones((2, 3))))
'''

# A multi-process program: `devices=` keeps the pmap on the shim (PM101), with PM501's fix riding on
# it, and the stack for it goes to the shim's drop-in (PM301).
MULTI_PROCESS = '''import jax
import numpy as np

jax.distributed.initialize()
step = jax.pmap(lambda x, w: x * w, axis_name="i", backend="cpu")
w = jax.device_put_replicated(np.float32(2.0), jax.local_devices())
print(step(np.ones((jax.local_device_count(), 3)), w))
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def run(*args):
    return CliRunner().invoke(main, [*args], catch_exceptions=False)


def findings(*args) -> list[dict]:
    result = run("check", "--no-cache", "--output-format", "json", *args)
    return json.loads(result.stdout)


def test_no_shim_rewrites_the_plain_sites_and_leaves_the_others_with_the_reason(project):
    (project / "m.py").write_text(SOURCE)
    result = run("fix", "--no-cache", "--unsafe-fixes", "--no-shim", ".")
    assert result.exit_code == 1, result.output  # a finding is left
    text = (project / "m.py").read_text()
    assert "runtime_shim" not in text
    assert "g = apply(jax.pmap, lambda x: x * 2)\n" in text and "jax.jit(_shard_mapped(lambda x: x + 1" in text
    left = findings("--no-shim", ".")
    assert [d["code"] for d in left] == ["PM103"] and left[0]["fix"] is None
    assert "not fixed (the shim fallback is off): `jax.pmap` passed as a value" in left[0]["message"]
    # the default still offers the shim for it
    assert "runtime_shim.pmap" in findings(".")[0]["fix"]["summary"]


def test_the_config_turns_the_shim_off_and_the_flag_turns_it_back_on(project):
    (project / "pyproject.toml").write_text("[tool.pmap-migrate]\nshim = false\n")
    (project / "m.py").write_text(SOURCE)
    assert findings(".")[0]["fix"] is None
    assert findings("--shim", ".")[0]["fix"]["summary"].startswith("pass `runtime_shim.pmap`")
    assert run("fix", "--no-cache", "--unsafe-fixes", ".").exit_code == 1
    assert "runtime_shim" not in (project / "m.py").read_text()
    assert run("fix", "--no-cache", "--unsafe-fixes", "--shim", ".").exit_code == 0
    assert "runtime_shim.pmap" in (project / "m.py").read_text()


def test_a_shim_value_in_the_config_must_be_a_boolean(project):
    (project / "pyproject.toml").write_text('[tool.pmap-migrate]\nshim = "no"\n')
    result = run("check", "--no-cache", ".")
    assert result.exit_code == 2 and "shim" in result.output and len(result.output.strip().splitlines()) == 1


def test_no_fix_rides_on_a_shim_that_is_not_written_and_no_finding_is_lost(project):
    (project / "prog.py").write_text(MULTI_PROCESS)
    before = sorted(d["code"] for d in findings("--no-shim", "."))
    assert {"PM101", "PM301", "PM501"} <= set(before), before
    assert all(d["fix"] is None for d in findings("--no-shim", ".") if d["code"] in ("PM101", "PM301", "PM501"))
    run("fix", "--no-cache", "--unsafe-fixes", "--no-shim", ".")
    text = (project / "prog.py").read_text()
    assert "runtime_shim" not in text and "jax.pmap(" in text and "jax.device_put_replicated(" in text
    assert sorted(d["code"] for d in findings("--no-shim", ".")) == before


def test_report_lists_the_sites_the_shim_would_take_as_manual(project):
    (project / "m.py").write_text(SOURCE)
    (project / "report.json").unlink(missing_ok=True)
    run("report", "--no-cache", "--no-shim", "--output-format", "json", "-o", "report.json", ".")
    ledger = json.loads((project / "report.json").read_text())
    states = {site["code"]: site["state"] for site in ledger["sites"]}
    assert states == {"PM103": "manual", "PM101": "fixable-safe"}, states
    assert states != {site["code"]: site["state"] for site in json.loads(run("report", "--no-cache", "--output-format", "json", ".").stdout)["sites"]}
