"""A pmap whose program observes legacy pmap itself keeps the shim, with the reason: called where
an exception is expected (its errors are legacy pmap's own: jax's `tests/pmap_test.py` checks
their messages), or with an attribute of legacy pmap's object read (`f._cache_size`); and a pmap
whose function a parameter transforms first, in a module that passes pmap as a value (maybe a
nested pmap, which only the shim runs). Programs:
fixtures/programs_shim/ (tests/test_fix_programs_shim.py)."""

from __future__ import annotations

import pytest

from pmap_migrate.engine import lint_bytes
from pmap_migrate.rules import all_rules

RULES = all_rules()
HEAD = "import jax\nimport pytest\n\n\n"


def _summaries(code: str) -> list[str]:
    result = lint_bytes(code.encode(), "m.py", RULES)
    return [d.fix.summary for d in result.diagnostics if d.code == "PM101" and d.fix is not None]


@pytest.mark.parametrize(("code", "expecting"), [
    ("def test(self, x):\n    f = jax.pmap(lambda x: x)\n    with self.assertRaisesRegex(ValueError, 'pmap'):\n"
     "        f(x)\n", "self.assertRaisesRegex(...)"),
    ("def test(self, x):\n    f = jax.pmap(lambda x: x)\n    self.assertRaises(ValueError, lambda: f(x))\n",
     "self.assertRaises(...)"),
    ("def test(self, x):\n    f = jax.pmap(lambda x: x)\n    self.assertRaises(ValueError, f, x)\n",
     "self.assertRaises(...)"),
    ("def test(x):\n    with pytest.raises(TypeError):\n        jax.pmap(lambda x: x)(x)\n", "pytest.raises(...)"),
    ("@jax.pmap\ndef f(x):\n    return x\n\n\ndef test(x):\n    with pytest.raises(TypeError):\n        f(x)\n",
     "pytest.raises(...)"),
])
def test_a_pmap_called_where_an_exception_is_expected_keeps_the_shim(code, expecting):
    (summary,) = _summaries(HEAD + code)
    assert "runtime_shim.pmap" in summary and f"the code expects it to raise (`{expecting}`)" in summary, summary


def test_a_legacy_attribute_read_keeps_the_shim():
    (summary,) = _summaries(HEAD + "def test(x):\n    f = jax.pmap(lambda x: x)\n    f(x)\n    return f._cache_size\n")
    assert "runtime_shim.pmap" in summary and "reads `f._cache_size`" in summary, summary


@pytest.mark.parametrize("code", [
    # the call is outside the expecting block; `lower` is the rewrite's too
    "def test(self, x):\n    f = jax.pmap(lambda x: x)\n    y = f(x)\n    with self.assertRaises(ValueError):\n"
    "        int('a')\n    return f.lower(x), y\n",
    # a function that calls it inside the block is another function
    "def test(self, x):\n    f = jax.pmap(lambda x: x)\n\n    def g():\n        with self.assertRaises(ValueError):\n"
    "            int('a')\n        return f(x)\n    return g()\n",
])
def test_pmaps_called_elsewhere_are_rewritten(code):
    (summary,) = _summaries(HEAD + code)
    assert "runtime_shim" not in summary, summary


def test_a_pmap_over_a_parameter_transform_keeps_the_shim_where_pmap_is_passed_as_a_value():
    code = ("from functools import partial\n\n\ndef build(map2):\n    @partial(jax.pmap, axis_name='i')\n"
            "    @partial(map2)\n    def f(x):\n        return x\n    return f\n\n\n")
    (summary,) = _summaries(HEAD + code + "g = build(jax.vmap)\n")
    assert "runtime_shim" not in summary, summary  # pmap is never a value here: rewritten
    summaries = _summaries(HEAD + code + "g = build(jax.pmap)\n")
    assert any("made by `map2`, a parameter" in s for s in summaries), summaries


def test_a_pmap_of_what_a_parameter_makes_keeps_the_shim_where_pmap_is_passed_as_a_value():
    code = "def build(map2, g):\n    return jax.pmap(map2(g), axis_name='i')\n\n\nh = build(jax.pmap, abs)\n"
    summaries = _summaries(HEAD + code)
    assert any("made by `map2`, a parameter" in s for s in summaries), summaries
