"""`fix --interactive`: every fix proposed on its own, as a diff, to be applied, skipped or quit.

The review follows the rounds of `fix`: each round proposes the fixes `fix` would apply together
(innermost, non-overlapping), one by one as a diff against the round's code, then applies the
accepted ones together; an outer fix that waited for an inner one comes in a later round, built on
what was accepted. Accepting everything writes exactly what `fix` writes. Nothing here prints: the
caller's ``decide`` callback shows a ``Proposal`` and answers with a ``Decision`` (or an ``Answer``,
to give a reason for a skip).

Skips are remembered (``pmap_migrate.skips``): a fix skipped in an earlier review is not asked about
again (unless ``review_skipped``), and each review says which sites of the file stay skipped, for
the caller to record. ``honour_skips`` makes plain `fix` leave those sites alone too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from pmap_migrate import libcst_patches
from pmap_migrate.config import Settings
from pmap_migrate.diagnostics import Diagnostic, FileError, FileResult, State
from pmap_migrate.engine import Finding, analyse, parse
from pmap_migrate.fixer import MAX_ROUNDS as MAX_FIX_ROUNDS
from pmap_migrate.fixer import (
    FixOutcome,
    applicable,
    apply,
    choose,
    clean_indent,
    imported_helpers,
    in_project_style,
    python_rejects,
    restore_lost_lines,
    shared_names,
)
from pmap_migrate.notebooks import Notebook, NotebookError, is_notebook, load, notebook_diff
from pmap_migrate.prefilter import gate_of
from pmap_migrate.projectstyle import import_order
from pmap_migrate.rules.base import Rule
from pmap_migrate.rules.fixes.choices import RuleOptions
from pmap_migrate.runner import apply_per_file_ignores, display_path, rule_options
from pmap_migrate.shared_module import location_for
from pmap_migrate.skips import SiteKey, Skip, SkipStore, site_keys, today
from pmap_migrate.sourcetext import decode

# Each round applies or refuses at least one fix; the bound only stops a rule that keeps
# producing new fixes from asking forever.
MAX_ROUNDS = 4 * MAX_FIX_ROUNDS


class Decision(str, Enum):
    APPLY = "apply"
    SKIP = "skip"
    QUIT = "quit"


@dataclass(frozen=True)
class Answer:
    decision: Decision
    reason: str = ""  # why a fix is skipped, recorded with the skip


_ANSWER = re.compile(r"\s*(a|apply|s|skip|q|quit)(?:(?:\s*:\s*|\s+)(.*?))?\s*", re.IGNORECASE | re.DOTALL)


def parse_answer(text: str) -> Answer:
    """``a``/``apply``, ``s``/``skip`` (optionally followed by a reason: ``s not on TPU yet``),
    ``q``/``quit``; ValueError for anything else."""
    match = _ANSWER.fullmatch(text)
    if match is None or (match.group(2) and match.group(1)[0].lower() != "s"):
        raise ValueError(f"not an answer: {text!r}")
    decision = {"a": Decision.APPLY, "s": Decision.SKIP, "q": Decision.QUIT}[match.group(1)[0].lower()]
    return Answer(decision, " ".join((match.group(2) or "").split()))


@dataclass(frozen=True)
class Proposal:
    diagnostic: Diagnostic  # where the finding is, as the user sees the file now
    diff: str  # unified diff of the file (of the changed cells, for a notebook)


@dataclass
class Review:
    outcomes: list[tuple[Path | None, FixOutcome]] = field(default_factory=list)
    skipped: list[Diagnostic] = field(default_factory=list)
    quit: bool = False
    held: list[Diagnostic] = field(default_factory=list)  # not asked: skipped in an earlier review


@dataclass
class FileReview:
    outcome: FixOutcome  # ``outcome.fixed`` holds what the answers chose
    skipped: list[Diagnostic] = field(default_factory=list)  # skipped now
    quit: bool = False
    held: list[Diagnostic] = field(default_factory=list)  # not asked: skipped in an earlier review
    skips: list[Skip] | None = None  # the sites of the final code that stay skipped (None: unknown)


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
        return "".join(difflib.unified_diff(decode(before).splitlines(keepends=True),
                                            decode(after).splitlines(keepends=True),
                                            f"a/{self.shown}", f"b/{self.shown}"))


def _keys(analysis, findings: Sequence[Finding]) -> list[tuple]:
    """An identity for each finding of a round: rule, message, the code of the node and where it
    starts. A refused finding's position is carried into the next round's code through the lines
    the accepted fixes left as they were (``_carried``); a site whose own code changed is new."""
    return [(f.diagnostic.code, f.diagnostic.message, analysis.module.code_for_node(f.node),
             f.diagnostic.line, f.diagnostic.column) for f in findings]


def _carried(keys, before: bytes, after: bytes) -> dict[tuple, tuple]:
    """``keys`` of the code ``before`` -> the same keys in ``after``, for those on lines that are
    still there unchanged (lines as libcst counts them: broken at LF, CRLF and CR)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    line_map: dict[int, int] = {}
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            line_map.update((i1 + k + 1, j1 + k + 1) for k in range(i2 - i1))
    return {key: (*key[:3], line_map[key[3]], key[4]) for key in keys if key[3] in line_map}


