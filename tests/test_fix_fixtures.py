"""`fixtures/fix/<case>.py` fixed with every rule (unsafe fixes included) must equal `<case>.fixed.py`,
and fixing `<case>.fixed.py` again must change nothing (idempotence).

Regenerate with `pytest tests/test_fix_fixtures.py --update-fixtures` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fix"
FIXED_SUFFIX = ".fixed.py"
CASES = sorted(p for p in FIXTURES.glob("*.py") if not p.name.endswith(FIXED_SUFFIX))


def fixed_path(case: Path) -> Path:
    return case.with_name(case.stem + FIXED_SUFFIX)


def fix(data: bytes, name: str):
    outcome = fix_bytes(data, name, all_rules(), unsafe=True)
    assert outcome.error is None, outcome.error
    return outcome


def test_fixtures_exist():
    assert CASES


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_fixture_is_fixed_as_expected(case: Path, request):
    outcome = fix(case.read_bytes(), str(case))  # its path: the line length of the repository's configuration
    actual = outcome.fixed if outcome.fixed is not None else case.read_bytes()
    expected_file = fixed_path(case)
    if request.config.getoption("--update-fixtures"):
        expected_file.write_bytes(actual)
    assert expected_file.exists(), f"missing {expected_file.name}; run with --update-fixtures"
    assert actual.decode() == expected_file.read_text()


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_fixed_fixture_is_a_fixpoint(case: Path):
    expected_file = fixed_path(case)
    if not expected_file.exists():
        pytest.skip(f"missing {expected_file.name}")
    again = fix(expected_file.read_bytes(), str(expected_file))
    assert again.fixed is None and again.applied == [], (
        f"fixing {expected_file.name} again changed it:\n{(again.fixed or b'').decode()}")
