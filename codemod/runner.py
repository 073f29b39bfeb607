"""Running the engine over many files: prefilter, cache, serial or process pool."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from stat import S_ISLNK
from typing import TYPE_CHECKING

from pmap_migrate import __version__
from pmap_migrate.cache import CACHE_DIR_NAME, ResultCache, blake2b, digest
from pmap_migrate.config import Settings
from pmap_migrate.diagnostics import FileError, FileResult, State
from pmap_migrate.rules import rules_by_code
from pmap_migrate.rules.fixes.choices import RuleOptions
from pmap_migrate.stack import on_deep_stack

if TYPE_CHECKING:  # rule classes (and libcst) load only when a file needs analysing; the
    # prefilter and the slicer only when a file needs reading (a warm run reads none)
    from pmap_migrate.crossmodule import Export
    from pmap_migrate.prefilter import Gate
    from pmap_migrate.rules.analysis.project import ModuleView, ProjectIndex
    from pmap_migrate.rules.base import Rule
    from pmap_migrate.slices import Parsed

# Below this many files to parse, a process pool costs more than it saves.
PARALLEL_THRESHOLD = 24


@dataclass
class RunResult:
    results: list[FileResult] = field(default_factory=list)
    files: int = 0  # files discovered
    parsed: int = 0  # files that passed the text prefilter and were parsed
    cached: int = 0  # results answered from the cache

    @property
    def diagnostics(self):
        return sorted((d for r in self.results for d in r.diagnostics), key=lambda d: d.sort_key())

    @property
    def errors(self) -> list[FileError]:
        return [r.error for r in self.results if r.error is not None]


def display_path(path: Path | str) -> str:
    """Paths as the user would type them: relative to the working directory when below it."""
    return PathDisplay()(path)


class PathDisplay:
    """`display_path` for the many files of one run. An absolute path is shown relative to the
    working directory when the file it names, symbolic links resolved, lies below the working
    directory's own real path. What holds for a directory (its real path, its relative spelling) is
    worked out once for all its files: resolving each file's path anew, component by component,
    cost half a second on 7,500 files named from an absolute path."""

    def __init__(self) -> None:
        self._cwd: str | None = None
        # directory: (its real path, whether that lies below the working directory, its relative spelling)
        self._directories: dict[str, tuple[str, bool, str]] = {}

    def __call__(self, path: Path | str, link: bool | None = None) -> str:
        """``path`` as shown; ``link``: whether it names a symbolic link, when the caller knows."""
        text = os.fspath(path)
        if _relative_and_normal(text):
            return text.replace(os.sep, "/")
        if not os.path.isabs(text):
            return os.path.relpath(text).replace(os.sep, "/")
        directory, name = os.path.split(text)
        # `..` after a link leads out of the link's target: such a path is resolved in order
        probe = text if os.altsep is None else text.replace(os.altsep, os.sep)
        if not name or (os.sep + "." in probe and {".", ".."} & set(probe.split(os.sep))):
            return (os.path.relpath(text) if self._below_cwd(os.path.realpath(text)) else text).replace(os.sep, "/")
        real_directory, below, relative = self._directory(directory)
        if os.path.islink(text) if link is None else link:
            below = self._below_cwd(os.path.realpath(text))
        elif not below:  # the working directory itself, named by this path?
            below = self._below_cwd(os.path.join(real_directory, name))
        return (_relative_join(relative, name, text) if below else text).replace(os.sep, "/")

    def _directory(self, directory: str) -> tuple[str, bool, str]:
        """(real path, below the working directory, relative spelling) of an absolute ``directory``
        without `.` or `..` parts, each from its parent's: one `lstat` per directory."""
        known = self._directories.get(directory)
        if known is None:
            parent, name = os.path.split(directory)
            if not name or parent == directory:
                real, relative = os.path.realpath(directory), os.path.relpath(directory)
            else:
                real_parent, _, parent_relative = self._directory(parent)
                real = os.path.join(real_parent, name)
                if os.path.islink(real):
                    real = os.path.realpath(real)
                relative = _relative_join(parent_relative, name, directory)
            known = self._directories[directory] = (real, self._below_cwd(real), relative)
        return known

    def _below_cwd(self, real: str) -> bool:
        if self._cwd is None:
            self._cwd = os.path.normcase(os.path.realpath(os.getcwd()))
        real = os.path.normcase(real)
        return real == self._cwd or real.startswith(self._cwd.rstrip(os.sep) + os.sep)


