"""Applying fixes: non-overlapping edits, imports once per file, re-parse, bounded fixpoint.

Rules only describe fixes (``FixSpec``); this module owns turning them into new source. Each
round applies the innermost non-overlapping fixes (an outer fix would be built from the
un-fixed inner code), re-parses the result, and analyses it again; the loop stops when nothing
applicable is left, when a round changes nothing, or after ``MAX_ROUNDS``. Output that does not
parse is never returned. The code a round makes is first analysed through its relevant slice, as
`check` does: when nothing applicable is left, that analysis gives the findings left, and the whole
module is not parsed and analysed again (``_last_round``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node

from pmap_migrate.diagnostics import Applicability, Diagnostic, FileError, State
from pmap_migrate.engine import Analysis, Finding, analyse, lint_module, one_line, parse, recursion_error, sliced_module
from pmap_migrate.importorder import ImportOrder, add_import
from pmap_migrate.importreuse import reuse_bound_names
from pmap_migrate.layout import closes_on_last_line, styled
from pmap_migrate.names import name_facts, name_problems
from pmap_migrate.projectstyle import DEFAULT_LINE_LENGTH, import_order, line_length
from pmap_migrate.relayout import relayout
from pmap_migrate.rules.analysis.imports import imported_names
from pmap_migrate.rules.analysis.index import indent_unit
from pmap_migrate.rules.analysis.project import ModuleView
from pmap_migrate.rules.base import Rule
from pmap_migrate.rules.fixes.choices import RuleOptions
from pmap_migrate.rules.fixes.edits import EditApplier, shim_comments, spaced_definitions
from pmap_migrate.rules.fixes.shared import GLOBAL_PMAP, SHARD_MAPPED, called_features, feature_names, fitted_helper
from pmap_migrate.rules.fixes.spec import Edit, Helper, ImportSpec
from pmap_migrate.shared_module import SharedLocation, location_for
from pmap_migrate.stack import on_deep_stack

MAX_ROUNDS = 8


@dataclass
class FixOutcome:
    path: str
    original: bytes
    fixed: bytes | None = None  # None: nothing changed (or an error)
    applied: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)  # active findings on the final code
    error: FileError | None = None
    rounds: int = 0
    # Fixes not written because they would have left the module broken (an undefined name, an
    # import over another binding, a builtin shadowed), with the reason; their sites got their
    # next-best fix or none.
    refused: list[tuple[Diagnostic, str]] = field(default_factory=list)
    # The package's shared module the fixed code imports helpers from, and those helpers (by their
    # name there); None: the module defines every helper it uses.
    shared: SharedLocation | None = None
    shared_helpers: frozenset[str] = frozenset()
    created: bool = False  # a file this run creates (a package's shared module)

    @property
    def changed(self) -> bool:
        return self.fixed is not None and self.fixed != self.original


def may_apply(d: Diagnostic, unsafe: bool) -> bool:
    """What a diagnostic shows of `applicable`: active, with a fix the run may apply."""
    return d.state is State.ACTIVE and d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)


def applicable(finding: Finding, unsafe: bool) -> bool:
    if finding.fix is None or not may_apply(finding.diagnostic, unsafe):
        return False
    return bool(finding.fix.all_edits(finding.node) or finding.fix.add_imports)


def _span(analysis: Analysis, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
    where = analysis.positions.get(node)
    if where is None:  # a target the metadata did not cover: treat as the whole file (never overlap-safe)
        return (0, 0), (1 << 30, 0)
    return (where.start.line, where.start.column), (where.end.line, where.end.column)


def _spans(analysis: Analysis, finding: Finding):
    """The source ranges a fix rewrites; an insertion occupies only the point where it goes."""
    spans = []
    for edit in finding.fix.all_edits(finding.node):
        start, end = _span(analysis, edit.target)
        spans.append((start, start) if edit.replacement is None else (start, end))
    return spans


def choose(analysis: Analysis, candidates: Sequence[Finding]) -> list[Finding]:
    """Innermost first (after any fix with a higher priority); a fix whose edits overlap an already
    chosen one waits for the next round."""
    def order(finding: Finding):
        size = max(((e[0] - s[0], e[1] - s[1]) for s, e in _spans(analysis, finding)), default=(0, 0))
        return -finding.fix.priority, size

    chosen: list[Finding] = []
    taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for finding in sorted(candidates, key=order):
        spans = _spans(analysis, finding)
        if any(s < te and ts < e for s, e in spans for ts, te in taken if s != e and ts != te):
            continue
        chosen.append(finding)
        taken.extend(spans)
    return chosen


def clean_indent(module: cst.Module) -> cst.Module:
    clean = indent_unit(module)
    return module if clean == module.default_indent else module.with_changes(default_indent=clean)


def _import_head(module: cst.Module) -> int:
    """How many of the module's first statements libcst's `AddImportsVisitor` may read or change,
    counted generously: the first statement (a docstring it keeps first), the import lines after it
    (where the new imports go), and the statement after those (it may get an empty line before it)."""
    body = module.body
    end = 1
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    return min(end + 1, len(body))


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)


# Top-level packages whose import imports jax (the packages whose legacy names the rules fix).
_JAX_FAMILY = frozenset({"jax", "jaxlib", "flax", "runtime_shim"})


def _imports_jax(statement: cst.SimpleStatementLine) -> bool:
    return any(full.split(".")[0] in _JAX_FAMILY
               for small in statement.body for _, full in imported_names(small))


class _Reads(cst.CSTVisitor):
    """Whether a statement reads one of ``names`` (attribute names and keywords aside)."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__()
        self.names = names
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if isinstance(node, cst.Name):
            self.found = node.value in self.names
            return False
        if isinstance(node, cst.Attribute):
            node.value.visit(self)
            return False
        if isinstance(node, cst.Arg) and node.keyword is not None:
            node.value.visit(self)
            return False
        return True


