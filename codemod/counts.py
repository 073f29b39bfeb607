"""What every summary counts (`check`, `fix`, `fix --diff`, `report`): one definition.

- A *legacy pattern* is an active finding of a rule (PM101 ... PM501): not suppressed by `noqa` or
  `per-file-ignores`, not inside code guarded for both APIs.
- A *file that could not be checked* is a path that got a PM000 (does not parse), PM001 (cannot be
  read; a named path that does not exist, a directory that cannot be listed) or PM002 (internal
  error) line. It is counted once, whatever else it got, and it is never a legacy pattern.
- *Fixable* patterns carry a fix of their own: safe ones `fix` applies, unsafe ones only
  `fix --unsafe-fixes`. A fix skipped in an earlier review is not counted as fixable (`fix` leaves
  it alone).
- `fix` and `fix --diff` count the patterns the tree had before (what `check` counts), those left
  after, and the difference as fixed: a fix may take away more than its own finding (rewriting a
  pmap also ends the host-local-input finding on it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from pmap_migrate.diagnostics import Applicability, Diagnostic, FileError, State

# The codes of the lines for files that could not be checked.
UNCHECKED_CODES = frozenset(FileError.NAMES)


def is_pattern(d: Diagnostic) -> bool:
    """An active finding of a rule (not a line about a file that could not be checked)."""
    return d.state is State.ACTIVE and d.code not in UNCHECKED_CODES


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or word + 's'}"


@dataclass(frozen=True)
class Counts:
    patterns: int = 0
    files_with_patterns: int = 0
    unchecked: int = 0  # files (or named paths) that could not be checked
    safe: int = 0  # patterns with a safe fix `fix` applies
    unsafe: int = 0  # patterns with an unsafe fix (`fix --unsafe-fixes`)
    held: int = 0  # patterns whose fix was skipped in an earlier review

    @classmethod
    def of(cls, diagnostics: Iterable[Diagnostic], held: Collection[Diagnostic] = ()) -> Counts:
        """The counts of a run's findings and its lines for files that could not be checked;
        ``held``: the fixes of those findings that `fix` leaves alone (skipped in review; as the
        review saw them, before other fixes moved them)."""
        diagnostics = list(diagnostics)
        patterns = [d for d in diagnostics if is_pattern(d)]
        unchecked = {d.path for d in diagnostics if d.code in UNCHECKED_CODES}
        held_patterns = [d for d in held if is_pattern(d) and d.fix is not None]

        def fixable(among, applicability: Applicability) -> int:
            return sum(1 for d in among if d.fix is not None and d.fix.applicability is applicability)

        return cls(
            patterns=len(patterns),
            files_with_patterns=len({d.path for d in patterns}),
            unchecked=len(unchecked),
            safe=fixable(patterns, Applicability.SAFE) - fixable(held_patterns, Applicability.SAFE),
            unsafe=fixable(patterns, Applicability.UNSAFE) - fixable(held_patterns, Applicability.UNSAFE),
            held=len(held_patterns),
        )

    def found(self, not_checked: str = "could not be checked") -> str:
        """``Found 3 legacy patterns in 2 files; 1 file could not be checked.`` (what `fix` says of
        the files it could not check or write: ``not_checked``)."""
        parts = []
        if self.patterns:
            parts.append(f"Found {plural(self.patterns, 'legacy pattern')} in {plural(self.files_with_patterns, 'file')}")
        if self.unchecked:
            parts.append(f"{plural(self.unchecked, 'file')} {not_checked}")
        return "; ".join(parts) + "." if parts else ""

    def to_json(self) -> dict:
        return {"legacy_patterns": self.patterns, "files_with_patterns": self.files_with_patterns,
                "files_not_checked": self.unchecked, "fixable_safe": self.safe, "fixable_unsafe": self.unsafe,
                "skipped_in_review": self.held}


@dataclass(frozen=True)
class FixCounts:
    """What `fix` (or `fix --diff`) did to a tree: its patterns before and after, the files changed."""

    before: Counts
    after: Counts
    files_changed: int

    @property
    def fixed(self) -> int:
        return max(0, self.before.patterns - self.after.patterns)

    def line(self, *, diff: bool) -> str:
        """``Fixed 5 of 6 legacy patterns in 2 files.`` (``Would fix`` with --diff)."""
        verb = "Would fix" if diff else "Fixed"
        return (f"{verb} {self.fixed} of {plural(self.before.patterns, 'legacy pattern')} in "
                f"{plural(self.files_changed, 'file')}.")