def _relative_join(relative: str, name: str, path: str) -> str:
    """``os.path.relpath(path)``, ``path`` being ``name`` in a directory whose relative spelling is
    ``relative``: joined to it, computed anew only when that spelling climbs out with `..`."""
    if relative == os.curdir:
        return name
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):  # `../work` may be `.`
        return os.path.relpath(path)
    return relative + os.sep + name


def _relative_and_normal(text: str) -> bool:
    """A relative path without `..` (what discovery yields for `check .`: no `.` parts either)."""
    return not os.path.isabs(text) and (".." not in text or ".." not in text.split(os.sep))


@lru_cache(maxsize=8)
def rules_for(codes: tuple[str, ...]) -> tuple[type[Rule], ...]:
    table = rules_by_code()
    return tuple(table[c] for c in codes)


def _is_notebook(path: str) -> bool:
    from pmap_migrate.notebooks import is_notebook

    return is_notebook(path)


def rule_options(settings: Settings) -> RuleOptions:
    return RuleOptions(idiomatic=settings.idiomatic, shim=settings.shim)


def _install_libcst_patches() -> None:
    """libcst made cheaper for the analysis (pmap_migrate.libcst_patches), in every process that
    analyses a file, before its first analysis; a run the cache or the prefilter answers never
    gets here (nor imports libcst)."""
    from pmap_migrate import libcst_patches

    libcst_patches.install()


@on_deep_stack
def lint_file(data: bytes, shown: str, rules: Sequence[type[Rule]], options: RuleOptions | None = None,
              parsed: Parsed | None = None, *, whole: bool = False, project: ModuleView | None = None) -> FileResult:
    """Check one file's contents by its kind: a notebook's code cells, or a Python module (through
    its relevant slice unless ``whole``: codemod/slices.py). ``project``: the project index as the
    file sees it (rules/analysis/project.py)."""
    _install_libcst_patches()
    if _is_notebook(shown):
        from pmap_migrate.notebooks import lint_notebook

        return lint_notebook(data, shown, rules, options, project)
    from pmap_migrate.engine import lint_bytes

    return lint_bytes(data, shown, rules, options, parsed=parsed, whole=whole, project=project)


# The project index of the run's root, in each process (workers read the modules they need).
_INDEXES: dict[str, ProjectIndex] = {}

# A dependency of a file's result: (path of a module the index read, its module name, the
# fingerprint of its facts, its size, its mtime, whether it is among the run's files).
Dependency = tuple[str, str, str, int, int, bool]

# The project of a job: the configuration's root, the absolute paths of the run's files, and the
# project's exports that a module not spelling `pmap` may import (codemod/crossmodule.py; those whose
# names do not spell it either).
Project = tuple[str, frozenset[str], tuple["Export", ...]]


def _project_view(path: str, shown: str, project: Project | None) -> ModuleView | None:
    """The index as the file ``path`` sees it: its module name from the package structure."""
    if project is None:
        return None
    from pmap_migrate.rules.analysis.project import ModuleView, ProjectIndex, module_identity

    root, files, _ = project
    index = _INDEXES.get(root)
    if index is None or index.run != files:
        index = _INDEXES[root] = ProjectIndex((root,), run=files)
    if _is_notebook(shown):
        return ModuleView(index, os.path.dirname(os.path.abspath(path)), "__notebook__")
    base, name, package = module_identity(path)
    return ModuleView(index, base, name, package)


