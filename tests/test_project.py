"""The project's own promises: README quickstart matches CI, the rule table is current."""

from __future__ import annotations

import re
from pathlib import Path

from pmap_migrate.docs import refreshed

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_command = next(b for b in blocks if "pytest" in b)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_rule_table_is_generated_from_the_rules():
    readme = (ROOT / "README.md").read_text()
    assert refreshed(readme) == readme, "run `python -m pmap_migrate.docs` to refresh the README rule table"


def test_quickstart_example_exists():
    assert (ROOT / "fixtures" / "example" / "train.py").exists()