def _present(module: cst.Module) -> set[tuple[str, str | None, str | None]]:
    """The imports of the module's top-level import lines, as (module, name, asname)."""
    found = set()
    for statement in module.body:
        if not _is_import_line(statement):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    found.add((get_full_name_for_node(alias.name), None, _asname(alias)))
            elif small.module is not None and not isinstance(small.names, cst.ImportStar):
                source = "." * len(small.relative) + get_full_name_for_node(small.module)
                for alias in small.names:
                    found.add((source, get_full_name_for_node(alias.name), _asname(alias)))
    return found


def _binding(spec) -> tuple[str, str]:
    """(the name an import binds, what it binds it to): `import jax.numpy as jnp` and `from jax import
    numpy as jnp` both bind `jnp` to `jax.numpy`. `import jax.numpy` binds `jax`, and loads
    `jax.numpy` too, which `import jax` does not: it stands for `jax.numpy`."""
    module, name, asname = (("." * spec.relative + spec.module, spec.name, spec.asname)
                            if not isinstance(spec, tuple) else spec)
    if name is None:
        return (asname, module) if asname else (module.split(".")[0], module)
    return asname or name, f"{module}.{name}"


def _bindings(present: set[tuple[str, str | None, str | None]]) -> dict[str, str]:
    """What the module's top-level imports bind, by name (a name bound by two imports to different
    things is left out: adding one of them again would not be a redefinition of the same)."""
    bound: dict[str, str | None] = {}
    for entry in present:
        name, target = _binding(entry)
        bound[name] = target if bound.get(name, target) == target else None
    return {name: target for name, target in bound.items() if target is not None}


def _asname(alias: cst.ImportAlias) -> str | None:
    return None if alias.asname is None else get_full_name_for_node(alias.asname.name)


def _bound_names(specs: Iterable) -> frozenset[str]:
    return frozenset(spec.asname or spec.name or spec.module.split(".")[0] for spec in specs)


