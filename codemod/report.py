"""The migration report: a ledger of every legacy site the tool saw, and what will become of it.

Every finding of every selected rule is listed — suppressed and guarded ones included — and so is
every existing use of ``runtime_shim``; every file that could not be checked is listed apart (it is
no legacy site). A site the tool cannot rewrite is listed as *manual* with the reason; nothing is
dropped (tf_upgrade_v2 reported "0 issues" while missing constructs; this ledger must not). The
headline counts are those `check` prints (codemod/counts.py).

A fix a reviewer skipped in `fix --interactive` (recorded in ``.pmap-migrate-skips.json``, see
``pmap_migrate.skips``) is listed as *skipped in review*, with the date and reason of the decision.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import takewhile
from pathlib import Path, PurePosixPath

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from pmap_migrate import __version__
from pmap_migrate.counts import Counts, plural
from pmap_migrate.diagnostics import Applicability, Diagnostic, FileError, State
from pmap_migrate.rules.base import Rule
from pmap_migrate.rules.fixes.edits import SHIM_COMMENT
from pmap_migrate.runner import RunResult
from pmap_migrate.skips import SKIPS_FILE, SkipStore, recorded_sites


class SiteState(str, Enum):
    FIXABLE_SAFE = "fixable-safe"  # `pmap-migrate fix` rewrites it to plain JAX
    FIXABLE_UNSAFE = "fixable-unsafe"  # `fix --unsafe-fixes` rewrites it, under a stated assumption
    SHIMMED = "shimmed"  # routed to runtime_shim (by a fix, or already)
    MANUAL = "manual"  # needs a person; the reason says why
    SUPPRESSED = "suppressed"  # `# noqa` or per-file-ignores
    GUARDED = "guarded"  # inside code written for both the old and the new API
    SKIPPED = "skipped"  # a fix a reviewer skipped in `fix --interactive`; `fix` leaves it alone

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    SiteState.FIXABLE_SAFE: "fixable (safe)",
    SiteState.FIXABLE_UNSAFE: "fixable (unsafe)",
    SiteState.SHIMMED: "shimmed",
    SiteState.MANUAL: "manual",
    SiteState.SUPPRESSED: "suppressed",
    SiteState.GUARDED: "guarded",
    SiteState.SKIPPED: "skipped in review",
}

# What each public runtime_shim name stands in for: the rule whose pattern it replaces.
SHIM_NAMES = {
    "runtime_shim.pmap": "PM101",
    "runtime_shim.install": "PM101",
    "runtime_shim.device_put_replicated": "PM301",
    "runtime_shim.device_put_sharded": "PM302",
    "runtime_shim.unreplicate": "PM202",
}


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    column: int
    code: str
    name: str
    state: SiteState
    reason: str
    message: str
    cell: int | None = None
    fixable_by: str | None = None  # the fix's summary, when there is one
    skipped_on: str | None = None  # skipped in review: the date of the decision
    skip_reason: str = ""  # ... and the reviewer's reason, if one was given

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    @property
    def position(self) -> str:
        return (f"cell {self.cell}:" if self.cell is not None else "") + f"{self.line}:{self.column}"

    def to_json(self) -> dict:
        entry = {
            "path": self.path, "line": self.line, "column": self.column, "code": self.code, "name": self.name,
            "state": self.state.value, "reason": self.reason, "message": self.message, "fix": self.fixable_by,
        }
        if self.cell is not None:
            entry["cell"] = self.cell
        if self.state is SiteState.SKIPPED:
            entry["skipped"] = {"date": self.skipped_on, "reason": self.skip_reason}
        return entry


@dataclass
class Report:
    sites: list[Site]
    files_checked: int
    files_with_sites: int = field(init=False)
    stale_skips: int = 0  # recorded skips of the checked files that match no site any more
    skips_file: str | None = None  # the record of skips, when there is one
    counts: Counts = field(default_factory=Counts)  # what `check` counts in the same run
    unchecked: list[FileError] = field(default_factory=list)  # the files that could not be checked

    def __post_init__(self) -> None:
        self.sites.sort(key=Site.sort_key)
        self.files_with_sites = len({s.path for s in self.sites})

    def by_state(self) -> Counter:
        return Counter(s.state for s in self.sites)

    def by_rule(self) -> dict[tuple[str, str], Counter]:
        table: dict[tuple[str, str], Counter] = {}
        for site in self.sites:
            table.setdefault((site.code, site.name), Counter())[site.state] += 1
        return dict(sorted(table.items()))

    def by_directory(self) -> dict[str, Counter]:
        table: dict[str, Counter] = {}
        for site in self.sites:
            table.setdefault(directory_of(site.path), Counter())[site.state] += 1
        return dict(sorted(table.items()))


def directory_of(path: str) -> str:
    parent = str(PurePosixPath(path).parent)
    return parent if parent not in ("", ".") else "."


def classify(d: Diagnostic) -> Site:
    """The ledger entry of one finding."""
    if d.state is State.SUPPRESSED:
        state, reason = SiteState.SUPPRESSED, f"suppressed (`# noqa` or per-file-ignores): {d.message}"
    elif d.state is State.GUARDED:
        state, reason = SiteState.GUARDED, f"inside a guard for both the old and the new API: {d.message}"
    elif d.fix is None:
        state, reason = SiteState.MANUAL, d.message
    elif d.fix.shimmed:
        state, reason = SiteState.SHIMMED, d.fix.summary
    elif d.fix.applicability is Applicability.SAFE:
        state, reason = SiteState.FIXABLE_SAFE, d.fix.summary
    else:
        state, reason = SiteState.FIXABLE_UNSAFE, d.fix.summary
    return Site(d.path, d.line, d.column, d.code, d.name, state, reason, d.message, d.cell,
                d.fix.summary if d.fix is not None else None)


def skipped(site: Site, date: str, reason: str) -> Site:
    """The ledger entry of a site whose fix a reviewer skipped."""
    why = f"skipped in review{f' on {date}' if date else ''}{f': {reason}' if reason else ''}"
    return Site(site.path, site.line, site.column, site.code, site.name, SiteState.SKIPPED,
                f"{why}; the fix: {site.fixable_by}", site.message, site.cell, site.fixable_by, date, reason)


def build(run: RunResult, rules: Sequence[type[Rule]], *, read=lambda path: Path(path).read_bytes(),
          skips: SkipStore | None = None) -> Report:
    """The ledger of a run whose results keep every state (as ``Session.check`` returns them);
    ``skips``: the project's record of fixes skipped in review."""
    sites: list[Site] = []
    codes = {rule.CODE: rule.NAME for rule in rules}
    stale = 0
    held: list[Diagnostic] = []  # findings whose fix was skipped in review
    for result in run.results:
        found = [classify(d) for d in result.diagnostics]
        data = None
        if result.error is None:
            try:
                data = read(result.path)
            except OSError:
                pass
        recorded = {key: skip for key, skip in (skips.of_file(result.path) if skips is not None else {}).items()
                    if key.code in codes}
        if recorded and data is not None:
            matched = set()
            for index, key, skip in recorded_sites(result.diagnostics, data, result.path, recorded):
                d = result.diagnostics[index]
                matched.add(key)
                # only a fix `fix` would apply is held back: a site suppressed since keeps that state
                if d.state is State.ACTIVE and d.fix is not None:
                    found[index] = skipped(found[index], skip.date, skip.reason)
                    held.append(d)
            stale += len(recorded.keys() - matched)
        sites += found
        if data is not None:
            sites.extend(shim_sites(data, result.path, codes))
    if skips is not None:
        stale += sum(1 for path, recorded in skips.files.items() if not (skips.root / path).exists()
                     for key in recorded if key.code in codes)
    everything = [d for result in run.results for d in result.diagnostics] + [e.as_diagnostic() for e in run.errors]
    return Report(sites, run.files, stale_skips=stale,
                  skips_file=_shown(skips.file) if skips is not None and skips.file.exists() else None,
                  counts=Counts.of(everything, held), unchecked=sorted(run.errors, key=lambda e: e.path))


