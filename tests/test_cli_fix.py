"""`pmap-migrate fix`: in place, --diff, --show-fixes, --unsafe-fixes, exit codes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main

LEGACY = '''import functools

import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i")
def total(x):
    return lax.psum(x, "i")
'''

UNSAFE = '''import jax

spread = jax.pmap(lambda x: x * 2, devices=jax.devices()[:4])
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def fix(*args):
    return CliRunner().invoke(main, ["fix", "--no-cache", *args], catch_exceptions=False)


def test_fix_rewrites_in_place_and_is_then_clean(project):
    path = project / "train.py"
    path.write_text(LEGACY)
    result = fix("train.py", "--show-fixes")
    assert result.exit_code == 0, result.output
    assert "Fixed 1 of 1 legacy pattern in 1 file." in result.output
    # --show-fixes: each fix applied, with its summary
    assert "Applied fixes:\n  train.py:7:1: PM101 rewrite `total` as `jax.jit(jax.shard_map(...))` (same values as legacy pmap)\n" \
        in result.output
    text = path.read_text()
    assert "@functools.partial(_shard_mapped, axis_name=\"i\")" in text and "jax.shard_map(" in text
    assert "jax.pmap" not in text
    assert text.count("import functools") == 1  # the module's own, which the rewrite uses too
    assert "from jax.sharding import Mesh" in text
    compile(text, "train.py", "exec")
    again = fix("train.py")
    assert again.exit_code == 0 and path.read_text() == text


def test_diff_writes_nothing_and_exits_1(project):
    path = project / "train.py"
    path.write_text(LEGACY)
    result = fix("train.py", "--diff")
    assert result.exit_code == 1
    assert "--- a/train.py" in result.output and "+++ b/train.py" in result.output
    assert '+@functools.partial(_shard_mapped, axis_name="i")' in result.output
    assert path.read_text() == LEGACY
    path.write_text("import jax\n")
    assert fix("train.py", "--diff").exit_code == 0


def test_unsafe_fixes_need_the_flag(project):
    path = project / "spread.py"
    path.write_text(UNSAFE)
    safe_only = fix("spread.py")
    assert safe_only.exit_code == 1 and path.read_text() == UNSAFE
    assert "PM101" in safe_only.output
    unsafe = fix("spread.py", "--unsafe-fixes")
    assert unsafe.exit_code == 0, unsafe.output
    assert "Mesh(jax.devices()[:4]" in path.read_text()


def test_a_file_that_does_not_parse_is_left_untouched(project):
    broken = project / "broken.py"
    original = b"import jax\nstep = jax.pmap(f\n"
    broken.write_bytes(original)
    result = fix("broken.py")
    assert result.exit_code == 1 and "PM000" in result.output
    assert broken.read_bytes() == original


def test_select_limits_what_is_fixed(project):
    path = project / "train.py"
    path.write_text(LEGACY)
    result = fix("train.py", "--select", "PM4")
    assert result.exit_code == 0 and path.read_text() == LEGACY


def test_per_file_ignores_also_hold_for_fix(project):
    (project / "pyproject.toml").write_text('[tool.pmap-migrate.per-file-ignores]\n"legacy_*.py" = ["PM101"]\n')
    kept, fixed = project / "legacy_keep.py", project / "train.py"
    kept.write_text(LEGACY)
    fixed.write_text(LEGACY)
    result = fix(".")
    assert result.exit_code == 0, result.output
    assert kept.read_text() == LEGACY and "jax.shard_map" in fixed.read_text()


def test_a_rewritten_module_is_not_taken_for_a_multi_process_one(project):
    """The generated multi-process guard must not make PM501 (or the rewriter) see a
    multi-process program: a pmap left for a later round is still rewritten to plain JAX."""
    path = project / "two.py"
    path.write_text(LEGACY + '\n\nother = jax.pmap(lambda x: x + 1, axis_name="j")\n')
    assert fix("two.py").exit_code == 0
    text = path.read_text()
    assert "runtime_shim" not in text.replace("use runtime_shim.pmap", "")
    assert CliRunner().invoke(main, ["check", "--no-cache", "two.py"]).exit_code == 0


def test_a_gather_left_by_the_safe_fix_is_still_reported(project):
    """The example's `jax.tree.map(lambda p: p[0], params)` reads rows of the rewritten pmap's output:
    after the safe fix it is still a cross-device gather per leaf, and `check` still says so."""
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "fixtures" / "example" / "train.py"
    (project / "train.py").write_text(source.read_text())
    assert fix("train.py").exit_code == 1  # the unsafe fixes are left
    check = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "concise", "train.py"])
    assert check.exit_code == 1
    assert "PM202" in check.output and "_shard_mapped" in (project / "train.py").read_text()
    # ... with its own fix: the stack comes from the rewritten replicate (`_replicate`) and the
    # rewritten pmap, both one row per device; `--unsafe-fixes` then reads each row from its shard
    assert "PM202" in check.output and "[unsafe fix]" in check.output, check.output
    assert fix("--unsafe-fixes", "train.py").exit_code == 0
    fixed = (project / "train.py").read_text()
    assert "jax.tree.map(lambda p: p.addressable_shards[0].data.squeeze(0), params)" in fixed