def _import_window(module: cst.Module, names: frozenset[str]) -> tuple[int, int] | None:
    """Where new imports binding ``names`` go, as the slice of the module's statements that
    libcst's `AddImportsVisitor` is run on (it puts them after the imports at the start of the
    slice); None: the imports at the top of the module, its own choice.

    Its choice is wrong when code runs after the imports at the top and before jax is imported: a
    program that sets `JAX_ENABLE_X64` or `JAX_PLATFORMS` in `os.environ` before `import jax`
    would have jax imported before that (jax reads them at import time: other numbers, other
    devices). The new imports (jax's own modules, numpy, the shim) then go after the last import
    before the first statement that reads them, when jax is imported by then, else just before
    that statement."""
    body = module.body
    top = 1 if body and _is_docstring(body[0]) else 0  # where libcst puts them: after the imports at the top
    while top < len(body) and _is_import_line(body[top]):
        top += 1
    use = next((i for i in range(len(body)) if not _is_import_line(body[i]) and _reads(body[i], names)), len(body))
    jax_at = next((i for i in range(use) if _is_import_line(body[i]) and _imports_jax(body[i])), None)
    runs_code = any(not _is_import_line(body[i]) and not isinstance(body[i], (cst.FunctionDef, cst.ClassDef))
                    for i in range(top, use if jax_at is None else min(jax_at, use)))
    if not runs_code:
        return None
    if jax_at is not None:
        last = max(i for i in range(jax_at, use) if _is_import_line(body[i]))
        start = last
        while start > top and _is_import_line(body[start - 1]):
            start -= 1
        return start, min(last + 2, len(body))
    return use, use + 1


def _import_block(module: cst.Module, names: frozenset[str]) -> tuple[int, int] | None:
    """The import lines new imports join, as a slice of the module's statements: those at the top
    (None), or, where code runs before jax is imported, those before the first statement that
    reads them (``_import_window``); (k, k): none there."""
    window = _import_window(module, names) if names else None
    if window is None:
        return None
    start, end = window
    while end > start and not _is_import_line(module.body[end - 1]):
        end -= 1
    return start, end


def _is_docstring(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def _reads(statement: cst.CSTNode, names: frozenset[str]) -> bool:
    reads = _Reads(names)
    statement.visit(reads)
    return reads.found


def _add_imports(module: cst.Module, context: CodemodContext, names: frozenset[str] = frozenset()) -> cst.Module:
    """libcst's `AddImportsVisitor` on the module, with what it scheduled in ``context``; the new
    imports bind ``names`` (`_import_window` says where they go).

    It reads and changes only the statements of that window (by default those `_import_head`
    counts: the imports at the top, where it also puts new ones), but its transform copies the
    whole module and walks every node: it runs on a module of those statements, the rest of the
    body is put back around them, and a compound statement among them (a class or function, which
    none of its tests matches) stands in as a ``pass`` line with the same leading lines, which get
    the empty line it may add."""
    window = _import_window(module, names) if names else None
    start, end = window if window is not None else (0, _import_head(module))
    shell = list(module.body[start:end])
    stubbed = {i: statement for i, statement in enumerate(shell) if isinstance(statement, cst.BaseCompoundStatement)}
    if start == 0 and end == len(module.body) and not stubbed:
        return AddImportsVisitor(context).transform_module(module)
    for i, statement in stubbed.items():
        shell[i] = cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=statement.leading_lines)
    done = list(AddImportsVisitor(context).transform_module(module.with_changes(body=shell)).body)
    # It only inserts statements, before the first one that is neither a docstring nor an import:
    # the statements from the first stub on are the last ones of its result.
    offset = len(done) - len(shell)
    for i, statement in stubbed.items():
        done[i + offset] = statement.with_changes(leading_lines=done[i + offset].leading_lines)
    return module.with_changes(body=(*module.body[:start], *done, *module.body[end:]))


class _RemoveImports(RemoveImportsVisitor):
    """libcst's `RemoveImportsVisitor`, whose transform (which copies every node it walks into)
    does not enter expressions and simple statements other than imports: it changes nothing but
    import statements, and none can be inside those.

    libcst drops a removed import line with the comments and blank lines above it (a docstring, a
    blank line, `# tools`, `import functools`, `import os` became the docstring then `import os`):
    here they go to the next statement of the same body (a blank line where the two meet counts
    once: `_joined_lines`), or, comments only, to the body's footer when nothing follows."""

    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self._pending: list[list[cst.EmptyLine]] = []  # per open body: lines of removed statements
        self._given: dict[int, list[cst.EmptyLine]] = {}  # statement -> lines it takes over

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Module, cst.IndentedBlock)):
            self._pending.append([])
        elif isinstance(node, cst.BaseStatement) and self._pending and self._pending[-1]:
            self._given[id(node)], self._pending[-1] = self._pending[-1], []
        return super().on_visit(node) and not isinstance(node, _NO_IMPORTS_INSIDE)

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, cst.BaseStatement):
            given = self._given.pop(id(original_node), [])
            if isinstance(result, cst.SimpleStatementLine) and not result.body:  # removed by its body
                self._pending[-1] += [*given, *original_node.leading_lines]
            elif given and isinstance(result, cst.BaseStatement):
                result = result.with_changes(leading_lines=_joined_lines(given, result.leading_lines))
        elif isinstance(original_node, (cst.Module, cst.IndentedBlock)):
            left = [line for line in self._pending.pop() if line.comment is not None]
            if left and isinstance(result, (cst.Module, cst.IndentedBlock)):
                result = result.with_changes(footer=[*left, *result.footer])
        return result