def _shown(path: Path) -> str:
    from pmap_migrate.runner import display_path

    return display_path(path)


class _ShimUses(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[cst.CSTNode, str, str]] = []
        self.reasons: list[str] = []  # per enclosing statement: the reason its shim comment gives

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self.reasons.append(shim_reason(node) or (self.reasons[-1] if self.reasons else ""))
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self.reasons.pop()
        super().on_leave(original_node)

    def visit_Import(self, node) -> bool:
        return False

    def visit_ImportFrom(self, node) -> bool:
        return False

    def _match(self, node: cst.CSTNode) -> bool:
        for qualified in self.get_metadata(QualifiedNameProvider, node, set()):
            if qualified.name in SHIM_NAMES:
                self.found.append((node, qualified.name, self.reasons[-1] if self.reasons else ""))
                return True
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return not self._match(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._match(node)


def shim_reason(statement: cst.CSTNode) -> str:
    """The reason a `# pmap-migrate: kept on the legacy shim: ...` comment above ``statement`` gives
    (its continuation lines joined), or ""."""
    lines = [line.comment.value for line in statement.leading_lines if line.comment is not None]
    for start, text in enumerate(lines):
        if text.startswith(SHIM_COMMENT.rstrip()):
            rest = [line[1:].strip() for line in takewhile(lambda line: line.startswith("#   "), lines[start + 1:])]
            return " ".join([text[len(SHIM_COMMENT.rstrip()):].strip(), *rest]).strip()
    return ""


def shim_sites(data: bytes, path: str, codes: dict[str, str]) -> list[Site]:
    """Existing uses of ``runtime_shim`` in one file (a migrated-by-shim site has no finding left)."""
    if b"runtime_shim" not in data:
        return []
    from pmap_migrate.engine import parse
    from pmap_migrate.notebooks import NotebookError, is_notebook, load

    locate = None
    if is_notebook(path):
        try:
            notebook = load(data, path)
        except NotebookError:
            return []
        locate = notebook.locator(notebook.settle())
        module = notebook.tree
    else:
        module = parse(data, path)
    if module is None or isinstance(module, FileError):
        return []
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    visitor = _ShimUses()
    wrapper.visit(visitor)
    positions = wrapper.resolve(PositionProvider)
    sites = []
    for node, qualified, why in visitor.found:
        code = SHIM_NAMES[qualified]
        if code not in codes:
            continue
        where = positions[node].start
        cell, line = locate(where.line) if locate is not None else (None, where.line)
        what = "replaces `jax.pmap` process-wide" if qualified.endswith(".install") else "legacy semantics at run time"
        reason = f"kept on the legacy shim: {why}" if why else f"uses `{qualified}` ({what})"
        sites.append(Site(path, line, where.column + 1, code, codes[code], SiteState.SHIMMED,
                          f"{reason}; migrated as far as `check` is concerned",
                          f"uses `{qualified}`", cell))
    return sites


# ---------------------------------------------------------------------------------------------
# Rendering

STATES = tuple(SiteState)


def to_json(report: Report) -> str:
    def states(counter: Counter) -> dict[str, int]:
        return {state.value: counter.get(state, 0) for state in STATES} | {"total": sum(counter.values())}

    document = {
        "version": 1,
        "tool": {"name": "pmap-migrate", "version": __version__},
        "files_checked": report.files_checked,
        "files_with_sites": report.files_with_sites,
        "counts": report.counts.to_json(),
        "not_checked": [{"path": e.path, "code": e.code, "message": e.message} for e in report.unchecked],
        "skips": {"file": report.skips_file, "stale": report.stale_skips},
        "summary": {
            "total": states(report.by_state()),
            "by_rule": {code: {"name": name, **states(counter)} for (code, name), counter in report.by_rule().items()},
            "by_directory": {directory: states(counter) for directory, counter in report.by_directory().items()},
        },
        "sites": [site.to_json() for site in report.sites],
    }
    return json.dumps(document, indent=2) + "\n"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.replace("|", "\\|").split())


