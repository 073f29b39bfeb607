"""One invocation: settings, selected rules, files; shared by `check`, `fix` and `report`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pmap_migrate.cache import CACHE_DIR_NAME
from pmap_migrate.config import ConfigError, Settings, check_flag_codes, load_settings, with_overrides
from pmap_migrate.diagnostics import Diagnostic, FileError, FileResult, State
from pmap_migrate.discovery import discover
from pmap_migrate.rules import select_codes
from pmap_migrate.runner import (
    RunResult,
    apply_per_file_ignores,
    display_path,
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
        """Active findings plus one PM00x line per file that could not be checked."""
        found = [d for r in self.run.results for d in r.diagnostics if d.state is State.ACTIVE]
        found += [e.as_diagnostic() for e in self.run.errors]
        return sorted(found, key=Diagnostic.sort_key)

    @property
    def internal_errors(self) -> list:
        return [e for e in self.run.errors if e.code == "PM002"]


@dataclass
class FixRun:
    """What `fix` did (or would do) to the files of a session; nothing is written yet."""

    files: int  # the files looked at
    outcomes: list  # (path, FixOutcome) of every file that could need a fix or could not be read
    problems: list[FileError] = field(default_factory=list)  # paths that could not be looked into


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
    # The named paths, directories and links that could not be looked into (by `files`).
    problems: list[FileError] = field(default_factory=list)
    _stdin: bytes | None = None

    @classmethod
    def create(cls, paths, *, select=(), ignore=(), extend_exclude=(), force_exclude=False, config_file=None,
               idiomatic: bool | None = None, shim: bool | None = None, rule_docs_url: str | None = None) -> Session:
        cwd = Path.cwd()
        settings = load_settings(Path(config_file) if config_file else None, cwd)
        check_flag_codes("--select", select)
        check_flag_codes("--ignore", ignore)
        settings = with_overrides(settings, select=list(select), ignore=list(ignore),
                                  extend_exclude=list(extend_exclude), idiomatic=idiomatic, shim=shim,
                                  rule_docs_url=rule_docs_url)
        codes = select_codes(list(settings.select), list(settings.ignore))
        paths = list(paths) or ["."]
        if STDIN in paths and len(paths) > 1:
            raise ConfigError("`-` (stdin) cannot be combined with other paths")
        return cls(paths, settings, codes, force_exclude)

    @property
    def reads_stdin(self) -> bool:
        return self.paths == [STDIN]

    @property
    def rules(self) -> tuple[type[Rule], ...]:
        return rules_for(self.codes)

    def check(self, *, use_cache: bool = True, jobs: int | None = None, stdin_filename: str | None = None,
              progress: bool = False) -> CheckOutcome:
        if self.reads_stdin:
            return CheckOutcome(self._check_stdin(stdin_filename))
        files = self.files(use_cache=use_cache)
        outcome = self._run(files, use_cache=use_cache, jobs=jobs, progress=progress)
        outcome.results = [FileResult(problem.path, error=problem) for problem in self.problems] + outcome.results
        return CheckOutcome(outcome)

    def check_files(self, files, *, use_cache: bool = True, jobs: int | None = None) -> RunResult:
        """`check` of ``files`` (paths this session discovered), without progress display."""
        return self._run(files, use_cache=use_cache, jobs=jobs, progress=False)

    def files(self, *, use_cache: bool = True) -> list[str]:
        """The files this invocation looks at; the paths it cannot look into are kept in
        ``problems`` (a named path that does not exist, a directory that cannot be listed).
        ``use_cache``: the cache directory keeps pathspec's translations of the patterns."""
        if self.reads_stdin:
            raise ConfigError("this command does not read stdin; name the files")
        cache_dir = (self.settings.cache_dir or self.settings.root / CACHE_DIR_NAME) if use_cache else None
        found = discover(self.paths, self.settings, force_exclude=self.force_exclude, cache_dir=cache_dir)
        self.problems = [FileError.not_looked_into(display_path(p.path), p.error, p.directory) for p in found.problems]
        return found.files

    def fix(self, *, unsafe: bool, jobs: int | None = None, progress: bool = False, use_cache: bool = True) -> FixRun:
        """What fixing the files would do; writing is the caller's decision (``--diff`` writes nothing)."""
        files = self.files(use_cache=use_cache)
        from pmap_migrate.runner import run_fix

        if not progress or not sys.stderr.isatty():
            outcomes = run_fix(files, self.settings, self.codes, unsafe=unsafe, jobs=jobs, shared=True,
                               use_cache=use_cache)
            return FixRun(len(files), outcomes, self.problems)
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("fixing", total=None, visible=False)
            outcomes = run_fix(files, self.settings, self.codes, unsafe=unsafe, jobs=jobs, shared=True,
                               use_cache=use_cache, progress=lambda n: bar.advance(task, n),
                               on_total=lambda total: bar.update(task, total=total,
                                                                 visible=total >= PROGRESS_THRESHOLD))
        return FixRun(len(files), outcomes, self.problems)

    def fix_stdin(self, stdin_filename: str | None, *, unsafe: bool):
        """The source read from stdin, fixed: a ``FixOutcome`` (nothing fixed in a file the
        excludes rule out under ``--force-exclude``)."""
        from pmap_migrate.fixer import FixOutcome
        from pmap_migrate.runner import fix_file, ignored_codes

        data = self.stdin_bytes()
        shown = stdin_filename or STDIN
        if self._excluded_stdin(stdin_filename):
            return FixOutcome(shown, data)
        ignored = ignored_codes(shown, self.settings)
        codes = tuple(c for c in self.codes if not any(c.startswith(i) for i in ignored))
        outcome = fix_file(data, shown, rules_for(codes), unsafe=unsafe, options=rule_options(self.settings))
        outcome.remaining = [d for d in apply_per_file_ignores(FileResult(shown, outcome.remaining), self.settings)
                             .diagnostics if d.state is State.ACTIVE]
        return outcome

    def stdin_bytes(self) -> bytes:
        """The source read from stdin (read once: `fix -` checks it, then fixes it)."""
        if self._stdin is None:
            self._stdin = sys.stdin.buffer.read()
        return self._stdin

    def _excluded_stdin(self, stdin_filename: str | None) -> bool:
        """Under ``--force-exclude``, whether the excludes rule out the file stdin stands for."""
        if not self.force_exclude or not stdin_filename:
            return False
        from pmap_migrate.discovery import excluded_path

        return excluded_path(stdin_filename, self.settings)

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
        data = self.stdin_bytes()
        shown = stdin_filename or STDIN
        if self._excluded_stdin(stdin_filename):
            return RunResult([FileResult(shown)], files=0)
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
