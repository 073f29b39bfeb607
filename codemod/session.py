"""One invocation: settings, selected rules, files; shared by `check`, `fix` and `report`."""

from __future__ import annotations

import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from codemod.config import ConfigError, Settings, load_settings, with_overrides
from codemod.diagnostics import Diagnostic, FileResult, State
from codemod.discovery import discover
from codemod.runner import RunResult, apply_per_file_ignores, lint_file, rule_options, rules_for, run
from rules import select_codes, unknown_selectors

if TYPE_CHECKING:
    from rules.base import Rule

STDIN = "-"
PROGRESS_THRESHOLD = 50


@dataclass
class CheckOutcome:
    run: RunResult

    @property
    def active_with_errors(self) -> list[Diagnostic]:
        """Active findings plus one PM00x finding per file that could not be checked."""
        found = [d for r in self.run.results for d in r.diagnostics if d.state is State.ACTIVE]
        found += [e.as_diagnostic() for e in self.run.errors]
        return sorted(found, key=Diagnostic.sort_key)

    @property
    def internal_errors(self) -> list:
        return [e for e in self.run.errors if e.code == "PM002"]


@dataclass
class Session:
    paths: list[str]
    settings: Settings
    codes: tuple[str, ...]  # the selected rules; their classes (and libcst) load only when needed
    force_exclude: bool = False
    _lines: dict = field(default_factory=dict)
    _stdin_text: dict[str, str] = field(default_factory=dict)
    _cells: dict[str, dict[int, str]] = field(default_factory=dict)  # notebooks: cell sources by path

    @classmethod
    def create(cls, paths, *, select=(), ignore=(), extend_exclude=(), force_exclude=False, config_file=None,
               idiomatic: bool | None = None) -> Session:
        cwd = Path.cwd()
        settings = load_settings(Path(config_file) if config_file else None, cwd)
        settings = with_overrides(settings, select=list(select), ignore=list(ignore),
                                  extend_exclude=list(extend_exclude), idiomatic=idiomatic)
        unknown = unknown_selectors(list(settings.select) + list(settings.ignore))
        if unknown:
            raise ConfigError(f"unknown rule selector(s): {', '.join(unknown)}; `pmap-migrate rules` lists the codes")
        codes = select_codes(list(settings.select), list(settings.ignore))
        return cls(list(paths) or ["."], settings, codes, force_exclude)

    @property
    def rules(self) -> tuple[type[Rule], ...]:
        return rules_for(self.codes)

    def check(self, *, use_cache: bool = True, jobs: int | None = None, stdin_filename: str | None = None,
              progress: bool = False) -> CheckOutcome:
        if STDIN in self.paths:
            if len(self.paths) > 1:
                raise ConfigError("`-` (stdin) cannot be combined with other paths")
            return CheckOutcome(self._check_stdin(stdin_filename))
        return CheckOutcome(self._run(self.files(), use_cache=use_cache, jobs=jobs, progress=progress))

    def files(self) -> list[Path]:
        """The files this invocation looks at (an error for a named path that does not exist)."""
        if STDIN in self.paths:
            raise ConfigError("this command does not read stdin; name the files")
        found = discover(self.paths, self.settings, force_exclude=self.force_exclude)
        if found.missing:
            raise ConfigError(f"no such file or directory: {', '.join(found.missing)}")
        return found.files

    def fix(self, *, unsafe: bool, jobs: int | None = None, progress: bool = False) -> list:
        """``(path, FixOutcome)`` pairs; writing is the caller's decision (``--diff`` writes nothing)."""
        if STDIN in self.paths:
            raise ConfigError("`fix` does not read stdin; name the files to fix")
        files = self.files()
        from codemod.runner import run_fix

        if not progress or not sys.stderr.isatty():
            return run_fix(files, self.settings, self.rules, unsafe=unsafe, jobs=jobs)
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("fixing", total=None, visible=False)
            return run_fix(files, self.settings, self.rules, unsafe=unsafe, jobs=jobs,
                           progress=lambda n: bar.advance(task, n),
                           on_total=lambda total: bar.update(task, total=total, visible=total >= PROGRESS_THRESHOLD))

    def _run(self, files, *, use_cache, jobs, progress) -> RunResult:
        if not progress or not sys.stderr.isatty():
            return run(files, self.settings, self.codes, jobs=jobs, use_cache=use_cache)
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("checking", total=None, visible=False)

            def on_total(total: int) -> None:
                bar.update(task, total=total, visible=total >= PROGRESS_THRESHOLD)

            return run(files, self.settings, self.codes, jobs=jobs, use_cache=use_cache,
                       progress=lambda n: bar.advance(task, n), on_total=on_total)

    def _check_stdin(self, stdin_filename: str | None) -> RunResult:
        data = sys.stdin.buffer.read()
        shown = stdin_filename or STDIN
        result: FileResult = lint_file(data, shown, self.rules, rule_options(self.settings))
        result = apply_per_file_ignores(result, self.settings)
        from codemod.notebooks import cell_sources, is_notebook

        if is_notebook(shown):
            self._cells[shown] = cell_sources(data)
        try:
            self._stdin_text[shown] = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            pass
        return RunResult([result], files=1, parsed=1)

    def source_line(self, path: str, line: int, cell: int | None = None) -> str | None:
        if cell is not None:  # a notebook: the line within its cell
            if path not in self._cells:
                from codemod.notebooks import cell_sources

                try:
                    self._cells[path] = cell_sources(Path(path).read_bytes())
                except OSError:
                    self._cells[path] = {}
            lines = self._cells[path].get(cell, "").splitlines()
            return lines[line - 1] if 1 <= line <= len(lines) else None
        if path in self._stdin_text:
            lines = self._stdin_text[path].splitlines()
            return lines[line - 1] if 1 <= line <= len(lines) else None
        return read_source_line(path, line, self._lines)


def read_source_line(path: str, line: int, cache: dict[str, list[str] | None]) -> str | None:
    if path not in cache:
        try:
            with tokenize.open(path) as handle:  # honours BOMs and coding cookies
                cache[path] = handle.read().splitlines()
        except (OSError, SyntaxError, UnicodeDecodeError):
            cache[path] = None
    lines = cache[path]
    if lines is None or not 1 <= line <= len(lines):
        return None
    return lines[line - 1]
