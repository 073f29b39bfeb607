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


def test_the_facts_know_a_rewritten_pmap_by_its_form():
    """What `fix` writes for a module-level pmap, read back: its outputs are the pmap's stacks."""
    from pmap_migrate.rules.analysis.facts import module_facts

    source = (
        "import functools\nimport jax\nfrom pkg._pmap_compat import _global_call, _shard_mapped\n\n"
        "def _f(x):\n    return x, x\n\n"
        "step = jax.jit(_shard_mapped(_f, 'i'))\n"
        "mp = _global_call(jax.jit(_shard_mapped(_f, 'i', processes=True)), 'i')\n"
        "other = jax.jit(_shard_mapped(_f, 'i', out_axes=None))\n\n"
        "@jax.jit\n@functools.partial(_shard_mapped, axis_name='i')\ndef deco(x):\n    return x\n"
    )
    facts = module_facts(source, "pkg.m", False)
    assert {name for name, fact in facts.pmapped.items() if fact.rewritten} == {"step", "mp", "deco"}
    assert facts.pmapped["step"].returns_tuple and not facts.pmapped["deco"].returns_tuple
