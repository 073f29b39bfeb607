"""static_broadcasted_argnums on a function whose signature the wrapper cannot repeat: the `*args`
wrapper keeps the static positions as Python values (programs: fixtures/programs/
static_unknown_signature.py); what it cannot express keeps the shim, with the reason."""

from __future__ import annotations

import pytest

from codemod.engine import lint_bytes
from codemod.fixer import fix_bytes
from rules import all_rules

RULES = all_rules()
HEAD = "import jax\n\ndef make():\n    def step(x, n):\n        return x * n\n    return step\n\n"


def _fixed(code: str) -> str:
    outcome = fix_bytes(code.encode(), "m.py", RULES, unsafe=True)
    assert outcome.fixed is not None
    return outcome.fixed.decode()


def _summary(code: str) -> str:
    result = lint_bytes(code.encode(), "m.py", RULES)
    (finding,) = [d for d in result.diagnostics if d.code == "PM101"]
    assert finding.fix is not None
    return finding.fix.summary


def test_positional_calls_are_rewritten_with_the_static_positions_kept():
    code = HEAD + "train = jax.pmap(make(), axis_name='i', static_broadcasted_argnums=(1,))\nout = train(xs, 2)\n"
    fixed = _fixed(code)
    assert "import runtime_shim" not in fixed and "runtime_shim.pmap(" not in fixed
    assert "@functools.partial(jax.jit, static_argnums=(1,))\ndef train(*args):\n" in fixed
    assert "dynamic = [arg for i, arg in enumerate(args) if i not in (1,)]" in fixed
    assert "_train(*[arg if i in (1,) else next(blocks) for i, arg in enumerate(args)])" in fixed
    assert "check_vma=False)(*dynamic)" in fixed
    compile(fixed, "fixed.py", "exec")


@pytest.mark.parametrize("code, reason", [
    (HEAD + "train = jax.pmap(make(), static_broadcasted_argnums=(1,))\nout = train(xs, n=2)\n",
     "static_broadcasted_argnums with an unknown signature, and keyword arguments"),
    (HEAD + "train = jax.pmap(make(), static_broadcasted_argnums=(1,))\nrun(train)\n",
     "static_broadcasted_argnums with an unknown signature, and keyword arguments"),
    (HEAD + "dynamic = make()\ntrain = jax.pmap(dynamic, static_broadcasted_argnums=(1,))\nout = train(xs, 2)\n",
     "the mapped function's name `dynamic` is a name of the wrapper's own"),
    (HEAD + "train = jax.pmap(make(), axis_name='i', static_broadcasted_argnums=(1,))\n"
     "out = train(xs, 2)\nprint(jax.process_index())\n",
     "static_broadcasted_argnums with an unknown signature in a multi-process program"),
])
def test_what_the_wrapper_cannot_express_keeps_the_shim(code, reason):
    summary = _summary(code)
    assert "runtime_shim.pmap" in summary and reason in summary, summary
    assert "import runtime_shim" in _fixed(code)
