"""Fix building blocks of the API-migration rules (PM401-PM404): renames, keywords, imports.

The rules decide what a use of an old API becomes; this module knows how to say it in a fix:
under which name `jax` is reachable at a node, a dotted replacement as an expression, positional
arguments turned into keywords, the reads of the name an import binds, and an import statement
rewritten in place (a name that moved to another module keeps its local name and its place).
The fix of a reported import (its reads rewritten, then the import removed) is ``rewrite_reads``;
``rules.base.ImportRule`` reports at import statements and builds it.

Imports that a rewrite leaves unused are handed to the engine as ``remove_imports`` (removed only
if nothing uses them after the round); an import with no use left at all is deleted by an edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ImportAssignment

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import tables


class Unfixable(Exception):
    """No automatic fix for this use; the message says why (the manual route is in the finding)."""


def dotted(name: str) -> cst.Attribute | cst.Name:
    return cst.parse_expression(name)  # type: ignore[return-value]


@dataclass
class FixParts:
    """A fix under construction: edits, imports, and what an unsafe part assumes."""

    edits: list[Edit] = field(default_factory=list)
    add_imports: list[ImportSpec] = field(default_factory=list)
    remove_imports: list[ImportSpec] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def add(self, other: FixParts) -> FixParts:
        self.edits += other.edits
        self.add_imports += other.add_imports
        self.remove_imports += other.remove_imports
        self.assumptions += other.assumptions
        return self

    def drop_import_of(self, model: SemanticModel, node: cst.BaseExpression) -> None:
        """The import the head name of ``node`` came from goes, once nothing uses it."""
        spec = removal_spec(model, node)
        if spec is not None:
            self.remove_imports.append(spec)

    def renamed(self, model: SemanticModel, node: cst.BaseExpression, qualified: str) -> cst.BaseExpression:
        """``qualified`` spelled at ``node`` in its place (keeping its parentheses); the imports that
        takes are added, and the one ``node`` came from goes once unused. A name that stays in the
        module ``node`` reads it from keeps that spelling: `jnp.fix` -> `jnp.trunc`."""
        module, _, last = qualified.rpartition(".")
        if isinstance(node, cst.Attribute) and model.qualified_names(node.value) == {module}:
            return node.with_changes(attr=cst.Name(last))
        expression, imports = qualified_expression(model, node, qualified)
        self.add_imports += imports
        self.drop_import_of(model, node)
        return replace_expression(node, expression)

    def spec(self, summary: str) -> FixSpec | None:
        if not self.edits:
            return None
        assumptions = list(dict.fromkeys(self.assumptions))
        if assumptions:
            summary += "; assumes " + "; ".join(assumptions)
        return FixSpec(Applicability.UNSAFE if assumptions else Applicability.SAFE, summary, edits=tuple(self.edits),
                       add_imports=tuple(dict.fromkeys(self.add_imports)),
                       remove_imports=tuple(dict.fromkeys(self.remove_imports)))


# ---------------------------------------------------------------------------------------- names

# Submodules that `import jax` does not load: a replacement inside one imports it (which binds
# `jax` as well). tests/test_api_fixes.py checks every replacement against jax 0.7.2 and the newest.
SEPARATE_MODULES = (
    "jax.extend.backend",
    "jax.extend.linear_util",
    "jax.example_libraries.optimizers",
    "jax.example_libraries.stax",
    "jax.experimental.compilation_cache.compilation_cache",
)


def _names_jax(scope, name: str) -> bool:
    return {q.name for q in scope.get_qualified_names_for(name)} == {"jax"}


def jax_name(model: SemanticModel, at: cst.CSTNode, *, plain: bool = False) -> tuple[str, tuple[ImportSpec, ...]]:
    """The name that reaches the jax module at ``at`` and the imports that makes it need: the
    module's `jax` (imported if it is not), or its `import jax as J` alias when it has no `jax`.
    ``plain`` insists on the name `jax` (a replacement that imports a submodule binds it)."""
    module_scope = model.scope_of(model.module)
    name, imports = "jax", (ImportSpec("jax"),)
    if not plain and module_scope is not None and not ("jax" in module_scope and _names_jax(module_scope, "jax")):
        for assignment in module_scope.assignments:
            if (isinstance(assignment, ImportAssignment) and "." not in assignment.name
                    and _names_jax(module_scope, assignment.name)):
                name, imports = assignment.name, ()
                break
    scope = model.scope_of(at)
    if scope is not None and name in scope and not _names_jax(scope, name):
        raise Unfixable(f"`{name}` is bound to something other than the jax module here")
    return name, imports


def qualified_expression(model: SemanticModel, at: cst.CSTNode,
                         qualified: str) -> tuple[cst.BaseExpression, tuple[ImportSpec, ...]]:
    """``qualified`` (`jax.tree.map`) spelled as an expression valid at ``at``, and its imports."""
    separate = next((m for m in SEPARATE_MODULES if qualified == m or qualified.startswith(m + ".")), None)
    if separate is not None:
        name, _ = jax_name(model, at, plain=True)
        imports: tuple[ImportSpec, ...] = (ImportSpec(separate),)
    else:
        name, imports = jax_name(model, at)
    return dotted(name + qualified[len("jax"):]), imports


def rename_to(model: SemanticModel, node: cst.BaseExpression, qualified: str) -> FixParts:
    """Replace the expression ``node`` by ``qualified``; the import its head name came from goes
    once unused."""
    parts = FixParts()
    parts.edits.append(Edit(node, parts.renamed(model, node, qualified)))
    return parts


def replace_expression(old: cst.BaseExpression, new: cst.BaseExpression) -> cst.BaseExpression:
    """``new`` keeping the parentheses around ``old``."""
    return new.with_changes(lpar=getattr(old, "lpar", ()), rpar=getattr(old, "rpar", ()))


def is_atom(node: cst.BaseExpression) -> bool:
    """Binds tighter than any operator: safe to put next to one without parentheses."""
    return bool(getattr(node, "lpar", ())) or isinstance(node, (
        cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Tuple, cst.List, cst.Set, cst.Dict,
        cst.SimpleString, cst.ConcatenatedString, cst.FormattedString, cst.Integer, cst.Float,
        cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp))


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    return node if is_atom(node) else node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def in_annotation(model: SemanticModel, node: cst.CSTNode) -> bool:
    return any(isinstance(a, cst.Annotation) for a in model.ancestors(node))


def isinstance_class(model: SemanticModel, node: cst.BaseExpression) -> bool:
    """``node`` is the class tested by the builtin ``isinstance(x, node)``, alone or as an element
    of the tuple of classes there."""
    parent = model.parent(node)
    if isinstance(parent, cst.Element) and parent.value is node and isinstance(model.parent(parent), cst.Tuple):
        node = model.parent(parent)
        parent = model.parent(node)
    if not isinstance(parent, cst.Arg) or parent.value is not node or parent.keyword or parent.star:
        return False
    call = model.parent(parent)
    return (isinstance(call, cst.Call) and len(call.args) == 2 and call.args[1] is parent
            and "builtins.isinstance" in model.qualified_names(call.func))


def applying_call(model: SemanticModel, use: cst.BaseExpression) -> cst.Call | None:
    """The call that applies the function ``use`` names: ``use(...)``, or
    ``functools.partial(use, ...)``; None when ``use`` is passed or stored as a value."""
    parent = model.parent(use)
    if isinstance(parent, cst.Call) and parent.func is use:
        return parent
    if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
        call = model.parent(parent)
        if (isinstance(call, cst.Call) and call.args and call.args[0] is parent
                and model.matches(call.func, tables.PARTIAL)):
            return call
    return None


# ------------------------------------------------------------------------------------ arguments

_NO_SPACE = cst.SimpleWhitespace("")


def as_keyword(arg: cst.Arg, keyword: str) -> cst.Arg:
    if arg.keyword is not None:
        return arg.with_changes(keyword=cst.Name(keyword))
    return arg.with_changes(keyword=cst.Name(keyword),
                            equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE))


def as_positional(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)


# ------------------------------------------------------------------------------------- imports

def _binding(model: SemanticModel, name: cst.Name) -> ImportAssignment | None:
    assignments = model.assignments_of(name)
    if len(assignments) == 1 and isinstance(assignments[0], ImportAssignment):
        return assignments[0]
    return None


def removal_spec(model: SemanticModel, expr: cst.BaseExpression) -> ImportSpec | None:
    """The import binding the head name of ``expr`` (`maps` in `maps.Mesh`, `smap` itself), to be
    removed once unused. None for `jax` and for plain dotted imports (`import a.b`), which also bind
    names other code may use."""
    head = expr
    while isinstance(head, cst.Attribute):
        head = head.value
    if not isinstance(head, cst.Name):
        return None
    binding = _binding(model, head)
    if binding is None:
        return None
    statement = binding.node
    for alias in statement.names if not isinstance(statement.names, cst.ImportStar) else ():
        local = alias.evaluated_alias or alias.evaluated_name
        if local != head.value:
            continue
        if isinstance(statement, cst.ImportFrom):
            if statement.relative or statement.module is None:
                return None
            module = get_full_name_for_node(statement.module)
            if module == "jax" and alias.evaluated_name == "jax":
                return None
            return ImportSpec(module, alias.evaluated_name, alias.evaluated_alias)
        if alias.asname is not None and alias.evaluated_name != "jax":
            return ImportSpec(alias.evaluated_name, None, alias.evaluated_alias)
    return None


def import_reads(model: SemanticModel, statement: cst.Import | cst.ImportFrom,
                 alias: cst.ImportAlias) -> list[cst.Name] | None:
    """Reads of the name ``alias`` binds, each seeing only this import; None when some read may
    also see another binding of the name (or is not a plain name)."""
    scope = model.scope_of(statement)
    if scope is None:
        return None
    local = alias.evaluated_alias or alias.evaluated_name
    reads: list[cst.Name] = []
    for assignment in scope.assignments[local]:
        if not (isinstance(assignment, ImportAssignment) and assignment.node is statement):
            continue
        for access in assignment.references:
            node = access.node
            if not isinstance(node, cst.Name) or _binding(model, node) is not assignment:
                return None
            reads.append(node)
    return reads


def _line_of(model: SemanticModel, small: cst.BaseSmallStatement) -> cst.SimpleStatementLine | None:
    line = model.parent(small)
    return line if isinstance(line, cst.SimpleStatementLine) else None


def _with_commas(aliases: list[cst.ImportAlias], parenthesized_: bool) -> list[cst.ImportAlias]:
    out = []
    for i, alias in enumerate(aliases):
        if i < len(aliases) - 1:
            if not isinstance(alias.comma, cst.Comma):
                alias = alias.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        elif not parenthesized_:
            alias = alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        out.append(alias)
    return out


def _replace_small(model: SemanticModel, small: cst.BaseSmallStatement,
                   new: list[cst.BaseSmallStatement]) -> tuple[Edit, ...]:
    """Replace one small statement by ``new`` (none: delete it): whole lines when it is alone on
    its line (comments and blank lines before it stay with the first), else in place."""
    line = _line_of(model, small)
    if line is not None and len(line.body) == 1:
        if not new:
            return delete_line(model, line)
        lines = [line.with_changes(body=[new[0]])]
        lines += [cst.SimpleStatementLine(body=[statement]) for statement in new[1:]]
        return (Edit(line, cst.FlattenSentinel(lines) if len(lines) > 1 else lines[0]),)
    if not new:
        return (Edit(small, cst.RemovalSentinel.REMOVE),)
    return (Edit(small, cst.FlattenSentinel(new) if len(new) > 1 else new[0]),)


def delete_line(model: SemanticModel, line: cst.SimpleStatementLine) -> tuple[Edit, ...]:
    """Delete ``line``, keeping the comments on the lines before it: they go to the next statement,
    with the blank lines around them. Without comments, the blank lines before it go to the next
    statement when it has none, so that deleting the first import after a docstring keeps the blank
    line between them. A last statement with comments before it becomes `pass` under them."""
    block = model.parent(line)
    body = list(getattr(block, "body", ()))
    leading = list(line.leading_lines)
    index = next((i for i, statement in enumerate(body) if statement is line), None)
    after = body[index + 1] if index is not None and index + 1 < len(body) else None
    if any(empty.comment is not None for empty in leading):
        if after is None or not hasattr(after, "leading_lines"):
            return (Edit(line, line.with_changes(body=[cst.Pass()])),)
        return (Edit(line, cst.RemovalSentinel.REMOVE),
                Edit(after, after.with_changes(leading_lines=[*leading, *after.leading_lines])))
    if leading and after is not None and not after.leading_lines:
        return Edit(line, cst.RemovalSentinel.REMOVE), Edit(after, after.with_changes(leading_lines=leading))
    return (Edit(line, cst.RemovalSentinel.REMOVE),)


def rewrite_import_from(model: SemanticModel, statement: cst.ImportFrom,
                        moves: dict[int, tuple[str, str] | None]) -> tuple[Edit, ...]:
    """``from m import a, b as c``: the alias at index i moves to ``from module import name`` (it
    keeps its local name), or is deleted (None); the other aliases stay."""
    assert not isinstance(statement.names, cst.ImportStar)
    aliases = list(statement.names)
    kept = [a for i, a in enumerate(aliases) if i not in moves]
    groups: dict[str, list[cst.ImportAlias]] = {}
    for i, alias in enumerate(aliases):
        target = moves.get(i)
        if target is None:
            continue
        module, name = target
        local = alias.evaluated_alias or alias.evaluated_name
        asname = None if local == name else cst.AsName(cst.Name(local))
        groups.setdefault(module, []).append(alias.with_changes(name=cst.Name(name), asname=asname))
    new: list[cst.BaseSmallStatement] = []
    parens = statement.lpar is not None
    if kept:
        new.append(statement.with_changes(names=_with_commas(kept, parens)))
    for module, moved in groups.items():
        if not kept and not new:  # the statement itself moves: keep its layout and comments
            new.append(statement.with_changes(module=dotted(module), names=_with_commas(moved, parens)))
        else:
            new.append(cst.ImportFrom(module=dotted(module), names=_with_commas(moved, False)))
    return _replace_small(model, statement, new)


def rewrite_import(model: SemanticModel, statement: cst.Import,
                   changes: dict[int, str | None]) -> tuple[Edit, ...]:
    """``import a.b, c as d``: the alias at index i imports another module (keeping its `as`
    name), or is deleted (None)."""
    aliases = []
    for i, alias in enumerate(statement.names):
        if i not in changes:
            aliases.append(alias)
        elif changes[i] is not None:
            aliases.append(alias.with_changes(name=dotted(changes[i])))
    if not aliases:
        return _replace_small(model, statement, [])
    return _replace_small(model, statement, [statement.with_changes(names=_with_commas(aliases, False))])


def replace_dotted_import(model: SemanticModel, statement: cst.Import, alias: cst.ImportAlias) -> FixParts:
    """``import jax.a.b`` (no `as`) binds `jax`: once nothing reads `jax.a.b` it becomes ``import
    jax``, or goes when another import already binds `jax` for good."""
    index = alias_index(statement, alias)
    scope = model.scope_of(statement)
    plain = scope is not None and any(
        isinstance(a, ImportAssignment) and a.node is not statement and isinstance(a.node, cst.Import)
        and any(x.asname is None and _binds_jax_for_good(x.evaluated_name) for x in a.node.names)
        for a in scope.assignments["jax"])
    return FixParts(list(rewrite_import(model, statement, {index: None if plain else "jax"})))


def _binds_jax_for_good(module: str) -> bool:
    """``import <module>`` binds `jax` and is not itself an import a fix removes."""
    return module == "jax" or (module.startswith("jax.") and tables.removed_entry(module) is None
                               and not module.startswith(tables.EXPERIMENTAL_MAPS_MODULE))


def alias_index(statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias) -> int:
    return next(i for i, a in enumerate(statement.names) if a is alias)


@dataclass
class ReadRewrites:
    """The rewrites of the reads of one import (see ``rewrite_reads``)."""

    parts: FixParts
    rewritten: int
    left: list[tuple[cst.Name, str]]  # reads left as they are, with the reason


def rewrite_reads(model: SemanticModel, statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias,
                  rewrite) -> ReadRewrites:
    """Rewrite every read of the name ``alias`` binds with ``rewrite(read) -> FixParts`` (which
    raises Unfixable to leave a read as it is). The import goes once nothing reads it; an import
    nothing reads at all is deleted here."""
    reads = import_reads(model, statement, alias)
    if reads is None:
        local = alias.evaluated_alias or alias.evaluated_name
        raise Unfixable(f"`{local}` is also bound to something else")
    parts, left, rewritten = FixParts(), [], 0
    for read in reads:
        try:
            parts.add(rewrite(read))
            rewritten += 1
        except Unfixable as why:
            left.append((read, str(why)))
    if not reads:
        index = alias_index(statement, alias)
        if isinstance(statement, cst.ImportFrom):
            parts.edits += rewrite_import_from(model, statement, {index: None})
        else:
            parts.edits += rewrite_import(model, statement, {index: None})
    elif rewritten:
        parts.drop_import_of(model, reads[0])
    return ReadRewrites(parts, rewritten, left)


def reads_summary(what: str, result: ReadRewrites) -> str:
    """`rewrite the uses of `x` ...` plus which reads stay and why."""
    if not result.left:
        return what
    reasons = "; ".join(dict.fromkeys(reason for _, reason in result.left))
    return f"{what} ({len(result.left)} use(s) left as they are: {reasons})"


# ---------------------------------------------------------------------------------------- rules

def spec_or_none(build: Callable[[], FixParts], summary: str) -> FixSpec | None:
    """The fix ``build`` makes, or None where it raises Unfixable."""
    try:
        return build().spec(summary)
    except Unfixable:
        return None
