"""Helpers of the tests of fixture projects (fixtures/projects/): the CLI run from a project's top,
the findings `check` reports there, and what a runnable package prints under a jax environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main


def run_cli(root: Path, *args: str):
    """``pmap-migrate ARGS`` run in-process from the directory ``root``."""
    previous = os.getcwd()
    os.chdir(root)
    try:
        return CliRunner().invoke(main, [*args], catch_exceptions=False)
    finally:
        os.chdir(previous)


def findings(root: Path, *args: str) -> list[str]:
    """``path:line:col: CODE`` of each finding of `check ARGS` (default: `--no-cache .`), sorted."""
    result = run_cli(root, "check", "--output-format", "concise", *(args or ("--no-cache", ".")))
    return sorted(line.split(" ")[0] + " " + line.split(" ")[1] for line in result.output.splitlines()
                  if " PM" in line)


def package_stdout(env, root: Path, script: str = "run.py", *, repo_on_path: bool = True) -> str:
    """What ``root/script`` prints under the jax environment ``env`` (skipped where it cannot be
    built), run from ``root``. ``repo_on_path=False``: only ``root`` is on the path (this
    repository's `runtime_shim` is not importable)."""
    from tests.support import jaxenv

    try:
        python = jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as why:
        pytest.skip(str(why))
    extra = None if repo_on_path else {"PYTHONPATH": str(root)}
    proc = jaxenv.run_program(python, root / script, cwd=root, repo_on_path=repo_on_path, extra_env=extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def json_records(stdout: str) -> list[dict]:
    """The JSON records (``{"check": ...}``) a multi-process program printed, one per line. gloo
    prints its connection messages to the same stdout from C++, unsynchronised with Python's lines:
    one, or a part of one, may share a line with a record."""
    decoder = json.JSONDecoder()
    records = []
    for line in stdout.splitlines():
        start = line.find('{"check"')
        while start != -1:
            record, end = decoder.raw_decode(line, start)
            records.append(record)
            start = line.find('{"check"', end)
    return records
