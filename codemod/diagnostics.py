"""Result values shared by the engine, the runner and the reporters (nothing here prints)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from pmap_migrate.rules.fixes.choices import Applicability

__all__ = ["Applicability", "Diagnostic", "FileError", "FileResult", "FixInfo", "State"]


class State(str, Enum):
    """What became of a finding after suppression and guard analysis."""

    ACTIVE = "active"
    SUPPRESSED = "suppressed"  # `# noqa` or a per-file ignore
    GUARDED = "guarded"  # inside code written for both the old and the new API


@dataclass(frozen=True)
class FixInfo:
    """The user-facing description of a fix; the edit itself stays with the engine."""

    applicability: Applicability
    summary: str
    shimmed: bool = False  # routes the site to runtime_shim instead of plain JAX


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    message: str
    path: str
    line: int  # 1-based
    column: int  # 1-based
    end_line: int
    end_column: int
    fix: FixInfo | None = None
    state: State = State.ACTIVE
    cell: int | None = None  # notebooks only: 1-based index in the notebook's cells; line is within the cell

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    @property
    def location(self) -> str:
        """``path:line:col``, or ``path:cell N:line:col`` in a notebook (ruff's spelling)."""
        cell = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{cell}{self.line}:{self.column}"

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "fix": None
            if self.fix is None
            else {"applicability": self.fix.applicability.value, "summary": self.fix.summary},
        } | ({"cell": self.cell} if self.cell is not None else {})


@dataclass(frozen=True)
class FileError:
    """A file that could not be checked (unreadable, undecodable, not valid Python)."""

    path: str
    code: str  # PM000 syntax error, PM001 unreadable/undecodable, PM002 internal error
    message: str
    line: int = 1
    column: int = 1

    NAMES = {"PM000": "syntax-error", "PM001": "unreadable-file", "PM002": "internal-error"}

    @classmethod
    def unreadable(cls, path: str, error: OSError) -> FileError:
        return cls(path, "PM001", f"cannot read file: {error.strerror or error}")

    @classmethod
    def not_looked_into(cls, path: str, error: OSError, directory: bool = False) -> FileError:
        """A path discovery could not look into: a named path that does not exist, a directory
        that cannot be listed (PM001, as an unreadable file)."""
        if isinstance(error, FileNotFoundError):
            return cls(path, "PM001", "no such file or directory")
        return cls(path, "PM001", f"cannot read {'directory' if directory else 'file'}: {error.strerror or error}")

    def as_diagnostic(self) -> Diagnostic:
        return Diagnostic(self.code, self.NAMES.get(self.code, "error"), self.message, self.path,
                          self.line, self.column, self.line, self.column)


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: FileError | None = None
    parsed: bool = False  # False when the text prefilter ruled the file out
    # The source lines of its findings by (cell or 0, line) (codemod/sourcetext.py), when the run
    # keeps them: the text output shows them without reading the file again.
    source_lines: dict[tuple[int, int], str] | None = None

    @property
    def active(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.state is State.ACTIVE]

    def shown_as(self, path: str) -> FileResult:
        """This result under another spelling of its path (a cached result, in this run)."""
        if path == self.path:
            return self
        return FileResult(path, [replace(d, path=path) for d in self.diagnostics],
                          replace(self.error, path=path) if self.error else None, self.parsed, self.source_lines)
