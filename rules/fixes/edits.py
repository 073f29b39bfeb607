"""Applying and composing edits, and the blank lines around generated definitions.

``EditApplier`` is the one place where edits become a new tree: the engine applies each round's
fixes with it (``pmap_migrate.fixer``), and ``compose_edits`` applies edits that fall inside
another edit's replacement to that replacement (the multi-process plan's single fix), since the
engine replaces an edit's target whole.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Container, Iterable, Mapping

import libcst as cst

from pmap_migrate.rules.fixes.spec import Edit


class LostEdit(Exception):
    def __init__(self, edit: Edit) -> None:
        super().__init__()
        self.edit = edit


class EditApplier(cst.CSTTransformer):
    """Applies edits by node identity: each target is replaced by its replacement, each insertion
    goes before its target. libcst's transformer copies every node it walks into: given ``toward``
    (the ids of the targets and of all their ancestors) it enters only those, and given ``original``
    (the nodes of the tree the edits were made for: the analysis' map of parents) also every node
    not of that tree (generated code, which may hold original nodes); every other subtree comes
    back as it is. ``done`` holds the ids of the targets it met."""

    def __init__(self, edits: Iterable[Edit], toward: set[int] | None = None,
                 original: Container[cst.CSTNode] | None = None,
                 comments: Mapping[int, tuple[str, ...]] | None = None) -> None:
        super().__init__()
        self.comments = comments or {}
        self.replacements: dict[int, Edit] = {}
        self.insertions: dict[int, list[cst.BaseStatement]] = {}
        self.blanks: dict[int, int] = {}
        for edit in edits:
            if edit.blank_lines:
                self.blanks[id(edit.target)] = max(edit.blank_lines, self.blanks.get(id(edit.target), 0))
            if edit.replacement is not None:
                self.replacements[id(edit.target)] = edit
            if edit.before:
                self.insertions.setdefault(id(edit.target), []).extend(edit.before)
        self.toward = toward
        self.original = original
        self.done: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.toward is None or id(node) in self.toward or (self.original is not None
                                                                   and node not in self.original)

    def on_leave(self, original_node, updated_node):
        key = id(original_node)
        edit = self.replacements.get(key)
        result = edit.replacement if edit is not None else updated_node
        comment = self.comments.get(key)
        if comment and isinstance(result, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            result = commented(result, comment)
        before = self.insertions.get(key)
        if edit is not None or before:
            self.done.add(key)
        lines = self.blanks.get(key)
        if lines:
            if isinstance(result, cst.FlattenSentinel) and result.nodes:
                result = cst.FlattenSentinel([blank(result.nodes[0], lines), *result.nodes[1:]])
            elif isinstance(result, cst.CSTNode):
                result = blank(result, lines)
        if before:
            if isinstance(result, cst.FlattenSentinel):
                return cst.FlattenSentinel([*before, *result.nodes])
            if isinstance(result, cst.RemovalSentinel):
                return cst.FlattenSentinel(before)
            return cst.FlattenSentinel([*before, result])
        return result


SHIM_COMMENT = "# pmap-migrate: kept on the legacy shim: "


def shim_comments(targets: Iterable[tuple[cst.CSTNode, str]], parents: Mapping[cst.CSTNode, cst.CSTNode],
                  unit: str, width: int) -> dict[int, tuple[str, ...]]:
    """The comment lines that say why each shimmed site keeps legacy semantics, by the id of the
    statement holding the site (its nearest enclosing statement; a decorated definition for a
    decorator), wrapped to ``width`` columns (the file's line length) at the statement's
    indentation: a line is longer only where one word is. Sites of one statement share its
    comment."""
    whys: dict[int, list[str]] = {}
    depth: dict[int, int] = {}
    for target, why in targets:
        node, statement, level = target, None, 0
        while node is not None:
            if statement is None and isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                statement = node
            elif statement is not None and isinstance(node, cst.IndentedBlock):
                level += 1
            node = parents.get(node)
        if statement is None:
            continue
        reasons = whys.setdefault(id(statement), [])
        if why not in reasons:
            reasons.append(why)
        depth[id(statement)] = level
    comments = {}
    for key, reasons in whys.items():
        room = max(width - len(unit) * depth[key], len("#   ") + 1)
        text = SHIM_COMMENT + "; ".join(reasons)
        if len(text) > room:  # the reasons without their asides, which `--show-fixes` prints
            text = SHIM_COMMENT + "; ".join(dict.fromkeys(_ASIDE.sub("", reason) for reason in reasons))
        comments[key] = tuple(textwrap.wrap(text, room, subsequent_indent="#   ", break_long_words=False,
                                            break_on_hyphens=False))
    return comments


# A reason's aside: a parenthesis (one level of parentheses inside), with the explanation after it
# (`called in code that may be traced (jit, vmap, a lambda): the global arrays are built ...`).
_ASIDE = re.compile(r" \((?:[^()]|\([^()]*\))*\)(?:: .*)?")


def commented(statement, lines: tuple[str, ...]):
    """``statement`` with ``lines`` as comment lines right above it (kept once: a statement that
    already carries them is returned as it is)."""
    leading = list(statement.leading_lines)
    present = [line.comment.value for line in leading if line.comment is not None]
    if present[-len(lines):] == list(lines):
        return statement
    leading.extend(cst.EmptyLine(indent=True, comment=cst.Comment(line)) for line in lines)
    return statement.with_changes(leading_lines=leading)


def compose_edits(model, edits: list[Edit]) -> list[Edit]:
    """Edits inside another edit's replacement are applied to that replacement (the engine would
    drop them: it replaces the outer node whole). Fails when the outer replacement no longer holds
    the inner target."""
    replaced = {id(e.target): e for e in edits if e.replacement is not None}
    inner: dict[int, list[Edit]] = {}
    roots: list[Edit] = []
    for edit in edits:
        outer = next((replaced[id(a)] for a in model.ancestors(edit.target) if id(a) in replaced), None)
        if outer is None:
            roots.append(edit)
        else:
            inner.setdefault(id(outer.target), []).append(edit)

    def build(edit: Edit) -> Edit:
        nested = inner.get(id(edit.target))
        if not nested or edit.replacement is None:
            return edit
        nested = [build(e) for e in nested]
        toward = {id(node) for e in nested for node in (e.target, *model.ancestors(e.target))}
        apply = EditApplier(nested, toward, model.parents)
        replacement = edit.replacement
        if isinstance(replacement, cst.FlattenSentinel):
            replacement = cst.FlattenSentinel([node.visit(apply) for node in replacement.nodes])
        else:
            replacement = replacement.visit(apply)
        for e in nested:
            if id(e.target) not in apply.done:
                raise LostEdit(e)
        return Edit(edit.target, replacement, edit.before)

    return [build(e) for e in roots]


class _Unindented(cst.CSTTransformer):
    """Empty lines of generated code carry no indentation (parsed at module level, they would print
    the indentation of the block they land in); code of the original module is left as it is."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node not in self.model.parents

    def leave_EmptyLine(self, original_node: cst.EmptyLine, updated_node: cst.EmptyLine) -> cst.EmptyLine:
        return updated_node.with_changes(indent=False) if updated_node.comment is None else updated_node


class _IndentedEmptyLine(cst.CSTVisitor):
    """Whether ``_Unindented`` would change anything: an empty line without a comment that carries
    indentation, reached as it reaches them. Most generated code holds none, and then the copy of
    every generated node that a transformer's walk makes is not needed. Generated code parsed from
    text without whitespace-only lines (``plain``: ids, `Rewriter.parse_generated`) holds none."""

    def __init__(self, model, plain: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.model = model
        self.plain = plain
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found or node in self.model.parents or id(node) in self.plain:
            return False
        if isinstance(node, cst.EmptyLine) and node.indent and node.comment is None:
            self.found = True
        return not self.found


def unindented(model, node, plain: dict[int, cst.CSTNode]):
    if isinstance(node, cst.FlattenSentinel):
        return cst.FlattenSentinel([unindented(model, n, plain) for n in node.nodes])
    if isinstance(node, cst.CSTNode):
        if id(node) in plain:
            return node
        finder = _IndentedEmptyLine(model, plain)
        node.visit(finder)
        return node.visit(_Unindented(model)) if finder.found else node
    return node


def spaced(model, edits: list[Edit], plain: dict[int, cst.CSTNode]) -> list[Edit]:
    """Blank lines around generated definitions: before the first one, and before the statement that
    follows them (two at module level, one in a function); none around plain statements that
    replace one (`step = _global_pmap(...)` for `step = jax.pmap(...)`)."""
    out = [Edit(e.target, unindented(model, e.replacement, plain),
                tuple(unindented(model, b, plain) for b in e.before)) for e in edits]
    replaced = {id(e.target): k for k, e in enumerate(out) if e.replacement is not None}
    follow: list[cst.CSTNode] = []
    for k, edit in enumerate(list(out)):
        n = _lines(model, edit.target)
        first = _first_in_block(model, edit.target)
        if edit.before:
            out[k] = Edit(edit.target, edit.replacement, _separated(list(edit.before), n, first))
            follow.append(edit.target)
        elif isinstance(edit.replacement, cst.FlattenSentinel) and isinstance(edit.target, cst.BaseStatement) \
                and any(isinstance(node, _DEFINITIONS) for node in edit.replacement.nodes):
            nodes = _separated(list(edit.replacement.nodes), n, first)
            out[k] = Edit(edit.target, cst.FlattenSentinel(nodes), edit.before)
            following = _next_statement(model, edit.target)
            if following is not None:
                follow.append(following)
    for statement in follow:
        index = replaced.get(id(statement))
        n = _lines(model, statement)
        if index is None:
            out.append(Edit(statement, blank(statement, n)))
            replaced[id(statement)] = len(out) - 1
            continue
        edit = out[index]
        if isinstance(edit.replacement, cst.FlattenSentinel):
            nodes = list(edit.replacement.nodes)
            nodes[0] = blank(nodes[0], n)
            out[index] = Edit(edit.target, cst.FlattenSentinel(nodes), edit.before)
        elif isinstance(edit.replacement, cst.BaseStatement):
            out[index] = Edit(edit.target, blank(edit.replacement, n), edit.before)
    return out


def _separated(nodes: list, n: int, first: bool) -> tuple:
    """Generated statements: ``n`` empty lines before the first (none at the top of a block) and
    before each definition after it."""
    out = []
    for k, node in enumerate(nodes):
        if k == 0:
            out.append(node if first else blank(node, n))
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)) or isinstance(nodes[k - 1], (cst.FunctionDef,
                                                                                           cst.ClassDef)):
            out.append(_exactly(node, n))
        else:
            out.append(node)
    return tuple(out)