class _Answers:
    """The sites not to ask about again (``refused``) and the skips among them to remember
    (``kept``: key -> (date, reason)), by the keys of the current round's code."""

    def __init__(self) -> None:
        self.refused: set[tuple] = set()
        self.kept: dict[tuple, tuple[str, str]] = {}
        self._floating: dict[tuple, tuple[bool, tuple[str, str] | None]] = {}

    def carry(self, before: bytes, after: bytes) -> None:
        """Into the code after a round's fixes: keys on lines left as they were move with them; the
        others (identical lines the diff paired the other way) wait for the next round's keys."""
        keys = self.refused | self.kept.keys()
        moved = _carried(keys, before, after)
        self._floating = {key: (key in self.refused, self.kept.get(key)) for key in keys if key not in moved}
        self.refused = {moved[key] for key in self.refused if key in moved}
        self.kept = {moved[key]: decision for key, decision in self.kept.items() if key in moved}

    def land(self, keys: Sequence[tuple]) -> None:
        """Waiting keys land on a site alike (rule, message and code) that has no answer yet."""
        for old, (refused, decision) in sorted(self._floating.items(), key=lambda item: item[0][3:]):
            new = next((k for k in keys if k[:3] == old[:3] and k not in self.refused and k not in self.kept), None)
            if new is None:
                continue  # the site changed or went away
            if refused:
                self.refused.add(new)
            if decision is not None:
                self.kept[new] = decision
        self._floating = {}


