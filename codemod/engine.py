"""Checking one file: parse once, build one MetadataWrapper, run every rule in one batched visit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, Scope

from pmap_migrate.diagnostics import Diagnostic, FileError, FileResult, FixInfo, State
from pmap_migrate.libcst_patches import parse_module
from pmap_migrate.positions import positions as node_positions
from pmap_migrate.positions import statement_positions
from pmap_migrate.prefilter import gate_of
from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.project import ModuleView
from pmap_migrate.rules.base import Rule, RuleContext
from pmap_migrate.rules.fixes.choices import RuleOptions
from pmap_migrate.rules.fixes.spec import FixSpec
from pmap_migrate.slices import AST_WITHIN_LIBCST, Parsed, Slice, parse_python, relevant_slice
from pmap_migrate.stack import on_deep_stack
from pmap_migrate.suppression import Suppressions, is_guarded


def one_line(message: str) -> str:
    """Messages are one line (`path:line:col: CODE message`), whatever an exception's text holds."""
    return " ".join(message.split()) or "no details"


# CPython's own limit (its tokenizer's MAXLEVEL): deeper code is not Python. libcst's native parser
# has no such check and overflows its stack (SIGSEGV) some way beyond it, so it never sees such code.
MAX_BRACKET_DEPTH = 200
_OPENING, _CLOSING = b"([{", b")]}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _OPENING + _CLOSING)


