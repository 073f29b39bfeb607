"""PM101 (applications, aliases) and PM103 (pmap as a value) together report every reference to
`jax.pmap`. Checked against an independent scan with the standard `ast` module over the lint
fixtures, the runnable programs and every rule's embedded examples."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pmap_migrate.engine import lint_bytes
from pmap_migrate.rules import all_rules, rules_by_code

ROOT = Path(__file__).resolve().parents[1]
PMAP_NAMES = {"jax.pmap", "jax.api.pmap", "jax._src.api.pmap"}


def pmap_references(source: str) -> list[tuple[int, int]]:
    """(line, 0-based column) of every `jax.pmap` read, by import bindings alone (no scopes)."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    bound[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            head = dotted(node.value)
            return f"{head}.{node.attr}" if head else None
        return None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) and dotted(node) in PMAP_NAMES:
            found.append((node.lineno, node.col_offset))
    return found


def uncovered(source: str) -> list[tuple[int, int]]:
    rules = [rules_by_code()["PM101"], rules_by_code()["PM103"]]
    result = lint_bytes(source, "example.py", rules)
    assert result.error is None, result.error
    spans = [((d.line, d.column - 1), (d.end_line, d.end_column - 1)) for d in result.diagnostics]  # any state
    return [ref for ref in pmap_references(source) if not any(start <= ref < end for start, end in spans)]


SOURCES = sorted((ROOT / "fixtures").rglob("*.py"))
EXAMPLES = [(f"{rule.CODE}-{kind}-{i}", example.code) for rule in all_rules()
            for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
            for i, example in enumerate(examples)]


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_every_pmap_reference_in_fixtures_is_reported(path: Path):
    source = path.read_text()
    try:
        ast.parse(source)
    except SyntaxError:
        pytest.skip("not valid Python for this interpreter")
    assert uncovered(source) == []


def test_every_pmap_reference_in_rule_examples_is_reported():
    missing = {}
    for name, code in EXAMPLES:
        if "pmap" not in code:  # the engine's text prefilter: no reference possible
            continue
        try:
            ast.parse(code)
        except SyntaxError:
            continue
        gaps = uncovered(code)
        if gaps:
            missing[name] = gaps
    assert missing == {}