def _row(values: Iterable[object]) -> str:
    return "| " + " | ".join(str(v) for v in values) + " |"


def _count_table(first: str, rows: list[tuple[str, Counter]]) -> list[str]:
    lines = [_row([first, *(s.label for s in STATES), "total"]), _row(["---", *("---:" for _ in STATES), "---:"])]
    total: Counter = Counter()
    for label, counter in rows:
        total.update(counter)
        lines.append(_row([label, *(counter.get(s, 0) or "" for s in STATES), sum(counter.values())]))
    lines.append(_row(["**total**", *(f"**{total.get(s, 0)}**" for s in STATES), f"**{sum(total.values())}**"]))
    return lines


def _stale_note(report: Report) -> list[str]:
    if not report.stale_skips:
        return []
    n = report.stale_skips
    note = (f"{n} recorded skip{'s' if n != 1 else ''} in `{report.skips_file or SKIPS_FILE}` "
            f"match{'es' if n == 1 else ''} no site any more (fixed, edited or deleted): harmless; "
            f"the next `fix --interactive` over {'their files drops them' if n != 1 else 'the file drops it'}.")
    return [note, ""]


def headline(report: Report) -> str:
    """The counts `check` prints for the same files: legacy patterns, fixable ones, files not checked."""
    counts = report.counts
    line = (f"**{plural(counts.patterns, 'legacy pattern')}** in {counts.files_with_patterns} of "
            f"{plural(report.files_checked, 'file')} checked")
    fixable = []
    if counts.safe:
        fixable.append(f"{counts.safe} fixable with `pmap-migrate fix`")
    if counts.unsafe:
        fixable.append(f"{counts.unsafe} more with `pmap-migrate fix --unsafe-fixes`")
    if counts.held:
        fixable.append(f"{counts.held} skipped in review")
    line += f" ({', '.join(fixable)})" if fixable else ""
    if counts.unchecked:
        line += f"; **{plural(counts.unchecked, 'file')} could not be checked**"
    return line + "."