def _joined_lines(taken: list[cst.EmptyLine], own: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a removed statement, then the next statement's own: what deleting only the
    statement's own line leaves, except that a blank line where the two meet counts once."""
    taken = list(taken)
    if own and own[0].comment is None:
        while taken and taken[-1].comment is None:
            taken.pop()
    return [*taken, *own]


_NO_IMPORTS_INSIDE = (cst.BaseExpression, cst.Decorator, cst.Parameters, cst.Annotation, cst.Arg,
                      cst.AnnAssign, cst.Assert, cst.Assign, cst.AugAssign, cst.Break, cst.Continue, cst.Del,
                      cst.Expr, cst.Global, cst.Nonlocal, cst.Pass, cst.Raise, cst.Return, cst.TypeAlias)


def _helper_edits(module: cst.Module, helpers: list, edits: list[Edit],
                  parents: Mapping[cst.CSTNode, cst.CSTNode] | None) -> list[Edit]:
    """The insertion of the helpers the module does not define yet: after the last top-level import
    before the first statement the fixes edit (or that code runs; just before that statement when
    no jax import precedes it), not inside a block of import lines, two blank lines around them."""
    bound = {name for statement in module.body for name in _top_level_names(statement)}
    missing = [helper for helper in helpers if helper.name not in bound]
    if not missing:
        return []
    tops = {id(statement): k for k, statement in enumerate(module.body)}
    first = len(module.body)
    for edit in edits:
        node = edit.target
        while parents is not None and id(node) not in tops and node in parents:
            node = parents[node]
        first = min(first, tops.get(id(node), first))
    while first < len(module.body) and _is_import_line(module.body[first]):
        first += 1  # an edited import line (a renamed module): after the rest of its block (E402)
    imports = [k for k in range(first) if _is_import_line(module.body[k])]
    at = imports[-1] + 1 if imports else (1 if module.body and _is_docstring(module.body[0]) else 0)
    if not any(_imports_jax(module.body[k]) for k in imports):
        # the helpers' imports go just before them (`_import_window`): not before code that runs
        # ahead of the module's own jax import (an `os.environ` setting jax reads when imported)
        at = max(at, min(first, len(module.body)))
    statements = []
    for helper in missing:
        for k, statement in enumerate(helper.statements):
            blank = [cst.EmptyLine(indent=False)] * 2 if k == 0 else []
            statements.append(statement.with_changes(leading_lines=[*blank, *statement.leading_lines]))
    if at >= len(module.body):
        return [Edit(module.body[-1], cst.FlattenSentinel([module.body[-1], *statements]))] if module.body else []
    anchor = module.body[at]
    insert = [Edit(anchor, before=tuple(statements))]
    lines = list(anchor.leading_lines)
    empty = 0
    while empty < len(lines) and lines[empty].comment is None:
        empty += 1
    if empty < 2 and parents is not None and not any(_within(edit.target, anchor, parents) for edit in edits):
        insert.append(Edit(anchor, anchor.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * (2 - empty) + lines)))
    return insert


def _within(node: cst.CSTNode, ancestor: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode]) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = parents.get(node)
    return False


def _top_level_names(statement: cst.CSTNode) -> list[str]:
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return [statement.name.value]
    if isinstance(statement, cst.SimpleStatementLine):
        return [t.target.value for small in statement.body if isinstance(small, cst.Assign)
                for t in small.targets if isinstance(t.target, cst.Name)]
    return []


def _toward(module: cst.Module, targets: Iterable[cst.CSTNode],
            parents: Mapping[cst.CSTNode, cst.CSTNode]) -> set[int] | None:
    """The ids of ``targets`` and of their ancestors up to ``module``; None when a target's line of
    parents does not reach the module (a node the analysis did not index: walk everything)."""
    toward = {id(module)}
    for target in targets:
        node = target
        while node is not module and id(node) not in toward:
            toward.add(id(node))
            node = parents.get(node)
            if node is None:
                return None
    return toward


