"""Where pmaps run inside pmapped functions (PM102, and the rewrites that must keep the shim there)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from pmap_migrate.rules.analysis.sites import PMAP, FunctionLike, TransformSite
from pmap_migrate.rules.knowledge import tables


class Nesting:
    """Nested pmaps, found in one walk of the module's pmapped bodies (a part of ``SemanticModel``)."""

    # --------------------------------------------------------------- nesting
    def nested_sites(self) -> dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]]:
        """Nodes that run a pmap inside a pmapped function, mapped to (the outer pmap's node, the
        outer site). A node is an inner pmap site (``pmap(pmap(f))``, ``@pmap`` stacked or defined
        in the body), a call of a pmapped callable, or a pmapped callable (Name/Attribute; see
        ``callable_site``) handed to the outer pmap or to a function-taking call in the body
        (``jax.vmap(p_inner)``). Bodies are followed through the helpers they call (plain and
        jitted functions of this module), transitively.

        One walk for the whole module: each function is visited once, attributed to the first
        outer pmap found to run it, so the cost is linear in the code, not sites x call depth."""
        if self._nested is not None:
            return self._nested
        nested: dict[cst.CSTNode, tuple[cst.CSTNode, TransformSite]] = {}
        work: list[tuple[FunctionLike, TransformSite]] = []
        expanded: set[int] = set()  # jit sites already looked through
        for outer in self.pmap_sites():
            found: list[cst.CSTNode] = []
            bodies: list[FunctionLike] = []
            if outer.decorated is not None:
                # Decorators apply bottom-up: a pmap decorator below this one is mapped by it.
                decorators = list(outer.decorated.decorators)
                below = decorators[next(i for i, d in enumerate(decorators) if d is outer.node) + 1:]
                for decorator in below:
                    inner = self.sites.get(decorator)
                    if inner is not None and inner.transform == PMAP:
                        found.append(decorator)
                bodies.append(outer.decorated)
            elif outer.fun is not None:
                self._expand_callable(outer.fun, found, bodies, expanded)
            for node in found:
                nested.setdefault(node, (outer.node, outer))
            work.extend((body, outer) for body in reversed(bodies))
        work.reverse()  # outers in source order: a function is attributed to the first that runs it
        walked: set[int] = set()
        while work:
            func, outer = work.pop()
            if id(func) in walked:
                continue
            found = []
            bodies = []
            for owner in self._lexical_functions(func):
                if id(owner) in walked:
                    continue
                walked.add(id(owner))
                self._scan_body(owner, found, bodies, expanded)
            for node in found:
                nested.setdefault(node, (outer.node, outer))
            work.extend((body, outer) for body in bodies)
        self._nested = nested
        return nested

    def _scan_body(self, owner: FunctionLike, found: list[cst.CSTNode], bodies: list[FunctionLike],
                   expanded: set[int]) -> None:
        """What the code directly in ``owner``'s body runs: pmaps to ``found``, functions to ``bodies``."""
        for decorator in self.index.owned_decorators.get(owner, ()):
            site = self.sites.get(decorator)
            if site is not None and site.transform == PMAP:
                found.append(decorator)
        for call in self.index.owned_calls.get(owner, ()):
            site = self.sites.get(call)
            if site is not None:
                if site.transform == PMAP:
                    found.append(call)
                elif site.fun is not None:
                    self._expand_callable(site.fun, found, bodies, expanded)
                continue
            if call.func not in self.sites:  # `jax.pmap(f)(x)`: the inner site is the finding
                self._expand_callable(call.func, found, bodies, expanded)
            # Functions handed to another function run too: vmap(g), lax.scan(body, ...).
            for arg in call.args:
                if isinstance(arg.value, (cst.Name, cst.Attribute)) and not arg.star:
                    self._expand_callable(arg.value, found, bodies, expanded)

    def mapped_functions(self, site: TransformSite) -> list[FunctionLike]:
        if site.decorated is not None:
            return [site.decorated]
        fun = site.fun
        return self.resolve_functions(fun) if fun is not None else []

    def resolve_functions(self, expr: cst.BaseExpression) -> list[FunctionLike]:
        """Function definitions that ``expr`` may denote (Name, lambda, partial(f), self.method)."""
        if isinstance(expr, cst.Lambda):
            return [expr]
        if isinstance(expr, cst.Name):
            return [a.node for a in self.assignments_of(expr) if isinstance(getattr(a, "node", None), cst.FunctionDef)]
        if isinstance(expr, cst.Call) and self.matches(expr.func, tables.PARTIAL) and expr.args:
            return self.resolve_functions(expr.args[0].value) if not expr.args[0].star else []
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            cls = self.enclosing_class(expr)
            if cls is not None:
                return [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == expr.attr.value]
        return []

    def _expand_callable(self, expr: cst.BaseExpression, found: list[cst.CSTNode],
                         bodies: list[FunctionLike], expanded: set[int]) -> None:
        """What running ``expr`` (a function value) runs: a pmapped callable goes to ``found`` (every
        time: each call is a finding), the bodies of plain and jitted functions go to ``bodies``."""
        site = self.sites.get(expr) or self.callable_site(expr)
        if site is not None:
            if site.transform == PMAP:
                found.append(expr)
                return
            if id(site) not in expanded:  # jit: look through it once (`f = jax.jit(f)` cycles)
                expanded.add(id(site))
                if site.decorated is not None:
                    bodies.append(site.decorated)
                elif site.fun is not None:
                    self._expand_callable(site.fun, found, bodies, expanded)
            if site.node is expr:
                return
        bodies.extend(self.resolve_functions(expr))

    def _lexical_functions(self, func: FunctionLike) -> Iterator[FunctionLike]:
        """``func`` and every def/lambda nested in it: code that may run when ``func`` runs."""
        stack = [func]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(self.index.child_functions.get(current, ()))

    def inner_site(self, inner: cst.CSTNode) -> TransformSite | None:
        """The site of the inner pmap of a nesting (a key of ``nested_sites``): ``inner``'s own, or
        that of the pmapped callable it calls or hands on; None where the analysis cannot name it."""
        site = self.sites.get(inner)
        if site is None and isinstance(inner, cst.Call):
            site = self.transformed_call(inner)
        if site is None and isinstance(inner, (cst.Name, cst.Attribute)):
            site = self.callable_site(inner)
        return site

    def nested_nodes(self) -> set[int]:
        """The ids of the nodes of every nesting (``nested_sites``): the inner node, the outer pmap,
        and the site that built an inner pmapped callable (a call of it, or a reference to it)."""
        if self._nested_nodes is None:
            nodes: set[int] = set()
            for inner, (outer, _) in self.nested_sites().items():
                nodes.add(id(inner))
                nodes.add(id(outer))
                site = self.inner_site(inner)
                if site is not None:
                    nodes.add(id(site.node))
            self._nested_nodes = nodes
        return self._nested_nodes