def review_file(data: bytes, shown: str, rules: Sequence[type[Rule]], settings: Settings, *, unsafe: bool,
                decide: Callable[[Proposal], Decision | Answer], options: RuleOptions | None = None,
                remembered: Mapping[SiteKey, Skip] | None = None, review_skipped: bool = False,
                shared: bool = False) -> FileReview:
    """Review one file. ``remembered``: the file's recorded skips, not asked about again unless
    ``review_skipped``. The result's ``skips`` are the sites of the final code that stay skipped
    (recorded ones still there, and new ones), keyed on the final code. ``shared``: helpers are
    imported from the package's shared module, as `fix` does (the caller writes that module)."""
    outcome = FixOutcome(shown, data)
    result = FileReview(outcome)
    if options is not None and options.idiomatic and not unsafe:  # as `fix`: idiomatic fixes are unsafe
        options = replace(options, idiomatic=False)
    try:
        unit = _Unit(data, shown)
    except NotebookError as error:
        outcome.error = error.error
        return result
    problems = unit.notebook.cell_errors(gate_of(tuple(rules))) if unit.notebook is not None else []
    if unit.notebook is not None and not unit.notebook.included:
        outcome.remaining = problems
        return result

    def ignored(d: Diagnostic) -> bool:  # per-file-ignores apply to fixes too
        return apply_per_file_ignores(FileResult(shown, [d]), settings).diagnostics[0].state is not State.ACTIVE

    def askable(finding: Finding) -> bool:
        return applicable(finding, unsafe) and not ignored(finding.diagnostic)

    current = unit.python
    location = None
    used: set[str] = set()
    answers = _Answers()
    refused, kept = answers.refused, answers.kept
    quit_ = False
    analysis = None
    order = import_order(shown)
    for number in range(MAX_ROUNDS):
        module = parse(current, shown)
        if isinstance(module, FileError):
            outcome.error = module
            return result
        analysis = analyse(module, shown, rules, options)
        if shared and number == 0 and unit.notebook is None:
            location = location_for(shown, module)
        # What `fix` does too: lines libcst renders differently although no fix touched them (a
        # form feed before an indented statement) get their bytes back, in every proposal.
        roundtrip = clean_indent(module).bytes
        if roundtrip != current and restore_lost_lines(current, roundtrip, roundtrip) is None:
            outcome.error = FileError(shown, "PM002", "internal error: libcst does not reproduce this file "
                                      "byte for byte; file left unchanged")
            return result

        def rendered(findings: Sequence[Finding], analysis=analysis, current=current, roundtrip=roundtrip,
                     module=module) -> bytes:
            fixed = apply(analysis.module, findings, analysis.parents, location, order).bytes
            fixed = fixed if roundtrip == current else restore_lost_lines(current, roundtrip, fixed)
            return fixed if fixed is None or fixed == current else in_project_style(current, fixed, shown, module)

        keys = _keys(analysis, analysis.findings)
        answers.land(keys)
        refused, kept = answers.refused, answers.kept
        before = unit.to_file(current)
        if remembered and before is not None:
            # Recorded skips are keyed on the file as it was written: every site of the first round
            # is matched (an unsafe one stays recorded in a run without --unsafe-fixes), later rounds
            # only for the sites they would ask about.
            placed = [unit.place(f.diagnostic, current) for f in analysis.findings]
            for key, finding, (site, _), shown_at in zip(keys, analysis.findings, site_keys(placed, before, shown), placed):
                earlier = remembered.get(site)
                if earlier is None or key in kept or key in refused or (number and not askable(finding)):
                    continue
                kept[key] = (earlier.date, earlier.reason)
                if not review_skipped:
                    refused.add(key)
                    if askable(finding):
                        result.held.append(shown_at)
        keyed = [(k, f) for k, f in zip(keys, analysis.findings) if k not in refused and askable(f)]
        if not keyed:
            break
        key_of = {id(f): k for k, f in keyed}
        accepted = []
        chosen = choose(analysis, [f for _, f in keyed])
        for finding in sorted(chosen, key=lambda f: f.diagnostic.sort_key()):  # asked in reading order
            candidate = rendered([finding])
            after = None
            if candidate != current and not isinstance(parse(candidate, shown), FileError):
                after = unit.to_file(candidate)
            if after is None or after == before:
                refused.add(key_of[id(finding)])  # changes nothing, does not parse or cannot go back into a notebook
                continue
            shown_at = unit.place(finding.diagnostic, current)
            answer = decide(Proposal(shown_at, unit.diff(before, after)))
            if isinstance(answer, Decision):
                answer = Answer(answer)
            key = key_of[id(finding)]
            if answer.decision is Decision.APPLY:
                accepted.append((finding, shown_at))
                kept.pop(key, None)
            elif answer.decision is Decision.SKIP:
                refused.add(key)
                result.skipped.append(shown_at)
                kept[key] = (today(), answer.reason or kept.get(key, ("", ""))[1])
            else:
                quit_ = True
                break
        if accepted:
            # The accepted fixes of a round go in together, as `fix` applies a round: answering
            # "apply" to every question gives exactly what `fix` writes.
            taken = {id(f) for f, _ in accepted}
            combined = rendered([f for f in chosen if id(f) in taken])  # in `fix`'s order
            combined_module = parse(combined, shown)
            if isinstance(combined_module, FileError) or unit.to_file(combined) is None:
                codes = ", ".join(sorted({f.diagnostic.code for f, _ in accepted}))
                outcome.error = FileError(shown, "PM002", f"internal error: the {codes} fixes together produced "
                                          "code that does not parse; file left unchanged")
                return result
            answers.carry(current, combined)
            current = combined
            used.update(shared_names(imported_helpers(
                analysis.module, [f for f in chosen if id(f) in taken], location), combined_module))
            outcome.applied.extend(d for _, d in accepted)
            analysis = None
        if quit_:
            break
    result.quit = quit_
    if current != unit.python:
        refusal = python_rejects(unit.python, current)  # the same second opinion `fix` asks for
        if refusal is not None:
            outcome.error = FileError(shown, "PM002", f"internal error: the fixed code does not compile ({refusal}); "
                                      "file left unchanged")
            outcome.applied = []
            return result
    if analysis is None:
        analysis = analyse(parse(current, shown), shown, rules, options)
    final = unit.to_file(current)
    if final != data:
        outcome.fixed = final
        if used:
            outcome.shared, outcome.shared_helpers = location, frozenset(used)
    placed = [unit.place(f.diagnostic, current) for f in analysis.findings]
    remaining = [d for f, d in zip(analysis.findings, placed) if f.diagnostic.state is State.ACTIVE]
    outcome.remaining = sorted(remaining + problems, key=Diagnostic.sort_key)
    if final is not None:
        keys = _keys(analysis, analysis.findings)
        answers.land(keys)
        result.skips = _still_skipped(answers.kept, keys, placed, final, shown)
    return result