def _shared_import(location: SharedLocation, name: str, local: str) -> ImportSpec:
    return ImportSpec(location.module, name, None if local == name else local, location.relative)


def imported_helpers(module: cst.Module, chosen: Sequence[Finding], shared: SharedLocation | None) -> dict:
    """The helpers of ``chosen`` that the module imports from its package's shared module, by
    their name in the module: those with a shared form, where there is a shared module, which the
    module does not define itself (a copy an earlier run wrote stays the one used)."""
    if shared is None:
        return {}
    defined = {name for statement in module.body for name in _top_level_names(statement)}
    return {name: helper for name, helper in fix_helpers(chosen).items() if helper.shared and name not in defined}


def fix_helpers(chosen: Sequence[Finding]) -> dict[str, Helper]:
    """The helpers the fixes of ``chosen`` need, by name; one that a fix calls and another only
    needs beside a helper it calls (``Helper.support``) is the one called (imported)."""
    helpers: dict[str, Helper] = {}
    for finding in chosen:
        for helper in finding.fix.helpers:
            if helper.name not in helpers or helpers[helper.name].support:
                helpers[helper.name] = helper
    return helpers


def shared_names(imported: Mapping[str, Helper], fixed: cst.Module) -> set[str]:
    """What the fixed module needs of its package's shared module: the helpers ``imported`` (by
    their name in the module), and the options its calls pass `_shard_mapped`."""
    names = {helper.shared for helper in imported.values()}
    for local, helper in imported.items():
        if helper.shared in (SHARD_MAPPED, GLOBAL_PMAP):
            names |= feature_names(called_features(fixed, local, helper.shared))
    return names


def apply(module: cst.Module, chosen: Sequence[Finding],
          parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None,
          shared: SharedLocation | None = None, order: ImportOrder | None = None,
          width: int = DEFAULT_LINE_LENGTH) -> cst.Module:
    """The module with the fixes of ``chosen`` applied (with ``parents``, the analysis' map of
    ``module``'s nodes, only the paths to the edits' targets are rebuilt). With ``shared``, the
    helpers that have a shared form are imported from that module instead of written here; with
    ``order``, new imports go where isort would put them: ``pmap_migrate.importorder``; the
    comments of shimmed sites are wrapped at ``width``, the file's line length."""
    edits = [edit for finding in chosen for edit in finding.fix.all_edits(finding.node)]
    helpers = fix_helpers(chosen)
    imported = imported_helpers(module, chosen, shared)
    helper_imports = [spec for helper in helpers.values() if helper.name not in imported for spec in helper.imports]
    helper_imports += [_shared_import(shared, helper.shared, name) for name, helper in imported.items()
                       if not helper.support]
    helpers = {name: helper for name, helper in helpers.items() if name not in imported}
    if helpers:  # first: code that runs at import may call them
        edits = _helper_edits(module, list(helpers.values()), edits, parents) + edits
    if edits and parents:
        edits = spaced_definitions(parents, edits)
    comments = None
    shimmed = [(finding.fix.target or finding.node, finding.fix.why) for finding in chosen
               if finding.fix.shimmed and finding.fix.why and finding.fix.replacement is not None]
    if shimmed and parents:
        comments = shim_comments(shimmed, parents, indent_unit(module), width)
    if edits:
        toward = None if not parents else _toward(module, [edit.target for edit in edits], parents)
        module = module.visit(EditApplier(edits, toward, comments=comments))
    for helper in helpers.values():  # (written with every option: now with those the calls pass)
        if helper.variant is not None:
            module = fitted_helper(module, helper.name, helper.variant)
    context = CodemodContext()
    # libcst takes the first indented line's indentation as the module's unit, form feed included
    # (`\f    x = 1`); its import visitors reject that unit and generated blocks would repeat the
    # form feed on every line. Render with the unit cleaned: `restore_lost_lines` puts the form
    # feeds of untouched lines back.
    module = clean_indent(module)
    adds = [spec for f in chosen for spec in f.fix.add_imports] + helper_imports
    removes = [spec for f in chosen for spec in f.fix.remove_imports]
    if adds:
        # An import the module has already, anywhere among its top-level lines, is not added
        # again (libcst looks only at the lines where it puts new ones).
        present = _present(module)
        bound = _bindings(present)
        adds = [spec for spec in dict.fromkeys(adds)
                if ("." * spec.relative + spec.module, spec.name, spec.asname) not in present
                and bound.get(_binding(spec)[0]) != _binding(spec)[1]]
        # `functools.partial` written as the module's own `partial`, and the like: no new import
        module, adds = reuse_bound_names(module, adds)
        names = _bound_names(adds)
        if adds and order is not None:
            left = []
            for spec in adds:  # at isort's place in the import block they go to, merged where it can be
                added = add_import(module, spec, order, _import_block(module, names))
                if added is None:
                    left.append(spec)
                else:
                    module = added
            adds = left
        for spec in adds:
            AddImportsVisitor.add_needed_import(context, spec.module, spec.name, spec.asname, spec.relative)
        if adds:
            module = _add_imports(module, context, names)
    relative = [spec for spec in dict.fromkeys(removes) if spec.relative and spec.name]
    removes = [spec for spec in removes if not (spec.relative and spec.name)]
    if removes:
        for spec in dict.fromkeys(removes):
            RemoveImportsVisitor.remove_unused_import(context, spec.module, spec.name, spec.asname)
        module = _RemoveImports(context).transform_module(module)
    if relative:
        module = _without_unused_relative(module, relative)
    return module


