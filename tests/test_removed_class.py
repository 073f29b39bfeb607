"""PM404 on a class tested by `isinstance`: a class jax removed has no instances, so the test
becomes `getattr(module, "Name", ())` (the same where jax has it, false where not); a class that
moved (`jax.core.DropVar`, now `jax.extend.core.DropVar`) still has instances, so it gets no fix
(the finding stays, with the new home in its message). kfac-jax's `tag_graph_matcher.py` tests
`isinstance(v, jax.core.DropVar)`."""

from __future__ import annotations

from pmap_migrate.engine import lint_bytes
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

RULES = all_rules()


def _pm404(code: str):
    return [d for d in lint_bytes(code.encode(), "m.py", RULES).diagnostics if d.code == "PM404"]


def test_a_removed_class_is_tested_only_where_jax_has_it():
    code = "import jax\n\n\ndef pmapped(x):\n    return isinstance(x.sharding, jax.sharding.PmapSharding)\n"
    (finding,) = _pm404(code)
    assert finding.fix is not None
    fixed = fix_bytes(code.encode(), "m.py", RULES).fixed.decode()
    assert 'isinstance(x.sharding, getattr(jax.sharding, "PmapSharding", ()))' in fixed, fixed


def test_a_moved_class_keeps_its_finding_without_a_fix():
    code = "import jax\n\n\ndef dropped(v):\n    return isinstance(v, jax.core.DropVar)\n"
    (finding,) = _pm404(code)
    assert finding.fix is None and "jax.extend.core.DropVar" in finding.message, finding
    assert fix_bytes(code.encode(), "m.py", RULES, unsafe=True).fixed is None