def _still_skipped(kept: Mapping[tuple, tuple[str, str]], final_keys: Sequence[tuple], placed: Sequence[Diagnostic],
                   final: bytes, shown: str) -> list[Skip]:
    """The skipped sites of the final code, keyed for the record."""
    chosen = [(index, kept[key]) for index, key in enumerate(final_keys) if key in kept]
    if not chosen:
        return []
    sites = site_keys(placed, final, shown)
    return [Skip(sites[index][0], sites[index][1], *decision) for index, decision in chosen]


def review(files: Sequence[str | Path], settings: Settings, rules: Sequence[type[Rule]], *, unsafe: bool,
           decide: Callable[[Proposal], Decision | Answer], skips: SkipStore | None = None,
           review_skipped: bool = False, shared: bool = False) -> Review:
    """Review every file in turn; after a quit the remaining files are left as they are. ``skips``
    (updated here, saved by the caller): the project's recorded skips; the entries of each reviewed
    file become the sites that stay skipped in it (stale ones are dropped)."""
    libcst_patches.install()
    result = Review()
    gate = gate_of(tuple(rules))
    options = rule_options(settings)
    codes = [rule.CODE for rule in rules]
    if skips is not None:
        skips.drop_missing()
    for path in files:
        shown = display_path(path)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            result.outcomes.append((None, FixOutcome(shown, b"", error=FileError.unreadable(shown, error))))
            continue
        if result.quit:
            continue
        if not gate.needs_parse(data, is_notebook(shown)):
            if skips is not None:  # no trigger word, no finding: what was recorded for it is gone
                skips.replace_file(shown, codes, [])
            continue
        reviewed = _review_safely(data, shown, rules, settings, unsafe=unsafe, decide=decide, options=options,
                                  remembered=skips.of_file(shown) if skips is not None else None,
                                  review_skipped=review_skipped, shared=shared)
        result.outcomes.append((path, reviewed.outcome))
        result.skipped.extend(reviewed.skipped)
        result.held.extend(reviewed.held)
        result.quit = reviewed.quit
        if skips is not None and reviewed.skips is not None:
            skips.replace_file(shown, codes, reviewed.skips)
    return result


def _review_safely(data: bytes, shown: str, rules: Sequence[type[Rule]], settings: Settings, **kwargs) -> FileReview:
    try:
        reviewed = review_file(data, shown, rules, settings, **kwargs)
    except Exception as error:  # a rule bug must not lose the answers given so far
        reviewed = FileReview(FixOutcome(shown, data, error=FileError(
            shown, "PM002", f"internal error: {type(error).__name__}: {error}")))
    outcome = reviewed.outcome
    outcome.remaining = [d for d in apply_per_file_ignores(FileResult(shown, outcome.remaining), settings).diagnostics
                         if d.state is State.ACTIVE]
    return reviewed


def honour_skips(outcomes: Sequence[tuple[Path | None, FixOutcome]], settings: Settings, rules: Sequence[type[Rule]],
                 *, unsafe: bool, skips: SkipStore,
                 shared: bool = False) -> tuple[list[tuple[Path | None, FixOutcome]], list[Diagnostic]]:
    """Plain `fix` leaves the recorded skips alone: a file it changed that has recorded skips is fixed
    again as a review answering "apply" to every fix but those (the same rounds, so the same code
    otherwise). Returns the outcomes and the fixes held back."""
    options = rule_options(settings)
    result: list[tuple[Path | None, FixOutcome]] = []
    held: list[Diagnostic] = []
    for path, outcome in outcomes:
        remembered = skips.of_file(outcome.path) if path is not None else {}
        if not remembered or outcome.error is not None or not outcome.changed:
            result.append((path, outcome))
            continue
        reviewed = _review_safely(outcome.original, outcome.path, rules, settings, unsafe=unsafe,
                                  decide=lambda _: Decision.APPLY, options=options, remembered=remembered,
                                  shared=shared)
        result.append((path, reviewed.outcome))
        held.extend(reviewed.held)
    return result, held
