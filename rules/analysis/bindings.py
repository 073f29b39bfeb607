"""Names and scopes: what a name refers to, which assignments reach a read, where aliases are used."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import libcst as cst
from libcst.metadata import Assignment, BaseAssignment, Scope

from pmap_migrate.rules.analysis.syntax import COMPREHENSIONS, DEFERRED, TARGET_PARTS
from pmap_migrate.rules.knowledge.tables import PARTIAL


class Bindings:
    """The semantic model's questions about names, scopes and the tree (a part of ``SemanticModel``)."""

    # ------------------------------------------------------------------ names
    def qualified_names(self, node: cst.CSTNode) -> frozenset[str]:
        cached = self._qname_cache.get(node)
        if cached is None:
            scope = self._scopes.get(node)
            raw = scope.get_qualified_names_for(node) if scope is not None else ()
            cached = frozenset(q.name for q in raw)
            if isinstance(node, cst.Name) and cached == {node.value} and node.value in self._partial_names():
                cached = cached | PARTIAL  # `partial = functools.partial` at module level, bound once
            self._qname_cache[node] = cached
        return cached

    def _partial_names(self) -> frozenset[str]:
        """The module-level names bound once, and to `functools.partial` (``partial =
        functools.partial``): calling one is calling `functools.partial`."""
        if self._partials is None:
            self._partials = frozenset()  # (asked again while computed: none yet)
            scope = self.scope_of(self.module)
            found = set()
            for statement in self.module.body:
                for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                            and isinstance(small.targets[0].target, cst.Name) \
                            and isinstance(small.value, (cst.Name, cst.Attribute)) \
                            and not self.qualified_names(small.value).isdisjoint(PARTIAL):
                        name = small.targets[0].target.value
                        if scope is not None and len(scope.assignments[name]) == 1:
                            found.add(name)
            self._partials = frozenset(found)
        return self._partials

    def matches(self, node: cst.CSTNode, names: Iterable[str]) -> bool:
        return not self.qualified_names(node).isdisjoint(names)

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        return self._scopes.get(node)

    def scopes(self) -> list[Scope]:
        """Every scope of the module, once each."""
        return list({id(s): s for s in self._scopes.values() if s is not None}.values())

    def assignments_of(self, name: cst.Name) -> list[BaseAssignment]:
        scope = self.scope_of(name)
        if scope is None:
            return []
        try:
            return list(scope[name.value])
        except Exception:  # names libcst cannot resolve (e.g. in comprehensions of class bodies)
            return []

    def assigned_value(self, target: cst.CSTNode | None) -> cst.BaseExpression | None:
        """The value an assignment statement binds to ``target`` (a name it assigns), if any."""
        return self.index.assigned_value.get(target)

    def assignment_for_target(self, target: cst.Name) -> BaseAssignment | None:
        scope = self.scope_of(target)
        if scope is None:
            return None
        for assignment in scope.assignments[target.value]:
            if isinstance(assignment, Assignment) and assignment.node is target:
                return assignment
        return None

    def reaching_assignments(self, name: cst.Name) -> list[BaseAssignment]:
        """The assignments of ``name`` that may reach this read. Flow-insensitive (every assignment
        in scope) except for two cheap, safe refinements. A statement's own binding comes after the
        reads of its value (``state = unreplicate(state)`` reads the previous ``state``): it does not
        reach them, unless a loop around the statement may run it again (then the previous
        iteration's binding does, as an assignment after the read would). And when an assignment in
        the same scope comes before the read in a block that encloses it (so it runs on every path
        to the read), the assignments before it are dead here: ``out = step(x); out =
        jax.device_get(out); out[0]`` reads the host copy. Assignments after the read inside a loop
        that does not also hold that dominating assignment stay (they reach it on the next
        iteration)."""
        assignments = self.assignments_of(name)
        position = self.index.order.get(name)
        if not assignments or position is None:
            return assignments
        enclosing = self._enclosing_expressions(name)
        own = [a for a in assignments if self._bound_after(a, enclosing)]
        if own and not self._repeats(name):
            assignments = [a for a in assignments if not any(a is o for o in own)]
            own = []
        if len(assignments) < 2:
            return assignments
        scope = self.scope_of(name)
        placed: list[tuple[float, BaseAssignment]] = []
        for assignment in assignments:
            node = assignment.node
            if not isinstance(node, cst.Name) or assignment.scope is not scope or node not in self.index.order:
                return assignments  # parameters, defs, imports, outer scopes: keep it simple
            # the statement's own binding (in a loop): after the read, as the next iteration sees it
            order = position + 0.5 if any(assignment is o for o in own) else self.index.order[node]
            placed.append((order, assignment))
        placed.sort(key=lambda item: item[0])
        before = [(order, a) for order, a in placed if order < position]
        dominating = next((i for i in range(len(before) - 1, -1, -1) if self._dominates(before[i][1].node, name)), None)
        if dominating is None:
            return assignments
        reaching = [a for _, a in before[dominating:]]
        loop = None
        for ancestor in self.ancestors(name):
            if isinstance(ancestor, (cst.For, cst.While)) and not self.is_within(before[dominating][1].node, ancestor):
                loop = ancestor  # the outermost loop around the read that the killing assignment is outside of
        if loop is not None:
            reaching += [a for order, a in placed if order > position and self.is_within(a.node, loop)]
        return reaching

    def _enclosing_expressions(self, read: cst.Name) -> set[int]:
        """Ids of the nodes around ``read`` that evaluate it as part of their own evaluation: its
        ancestors up to the nearest function, lambda, class or comprehension (code that may run
        later than the expression around it, or apart from it)."""
        found = {id(read)}
        for ancestor in self.ancestors(read):
            if isinstance(ancestor, DEFERRED):
                break
            found.add(id(ancestor))
        return found

    def _bound_after(self, assignment: BaseAssignment, enclosing: set[int]) -> bool:
        """``assignment`` is made by the statement that evaluates the read, after it: the read
        (``enclosing``: see ``_enclosing_expressions``) is in the value of ``x = ...`` (``x +=
        ...``, ``x: T = ...``, ``(x := ...)``), in the iterable of ``for x in ...`` or in the context
        expression of ``with ... as x``, and not in a function, lambda or comprehension there."""
        target = getattr(assignment, "node", None)
        if not isinstance(target, cst.Name):
            return False
        for ancestor in self.ancestors(target):
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
                part = ancestor.value
            elif isinstance(ancestor, cst.For):
                part = ancestor.iter
            elif isinstance(ancestor, cst.WithItem):
                part = ancestor.item
            elif isinstance(ancestor, TARGET_PARTS):
                continue
            else:
                return False
            return part is not None and id(part) in enclosing
        return False

    def _repeats(self, read: cst.Name) -> bool:
        """Whether a loop of the read's own scope may evaluate ``read`` again (a ``for`` body, a
        ``while`` test or body), so that a binding made after it reaches it on the next pass."""
        child: cst.CSTNode = read
        for ancestor in self.ancestors(read):
            if isinstance(ancestor, cst.For) and child is ancestor.body:
                return True
            if isinstance(ancestor, cst.While) and (child is ancestor.body or child is ancestor.test):
                return True
            if isinstance(ancestor, DEFERRED):
                return isinstance(ancestor, COMPREHENSIONS)  # a comprehension repeats; a def is another scope
            child = ancestor
        return False

    def _dominates(self, target: cst.Name, read: cst.Name) -> bool:
        """Whether the statement binding ``target`` runs on every path to ``read``: it is an
        ordinary statement of a block that encloses ``read`` (or a ``for``/``with`` header whose body
        holds it). Conservative: anything else answers False."""
        statement: cst.CSTNode | None = target
        for ancestor in self.ancestors(target):
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                statement = ancestor
                break
        else:
            return False
        if isinstance(statement, (cst.For, cst.With)):
            return self.is_within(read, statement.body)
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        return self._runs_before(statement, read)

    def _runs_before(self, statement: cst.BaseStatement, read: cst.CSTNode) -> bool:
        """``statement`` is an ordinary statement of a block that encloses ``read``; or of the body
        of a loop that surely runs at least once (``for _ in range(3)`` without break/continue) and
        that itself runs before ``read`` (a read after the loop sees the last iteration's value)."""
        block = self.parents.get(statement)
        if isinstance(block, (cst.IndentedBlock, cst.Module)) and self.is_within(read, block):
            return True
        loop = self.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        if isinstance(loop, cst.For) and loop.body is block and not self.is_within(read, loop) \
                and _runs_at_least_once(self, loop):
            return self._runs_before(loop, read)
        return False

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def is_within(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return node is container or any(a is container for a in self.ancestors(node))

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.ClassDef):
                return ancestor
        return None

    def references(self, names: Iterable[str], last_components: Iterable[str],
                   follow_aliases: bool = False) -> list[cst.CSTNode]:
        """Name/Attribute nodes (outside imports) that resolve to one of ``names``.

        ``last_components`` are the final identifiers to consider (``pmap`` for ``jax.pmap``);
        names imported under another name are added automatically. With ``follow_aliases``, reads
        of module-local aliases (``dpr = jax.device_put_replicated``) are included too."""
        names = frozenset(names)
        last_components = tuple(last_components)
        found: list[cst.CSTNode] = []
        for component in set(last_components):
            for attr in self.index.attributes.get(component, ()):
                if self.matches(attr, names):
                    found.append(attr)
        for local in set(last_components) | self.index.import_aliases:
            for name in self.index.names.get(local, ()):
                if self._is_attribute_tail(name):
                    continue
                if self.matches(name, names):
                    found.append(name)
        if follow_aliases:
            found.extend(self.alias_references(names, last_components))
        return found

    def _is_attribute_tail(self, name: cst.Name) -> bool:
        parent = self.parents.get(name)
        return isinstance(parent, cst.Attribute) and parent.attr is name

    def is_binding(self, name: cst.Name) -> bool:
        """True where ``name`` is being bound (assignment target, parameter, loop variable, def
        name), not read."""
        scope = self.scope_of(name)
        if scope is None:
            return False
        return any(a.node is name for a in scope.assignments[name.value])

    def resolves_to(self, expr: cst.BaseExpression, names: frozenset[str]) -> bool:
        """Whether ``expr`` denotes one of ``names``: by qualified name, or as a module-local alias
        (``dpr = jax.device_put_replicated``) of one, followed through its assignments."""
        if self.matches(expr, names):
            return True
        if not isinstance(expr, cst.Name) or expr.value not in self._assigned_names:
            return False  # cheap exit for the common case: not a name any `x = ...` binds
        key = (id(expr), names)
        cached = self._resolves_cache.get(key)
        if cached is not None:
            return cached
        self._resolves_cache[key] = False  # cycle guard: p = q; q = p
        result = False
        for assignment in self.assignments_of(expr):
            value = self.index.assigned_value.get(assignment.node) if isinstance(assignment, Assignment) else None
            if isinstance(value, (cst.Name, cst.Attribute)) and self.resolves_to(value, names):
                result = True
                break
        self._resolves_cache[key] = result
        return result

    def alias_references(self, names: Iterable[str], last_components: Iterable[str]) -> list[cst.Name]:
        """Reads of module-local aliases of ``names`` (``dpr`` after ``dpr = jax.device_put_replicated``),
        chains of aliases included; the alias definitions' values are found by ``references``."""
        names = frozenset(names)
        seeds = set(last_components) | self.index.import_aliases
        aliases: set[str] = set()
        changed = True
        while changed:  # one round per link of the longest alias chain
            changed = False
            for target, value in self.index.assigned_value.items():
                if not isinstance(target, cst.Name) or target.value in aliases:
                    continue
                if isinstance(value, cst.Attribute):
                    candidate = value.attr.value in seeds
                elif isinstance(value, cst.Name):
                    candidate = value.value in seeds or value.value in aliases
                else:
                    candidate = False
                if candidate and self.resolves_to(value, names):
                    aliases.add(target.value)
                    changed = True
        found: list[cst.Name] = []
        for alias in aliases:
            for name in self.index.names.get(alias, ()):
                if not self._is_attribute_tail(name) and not self.is_binding(name) and self.resolves_to(name, names):
                    found.append(name)
        return found


def _runs_at_least_once(model: Bindings, loop: cst.For) -> bool:
    """``for _ in range(<literals>)`` with a non-empty range and no break/continue in its body."""
    call = loop.iter
    if loop.asynchronous is not None or not isinstance(call, cst.Call) or not call.args:
        return False
    if not model.matches(call.func, {"builtins.range"}):
        return False
    bounds = []
    for arg in call.args:
        value = arg.value
        sign = 1
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            value, sign = value.expression, -1
        if arg.keyword is not None or arg.star or not isinstance(value, cst.Integer):
            return False
        bounds.append(sign * int(value.value, 0))
    try:
        if len(range(*bounds)) == 0:
            return False
    except (TypeError, ValueError):
        return False
    finder = _LoopExit()
    loop.body.visit(finder)
    return not finder.found


class _LoopExit(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Break(self, node: cst.Break) -> None:
        self.found = True

    def visit_Continue(self, node: cst.Continue) -> None:
        self.found = True

    def visit_Return(self, node: cst.Return) -> None:
        self.found = True

    def visit_Raise(self, node: cst.Raise) -> None:
        self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False
