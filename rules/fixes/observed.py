"""What only legacy pmap does, where a program observes it: such a pmap has no plain rewrite and
keeps `runtime_shim.pmap` (the reason raised as Unsupported goes into the fix's comment).

- its errors: the pmapped function called where an exception is expected (`with
  self.assertRaises(...)`, `self.assertRaisesRegex(E, msg, lambda: f(x))`, `pytest.raises`); the
  rewrite raises other errors, or none, for misuse legacy pmap refused (jax's own
  `tests/pmap_test.py` checks 32 such messages);
- its object's attributes (`f._cache_size`), which a `jax.jit` object lacks or has otherwise;
- a nest: the mapped function made by a parameter (`jax.pmap(map2(f))`, `@partial(map2)` below
  the pmap's decorator) in a module that passes pmap as a value.
"""

from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.knowledge import tables


def only_legacy(model: SemanticModel, site: TransformSite) -> None:
    """Unsupported where the program observes what only legacy pmap does at ``site``."""
    _observed(model, site)
    _made_by_parameter(model, site)


def _observed(model: SemanticModel, site: TransformSite) -> None:
    """Unsupported where the program observes what only legacy pmap's object does: its errors
    (the pmapped function called where an exception is expected: `with self.assertRaises(...)`,
    `self.assertRaisesRegex(E, msg, lambda: f(x))`, `pytest.raises`; the rewrite raises other
    errors, or none, for misuse legacy pmap refused) or its own attributes (`f._cache_size`)."""
    uses: list[cst.CSTNode] = [site.node] if isinstance(site.node, cst.Call) else []
    uses += [access.node for assignment in site.bound_names for access in assignment.references]
    for use in uses:
        parent = model.parent(use)
        if isinstance(parent, cst.Attribute) and parent.value is use \
                and parent.attr.value in tables.LEGACY_PMAP_ATTRIBUTES:
            raise Unsupported(f"the code reads `{code_of(parent)}`, an attribute of legacy pmap's object")
        expecting = _expecting_error(model, use)
        if expecting is not None:
            raise Unsupported(f"the code expects it to raise (`{expecting}`): the rewrite's errors are not "
                              "legacy pmap's")


def _made_by_parameter(model: SemanticModel, site: TransformSite) -> None:
    """Unsupported where the mapped function is what a parameter makes (`jax.pmap(map2(g))`,
    a decorator `@partial(map2)` below the pmap's, in `def build(map2)`) in a module that
    passes pmap as a value: it may be a pmap, whose nest only legacy pmap (the shim) runs."""
    if not model.value_uses(PMAP):
        return
    if site.is_decorator:
        below = site.decorated.decorators[list(site.decorated.decorators).index(site.node) + 1:]
        makers = [decorator.decorator for decorator in below]
    else:
        makers = [site.fun.func] if isinstance(site.fun, cst.Call) else []
    for expr in makers:
        if isinstance(expr, cst.Call) and model.matches(expr.func, tables.PARTIAL) and expr.args:
            expr = expr.args[0].value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        if isinstance(expr, cst.Name) and any(
                isinstance(getattr(a, "node", None), cst.Param) for a in model.assignments_of(expr)):
            raise Unsupported(f"the function is made by `{expr.value}`, a parameter, and the module passes "
                              "pmap as a value: maybe a nested pmap")


def _expecting_error(model: SemanticModel, node: cst.CSTNode) -> str | None:
    """The call that expects an exception around ``node`` in its function: a `with` item's
    (``node`` in the block) or a call's (``node`` among its arguments)."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return None
        calls = []
        if isinstance(ancestor, cst.With) and child is ancestor.body:
            calls = [item.item for item in ancestor.items if isinstance(item.item, cst.Call)]
        elif isinstance(ancestor, cst.Call) and child is not ancestor.func:
            calls = [ancestor]
        for call in calls:
            func = call.func
            if (isinstance(func, cst.Attribute) and func.attr.value in tables.EXPECTS_ERROR_METHODS) \
                    or model.matches(func, tables.EXPECTS_ERROR):
                return f"{code_of(func)}(...)"
        child = ancestor
    return None