def _without_unused_relative(module: cst.Module, specs: Sequence[ImportSpec]) -> cst.Module:
    """``module`` without the names of the module-level relative imports ``specs`` (``from
    .constants import pmap as p``) that no other statement reads (libcst's visitor does not resolve
    relative imports without the package's name)."""
    unread = {spec for spec in specs
              if not any(_reads(s, frozenset({spec.asname or spec.name}))
                         for s in module.body if not _is_import_line(s))}
    if not unread:
        return module
    body = []
    taken: list[cst.EmptyLine] = []  # the lines above a removed statement go to the next one
    for statement in module.body:
        if taken:
            statement = statement.with_changes(leading_lines=_joined_lines(taken, statement.leading_lines))
            taken = []
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        if isinstance(small, cst.ImportFrom) and small.relative and not isinstance(small.names, cst.ImportStar):
            source = get_full_name_for_node(small.module) if small.module is not None else ""
            kept = [alias for alias in small.names
                    if ImportSpec(source or "", get_full_name_for_node(alias.name), _asname(alias),
                                  len(small.relative)) not in unread]
            if not kept:
                taken = list(statement.leading_lines)
                continue
            if len(kept) != len(small.names):
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                statement = statement.with_changes(body=[small.with_changes(names=kept)])
        body.append(statement)
    return module.with_changes(body=body)


def python_rejects(original: bytes, fixed: bytes) -> str | None:
    """Why the running Python's compiler rejects ``fixed`` although it accepts ``original``
    (None when it accepts both, or already rejected the original: code for a newer Python).
    A second opinion on libcst's parser, which does not check what CPython checks after parsing
    (`from __future__` placement, `return` outside a function, starred targets, ...)."""

    def problem(data: bytes) -> str | None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escape sequences and the like
                compile(data, "<fixed>", "exec", dont_inherit=True)  # compiled only, never run
        except SyntaxError as error:
            return f"line {error.lineno}: {error.msg}"
        except (ValueError, RecursionError, MemoryError) as error:
            return f"{type(error).__name__}: {error}"
        return None

    found = problem(fixed)
    if found is None or problem(original) is not None:
        return None
    return found


