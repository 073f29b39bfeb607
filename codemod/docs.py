"""The documentation generated from the rule classes.

One function, :func:`rule_document`, makes the text of a rule's documentation: `pmap-migrate explain
CODE` prints it and the docs site's page for the rule (``docs/rules/<code>.md``) holds it. From the
same classes come the site's rules index, the rules section of its navigation (``mkdocs.yml``) and
the README's rule table. ``python -m pmap_migrate.docs [ROOT]`` writes them all (ROOT: the
repository, default the current directory); the tests fail when one of them is stale.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pmap_migrate.rules import all_rules

START, END = "<!-- rules:start -->", "<!-- rules:end -->"
NAV_START, NAV_END = "# rules:start", "# rules:end"
RULES_DIR = Path("docs") / "rules"
NOTICE = "generated from the rule classes by `python -m pmap_migrate.docs`: edit the rule's docstring, not this file"


def rule_document(rule) -> str:
    """A rule's documentation as `pmap-migrate explain` prints it and its docs page holds it."""
    return f"# {rule.CODE} ({rule.NAME})\n\n{rule.documentation()}\n"


def rule_page(rule) -> str:
    """The page of ``rule`` relative to the docs directory (stable: SARIF output links to it)."""
    return f"rules/{rule.CODE.lower()}.md"


def rule_table(link_prefix: str = "docs/") -> str:
    """A Markdown table of every rule, each code linking to its page under ``link_prefix``."""
    rows = ["| code | name | fix | what it finds |", "|---|---|---|---|"]
    for rule in all_rules():
        rows.append(f"| [{rule.CODE}]({link_prefix}{rule_page(rule)}) | `{rule.NAME}` | {rule.FIXABLE.value} | "
                    f"{rule.summary()} |")
    return "\n".join(rows)


def rules_index() -> str:
    """The docs site's rules page: the table, and how codes are used."""
    return f"""<!-- {NOTICE} -->
# Rules

Every rule has a stable code (`PM101`) and a name (`pmap-call`): codes are what you write in
`--select`, `--ignore`, `# noqa: PM101` and `per-file-ignores`, and either one works with
`pmap-migrate explain`. A code prefix selects a family: `PM1` is the pmap call itself, `PM2` reads of
its outputs, `PM3` placing data on devices, `PM4` other removed or deprecated APIs, `PM5`
multi-process programs. *fix* says whether a rule's findings carry a fix of their own (`always`,
`sometimes`, `never`), as `pmap-migrate rules` shows it. Each page below is exactly what
`pmap-migrate explain CODE` prints.

{rule_table(link_prefix="../")}

Three more codes are not rules and cannot be selected or ignored: `PM000` (a file that does not
parse), `PM001` (a file that cannot be read, decoded or written) and `PM002` (an internal error).
[Troubleshooting](../troubleshooting.md#a-file-is-reported-as-pm000-pm001-or-pm002) says what to do
about each.
"""


def _replace_block(text: str, start: str, end: str, body: str, where: str) -> str:
    """``text`` with the lines between its ``start`` and ``end`` marker lines (kept as they are)
    replaced by ``body``, indented as the start marker is."""
    pattern = re.compile(rf"^(?P<head>(?P<indent>[ \t]*){re.escape(start)}[^\n]*\n).*?(?P<tail>^[ \t]*{re.escape(end)})",
                         re.S | re.M)
    match = pattern.search(text)
    if not match:
        raise ValueError(f"{where} has no {start} ... {end} block")
    indent = match.group("indent")
    lines = "".join(f"{indent}{line}\n" if line else "\n" for line in body.splitlines())
    return text[:match.start()] + match.group("head") + lines + match.group("tail") + text[match.end():]


def refreshed(readme: str) -> str:
    """``readme`` with its rule table regenerated."""
    return _replace_block(readme, START, END, rule_table(), "README.md")


def refreshed_nav(mkdocs_yml: str) -> str:
    """``mkdocs_yml`` with the rules section of its navigation regenerated."""
    entries = ["- rules/index.md", *(f'- "{rule.CODE} {rule.NAME}": {rule_page(rule)}' for rule in all_rules())]
    return _replace_block(mkdocs_yml, NAV_START, NAV_END, "\n".join(entries), "mkdocs.yml")


def generated(root: Path) -> dict[Path, str]:
    """Every generated file under ``root`` with the content it must have."""
    files = {
        root / "README.md": refreshed((root / "README.md").read_text(encoding="utf-8")),
        root / "mkdocs.yml": refreshed_nav((root / "mkdocs.yml").read_text(encoding="utf-8")),
        root / RULES_DIR / "index.md": rules_index(),
    }
    for rule in all_rules():
        files[root / "docs" / rule_page(rule)] = rule_document(rule)
    return files


def stale(root: Path) -> list[Path]:
    """Generated files whose content is not what the rules make, and rule pages of no rule."""
    wanted = generated(root)
    outdated = [path for path, text in wanted.items()
                if not path.is_file() or path.read_text(encoding="utf-8") != text]
    orphans = [path for path in sorted((root / RULES_DIR).glob("*.md")) if path not in wanted]
    return outdated + orphans


def main(root: str = ".") -> int:
    base = Path(root)
    wanted = generated(base)
    for path in stale(base):
        if path in wanted:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted[path], encoding="utf-8")
            print(f"wrote {path}")
        else:
            path.unlink()
            print(f"removed {path} (no rule has this page)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
