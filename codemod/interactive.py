"""`fix --interactive`: every fix proposed on its own, as a diff, to be applied, skipped or quit.

The review follows the rounds of `fix`: each round proposes the fixes `fix` would apply together
(innermost, non-overlapping), one by one as a diff against the round's code, then applies the
accepted ones together; an outer fix that waited for an inner one comes in a later round, built on
what was accepted. Accepting everything writes exactly what `fix` writes. Nothing here prints: the
caller's ``decide`` callback shows a ``Proposal`` and answers with a ``Decision``.
"""

from __future__ import annotations

import difflib
import io
import tokenize
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from codemod.config import Settings
from codemod.diagnostics import Diagnostic, FileError, FileResult, State
from codemod.engine import Finding, analyse, might_match, parse, triggers_of
from codemod.fixer import MAX_ROUNDS as MAX_FIX_ROUNDS
from codemod.fixer import FixOutcome, _python_rejects, apply, applicable, choose
from codemod.notebooks import Notebook, NotebookError, is_notebook, load, notebook_diff
from codemod.runner import apply_per_file_ignores, display_path
from rules.base import Rule

# Each round applies or refuses at least one fix; the bound only stops a rule that keeps
# producing new fixes from asking forever.
MAX_ROUNDS = 4 * MAX_FIX_ROUNDS


class Decision(str, Enum):
    APPLY = "apply"
    SKIP = "skip"
    QUIT = "quit"


@dataclass(frozen=True)
class Proposal:
    diagnostic: Diagnostic  # where the finding is, as the user sees the file now
    diff: str  # unified diff of the file (of the changed cells, for a notebook)


@dataclass
class Review:
    outcomes: list[tuple[Path | None, FixOutcome]] = field(default_factory=list)
    skipped: list[Diagnostic] = field(default_factory=list)
    quit: bool = False


class _Unit:
    """The Python a file's fixes work on, and the way back to the file's bytes."""

    def __init__(self, data: bytes, shown: str) -> None:
        self.shown = shown
        self.notebook: Notebook | None = None
        self.python = data
        if is_notebook(shown):
            self.notebook = load(data, shown)
            self.python = self.notebook.settle().encode("utf-8")

    def to_file(self, python: bytes) -> bytes | None:
        if self.notebook is None:
            return python
        return self.notebook.rebuild(python.decode("utf-8"))

    def place(self, diagnostic: Diagnostic, python: bytes) -> Diagnostic:
        if self.notebook is None:
            return diagnostic
        return self.notebook.place(diagnostic, self.notebook.locator(python.decode("utf-8")))

    def diff(self, before: bytes, after: bytes) -> str:
        if self.notebook is not None:
            return notebook_diff(self.shown, before, after)
        return "".join(difflib.unified_diff(_text(before).splitlines(keepends=True),
                                            _text(after).splitlines(keepends=True),
                                            f"a/{self.shown}", f"b/{self.shown}"))


