"""The README's rule table, generated from the rule classes (run `python -m pmap_migrate.docs` to refresh)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pmap_migrate.rules import all_rules

START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def rule_table() -> str:
    rows = ["| code | name | what it finds |", "|---|---|---|"]
    for rule in all_rules():
        rows.append(f"| {rule.CODE} | `{rule.NAME}` | {rule.summary()} |")
    return "\n".join(rows)


def refreshed(readme: str) -> str:
    block = f"{START}\n{rule_table()}\n{END}"
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise ValueError(f"README has no {START} ... {END} block")
    return pattern.sub(lambda _: block, readme)


def main(path: str = "README.md") -> int:
    readme = Path(path)
    text = readme.read_text(encoding="utf-8")
    new = refreshed(text)
    if new != text:
        readme.write_text(new, encoding="utf-8")
        print(f"updated the rule table in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