def restore_lost_lines(original: bytes, roundtrip: bytes, final: bytes) -> bytes | None:
    """``final`` with the lines libcst re-rendered differently from ``original`` put back where no
    fix changed them (None when the difference is not line by line).

    libcst keeps one indentation per block and renders every statement's line with it, so a
    form feed before a statement (`\\f    x = 1`) is lost even where nothing was edited. Lines of
    ``final`` that are equal to lines of the unedited rendering ``roundtrip`` are unedited: they get
    their original bytes back."""
    import difflib

    before, rendered = original.splitlines(keepends=True), roundtrip.splitlines(keepends=True)
    if len(before) != len(rendered):
        return None
    if final == roundtrip:  # nothing was fixed
        return original
    restore = {i: line for i, (line, same) in enumerate(zip(before, rendered)) if line != same}
    after = final.splitlines(keepends=True)
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(None, rendered, after, autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                if i1 + k in restore:
                    after[j1 + k] = restore[i1 + k]
    return b"".join(after)


def _last_round(data: bytes, path: str, rules: Sequence[type[Rule]], options: RuleOptions | None,
                unsafe: bool, refused: Mapping[tuple[str, str], str] | None = None) -> list[Diagnostic] | None:
    """The findings on ``data``, the code a round of fixes made, when none of them has a fix the
    run may apply; None when some has, or when ``data`` is not analysed through a slice.

    The next round would parse and analyse the whole module again only to find that nothing is
    left to fix and to list the findings left. `check`'s analysis of the module's relevant slice
    (codemod/slices.py: the same findings, fixes included, at a fraction of the cost) answers
    both; `ast` accepting the code vouches that libcst parses it too. Otherwise the whole module is
    parsed and analysed, as for every round."""
    sliced = sliced_module(data, path, rules, None)
    if sliced is None:
        return None
    module, source, kept = sliced
    found = lint_module(module, path, rules, options, source, kept, refused)
    if any(may_apply(d, unsafe) for d in found):
        return None
    return found


def _site_key(module: cst.Module, finding: Finding) -> tuple[str, str]:
    return finding.diagnostic.code, module.code_for_node(finding.node)


def _refusals(analysis: Analysis, chosen: Sequence[Finding], candidate: cst.Module,
              following: Analysis | None = None, shared: SharedLocation | None = None) -> dict[tuple[str, str], str]:
    """The fixes among ``chosen`` that break the module's names (``name_problems``), by site, with
    why; {} when ``candidate`` (all of them applied; ``following``: its analysis, when made) has no
    problem. Each fix is tried on top of those found harmless before it."""
    before = name_facts(analysis.module, analysis.scopes)
    after = name_facts(following.module, following.scopes) if following is not None else name_facts(candidate)
    if not name_problems(before, after):
        return {}
    kept: list[Finding] = []
    refused: dict[tuple[str, str], str] = {}
    for finding in chosen:
        problems = name_problems(before, name_facts(apply(analysis.module, [*kept, finding], analysis.parents, shared)))
        if problems:
            refused[_site_key(analysis.module, finding)] = "the rewrite would leave " + "; ".join(problems)
        else:
            kept.append(finding)
    return refused


def in_project_style(original: bytes, fixed: bytes, path: str, module: cst.Module) -> bytes:
    """``fixed`` laid out in the project's style (``pmap_migrate.layout``): its new lines within the
    project's line length, continuation lines aligned after renames, statements that an edit
    pushed past the limit laid out again (``pmap_migrate.relayout``); ``fixed`` as it is when the
    result would not compile."""
    encoding = module.encoding
    try:
        before, after = original.decode(encoding), fixed.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return fixed
    limit, unit = line_length(path), indent_unit(module)
    hug = closes_on_last_line(before)  # where the file puts a closing bracket
    text = relayout(styled(after, before, limit, unit, hug), before, limit, unit, hug)
    if text == after:
        return fixed
    styled_bytes = text.encode(encoding)
    return fixed if python_rejects(original, styled_bytes) is not None else styled_bytes


@on_deep_stack
def fix_bytes(data: bytes, path: str, rules: Sequence[type[Rule]], *, unsafe: bool = False,
              max_rounds: int = MAX_ROUNDS, options: RuleOptions | None = None, shared: bool = False,
              project: ModuleView | None = None) -> FixOutcome:
    """Fix one file's contents. Never raises; never returns output that does not parse.

    With ``shared``, helpers are imported from the package's shared module where ``path`` has one
    (pmap_migrate/shared_module.py; the outcome says which, the caller writes that module).

    The idiomatic option only takes effect with ``unsafe`` (its fixes are unsafe); without it the
    faithful rewrite applies. ``project``: the project index as the module sees it (the uses of an
    alias another module defines are rewritten through it, as `check` reports them)."""
    outcome = FixOutcome(path, data)
    made: dict[int, tuple[cst.Module, bytes]] = {}

    def rendered(tree: cst.Module) -> bytes:  # a module's code, made once (a large module's takes a while)
        if id(tree) not in made:
            made[id(tree)] = tree, tree.bytes
        return made[id(tree)][1]

    if options is not None and options.idiomatic and not unsafe:
        options = replace(options, idiomatic=False)
    order = import_order(path)
    width = line_length(path)
    module = None
    final: bytes | None = None
    remaining: list[Diagnostic] = []
    try:
        module = parse(data, path)
        if isinstance(module, FileError):
            outcome.error = module
            return outcome
        refused: dict[tuple[str, str], str] = {}
        location = location_for(path, module) if shared else None
        used: set[str] = set()
        analysis = analyse(module, path, rules, options, all_positions=False, project=project)
        for _ in range(max_rounds):
            chosen = choose(analysis, [f for f in analysis.findings if applicable(f, unsafe)])
            if not chosen:
                break
            candidate = apply(analysis.module, chosen, analysis.parents, location, order, width)
            new_bytes = candidate.bytes
            if new_bytes == rendered(analysis.module):
                break
            last = None if project is not None else _last_round(new_bytes, path, rules, options, unsafe, refused)
            following = None
            if last is None:
                reparsed = parse(new_bytes, path)
                if isinstance(reparsed, FileError):
                    codes = ", ".join(sorted({f.diagnostic.code for f in chosen}))
                    outcome.error = FileError(path, "PM002", one_line(f"internal error: the {codes} fix produced "
                                              f"code that does not parse ({reparsed.message}); file left unchanged"))
                    return outcome
                following = analyse(reparsed, path, rules, options, all_positions=False, refused=refused,
                                    project=project)
            broken = _refusals(analysis, chosen, candidate, following, location)
            if broken:
                # Fixes that would leave the module broken are not written: their sites get their
                # next-best fix (a shim) or none, and the round starts again from the same code.
                refused.update(broken)
                outcome.refused.extend((f.diagnostic, why) for f in chosen
                                       if (why := broken.get(_site_key(analysis.module, f))) is not None)
                analysis = analyse(analysis.module, path, rules, options, all_positions=False, refused=refused,
                                   project=project)
                continue
            used.update(shared_names(imported_helpers(analysis.module, chosen, location), candidate))
            if last is not None:  # nothing more to fix: the findings on the new code are those left
                outcome.applied.extend(f.diagnostic for f in chosen)
                outcome.rounds += 1
                final, remaining = new_bytes, last
                break
            outcome.applied.extend(f.diagnostic for f in chosen)
            outcome.rounds += 1
            analysis = following
        if final is None:
            final = rendered(analysis.module)
            remaining = [f.diagnostic for f in analysis.findings]
            if project is not None:
                # Uses of an imported alias that its module's fix keeps on the shim: fixed there.
                through = {id(f.diagnostic) for f in analysis.findings if f.fix is not None and f.fix.shimmed
                           and f.fix.replacement is None and not f.fix.edits and may_apply(f.diagnostic, unsafe)}
                outcome.applied.extend(d for d in remaining if id(d) in through)
                remaining = [d for d in remaining if id(d) not in through]
        roundtrip = final if outcome.rounds == 0 else rendered(clean_indent(module))
        if roundtrip != data:
            # libcst re-rendered bytes that no fix touched (form feeds in indentation): put them back
            final = restore_lost_lines(data, roundtrip, final)
            if final is None or (final != data and isinstance(parse(final, path), FileError)):
                outcome.error = FileError(path, "PM002", "internal error: libcst does not reproduce this file "
                                          "byte for byte; file left unchanged")
                return outcome
        if final != data:
            final = in_project_style(data, final, path, module)
            refusal = python_rejects(data, final)
            if refusal is not None:
                outcome.error = FileError(path, "PM002", one_line(
                    f"internal error: the fixed code does not compile under Python "
                    f"{sys.version_info.major}.{sys.version_info.minor} ({refusal}); file left unchanged"))
                return outcome
            outcome.fixed = final
            if used:
                outcome.shared, outcome.shared_helpers = location, frozenset(used)
        outcome.remaining = [d for d in remaining if d.state is State.ACTIVE]
    except RecursionError:
        outcome.error = recursion_error(path, module)
        outcome.fixed = None
    except Exception as error:  # a rule bug must not end the run or show a traceback
        outcome.error = FileError(path, "PM002", one_line(f"internal error: {type(error).__name__}: {error}"))
        outcome.fixed = None
    return outcome
