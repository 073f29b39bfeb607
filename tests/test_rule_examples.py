"""Tests generated from every rule's embedded VALID / INVALID examples (no hand-written cases)."""

from __future__ import annotations

import pytest

from pmap_migrate.diagnostics import State
from pmap_migrate.engine import lint_bytes
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

VALID = [(rule, i, ex) for rule in all_rules() for i, ex in enumerate(rule.VALID)]
INVALID = [(rule, i, ex) for rule in all_rules() for i, ex in enumerate(rule.INVALID)]
FIXED = [(rule, i, ex) for rule, i, ex in INVALID if ex.expected is not None]


def _active(rule, code):
    result = lint_bytes(code, "example.py", [rule])
    assert result.error is None, result.error
    return [d for d in result.diagnostics if d.state is State.ACTIVE]


@pytest.mark.parametrize(("rule", "index", "example"), VALID, ids=[f"{r.CODE}-valid-{i}" for r, i, _ in VALID])
def test_valid_example_has_no_finding(rule, index, example):
    found = _active(rule, example.code)
    assert found == [], f"{rule.CODE} reported on valid example {index}:\n{example.code}\n{found}"


@pytest.mark.parametrize(("rule", "index", "example"), INVALID, ids=[f"{r.CODE}-invalid-{i}" for r, i, _ in INVALID])
def test_invalid_example_is_reported(rule, index, example):
    found = _active(rule, example.code)
    assert found, f"{rule.CODE} missed invalid example {index}:\n{example.code}"
    assert all(d.code == rule.CODE for d in found)
    if example.lines is not None:
        assert sorted(d.line for d in found) == sorted(example.lines), (example.code, found)
    elif example.count is not None:
        assert len(found) == example.count, (example.code, found)
    else:
        assert len(found) == 1, (example.code, found)


@pytest.mark.parametrize(("rule", "index", "example"), FIXED, ids=[f"{r.CODE}-fix-{i}" for r, i, _ in FIXED])
def test_invalid_example_is_fixed_as_expected(rule, index, example):
    """The rule's own fixes (unsafe ones too) turn the example into ``expected``, which is a fixpoint."""
    outcome = fix_bytes(example.code.encode(), "example.py", [rule], unsafe=True)
    assert outcome.error is None, outcome.error
    fixed = (outcome.fixed or example.code.encode()).decode()
    assert fixed == example.expected, f"{rule.CODE} invalid example {index} fixed to:\n{fixed}"
    again = fix_bytes(fixed.encode(), "example.py", [rule], unsafe=True)
    assert again.error is None and again.fixed is None, f"fixing the fixed example changed it:\n{again.fixed}"


def test_every_rule_has_examples_and_docs():
    sections = ["## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety", "## References"]
    for rule in all_rules():
        assert rule.VALID and rule.INVALID, rule.CODE
        doc = rule.documentation()
        missing = [s for s in sections if s not in doc]
        assert not missing, f"{rule.CODE} documentation lacks {missing}"


def test_triggers_admit_every_invalid_example():
    """The text prefilter must never drop a file a rule would report: every INVALID example
    contains one of its rule's TRIGGERS (the example tests above bypass the prefilter)."""
    from pmap_migrate.prefilter import Gate

    dropped = [f"{rule.CODE}-invalid-{i}" for rule, i, example in INVALID
               if not Gate.of([rule]).needs_parse(example.code.encode())]
    assert dropped == []


def test_the_cached_visitor_table_is_what_libcst_would_compute():
    """Rule.get_visitors answers from a per-class table; libcst's own answer must be the same."""
    import libcst as cst

    for rule in all_rules():
        instance = rule.__new__(rule)
        assert set(rule.get_visitors(instance)) == set(cst.BatchableCSTVisitor.get_visitors(instance)), rule.CODE
        assert rule.get_visitors(instance), rule.CODE


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.CODE)
def test_the_declared_fixability_is_what_the_examples_show(rule):
    """`FIXABLE` (what `pmap-migrate rules` shows) against the rule's INVALID examples: ALWAYS, every
    finding carries a fix; NEVER, none does; SOMETIMES, some do and some do not."""
    from pmap_migrate.rules.base import Fixable

    found = [d for example in rule.INVALID for d in _active(rule, example.code)]
    with_fix = sum(1 for d in found if d.fix is not None)
    shown = {Fixable.ALWAYS: with_fix == len(found), Fixable.NEVER: with_fix == 0,
             Fixable.SOMETIMES: 0 < with_fix < len(found)}
    assert isinstance(rule.FIXABLE, Fixable) and shown[rule.FIXABLE], (rule.CODE, rule.FIXABLE, with_fix, len(found))
