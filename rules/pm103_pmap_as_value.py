from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.sites import PMAP
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.spec import FixSpec
from pmap_migrate.rules.knowledge import gates


class PmapAsValue(Rule):
    """`jax.pmap` passed, stored or returned as a value.

    ## What it does
    Finds references to `jax.pmap` (or a module-local alias of it) that do not apply it to a
    function: elements of lists, tuples, sets and dicts (`[jax.pmap, jax.vmap]`,
    `@pytest.mark.parametrize("t", [jax.pmap, jax.vmap])`), call arguments (`apply(jax.pmap, f)`,
    `partial(jax.pmap, axis_name="i")` passed on), return values, attributes
    (`self.transform = jax.pmap`), conditional expressions (`jax.pmap if multi else jax.vmap`),
    and `jax.pmap()` called without a function. Applications and alias definitions are
    `PM101`'s; between the two rules every reference to `jax.pmap` is reported.

    ## Why is this bad?
    Where `jax.pmap` is a value, the code that finally applies it is out of sight: the call site,
    its options and its inputs cannot be checked or rewritten, so every legacy-pmap hazard
    (nesting, committed inputs, `out[0]` gathers, host-local inputs) may hide behind it.

    ## Example
    ```python
    import jax
    import pytest

    @pytest.mark.parametrize("transform", [jax.pmap, jax.vmap])
    def test_double(transform):
        ...
    ```

    ## Use instead
    ```python
    import jax
    import pytest
    from runtime_shim import pmap  # legacy semantics on jit(shard_map); or a shard_map-based helper

    @pytest.mark.parametrize("transform", [pmap, jax.vmap])
    def test_double(transform):
        ...
    ```

    ## Fix safety
    `fix` swaps the value for `runtime_shim.pmap` (safe: it accepts every legacy option and keeps
    legacy semantics wherever the value ends up being applied; the program then needs
    pmap-migrate-shim installed at run time). A local alias used as a value is swapped at its
    definition. A module that also compares the value (`t is jax.pmap`, `t == jax.pmap`) or reads
    its attributes gets no swap at all (a swapped value would no longer match the test), nor does a
    module that replaces `jax.pmap` while it runs (a test fake such as `chex.fake_pmap`).

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    """

    CODE = "PM103"
    NAME = "pmap-as-value"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("`jax.pmap` used as a value: where it is finally applied cannot be checked or rewritten; "
               "pass `runtime_shim.pmap` or a shard_map-based function instead")
    TRIGGERS = gates.PM103.TRIGGERS
    NAMES = gates.PM103.NAMES
    CONTEXT_NAMES = gates.PM103.CONTEXT_NAMES

    VALID = [
        Valid("import jax\nstep = jax.pmap(f)\n"),
        Valid("import jax\n@jax.pmap\ndef step(x):\n    return x\n"),
        Valid("import jax\np = jax.pmap\nstep = p(f)\n"),
        Valid("import jax, functools\npmap_i = functools.partial(jax.pmap, axis_name='i')\n@pmap_i\ndef s(x):\n    return x\n"),
        Valid("import jax, functools\nstep = functools.partial(jax.pmap, axis_name='i')(f)\n"),
        Valid("import jax\ntransforms = [jax.vmap, jax.jit]\n"),
        Valid("from flax import nnx\ntransforms = [nnx.pmap, nnx.vmap]\n"),
        Valid("import jax\nnames = ['jax.pmap', 'pmap']\n"),
        Valid("from runtime_shim import pmap\ntransforms = [pmap]\n"),
        # A local variable that only shares a name with an alias in another scope.
        Valid("import jax\np = jax.pmap\ndef f(p):\n    return [p]\n"),
        Valid("import jax\np = jax.pmap\nq = p\nstep = q(f)\n"),
    ]
    INVALID = [
        Invalid("import jax\ntransforms = [jax.pmap, jax.vmap]\n", lines=(2,)),
        Invalid("import jax\ntable = {'pmap': jax.pmap, 'vmap': jax.vmap}\n", lines=(2,)),
        Invalid("import jax\nout = apply(jax.pmap, f)\n", lines=(2,)),
        Invalid("import jax\ndef transform():\n    return jax.pmap\n", lines=(3,)),
        Invalid(
            "import jax, pytest\n"
            "@pytest.mark.parametrize('t', [jax.pmap, jax.vmap])\n"
            "def test_double(t):\n    assert t(f)(x) is not None\n",
            lines=(2,),
        ),
        Invalid("import jax\nfrom functools import partial\nrun(partial(jax.pmap, axis_name='i'), f)\n", lines=(3,)),
        Invalid("import jax\nstep_fn = jax.pmap if multi_device else jax.vmap\n", lines=(2,)),
        Invalid("import jax\nclass T:\n    def __init__(self):\n        self.transform = jax.pmap\n", lines=(4,)),
        Invalid("import jax\ndef make(transform=jax.pmap):\n    return transform\n", lines=(2,)),
        Invalid("from jax import pmap as P\nts = (P, None)\n", lines=(2,)),
        Invalid("import jax\np = jax.pmap\nts = [p]\n", lines=(3,)),
        Invalid("import jax, functools\npmap_i = functools.partial(jax.pmap, axis_name='i')\nregister(pmap_i)\n", lines=(3,)),
        Invalid("import jax\nx = jax.pmap()\n", lines=(2,)),
        Invalid("import jax\nwrapped = jax.pmap.__wrapped__\n", lines=(2,)),
        Invalid("import jax\nif transform is jax.pmap:\n    pass\n", lines=(2,)),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        patched = self.context.fixes.pmap_patched
        uses = self.model.value_uses(PMAP)
        if patched is None and any(self._inspected(reference) for reference in uses):
            # Swap every value or none: a swapped value no longer equals `jax.pmap` where it is tested.
            patched = ("the module also compares `jax.pmap` (or reads its attributes), which a swapped value "
                       "would no longer match")
        for reference in uses:
            parent = self.model.parent(reference)
            if isinstance(parent, cst.Call) and parent.func is reference:
                self.report(reference, "`jax.pmap` called without a function to map")
            elif isinstance(reference, cst.Name) and reference.value != "pmap" and not self.model.matches(
                    reference, ("jax.pmap",)):
                self.report(reference, f"`{reference.value}` (an alias of `jax.pmap`) used as a value: where it is "
                                       "finally applied cannot be checked or rewritten; pass `runtime_shim.pmap` "
                                       "or a shard_map-based function instead" + self._note(patched),
                            fix=None if patched else self._shim(reference))
            else:
                self.report(reference, self.MESSAGE + self._note(patched), fix=None if patched else self._shim(reference))

    def _inspected(self, reference: cst.BaseExpression) -> bool:
        """An identity or equality test of the value, or a read of its attributes."""
        return isinstance(self.model.parent(reference), (cst.Attribute, cst.Comparison, cst.ComparisonTarget))

    @staticmethod
    def _note(patched: str | None) -> str:
        return f"; not swapped: {patched}" if patched else ""

    def _shim(self, reference: cst.BaseExpression) -> FixSpec | None:
        """Hand out `runtime_shim.pmap` instead: whoever applies the value gets legacy semantics.
        Not for identity tests or attribute reads of `jax.pmap` itself, whose meaning would change."""
        if self._inspected(reference):
            return None
        rewriter = self.context.fixes.rewriter
        target = rewriter.pmap_reference(reference)
        if target is None:
            return None
        return rewriter.shim_reference(
            target, "pass `runtime_shim.pmap` (legacy semantics wherever the value is applied; needs "
                    "pmap-migrate-shim installed at run time)", "`jax.pmap` passed as a value")
