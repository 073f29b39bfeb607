"""The scope analysis takes the names the code binds from the semantic model's own walk
(`pmap_migrate.rules.analysis.index.resolve_scopes`), not from libcst's ExpressionContextProvider: the names must be
exactly those that provider marks STORE, and the scopes exactly those libcst builds by itself."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import (
    ExpressionContext,
    ExpressionContextProvider,
    MetadataWrapper,
    ScopeProvider,
)

from pmap_migrate.rules.analysis.index import Indexer, resolve_scopes
from pmap_migrate.rules.analysis.model import SemanticModel
from tests.support.samples import parsed_samples

# Every way Python binds a name, and reads that look like bindings (attributes, subscripts, `del`).
BINDINGS = [
    "import os.path as osp, sys\nfrom a import b as c, d\nfrom e import *\n",
    "x = y = 1\n(p, [q, *r]) = z\ns.t = u[v] = w\n((aa)) = 1\n[bb, (cc, dd)] = ee\n",
    "a1: int = 2\na2: 'T'\nk += 1\ns.t += 1\nu[v] -= 1\n",
    "if (n := 10) > 5: pass\nf(y := 1).attr = 2\nfor f(q2 := 1).a in []: pass\nx[(i2 := 0)] = 1\n",
    "for i, (j, *l) in enumerate(m): pass\nelse: pass\n",
    "async def af():\n    async for e in g: pass\n    async with h as (hh, hi), h2 as [h3]: pass\n",
    "[xx for xx, yy in zz if (ww := xx)]\n{kk: vv for kk in ll for vv in kk}\n(g1 for g1 in g2)\n{s1 for *s1, in s2}\n",
    "lam = lambda pa, /, pb, *pc, pd=lambda pe: pe, **pf: pa\n",
    "class C(B, metaclass=M):\n    attr = 1\n    def meth(self, q: int = 3, *, kw: 'C' = None) -> 'C': return self\n",
    ("@dec\ndef fn(a, /, b, *, c):\n    global G\n    G = 1\n    nl = 1\n    def inner():\n"
     "        nonlocal nl\n        nl = 2\n    return inner\n"),
    "del x, s.t, u[v], (w1, w2)\n",
    "try: pass\nexcept E as err: pass\nexcept* F as err2: pass\n",
    "with open(f) as fh, other() as (o1, o2): pass\n",
    "match cmd:\n    case [a, *rest]: pass\n    case {'k': v2, **kw}: pass\n    case Point(x=px) as pt: pass\n",
    "def outer():\n    x = 1\n    class Inner:\n        x = x\n        y = [x for _ in range(3)]\n    return Inner\n",
    "type Alias[T] = list[T]\ndef gen[T: (int, str), *Ts, **P](x: T) -> T: return x\nclass K[U](Base[U]): pass\n",
    "def f[T: (lambda z: z)]():\n    pass\nclass G[V: [w for w in ()]]: pass\n",
]


def bound_names(module: cst.Module) -> tuple[set[int], set[int]]:
    """(ids of the names libcst's provider marks STORE, ids of the names the index binds)."""
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ExpressionContextProvider)
    expected = {id(node) for node, context in reference.items()
                if context is ExpressionContext.STORE and isinstance(node, cst.Name)}
    index = Indexer()
    module.visit(index)
    return expected, {id(node) for node in index.stores}


def _modules() -> list[tuple[str, cst.Module]]:
    extra = []
    for k, code in enumerate(BINDINGS):
        try:
            extra.append((f"binding {k}", cst.parse_module(code)))
        except cst.ParserSyntaxError:  # a grammar this libcst does not parse
            continue
    return list(parsed_samples()) + extra


MODULES = _modules()


def test_the_samples_hold_every_binding() -> None:
    assert len(MODULES) > 200
    assert sum(len(bound_names(module)[0]) for _, module in MODULES) > 3000
    assert len([1 for name, _ in MODULES if name.startswith("binding")]) >= len(BINDINGS) - 2


@pytest.mark.parametrize(("name", "module"), MODULES, ids=[name for name, _ in MODULES])
def test_the_index_binds_the_names_libcst_marks_store(name: str, module: cst.Module) -> None:
    expected, bound = bound_names(module)
    assert bound == expected


def _node_key(own: set[int]):
    """A node's identity across two analyses of one module: the node itself, or for the nodes libcst
    parses out of string annotations anew on each analysis, their kind and code."""
    empty = cst.Module([])

    def key(node: cst.CSTNode | None):
        if node is None or id(node) in own:
            return id(node)
        return type(node).__name__, empty.code_for_node(node)

    return key


def _scopes_seen(scopes, key) -> list[tuple]:
    """Each scope libcst made (by the node it belongs to), its assignments and accesses."""
    seen = {}
    for scope in scopes.values():
        if scope is None or id(scope) in seen:
            continue
        assignments = sorted((a.name, repr(key(getattr(a, "node", None)))) for a in scope.assignments)
        accesses = sorted((repr(key(a.node)), sorted(repr(key(getattr(r, "node", None))) for r in a.referents))
                          for a in scope.accesses)
        seen[id(scope)] = (type(scope).__name__, repr(key(getattr(scope, "node", None))), assignments, accesses)
    return sorted(seen.values(), key=repr)


@pytest.mark.parametrize(("name", "module"), MODULES, ids=[name for name, _ in MODULES])
def test_scopes_from_the_index_are_libcsts(name: str, module: cst.Module) -> None:
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    index = Indexer()
    module.visit(index)
    ours = resolve_scopes(MetadataWrapper(module, unsafe_skip_copy=True), index.stores)
    own = {id(module), *map(id, index.parents)}
    key = _node_key(own)
    assert sorted(repr((key(n), s is None)) for n, s in ours.items()) == \
        sorted(repr((key(n), s is None)) for n, s in reference.items())
    assert _scopes_seen(ours, key) == _scopes_seen(reference, key)


def test_the_model_hands_libcst_its_bindings_and_libcst_does_not_walk_for_them(monkeypatch) -> None:
    walked = []
    monkeypatch.setattr(ExpressionContextProvider, "visit_Module", lambda self, node: walked.append(node))
    module = cst.parse_module("import jax\nx, y = 1, 2\nfor i in x: print(i, y)\n")
    model = SemanticModel(MetadataWrapper(module, unsafe_skip_copy=True))
    assert walked == []
    scope = model.scope_of(module)
    assert {a.name for a in scope.assignments} == {"jax", "x", "y", "i"}


def test_no_rule_reads_the_expression_contexts_the_model_hands_libcst() -> None:
    # The wrapper keeps only the bound names as ExpressionContextProvider's result (no LOAD or DEL
    # marks): a rule asking for that provider would have to get libcst's own walk back first.
    from pmap_migrate.rules import all_rules

    for rule in all_rules():
        assert ExpressionContextProvider not in rule.get_inherited_dependencies(), rule.CODE
