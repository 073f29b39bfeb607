"""Where a pmap's wrapper may be evaluated: the statement that evaluates a pmap call, whether the
pmapped function is evaluated first there, whether an expression can be evaluated once at module
level without changing when or whether it is evaluated, which names a lambda reads, and which pmaps
nest directly (`pmap(pmap(f, 'j'), 'i')`, one shard_map over a multi-axis mesh). A part of
``pmap_rewrite.Rewriter`` (its base class); read-only, on the module's semantic model."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import BuiltinAssignment

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import PMAP, TransformSite


class EvaluationPlaces:
    """Questions about where and when code is evaluated, asked by the PM101 rewrites."""

    model: SemanticModel

    _NEST_OPTIONS = {"fun", "axis_name"}

    def _direct_nest(self, site: TransformSite) -> list[TransformSite] | None:
        """``pmap(pmap(f, 'j'), 'i')`` as an assignment, every level with only a literal axis name:
        the chain of sites, outermost first. Such a nest is one shard_map over a multi-axis mesh."""
        if site.is_decorator or self.assignment_statement(site.node)[0] is None:
            return None
        chain = [site]
        while True:
            fun = chain[-1].fun
            inner = self.model.site(fun) if fun is not None else None
            if inner is None or inner.transform != PMAP or inner.is_decorator:
                break
            chain.append(inner)
        if len(chain) < 2:
            return None
        for level in chain:
            if level.dynamic_options or level.callee.ambiguous:
                return None
            names = {a.keyword.value for a in level.args if a.keyword is not None}
            if not names <= self._NEST_OPTIONS or len(level.positional()) > 2:
                return None
            axis = level.option("axis_name")
            if not isinstance(axis, cst.SimpleString):
                return None
        return chain

    def _inner_of_direct_nest(self, site: TransformSite) -> bool:
        return self._enclosing_direct_nest(site) is not None

    def _enclosing_direct_nest(self, site: TransformSite) -> list[TransformSite] | None:
        """The chain of the direct nest (``_direct_nest``) ``site`` is an inner level of."""
        parent = self.model.parent(site.node)
        call = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
        outer = self.model.site(call) if isinstance(call, cst.Call) else None
        while outer is not None:
            chain = self._direct_nest(outer)
            if chain is not None:
                return chain
            parent = self.model.parent(outer.node)
            call = self.model.parent(parent) if isinstance(parent, cst.Arg) else None
            outer = self.model.site(call) if isinstance(call, cst.Call) else None
        return None

    def _surely_hashable(self, fun: cst.BaseExpression) -> bool:
        """A lambda, or a name every binding of which is a `def` or a lambda."""
        if isinstance(fun, cst.Lambda):
            return True
        if not isinstance(fun, cst.Name):
            return False
        assignments = self.model.assignments_of(fun)
        return bool(assignments) and all(
            isinstance(getattr(a, "node", None), cst.FunctionDef)
            or isinstance(self.model.assigned_value(getattr(a, "node", None)), cst.Lambda) for a in assignments)

    def _enclosing_statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return ancestor
        return None

    def _evaluating_statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement whose execution evaluates ``node`` exactly once: a simple statement line, or
        the header of an `if`, `for` or `with` statement (a `def`'s decorators and defaults); None
        when something between them evaluates it later, conditionally or repeatedly."""
        child: cst.CSTNode = node
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
                return None
            if isinstance(ancestor, cst.IfExp) and child is not ancestor.test:
                return None
            if isinstance(ancestor, cst.BooleanOperation) and child is not ancestor.left:
                return None
            if isinstance(ancestor, cst.SimpleStatementLine):
                return ancestor
            if isinstance(ancestor, (cst.If, cst.For, cst.With, cst.FunctionDef, cst.ClassDef)):
                header = child is not getattr(ancestor, "body", None) and child is not getattr(ancestor, "orelse", None)
                return ancestor if header else None
            if isinstance(ancestor, (cst.BaseCompoundStatement, cst.BaseSuite)):
                return None  # a `while` test, a `try`, `match` ...: evaluated repeatedly or not at all
            child = ancestor
        return None

    def _evaluated_first(self, call: cst.Call, statement: cst.BaseStatement) -> bool:
        """Nothing ``statement`` evaluates before the pmap ``call`` has an effect: what comes first is
        names and literals (`show("ranked", jax.pmap(f, axis)(x))`), or nothing (the pmap assigned,
        returned, or called directly)."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        child: cst.CSTNode = call
        for ancestor in self.model.ancestors(call):
            if ancestor is statement:
                return True
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign, cst.Return, cst.Expr)) and child is ancestor.value:
                before: list[cst.CSTNode] = []
            elif isinstance(ancestor, cst.AugAssign) and child is ancestor.value:
                before = [ancestor.target]
            elif isinstance(ancestor, (cst.Arg, cst.Element)) and child is ancestor.value:
                before = []
            elif isinstance(ancestor, cst.Attribute) and child is ancestor.value:
                before = []
            elif isinstance(ancestor, cst.Call):
                before = [] if child is ancestor.func else [ancestor.func, *ancestor.args[:ancestor.args.index(child)]]
            elif isinstance(ancestor, (cst.Tuple, cst.List)):
                before = list(ancestor.elements[:ancestor.elements.index(child)])
            else:
                return False
            if not all(_inert(node) for node in before):
                return False
            child = ancestor
        return False

    def _in_class_body(self, statement: cst.BaseStatement) -> bool:
        block = self.model.parent(statement)
        return isinstance(block, cst.IndentedBlock) and isinstance(self.model.parent(block), cst.ClassDef)

    def _top_level_statement(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        current: cst.CSTNode = statement
        for ancestor in self.model.ancestors(statement):
            if isinstance(ancestor, cst.Module):
                return current if isinstance(current, cst.BaseStatement) else None
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                current = ancestor
        return None

    def _definition_time_only(self, expr: cst.BaseExpression) -> bool:
        """``expr`` means the same, and does the same, evaluated once at module level as where it is:
        literals, lambdas, and names bound once at module level to a `def`, a `class` or an import (or
        builtins). Nothing is read from an object or called when it is evaluated (an attribute read
        may fail, or differ, before the program has run)."""
        module_scope = self.model.scope_of(self.model.module)
        stack: list[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Lambda):
                stack.extend(p.default for p in node.params.params if p.default is not None)
                for name in _free_names(node):
                    if not self._defined_once_at_module_level(name, module_scope):
                        return False
                continue
            if isinstance(node, (cst.Attribute, cst.Call, cst.Subscript, cst.Await, cst.Yield, cst.NamedExpr,
                                 cst.FormattedString)):
                return False
            if isinstance(node, cst.Name) and not self._defined_once_at_module_level(node, module_scope):
                return False
            stack.extend(node.children)
        return True

    def _defined_once_at_module_level(self, name: cst.Name, module_scope) -> bool:
        assignments = self.model.assignments_of(name)
        if len(assignments) != 1:
            return not assignments and name.value in ("True", "False", "None")
        assignment = assignments[0]
        if isinstance(assignment, BuiltinAssignment):
            return True
        if assignment.scope is not module_scope or len(module_scope.assignments[name.value]) != 1:
            return False
        return isinstance(assignment.node, (cst.FunctionDef, cst.ClassDef, cst.Import, cst.ImportFrom))

    def _base_name(self, call: cst.Call, fun: cst.BaseExpression) -> str:
        parent = self.model.parent(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            if isinstance(target, cst.Attribute):
                return target.attr.value.lstrip("_") or "pmapped"
        if isinstance(fun, cst.Name):
            return fun.value.lstrip("_") or "pmapped"
        if isinstance(fun, cst.Attribute):
            return fun.attr.value.lstrip("_") or "pmapped"
        return "pmapped"

    def assignment_statement(self, call: cst.Call) -> tuple[cst.SimpleStatementLine | None, str]:
        parent = self.model.parent(call)
        if not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
            return None, ""
        target = parent.targets[0].target
        if not isinstance(target, cst.Name):
            return None, ""
        line = self.model.parent(parent)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None, ""
        return line, target.value


def _inert(node: cst.CSTNode) -> bool:
    """Evaluating ``node`` has no effect: a name, a literal (an argument or element of those)."""
    if isinstance(node, cst.Arg):
        return not node.star and _inert(node.value)  # `*xs` iterates
    if isinstance(node, cst.Element):
        return _inert(node.value)
    return isinstance(node, (cst.Name, cst.SimpleString, cst.Integer, cst.Float, cst.Imaginary)) or (
        isinstance(node, cst.ConcatenatedString) and _inert(node.left) and _inert(node.right))


def _free_names(function: cst.Lambda) -> list[cst.Name]:
    """The names a lambda's body reads that its parameters do not bind (attribute names and keywords
    aside)."""
    collector = _NameCollector()
    function.body.visit(collector)
    own = {p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                   *function.params.kwonly_params)}
    for star in (function.params.star_arg, function.params.star_kwarg):
        if isinstance(star, cst.Param):
            own.add(star.name.value)
    return [name for name in collector.names if name.value not in own]


class _NameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: list[cst.Name] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # the attribute's own name is not a variable
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # keyword names are not variables
        return False
