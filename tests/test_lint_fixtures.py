"""`fixtures/lint/<case>.py` checked against `<case>.expected` ("line:col CODE message" per finding).

Regenerate with `pytest tests/test_lint_fixtures.py --update-fixtures` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pmap_migrate.diagnostics import State
from pmap_migrate.engine import lint_bytes
from pmap_migrate.rules import all_rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lint"
CASES = sorted(FIXTURES.glob("*.py"))


def render(path: Path) -> str:
    result = lint_bytes(path.read_bytes(), path.name, all_rules())
    lines = []
    if result.error is not None:
        lines.append(f"{result.error.line}:{result.error.column} {result.error.code} {result.error.message}")
    for d in result.diagnostics:
        if d.state is State.ACTIVE:
            lines.append(f"{d.line}:{d.column} {d.code} {d.message}")
    return "\n".join(lines) + "\n"


def test_fixtures_exist():
    assert len(CASES) >= 1


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_fixture(case: Path, request):
    expected_file = case.with_suffix(".expected")
    actual = render(case)
    if request.config.getoption("--update-fixtures"):
        expected_file.write_text(actual)
    assert expected_file.exists(), f"missing {expected_file.name}; run with --update-fixtures"
    assert actual == expected_file.read_text()


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_triggers_admit_every_finding(case: Path):
    """A rule that reports on a fixture must also pass the text prefilter on it."""
    from pmap_migrate.prefilter import Gate
    from pmap_migrate.rules import rules_by_code

    data = case.read_bytes()
    result = lint_bytes(data, case.name, all_rules())
    codes = {d.code for d in result.diagnostics}
    assert [c for c in sorted(codes) if not Gate.of([rules_by_code()[c]]).needs_parse(data)] == []