def _exactly(statement, n: int):
    lines = list(statement.leading_lines)
    empty = 0
    while empty < len(lines) and lines[empty].comment is None:
        empty += 1
    return statement.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * n + lines[empty:])


def _first_in_block(model, statement: cst.CSTNode) -> bool:
    block = model.parent(statement)
    body = getattr(block, "body", None)
    return isinstance(body, (list, tuple)) and bool(body) and body[0] is statement


def _lines(model, statement: cst.CSTNode) -> int:
    return 2 if isinstance(model.parent(statement), cst.Module) else 1


def blank(statement, n: int):
    """``statement`` with at least ``n`` empty lines before it (ahead of its own comments)."""
    if not hasattr(statement, "leading_lines"):
        return statement
    lines = list(statement.leading_lines)
    empty = 0
    for line in lines:
        if line.comment is not None:
            break
        empty += 1
    if empty >= n:
        return statement
    return statement.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * (n - empty) + lines)


def _next_statement(model, statement: cst.CSTNode) -> cst.BaseStatement | None:
    block = model.parent(statement)
    body = getattr(block, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    for k, item in enumerate(body):
        if item is statement:
            return body[k + 1] if k + 1 < len(body) else None
    return None


_DEFINITIONS = (cst.FunctionDef, cst.ClassDef)


def spaced_definitions(parents: Mapping[cst.CSTNode, cst.CSTNode], edits: list[Edit]) -> list[Edit]:
    """Blank lines as PEP 8 puts them around the definitions that edits insert (two at module
    level, one in a block): before each one that is not the first statement of its block, and
    before the statement after it. Edits that insert no definition are left as they are."""
    out = list(edits)
    follow: list[cst.CSTNode] = []
    for k, edit in enumerate(edits):
        flattened = isinstance(edit.replacement, cst.FlattenSentinel) and isinstance(edit.target, cst.BaseStatement)
        nodes = list(edit.before) if edit.before else list(edit.replacement.nodes) if flattened else []
        if not any(isinstance(node, _DEFINITIONS) for node in nodes):
            continue
        parent = parents.get(edit.target)
        n = 2 if isinstance(parent, cst.Module) else 1
        body = getattr(parent, "body", None)
        first = isinstance(body, (list, tuple)) and bool(body) and body[0] is edit.target
        separated = []
        for j, node in enumerate(nodes):
            if j == 0:
                separated.append(blank(node, n) if isinstance(node, _DEFINITIONS) and not first else node)
            elif isinstance(node, _DEFINITIONS) or isinstance(nodes[j - 1], _DEFINITIONS):
                separated.append(_exactly(node, n))
            else:
                separated.append(node)
        if edit.before:
            out[k] = Edit(edit.target, out[k].replacement, tuple(separated))
            if isinstance(nodes[-1], _DEFINITIONS):
                follow.append(edit.target)
        else:
            out[k] = Edit(edit.target, cst.FlattenSentinel(separated), edit.before)
            following = _following(parent, edit.target)
            if isinstance(nodes[-1], _DEFINITIONS) and following is not None:
                follow.append(following)
    for statement in follow:
        out.append(Edit(statement, blank_lines=2 if isinstance(parents.get(statement), cst.Module) else 1))
    return out


def _following(parent: cst.CSTNode | None, statement: cst.CSTNode) -> cst.BaseStatement | None:
    body = getattr(parent, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    for k, item in enumerate(body):
        if item is statement:
            return body[k + 1] if k + 1 < len(body) else None
    return None