def bracket_depth(data: bytes | str) -> int:
    """The deepest nesting of brackets, counting those in strings and comments too (so at least
    the true depth, unless closing brackets in strings hide opening ones)."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    brackets = raw.translate(None, _NOT_BRACKETS)
    if sum(brackets.count(b) for b in _OPENING) <= MAX_BRACKET_DEPTH:
        return 0  # too few to matter; the common case costs one pass in C
    depth = deepest = 0
    for byte in brackets:
        if byte in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest


def _true_bracket_depth(data: bytes | str) -> int | None:
    """The nesting of bracket tokens (strings and comments left out); None if it cannot be tokenized."""
    import io
    import tokenize

    readline = io.BytesIO(data).readline if isinstance(data, bytes) else io.StringIO(data).readline
    tokens = tokenize.tokenize(readline) if isinstance(data, bytes) else tokenize.generate_tokens(readline)
    depth = deepest = 0
    try:
        for token in tokens:
            if token.type == tokenize.OP and token.string in ("(", "[", "{"):
                depth += 1
                deepest = max(deepest, depth)
            elif token.type == tokenize.OP and token.string in (")", "]", "}"):
                depth = max(0, depth - 1)
    except (SyntaxError, tokenize.TokenError, UnicodeError, LookupError):
        return None
    return deepest


def parse(data: bytes | str, path: str) -> cst.Module | FileError:
    if bracket_depth(data) > MAX_BRACKET_DEPTH:
        depth = _true_bracket_depth(data)
        if depth is None or depth > MAX_BRACKET_DEPTH:
            return FileError(path, "PM000", f"SyntaxError: too many nested parentheses "
                             f"(more than {MAX_BRACKET_DEPTH} levels)")
    try:
        return parse_module(data)
    except cst.ParserSyntaxError as error:
        message = str(error).splitlines()[0] if str(error) else "invalid syntax"
        return FileError(path, "PM000", one_line(f"SyntaxError: {error.message or message}"),
                         max(error.raw_line, 1), error.raw_column + 1)
    except (UnicodeError, LookupError) as error:  # bad bytes, or a coding cookie naming no text codec
        return FileError(path, "PM001", one_line(f"cannot decode file: {error}"))
    except SyntaxError as error:  # the encoding detection: no valid cookie for non-UTF-8 bytes, a BOM contradicting it
        return FileError(path, "PM001", one_line(f"cannot decode file: {error.msg}"))
    except RecursionError:
        return FileError(path, "PM000", "SyntaxError: too deeply nested to parse")


@dataclass
class Finding:
    """A diagnostic together with the nodes its fix refers to (valid for one tree only)."""

    diagnostic: Diagnostic
    node: cst.CSTNode
    fix: FixSpec | None


@dataclass
class Analysis:
    module: cst.Module
    findings: list[Finding]
    positions: Mapping[cst.CSTNode, CodeRange]
    parents: Mapping[cst.CSTNode, cst.CSTNode] = field(default_factory=dict)  # of the nodes the analysis indexed
    scopes: Sequence[Scope] | None = None  # the module's scopes (a whole module's analysis with findings)


def analyse(module: cst.Module, path: str, rules: Sequence[type[Rule]],
            options: RuleOptions | None = None, source: str | None = None, *,
            all_positions: bool = True, sliced: Slice | None = None, edit_targets: bool = True,
            refused: Mapping[tuple[str, str], str] | None = None,
            project: ModuleView | None = None) -> Analysis:
    """Every finding of ``rules`` on ``module``, with suppression and guard states set. ``source``:
    the file's text when ``module`` is a slice of it (its `noqa` comments count), ``sliced`` that
    slice (findings are placed on the file's lines). The analysis has every node's position unless
    ``all_positions`` is false (then those of the reported nodes and of their fixes' edit targets,
    and of whatever precedes the last of them; without ``edit_targets``, only of the reported nodes:
    `check` places findings, it does not apply fixes). ``refused``: fixes `fix` refused to write
    (``RuleContext.refused``): a rule may offer another (a shim); any other fix of such a site is
    dropped, and its finding says why. ``project``: the project index as the module sees it
    (rules/analysis/project.py): findings keep the fixes the analysis through it gives them (a use
    of an alias another module defines is rewritten: rules/analysis/imported.py; `fix` analyses
    through the same index), but where such a fix would edit another module's nodes."""
    if not rules:
        return Analysis(module, [], {})
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    options = options or RuleOptions()
    context = RuleContext(path, SemanticModel(wrapper, project, run_by=options.multi_process_callers), options=options,
                          refused=refused or {})
    wrapper.visit_batched([rule(context) for rule in rules])
    if not context.reports:
        return Analysis(module, [], {})
    if context.model.uses_project:
        _fixes_without_project(context, module, path, rules, options, refused)
    # The reported nodes, and the targets of their fixes' edits (where `fix` needs to know which
    # edits overlap): code generation for positions stops after the last of them.
    needed = None if all_positions else [
        *(report.node for _, report in context.reports),
        *(edit.target for _, report in context.reports if edit_targets and report.fix is not None
          for edit in report.fix.all_edits(report.node))]
    positions = None
    if needed is not None and sliced is not None and sliced.starts:
        # Only the code of the statements that hold them (checked against the slice's text).
        positions = statement_positions(module, needed, sliced.starts, sliced.text, context.model.parents)
    if positions is None:
        positions = node_positions(module, needed)
    suppressions = Suppressions(module.code if source is None else source)
    findings: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    for rule, report in context.reports:
        key = (rule.CODE, id(report.node))
        if key in seen:
            continue
        seen.add(key)
        if refused and report.fix is not None and not report.fix.shimmed:
            why = refused.get((rule.CODE, module.code_for_node(report.node)))
            if why is not None:
                report = replace(report, fix=None, message=f"{report.message}; not fixed: {why}")
        if not options.shim and report.fix is not None and report.fix.shimmed:
            report = replace(report, fix=None, message=f"{report.message}; not fixed (the shim fallback is off): "
                             f"{report.fix.why or report.fix.summary}")
        where = positions[report.node]
        line, end_line = where.start.line, where.end.line
        if sliced is not None:
            line = sliced.line_in_file(line)
            # An end at a line's start follows the line ending before it (whichever lines follow).
            end_line = sliced.line_in_file(end_line - 1) + 1 if where.end.column == 0 and end_line > 1 \
                else sliced.line_in_file(end_line)
        if suppressions.suppresses(rule.CODE, line):
            state = State.SUPPRESSED
        elif is_guarded(context.model, report.node):
            state = State.GUARDED
        else:
            state = State.ACTIVE
        info = None
        if report.fix is not None:
            info = FixInfo(report.fix.applicability, report.fix.summary, report.fix.shimmed)
        diagnostic = Diagnostic(
            code=rule.CODE, name=rule.NAME, message=report.message, path=path,
            line=line, column=where.start.column + 1, end_line=end_line,
            end_column=where.end.column + 1, fix=info, state=state,
        )
        findings.append(Finding(diagnostic, report.node, report.fix))
    findings.sort(key=lambda f: f.diagnostic.sort_key())
    return Analysis(module, findings, positions, context.model.parents,
                    context.model.scopes() if sliced is None else None)


def _fixes_without_project(context: RuleContext, module: cst.Module, path: str, rules: Sequence[type[Rule]],
                           options: RuleOptions | None, refused: Mapping[tuple[str, str], str] | None) -> None:
    """The reports of an analysis that used the project index, with the fixes it gave them, but
    for a fix that would edit nodes outside the module (parsed from another module's facts): that
    report gets the fix the module's analysis on its own gives the same finding (none for a finding
    only the index shows). Reports of nodes outside the module (an option another module binds)
    are left out."""
    parents = context.model.parents

    def inside(node: cst.CSTNode) -> bool:
        return node is module or node in parents

    context.reports[:] = [(rule, report) for rule, report in context.reports if inside(report.node)]
    foreign = [i for i, (_, report) in enumerate(context.reports) if report.fix is not None
               and not all(inside(edit.target) for edit in report.fix.all_edits(report.node))]
    if not foreign:
        return
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    options = options or RuleOptions()
    alone = RuleContext(path, SemanticModel(wrapper, run_by=options.multi_process_callers), options=options,
                        refused=refused or {})
    wrapper.visit_batched([rule(alone) for rule in rules])
    fixes = {(rule.CODE, id(report.node)): report.fix for rule, report in alone.reports}
    for i in foreign:
        rule, report = context.reports[i]
        context.reports[i] = rule, replace(report, fix=fixes.get((rule.CODE, id(report.node))))


# Nesting beyond this many tree levels is the code's own: Python's compiler gives up well before
# the engine does (a RecursionError at ~3000 levels on its deep stack). Shallower code that
# exhausts the stack points at a bug in a rule.
DEEP_CODE_LEVELS = 500


def tree_depth(module: cst.CSTNode) -> int:
    deepest, stack = 0, [(module, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node.children)
    return deepest


def recursion_error(path: str, module: cst.Module | FileError | None) -> FileError:
    """What a RecursionError means: code too deep to analyse (PM000, like code Python cannot
    compile), or unbounded recursion in a rule (PM002)."""
    if not isinstance(module, cst.Module) or tree_depth(module) > DEEP_CODE_LEVELS:
        return FileError(path, "PM000", "SyntaxError: code nested too deeply to analyse")
    return FileError(path, "PM002", "internal error: unbounded recursion in the analysis")


def lint_module(module: cst.Module, path: str, rules: Sequence[type[Rule]],
                options: RuleOptions | None = None, source: str | None = None,
                sliced: Slice | None = None, refused: Mapping[tuple[str, str], str] | None = None,
                project: ModuleView | None = None) -> list[Diagnostic]:
    return [f.diagnostic for f in analyse(module, path, rules, options, source, all_positions=False,
                                          sliced=sliced, edit_targets=False, refused=refused,
                                          project=project).findings]


def sliced_module(data: bytes | str, path: str, rules: Sequence[type[Rule]],
                  parsed: Parsed | None) -> tuple[cst.Module, str, Slice] | None:
    """The libcst module of the relevant slice of the file (codemod/slices.py), the file's text and
    the slice; None when the whole file is to be analysed (small, not valid for `ast`, nothing to
    leave out)."""
    if isinstance(data, str) or bracket_depth(data) > MAX_BRACKET_DEPTH:
        return None
    if parsed is None:
        parsed = parse_python(data)
        if parsed is None:
            return None  # libcst reports why
    sliced = relevant_slice(parsed.text, parsed.tree, gate_of(tuple(rules)), parsed.names)
    if sliced is None:
        return None
    if not AST_WITHIN_LIBCST and isinstance(parse(data, path), FileError):
        return None
    module = parse(sliced.text, path)
    if isinstance(module, FileError):
        return None  # the whole file's parse reports it, where it is
    return module, parsed.text, sliced


@on_deep_stack
def lint_bytes(data: bytes | str, path: str, rules: Sequence[type[Rule]],
               options: RuleOptions | None = None, *, whole: bool = False,
               parsed: Parsed | None = None, project: ModuleView | None = None) -> FileResult:
    """Check one file's contents. Never raises: failures become the result's ``error``.

    Large modules are analysed through their relevant slice unless ``whole`` (same findings:
    codemod/slices.py); ``parsed``: the file's `ast`, when the caller has it already. ``project``:
    the project index as the module sees it, consulted when the module imports what it knows (then
    the module is analysed whole: a use of an imported alias need not spell `pmap`)."""
    result = FileResult(path, parsed=True)
    module = None
    try:
        if project is not None and rules:
            if parsed is None and isinstance(data, bytes) and bracket_depth(data) <= MAX_BRACKET_DEPTH:
                parsed = parse_python(data)
            if parsed is not None and project.refers_to_exports(parsed.tree):
                whole = True
            else:
                project = None
        sliced = None if whole or not rules else sliced_module(data, path, rules, parsed)
        if sliced is not None:
            module, source, kept = sliced
            result.diagnostics = lint_module(module, path, rules, options, source, kept, project=project)
            return result
        module = parse(data, path)
        if isinstance(module, FileError):
            result.error = module
            return result
        result.diagnostics = lint_module(module, path, rules, options, project=project)
    except RecursionError:
        result.error = recursion_error(path, module)
    except Exception as error:  # a rule bug must not end the run or show a traceback
        result.error = FileError(path, "PM002", one_line(f"internal error: {type(error).__name__}: {error}"))
    return result