def _dependencies(view: ModuleView | None) -> tuple[Dependency, ...]:
    """What the file's result depends on in other files: the facts of every module it asked about."""
    if view is None or not view.used:
        return ()
    found = []
    for used in sorted(view.used):
        facts = view.index.facts_for(used)
        try:
            stat = os.stat(used)
        except OSError:
            continue
        if facts is not None:
            from pmap_migrate.rules.analysis.project import facts_fingerprint

            found.append((used, facts.name, facts_fingerprint(facts), stat.st_size, stat.st_mtime_ns,
                          used in view.index.run))
    return tuple(found)


@on_deep_stack
def fix_file(data: bytes, shown: str, rules: Sequence[type[Rule]], *, unsafe: bool,
             options: RuleOptions | None = None, shared: bool = False, project: ModuleView | None = None):
    """Fix one file's contents by its kind; ``project``: the project index as the file sees it."""
    _install_libcst_patches()
    from pmap_migrate.fixer import fix_bytes
    from pmap_migrate.notebooks import fix_notebook, is_notebook

    if is_notebook(shown):
        return fix_notebook(data, shown, rules, unsafe=unsafe, options=options, project=project)
    return fix_bytes(data, shown, rules, unsafe=unsafe, options=options, shared=shared, project=project)


def _gate_for(codes: tuple[str, ...]) -> Gate:
    from pmap_migrate.prefilter import gate_of_codes  # loaded with the first file to read

    return gate_of_codes(codes)


def _absolute_paths(files: Sequence[str | Path]) -> list[str]:
    """The files' absolute paths (a relative path from discovery, normal, joined to the working
    directory without `abspath`: a warm run of a large tree spends its time on such steps)."""
    cwd = os.path.join(os.getcwd(), "")
    return [cwd + text if not os.path.isabs(text := os.fspath(f)) and os.path.normpath(text) == text
            else os.path.abspath(text) for f in files]


def _project(settings: Settings, files: Sequence[str | Path], absolute: list[str] | None = None) -> Project:
    """The project of a run's jobs (one object, shared by every job of a chunk when pickled): the
    root and the files' absolute paths (``absolute``, when the caller has them); no exports yet
    (``_exports``, ``_importable``)."""
    return os.fspath(settings.root), frozenset(_absolute_paths(files) if absolute is None else absolute), ()


def _importable(exports: frozenset[Export]) -> tuple[Export, ...]:
    """The ``exports`` that a module not spelling `pmap` can name, in a stable order."""
    from pmap_migrate.crossmodule import importable

    return tuple(importable(exports))


def _exports_root(settings: Settings, files: frozenset[str]) -> str | None:
    """The tree whose modules' exports count: the root, when a configuration names it; without
    one, the project around the working directory (``project_top``: a repository's or package's
    top, where pre-commit runs) when it holds every file of the run (``files``: absolute paths);
    else none (the run's files are the project)."""
    if settings.config_file is not None:
        return os.fspath(settings.root)
    from pmap_migrate.config import project_top

    top = project_top(settings.root)
    if top is None:
        return None
    inside = os.path.join(os.fspath(top), "")
    return os.fspath(top) if all(f.startswith(inside) for f in files) else None


def _exports(tree: str | None, files: frozenset[str], cache: ResultCache | None = None) -> frozenset[Export]:
    """The exports of the project's ``tree`` (``_exports_root``) and of the run's ``files``
    (codemod/crossmodule.py), each module's part from the cache while its size and mtime hold (read
    only: `fix` records nothing; `run` goes over the files itself, with an ``ExportsPass``)."""
    from pmap_migrate.crossmodule import project_exports

    if cache is None:
        return project_exports(tree, None, files)[0]
    return project_exports(tree, dict(cache.contributions), files, cache.unchanged, cache.exports, cache.sources)[0]


def _result_cache(settings: Settings, codes: tuple[str, ...]) -> ResultCache:
    directory = settings.cache_dir or (settings.root / CACHE_DIR_NAME)
    return ResultCache(directory, settings.fingerprint(f"{__version__}+{_code_fingerprint()}", codes))