def _text(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


def _keys(analysis, findings: Sequence[Finding]) -> list[tuple]:
    """An identity for each finding that survives other fixes: rule, message, the code of the node
    and its rank among findings alike (positions move as fixes above it are applied)."""
    seen: Counter = Counter()
    keys = []
    for finding in findings:
        d = finding.diagnostic
        base = (d.code, d.message, analysis.module.code_for_node(finding.node))
        keys.append((*base, seen[base]))
        seen[base] += 1
    return keys


def review_file(data: bytes, shown: str, rules: Sequence[type[Rule]], settings: Settings, *, unsafe: bool,
                decide: Callable[[Proposal], Decision]) -> tuple[FixOutcome, list[Diagnostic], bool]:
    """``(outcome, skipped, quit)`` for one file; ``outcome.fixed`` holds what the answers chose."""
    outcome = FixOutcome(shown, data)
    skipped: list[Diagnostic] = []
    try:
        unit = _Unit(data, shown)
    except NotebookError as error:
        outcome.error = error.error
        return outcome, skipped, False
    problems = unit.notebook.cell_errors(triggers_of(rules)) if unit.notebook is not None else []
    if unit.notebook is not None and not unit.notebook.included:
        outcome.remaining = problems
        return outcome, skipped, False

    def ignored(d: Diagnostic) -> bool:  # per-file-ignores apply to fixes too
        return apply_per_file_ignores(FileResult(shown, [d]), settings).diagnostics[0].state is not State.ACTIVE

    current = unit.python
    refused: set[tuple] = set()
    quit_ = False
    analysis = None
    for _ in range(MAX_ROUNDS):
        module = parse(current, shown)
        if isinstance(module, FileError):
            outcome.error = module
            return outcome, skipped, False
        analysis = analyse(module, shown, rules)
        keyed = [(k, f) for k, f in zip(_keys(analysis, analysis.findings), analysis.findings)
                 if k not in refused and applicable(f, unsafe) and not ignored(f.diagnostic)]
        if not keyed:
            break
        key_of = {id(f): k for k, f in keyed}
        before = unit.to_file(current)
        accepted = []
        chosen = choose(analysis, [f for _, f in keyed])
        for finding in sorted(chosen, key=lambda f: f.diagnostic.sort_key()):  # asked in reading order
            candidate = apply(analysis.module, [finding]).bytes
            after = None
            if candidate != current and not isinstance(parse(candidate, shown), FileError):
                after = unit.to_file(candidate)
            if after is None or after == before:
                refused.add(key_of[id(finding)])  # changes nothing, does not parse or cannot go back into a notebook
                continue
            shown_at = unit.place(finding.diagnostic, current)
            decision = decide(Proposal(shown_at, unit.diff(before, after)))
            if decision is Decision.APPLY:
                accepted.append((finding, shown_at))
            elif decision is Decision.SKIP:
                refused.add(key_of[id(finding)])
                skipped.append(shown_at)
            else:
                quit_ = True
                break
        if accepted:
            # The accepted fixes of a round go in together, as `fix` applies a round: answering
            # "apply" to every question gives exactly what `fix` writes.
            taken = {id(f) for f, _ in accepted}
            combined = apply(analysis.module, [f for f in chosen if id(f) in taken]).bytes  # in `fix`'s order
            if isinstance(parse(combined, shown), FileError) or unit.to_file(combined) is None:
                codes = ", ".join(sorted({f.diagnostic.code for f, _ in accepted}))
                outcome.error = FileError(shown, "PM002", f"internal error: the {codes} fixes together produced "
                                          "code that does not parse; file left unchanged")
                return outcome, skipped, False
            current = combined
            outcome.applied.extend(d for _, d in accepted)
            analysis = None
        if quit_:
            break
    if current != unit.python:
        refusal = _python_rejects(unit.python, current)  # the same second opinion `fix` asks for
        if refusal is not None:
            outcome.error = FileError(shown, "PM002", f"internal error: the fixed code does not compile ({refusal}); "
                                      "file left unchanged")
            outcome.applied = []
            return outcome, skipped, quit_
    if analysis is None:
        analysis = analyse(parse(current, shown), shown, rules)
    final = unit.to_file(current)
    if final != data:
        outcome.fixed = final
    remaining = [unit.place(f.diagnostic, current) for f in analysis.findings if f.diagnostic.state is State.ACTIVE]
    outcome.remaining = sorted(remaining + problems, key=Diagnostic.sort_key)
    return outcome, skipped, quit_


def review(files: Sequence[Path], settings: Settings, rules: Sequence[type[Rule]], *, unsafe: bool,
           decide: Callable[[Proposal], Decision]) -> Review:
    """Review every file in turn; after a quit the remaining files are left as they are."""
    result = Review()
    triggers = triggers_of(rules)
    for path in files:
        shown = display_path(path)
        try:
            data = path.read_bytes()
        except OSError as error:
            failure = FileError(shown, "PM001", f"cannot read file: {error.strerror or error}")
            result.outcomes.append((None, FixOutcome(shown, b"", error=failure)))
            continue
        if result.quit or not might_match(data, triggers):
            continue
        try:
            outcome, skipped, quit_ = review_file(data, shown, rules, settings, unsafe=unsafe, decide=decide)
        except Exception as error:  # a rule bug must not lose the answers given so far
            outcome, skipped, quit_ = FixOutcome(shown, data, error=FileError(
                shown, "PM002", f"internal error: {type(error).__name__}: {error}")), [], False
        outcome.remaining = [d for d in apply_per_file_ignores(FileResult(shown, outcome.remaining), settings).diagnostics
                             if d.state is State.ACTIVE]
        result.outcomes.append((path, outcome))
        result.skipped.extend(skipped)
        result.quit = quit_
    return result
