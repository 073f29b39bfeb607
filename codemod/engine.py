"""Checking one file: parse once, build one MetadataWrapper, run every rule in one batched visit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from codemod.diagnostics import Applicability, Diagnostic, FileError, FileResult, FixInfo, State
from codemod.suppression import Suppressions, is_guarded
from rules.base import FixSpec, Rule, RuleContext, RuleOptions
from rules.semantic import SemanticModel


def triggers_of(rules: Sequence[type[Rule]]) -> tuple[bytes, ...] | None:
    """Byte strings of which one must occur in a file for any rule to fire (None: parse all)."""
    triggers: set[bytes] = set()
    for rule in rules:
        if not rule.TRIGGERS:
            return None
        triggers.update(t.encode() for t in rule.TRIGGERS)
    return tuple(sorted(triggers))


def might_match(data: bytes, triggers: tuple[bytes, ...] | None) -> bool:
    return triggers is None or any(t in data for t in triggers)


def one_line(message: str) -> str:
    """Messages are one line (`path:line:col: CODE message`), whatever an exception's text holds."""
    return " ".join(message.split()) or "no details"


def parse(data: bytes | str, path: str) -> cst.Module | FileError:
    try:
        return cst.parse_module(data)
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


def analyse(module: cst.Module, path: str, rules: Sequence[type[Rule]],
            options: RuleOptions | None = None) -> Analysis:
    """Every finding of ``rules`` on ``module``, with suppression and guard states set."""
    if not rules:
        return Analysis(module, [], {})
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    context = RuleContext(path, SemanticModel(wrapper), options=options or RuleOptions())
    wrapper.visit_batched([rule(context) for rule in rules])
    if not context.reports:
        return Analysis(module, [], {})
    positions = wrapper.resolve(PositionProvider)
    suppressions = Suppressions(module.code)
    findings: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    for rule, report in context.reports:
        key = (rule.CODE, id(report.node))
        if key in seen:
            continue
        seen.add(key)
        where = positions[report.node]
        line = where.start.line
        if suppressions.suppresses(rule.CODE, line):
            state = State.SUPPRESSED
        elif is_guarded(context.model, report.node):
            state = State.GUARDED
        else:
            state = State.ACTIVE
        info = None
        if report.fix is not None:
            info = FixInfo(Applicability(report.fix.applicability), report.fix.summary, report.fix.shimmed)
        diagnostic = Diagnostic(
            code=rule.CODE, name=rule.NAME, message=report.message, path=path,
            line=line, column=where.start.column + 1, end_line=where.end.line,
            end_column=where.end.column + 1, fix=info, state=state,
        )
        findings.append(Finding(diagnostic, report.node, report.fix))
    findings.sort(key=lambda f: f.diagnostic.sort_key())
    return Analysis(module, findings, positions)


def lint_module(module: cst.Module, path: str, rules: Sequence[type[Rule]],
                options: RuleOptions | None = None) -> list[Diagnostic]:
    return [f.diagnostic for f in analyse(module, path, rules, options).findings]


def lint_bytes(data: bytes | str, path: str, rules: Sequence[type[Rule]],
               options: RuleOptions | None = None) -> FileResult:
    """Check one file's contents. Never raises: failures become the result's ``error``."""
    result = FileResult(path, parsed=True)
    try:
        module = parse(data, path)
        if isinstance(module, FileError):
            result.error = module
            return result
        result.diagnostics = lint_module(module, path, rules, options)
    except RecursionError:
        result.error = FileError(path, "PM002", "internal error: code nested too deeply to analyse")
    except Exception as error:  # a rule bug must not end the run or show a traceback
        result.error = FileError(path, "PM002", one_line(f"internal error: {type(error).__name__}: {error}"))
    return result