def _unchecked_section(report: Report) -> list[str]:
    if not report.unchecked:
        return []
    lines = ["## Files that could not be checked", "", _row(["file", "code", "why"]), _row(["---", "---", "---"])]
    lines += [_row([f"`{_cell(e.path)}`", e.code, _cell(e.message)]) for e in report.unchecked]
    return [*lines, ""]


def to_markdown(report: Report) -> str:
    counts = report.by_state()
    out = ["# pmap-migrate: migration report", "", headline(report), ""]
    total = len(report.sites)
    if total == 0:
        out += [*_unchecked_section(report), *_stale_note(report)]
        return "\n".join(out)
    parts = [f"{counts[s]} {s.label}" for s in STATES if counts.get(s)]
    out += [
        f"The ledger lists {plural(total, 'site')} in {plural(report.files_with_sites, 'file')}: {', '.join(parts)}. "
        "A site is a finding in any state (suppressed and guarded ones too) or an existing use of `runtime_shim`.",
        "",
        "States: *fixable (safe)* — `pmap-migrate fix` rewrites it to plain JAX; *fixable (unsafe)* — "
        "`fix --unsafe-fixes` does, under the assumption stated; *shimmed* — routed to `runtime_shim` "
        "(legacy semantics at run time); *manual* — needs a person, for the reason given; *suppressed* — "
        "`# noqa` or per-file-ignores; *guarded* — in code written for both the old and the new API; "
        f"*skipped in review* — a reviewer skipped the fix in `fix --interactive` (recorded in "
        f"`{report.skips_file or SKIPS_FILE}`; `fix` leaves it alone, `fix --interactive --review-skipped` "
        "asks again).",
        "",
        *_stale_note(report),
        "## Summary by rule",
        "",
        *_count_table("rule", [(f"{code} `{name}`", counter) for (code, name), counter in report.by_rule().items()]),
        "",
        "## Summary by directory",
        "",
        *_count_table("directory", [(f"`{directory}`", counter) for directory, counter in report.by_directory().items()]),
        "",
        "## Sites",
        "",
        _row(["file", "position", "rule", "state", "reason"]),
        _row(["---", "---", "---", "---", "---"]),
    ]
    for site in report.sites:
        out.append(_row([f"`{_cell(site.path)}`", site.position, f"{site.code} `{site.name}`", site.state.label,
                         _cell(site.reason)]))
    out.append("")
    out += _unchecked_section(report)
    return "\n".join(out)