def _may_import(path: str, exports: tuple[Export, ...]) -> bool:
    """Whether the file ``path``, not spelling `pmap`, may import one of ``exports``."""
    from pmap_migrate.crossmodule import imports_exports

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return True
    return b"pmap" not in data and imports_exports(data, exports)


def _imports_exports(data: bytes, project: Project | None) -> bool:
    """Whether a module that does not spell `pmap` may import what the project exports."""
    if project is None or not project[2]:
        return False
    from pmap_migrate.crossmodule import imports_exports

    return imports_exports(data, project[2])


def _check_job(job: tuple[str, str, tuple[str, ...], RuleOptions, bool, bytes | None, Project | None]
               ) -> tuple[FileResult | None, bytes | None, bool, tuple[Dependency, ...]]:
    """One file of `run`: ``(result, content digest, unchanged, dependencies)``. The digest is None
    for a file that could not be read (its result says why; nothing to cache), ``b""`` without a
    cache; unchanged: its content has the digest the cache holds for it (no result: the cache's is
    the answer); dependencies: the other modules whose facts the result used (the project index of
    the configuration's root, when the job names one)."""
    path, shown, codes, options, want_digest, cached_digest, project = job
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return FileResult(shown, error=FileError.unreadable(shown, error)), None, False, ()
    content_digest = digest(data) if want_digest else b""
    if cached_digest is not None and content_digest == cached_digest:
        return None, content_digest, True, ()
    gate = _gate_for(codes)
    text_matched = gate.text_match(data)
    # An importer of an alias the project defines (`from .constants import pmap as p`) need not
    # refer to jax: the index is asked about the files that spell `pmap`, and about those that
    # spell a name the project exports and its module (`from .steps import p_double`).
    spelled = b"pmap" in data
    imported = not spelled and _imports_exports(data, project)
    if not text_matched and not imported and not gate.names and not gate.keywords:
        return FileResult(shown), content_digest, False, ()
    view = _project_view(path, shown, project) if spelled or imported else None
    result = _checked(data, shown, codes, options, text_matched, view)
    if result.diagnostics or result.error is not None:
        with_source_lines(result, data)
    return result, content_digest, False, _dependencies(view)


def with_source_lines(result: FileResult, data: bytes) -> FileResult:
    """``result`` holding the source lines of its findings (kept in the cache with it)."""
    from pmap_migrate.sourcetext import finding_lines

    shown = [*result.diagnostics, *([result.error.as_diagnostic()] if result.error is not None else [])]
    result.source_lines = finding_lines(data, _is_notebook(result.path), shown)
    return result


def _checked(data: bytes, shown: str, codes: tuple[str, ...], options: RuleOptions, text_matched: bool,
             project: ModuleView | None = None) -> FileResult:
    gate = _gate_for(codes)
    if _is_notebook(shown):
        if not text_matched and project is None and not gate.refers_to_names(data, notebook=True):
            return FileResult(shown)
        return lint_file(data, shown, rules_for(codes), options, project=project)
    if not text_matched and project is None and not gate.spells_names(data):
        return FileResult(shown)
    # The `ast` half of the prefilter, in the worker; the same tree serves to slice the module.
    from pmap_migrate.slices import parse_python
    from pmap_migrate.stack import collector_paused

    # The collector stays paused from the parse to the end of the analysis: the `ast` tree, which
    # holds no cycles, is freed before the collector's next pass, which would otherwise walk it
    # (it then also counts no more towards starting one).
    with collector_paused():
        parsed = parse_python(data)
        tree = scanned = None
        if not text_matched:
            # Without a tree of its own: Python 3.12's type parameters on an older Python, say.
            tree, scanned = (parsed.tree, parsed.names) if parsed is not None else (gate.newer_grammar_tree(data), None)
            if tree is not None and not gate.tree_refers_to_names(tree, scanned) \
                    and (project is None or not project.refers_to_exports(tree)):
                parsed = tree = scanned = None
                return FileResult(shown)
        result = lint_file(data, shown, rules_for(codes), options, parsed, project=project)
        parsed = tree = scanned = None
    return result


@lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """Size and mtime of the tool's own modules, so that an edited rule never reuses old results."""
    import pmap_migrate
    import pmap_migrate.rules

    parts = []
    for package in (pmap_migrate, pmap_migrate.rules):
        for path in sorted(Path(package.__file__).parent.rglob("*.py")):
            stat = path.stat()
            parts.append(f"{path.relative_to(Path(package.__file__).parent)}:{stat.st_size}:{stat.st_mtime_ns}")
    return blake2b("|".join(parts).encode(), digest_size=6).hexdigest()


def default_jobs() -> int:
    if os.environ.get("PRE_COMMIT"):  # pre-commit already runs hooks in parallel: never nest pools
        return 1
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def run(
    files: Sequence[str | Path],
    settings: Settings,
    rules: Sequence[type[Rule]] | Sequence[str],
    *,
    jobs: int | None = None,
    use_cache: bool = True,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> RunResult:
    """Check ``files`` with ``rules`` (classes, or codes: a run the cache answers whole loads no rule)."""
    codes = tuple(rule if isinstance(rule, str) else rule.CODE for rule in rules)
    cache = _result_cache(settings, codes) if use_cache else None
    outcome = RunResult(files=len(files))
    options = rule_options(settings)
    # (slot, cache key, stat, shown, path, the cached content digest) of each job
    pending: list[tuple[int, str, os.stat_result, str, str, bytes | None]] = []
    hits: list[int] = []  # the slots of the results the cache answers (no tuple each: no work for the collector)
    slots: list[FileResult | None] = []
    cwd = os.path.join(os.getcwd(), "")
    shower = PathDisplay()
    absolute = _absolute_paths(files)
    project = _project(settings, files, absolute)
    # The project's exports are gathered in the same pass (codemod/crossmodule.py): a configuration's
    # tree first, but for the run's files, which the loop adds with the stat and cache entry it takes.
    from pmap_migrate.crossmodule import ExportsPass

    exporting = ExportsPass(cache.contributions if cache is not None else None,
                            cache.unchanged if cache is not None else None)
    known = exporting.known
    tree = _exports_root(settings, project[1])
    found = exporting.walk(tree, project[1]) if tree is not None else frozenset()
    inside = os.path.join(os.path.abspath(tree), "") if tree is not None else None
    _INDEXES.clear()  # files may have changed since an earlier run in this process
    for path, path_absolute in zip(files, absolute):
        text = os.fspath(path)
        # The cache key: the absolute path (discovery already merged the names of one file). A
        # relative path from discovery is normal (no `.`, no `..`): joined to the working directory.
        link = failure = None
        relative = _relative_and_normal(text)
        key = cwd + text if relative else os.path.abspath(text)
        exported = path_absolute.endswith(".py") and (
            inside is None or path_absolute in found or not path_absolute.startswith(inside))
        try:
            stat = os.lstat(text)  # the link's own first: whether the display resolves it
            link = S_ISLNK(stat.st_mode)
            if link:
                stat = os.stat(text)
        except OSError as error:
            stat, failure = None, error
        shown = text.replace(os.sep, "/") if relative else shower(text, link)
        if stat is None:
            if exported:
                exporting.missing(path_absolute)
            slots.append(FileResult(shown, error=FileError.unreadable(shown, failure)))
            continue
        entry = cache.entries.get(key) if cache is not None else None
        fresh = entry is not None and entry[0] == stat.st_size and entry[1] == stat.st_mtime_ns
        # The cache vouches for a file by its key (the same path, spelled alike or not); most files
        # of a warm run are vouched for and without pmap: nothing to add.
        if exported:
            if fresh and path_absolute not in known and key == path_absolute:
                exporting.plain.append(path_absolute)
            else:
                exporting.add(path_absolute, stat, fresh if key == path_absolute else None)
        # A result that used other modules' facts (the project index) holds while those do.
        if entry is not None and len(entry) > 4 and cache.dependencies_changed(key, project[1]):
            entry = None
        elif fresh:
            outcome.cached += 1
            hits.append(len(slots))
            slots.append(cache.result(entry, shown))
            continue
        pending.append((len(slots), key, stat, shown, text, entry[2] if entry is not None else None))
        slots.append(None)

    if cache is None:
        exports, added = exporting.finish()[0], frozenset()
    else:  # exports made from the same contributions as the cached ones are those
        exports, changed = exporting.finish(cache.exports, cache.sources)
        added = cache.use_exports(exports, changed, exporting.forgotten, exporting.sources)
    project = (*project[:2], _importable(exports))
    # A cached result that the project's index did not take part in holds while the project
    # exports nothing new that the module may import (a module not spelling `pmap` got no view of
    # the index unless it spelled an export).
    added = _importable(added)
    if added:
        pending = [(*job[:5], None) if job[5] is not None and _may_import(job[4], added) else job for job in pending]
        for index in hits:
            text = os.fspath(files[index])
            if _may_import(text, added):
                key = cwd + text if _relative_and_normal(text) else os.path.abspath(text)
                shown = slots[index].path
                outcome.cached -= 1
                try:
                    stat = os.stat(text)
                except OSError as error:  # gone since the pass
                    slots[index] = FileResult(shown, error=FileError.unreadable(shown, error))
                    continue
                pending.append((index, key, stat, shown, text, None))
                slots[index] = None
    # A file whose size or mtime changed may hold what the cache has (a checkout touches files):
    # the worker compares digests before checking it.
    work = [(text, shown, codes, options, cache is not None, cached_digest, project)
            for _, _, _, shown, text, cached_digest in pending]

    if on_total is not None:
        on_total(len(pending))
    # The workers read the files: the pool starts at once, and no file's bytes travel through a pipe.
    # The results first: zip then runs the pool's generator to its end, which shuts the pool down
    # (stopped at its last result, it would be closed, and the idle workers killed, later).
    for (result, content_digest, unchanged, dependencies), (index, key, stat, shown, _, _) in zip(
            execute(_check_job, work, jobs, progress), pending):
        if unchanged:
            result = cache.lookup_digest(key, stat, content_digest, shown)
            outcome.cached += 1
        else:
            outcome.parsed += result.parsed
        slots[index] = result
        stored = content_digest is not None and not unchanged
        internal_error = result.error is not None and result.error.code == "PM002"
        if cache is not None and stored and not internal_error:  # a crash is retried on the next run
            cache.store(key, stat, content_digest, result, dependencies)
    if cache is not None:
        cache.save()
    outcome.results = [r for r in slots if r is not None]
    if settings.per_file_ignores:
        outcome.results = [apply_per_file_ignores(r, settings) for r in outcome.results]
    return outcome


def execute(function, work: list, jobs: int | None, progress: Callable[[int], None] | None = None):
    """``map(function, work)``, in a process pool when there is enough work to pay for one.

    Results come back in order, as they are consumed."""
    jobs = jobs or default_jobs()
    if jobs > 1 and len(work) >= PARALLEL_THRESHOLD:
        import multiprocessing  # not loaded by a run the cache answers
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_ignores_interrupts)
        size = max(1, len(work) // (jobs * 8))
        try:
            with _interrupts_blocked():  # workers start with Ctrl-C blocked, until they ignore it
                futures = [pool.submit(_map_chunk, function, work[i:i + size]) for i in range(0, len(work), size)]
            yield from _with_progress((r for future in futures for r in future.result()), progress)
        except BaseException:
            # Ctrl-C (or a failure): stop the workers rather than finish the queued work. The
            # futures are not cancelled first: the pool marks them broken, which cancelled
            # futures do not accept (a traceback from the pool's thread on Python 3.11).
            for process in list((getattr(pool, "_processes", None) or {}).values()):  # private API
                process.terminate()
            pool.shutdown(wait=False)
            raise
        finally:
            pool.shutdown(wait=True)
    else:
        yield from _with_progress(map(function, work), progress)


def _map_chunk(function, items: list) -> list:
    return [function(item) for item in items]


def _worker_ignores_interrupts() -> None:
    """Ctrl-C reaches the whole process group: the parent alone handles it (one message, no
    traceback from each worker), and stops the workers."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _interrupts_blocked():
    """Ctrl-C held back while workers are started: a worker interrupted before its initializer
    ran would print a traceback. The parent gets the interrupt when the block ends."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _with_progress(results, progress):
    for result in results:
        if progress is not None:
            progress(1)
        yield result


def _fix_job(job: tuple[str, str, tuple[str, ...], bool, RuleOptions, bool]):
    """One file of `run_fix`, read here (in the worker): ``(outcome, read)``; the outcome is None
    when the prefilter rules the file out, ``read`` false when the file could not be read."""
    path, shown, codes, unsafe, options, shared, project = job
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        from pmap_migrate.fixer import FixOutcome

        return FixOutcome(shown, b"", error=FileError.unreadable(shown, error)), False
    gate = _gate_for(codes)
    # An importer of an alias the project defines is fixed through the index, as `check` sees it.
    view = _project_view(path, shown, project) if b"pmap" in data or _imports_exports(data, project) else None
    if view is not None and not _refers_to_exports(data, view):
        view = None
    if view is None and not gate.text_match(data) and not gate.refers_to_names(data, _is_notebook(shown)):
        return None, True  # the text half of the prefilter, then its `ast` half: nothing to fix
    return fix_file(data, shown, rules_for(codes), unsafe=unsafe, options=options, shared=shared,
                    project=view), True


def _refers_to_exports(data: bytes, view: ModuleView) -> bool:
    """Whether the module (or notebook) ``data`` imports what the project index knows."""
    if view.name == "__notebook__":
        return True
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return view.refers_to_exports(tree)


def run_fix(files: Sequence[str | Path], settings: Settings, rules: Sequence[type[Rule]] | Sequence[str], *,
            unsafe: bool, jobs: int | None = None, progress: Callable[[int], None] | None = None,
            on_total: Callable[[int], None] | None = None, shared: bool = False, use_cache: bool = False) -> list:
    """``(path, FixOutcome)`` for every file that could need a fix or could not be read (path None);
    nothing is written here. The workers read the files (no file's bytes through a pipe). ``rules``:
    classes, or codes (a run whose files the prefilter all rules out loads no rule, nor libcst).
    ``shared``: fixed modules import shared helpers from their package's shared module
    (``shared_module_outcomes`` adds the outcomes that create or extend those modules).
    ``use_cache``: the project's exports are read with `check`'s cache (as `fix` runs after a
    `check` of the same files), which this run does not change."""
    codes = tuple(rule if isinstance(rule, str) else rule.CODE for rule in rules)
    outcomes: list = []
    options = rule_options(settings)
    work: list[tuple[str, str, tuple[str, ...], bool, RuleOptions, bool, Project]] = []
    shower = PathDisplay()
    project = _project(settings, files)
    tree = _exports_root(settings, project[1])
    exports = _exports(tree, project[1], _result_cache(settings, codes) if use_cache else None)
    project = (*project[:2], _importable(exports))
    root = tree or project[0]  # where importers of aliases are looked for
    _INDEXES.clear()  # files may have changed since an earlier run in this process
    for path in files:
        shown = shower(path)
        # Rules a per-file ignore switches off do not fix that file either.
        ignored = ignored_codes(shown, settings)
        file_codes = tuple(c for c in codes if not any(c.startswith(i) for i in ignored)) if ignored else codes
        work.append((os.fspath(path), shown, file_codes, unsafe, options, shared, project))
    if on_total is not None:
        on_total(len(work))
    done = list(zip(execute(_fix_job, work, jobs, progress), files))  # results first: as in `run`
    # The modules whose pmapped functions multi-process programs of the project call: fixed again,
    # for every process (codemod/crossmodule.py), as the programs need.
    pmapping = [i for i, ((outcome, read), _) in enumerate(done) if read and outcome is not None and any(
        d.code == "PM101" and d.fix is not None for d in outcome.applied)]
    if pmapping:
        from pmap_migrate.crossmodule import multi_process_callers

        callers = multi_process_callers([os.fspath(done[i][1]) for i in pmapping], root)
        for i in pmapping:
            found = callers.get(os.path.abspath(done[i][1]))
            if found:
                path, shown, file_codes, _, file_options, _, _ = work[i]
                work[i] = (path, shown, file_codes, unsafe, replace(file_options, multi_process_callers=found), shared,
                           project)
                done[i] = _fix_job(work[i]), done[i][1]
    # The modules whose public pmap aliases kept working for importers: fixed again, knowing which
    # importers the run rewrote (the alias goes when all of them are: codemod/crossmodule.py).
    kept = [i for i, ((outcome, read), _) in enumerate(done) if read and outcome is not None and any(
        d.fix is not None and d.fix.summary.startswith(KEPT_ALIAS) for d in outcome.applied)]
    if kept:
        from pmap_migrate.crossmodule import alias_decisions

        fixed = {os.path.abspath(path): outcome.fixed for (outcome, read), path in done
                 if read and outcome is not None and outcome.changed and outcome.error is None}
        decisions = alias_decisions([os.fspath(done[i][1]) for i in kept], [os.fspath(f) for f in files], fixed, root,
                                    exports)
        for i in kept:
            decided = decisions.get(os.path.abspath(done[i][1]))
            if decided:
                path, shown, file_codes, _, file_options, _, _ = work[i]
                again = (path, shown, file_codes, unsafe, replace(file_options, alias_importers=decided), shared,
                         project)
                done[i] = _fix_job(again), done[i][1]
    for (outcome, read), path in done:
        if not read:
            outcomes.append((None, outcome))
        elif outcome is not None:
            remaining = apply_per_file_ignores(FileResult(outcome.path, outcome.remaining), settings)
            outcome.remaining = [d for d in remaining.diagnostics if d.state is State.ACTIVE]
            outcomes.append((path, outcome))
    return outcomes


# The summary of PM101's fix that keeps a public pmap alias for importers (rules/pm101_pmap_call.py).
KEPT_ALIAS = "keep the public alias"


def shared_module_outcomes(outcomes: Sequence[tuple[Path | None, object]]) -> list[tuple[Path, object]]:
    """``(path, FixOutcome)`` of each shared module that the fixed modules among ``outcomes``
    import helpers from and that does not hold them yet (created: ``original`` empty and
    ``created`` set). They must be written before the modules that import them."""
    needs = [(o.shared, o.shared_helpers) for _, o in outcomes
             if getattr(o, "shared", None) is not None and o.changed and o.error is None]
    if not needs:
        return []  # nothing loaded (a run the prefilter ruled everything out of loads no libcst)
    from pmap_migrate.fixer import FixOutcome
    from pmap_migrate.shared_module import shared_modules

    return [(Path(m.file), FixOutcome(m.file, m.original or b"", m.text(), created=m.original is None))
            for m in shared_modules(needs)]


@lru_cache(maxsize=64)
def _spec(pattern: str):
    import pathspec  # per-file-ignores only

    return pathspec.GitIgnoreSpec.from_lines([pattern])


def ignored_codes(path: str, settings: Settings) -> set[str]:
    """Codes (or prefixes) that `per-file-ignores` switches off for ``path``."""
    if not settings.per_file_ignores:
        return set()
    try:
        relative = Path(path).resolve().relative_to(settings.root).as_posix()
    except ValueError:
        relative = path
    ignored: set[str] = set()
    for pattern, codes in settings.per_file_ignores:
        if _spec(pattern).match_file(relative):
            ignored.update(codes)
    return ignored


def apply_per_file_ignores(result: FileResult, settings: Settings) -> FileResult:
    if not settings.per_file_ignores or not result.diagnostics:
        return result
    ignored = ignored_codes(result.path, settings)
    if not ignored:
        return result
    result.diagnostics = [
        replace(d, state=State.SUPPRESSED)
        if d.state is State.ACTIVE and any(d.code.startswith(c) for c in ignored) else d
        for d in result.diagnostics
    ]
    return result
