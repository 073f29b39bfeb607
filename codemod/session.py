"""One invocation: settings, selected rules, files; shared by `check`, `fix` and `report`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pmap_migrate.cache import CACHE_DIR_NAME
from pmap_migrate.config import ConfigError, Settings, load_settings, with_overrides
from pmap_migrate.diagnostics import Diagnostic, FileResult, State
from pmap_migrate.discovery import discover
from pmap_migrate.rules import select_codes, unknown_selectors
from pmap_migrate.runner import (
    RunResult,
    apply_per_file_ignores,
    lint_file,
    rule_options,
    rules_for,
    run,
    with_source_lines,
)

if TYPE_CHECKING:
    from pmap_migrate.rules.base import Rule

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
    # The source lines of the findings of this session's run, by path (FileResult.source_lines),
    # and the lines of files read for findings that came without them.
    _source_lines: dict[str, dict[tuple[int, int], str]] = field(default_factory=dict)
    _read: dict[str, dict[int | None, list[str]]] = field(default_factory=dict)

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
        return CheckOutcome(self._run(self.files(use_cache=use_cache), use_cache=use_cache, jobs=jobs,
                                      progress=progress))

    def files(self, *, use_cache: bool = True) -> list[str]:
        """The files this invocation looks at (an error for a named path that does not exist).
        ``use_cache``: the cache directory keeps pathspec's translations of the patterns."""
        if STDIN in self.paths:
            raise ConfigError("this command does not read stdin; name the files")
        cache_dir = (self.settings.cache_dir or self.settings.root / CACHE_DIR_NAME) if use_cache else None
        found = discover(self.paths, self.settings, force_exclude=self.force_exclude, cache_dir=cache_dir)
        if found.missing:
            raise ConfigError(f"no such file or directory: {', '.join(found.missing)}")
        return found.files

    def fix(self, *, unsafe: bool, jobs: int | None = None, progress: bool = False, use_cache: bool = True) -> list:
        """``(path, FixOutcome)`` pairs; writing is the caller's decision (``--diff`` writes nothing)."""
        if STDIN in self.paths:
            raise ConfigError("`fix` does not read stdin; name the files to fix")
        files = self.files(use_cache=use_cache)
        from pmap_migrate.runner import run_fix

        if not progress or not sys.stderr.isatty():
            return run_fix(files, self.settings, self.codes, unsafe=unsafe, jobs=jobs)
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("fixing", total=None, visible=False)
            return run_fix(files, self.settings, self.codes, unsafe=unsafe, jobs=jobs,
                           progress=lambda n: bar.advance(task, n),
                           on_total=lambda total: bar.update(task, total=total, visible=total >= PROGRESS_THRESHOLD))

    def _run(self, files, *, use_cache, jobs, progress) -> RunResult:
        if not progress or not sys.stderr.isatty():
            return self._keep_source_lines(run(files, self.settings, self.codes, jobs=jobs, use_cache=use_cache))
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("checking", total=None, visible=False)

            def on_total(total: int) -> None:
                bar.update(task, total=total, visible=total >= PROGRESS_THRESHOLD)

            return self._keep_source_lines(run(files, self.settings, self.codes, jobs=jobs, use_cache=use_cache,
                                               progress=lambda n: bar.advance(task, n), on_total=on_total))

    def _check_stdin(self, stdin_filename: str | None) -> RunResult:
        data = sys.stdin.buffer.read()
        shown = stdin_filename or STDIN
        result: FileResult = lint_file(data, shown, self.rules, rule_options(self.settings))
        result = apply_per_file_ignores(with_source_lines(result, data), self.settings)
        return self._keep_source_lines(RunResult([result], files=1, parsed=1))

    def _keep_source_lines(self, outcome: RunResult) -> RunResult:
        for result in outcome.results:
            if result.source_lines is not None:
                self._source_lines[result.path] = result.source_lines
        return outcome

    def source_line(self, path: str, line: int, cell: int | None = None) -> str | None:
        """Line ``line`` of the file (of its cell ``cell`` in a notebook): kept with the results of
        this session's run, else read from the file (after `fix`, the file as written)."""
        known = self._source_lines.get(path)
        if known is not None and (cell or 0, line) in known:
            return known[(cell or 0, line)]
        if path not in self._read:
            self._read[path] = read_lines(path)
        lines = self._read[path].get(cell)
        return lines[line - 1] if lines is not None and 1 <= line <= len(lines) else None


def read_lines(path: str) -> dict[int | None, list[str]]:
    """The lines of a file (key None), and of a notebook's cells by number; {} if unreadable."""
    from pmap_migrate.notebooks import is_notebook
    from pmap_migrate.sourcetext import lines_shown

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return {}
    return lines_shown(data, is_notebook(path))
