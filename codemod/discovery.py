"""Which files a run looks at: the given paths, minus .gitignore'd and excluded ones."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from pmap_migrate.config import DEFAULT_EXCLUDE, ConfigError, Settings

PYTHON_SUFFIXES = (".py", ".ipynb")  # notebooks are checked through their code cells
_NAME = attrgetter("name")


@dataclass(frozen=True)
class PathProblem:
    """A path the run could not look into: a named path that does not exist, a directory that
    cannot be listed, a Python file's link that leads nowhere."""

    path: str  # as given, or as the walk spells it
    error: OSError
    directory: bool = False


@dataclass(frozen=True)
class Discovered:
    files: list[str]  # as `pathlib` spells them: relative to the working directory when given so
    problems: list[PathProblem] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        """Named paths that do not exist."""
        return [p.path for p in self.problems if isinstance(p.error, FileNotFoundError)]


class _Matcher:
    """``spec.match_file`` as one regular expression when the patterns allow (no negations):
    one search per path instead of one per pattern, the cost of walking a large tree.

    The walk asks about an entry only when no directory above it matched (it prunes those), so a
    pattern without a slash inside (``.venv``, ``*.egg-info``, ``build/``) can only match the
    entry's own name: those are tested on the name, and the answer is kept per name (`__init__.py`,
    `tests/`, ... recur all over a tree)."""

    def __init__(self, lines: list[str], translations: list[_Translation]) -> None:
        self.lines = [line for line, t in zip(lines, translations) if t is not None]  # pathspec accepts
        self._spec = None
        self.regex = self.names = self.paths = None
        self._by_name: dict[str, bool] = {}
        patterns = [t for t in translations if t is not None and t[0] is not None]
        if all(include and regex is not None for include, regex in patterns):
            regexes = [re.sub(r"[(][?]P<[^>]*>", "(?:", regex) for _, regex in patterns]
            by_name = [r for r in regexes if _name_only(r)]
            by_path = [r for r in regexes if r not in by_name]
            try:
                self.regex = _any_of(regexes)
                self.names = _any_of(by_name)
                self.paths = _any_of(by_path) if by_path else None
            except re.error:
                self.regex = self.names = self.paths = None

    @property
    def spec(self):
        """pathspec's own matcher (negations), made when first needed."""
        if self._spec is None:
            import pathspec

            self._spec = pathspec.GitIgnoreSpec.from_lines(self.lines)
        return self._spec

    def match_file(self, relative: str) -> bool:
        if self.regex is not None:
            return self.regex.search(relative) is not None
        return self.spec.match_file(relative)

    def check_file(self, relative: str) -> bool | None:
        """True: ignored; False: re-included by a negation; None: no pattern applies."""
        if self.regex is not None:
            return True if self.regex.search(relative) is not None else None
        return self.spec.check_file(relative).include

    def match_entry(self, relative: str, name: str) -> bool | None:
        """``check_file(relative)`` for an entry of the walk (a directory's with its ``/``) whose
        directories are matched by no pattern of this matcher; ``name``: its last part."""
        if self.names is None:
            return self.check_file(relative)
        verdict = self._by_name.get(name)
        if verdict is None:
            verdict = self._by_name[name] = self.names.search(name) is not None
        if verdict or (self.paths is not None and self.paths.search(relative) is not None):
            return True
        return None


_BY_NAME_PREFIX = "^(?:.+/)?"  # pathspec's start of a pattern that matches at any depth
# pathspec's ends of a pattern, with named groups made plain: the entry itself or what lies below it
# (1.x), or below a directory only; the same in 0.12.
_ENDINGS = ("(?:(?:/)|$)", "(?:/)", "(?:(?:/).*)?$", "(?:/).*$")


def _name_only(regex: str) -> bool:
    """Whether the pattern's regex matches a path only through one part of it (and what lies
    below): a match at any depth of a body without ``/`` and without a wildcard that crosses one.
    A regex of any other shape is judged on the whole path (never wrong, only slower)."""
    if not regex.startswith(_BY_NAME_PREFIX):
        return False
    body = regex[len(_BY_NAME_PREFIX):]
    ending = next((e for e in _ENDINGS if body.endswith(e)), None)
    if ending is None:
        return False
    body = re.sub(r"\\.", "", body[: -len(ending)].replace("[^/]", ""))  # escaped characters, "any but /"
    return not any(c in body for c in "/.()|^$")


def _any_of(regexes: list[str]) -> re.Pattern:
    return re.compile("|".join(f"(?:{r})" for r in regexes) or "(?!)")


# How pathspec translates one gitignore-style line: (include, regex), include None for a comment or
# a blank line; None for a line pathspec rejects (a trailing backslash: git ignores such a pattern too).
_Translation = tuple[bool | None, str | None] | None


def _translate(line: str) -> _Translation:
    import pathspec  # only for lines no earlier run translated

    if not line:
        return None, None
    try:
        [pattern] = pathspec.GitIgnoreSpec.from_lines([line]).patterns
    except ValueError:  # pathspec's GitIgnorePatternError
        return None
    regex = getattr(pattern, "regex", None)
    return pattern.include, None if regex is None else regex.pattern


def _pathspec_identity() -> str | None:
    """The installed pathspec's file, size and mtime (without importing it), hashed."""
    import importlib.util

    from pmap_migrate.cache import blake2b

    try:
        found = importlib.util.find_spec("pathspec")
        stat = os.stat(found.origin)
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return None
    return blake2b(f"{found.origin}:{stat.st_size}:{stat.st_mtime_ns}".encode(), digest_size=8).hexdigest()


class _Translator:
    """pathspec's translations of pattern lines, remembered in the cache directory for the installed
    pathspec: a run the cache answers then does not import pathspec (about a tenth of such a run).
    A line is translated alone, as pathspec translates a file's lines (one pattern per line)."""

    FORMAT = 1

    def __init__(self, directory: Path | None) -> None:
        self.file = None
        self.known: dict[str, _Translation] = {}
        self.added = False
        identity = _pathspec_identity() if directory is not None else None
        if identity is not None:
            from pmap_migrate.cache import load_pickle

            self.file = directory / f"patterns-{self.FORMAT}-{identity}.pickle"
            loaded = load_pickle(self.file)
            if isinstance(loaded, dict):
                self.known = loaded

    def translate(self, lines: list[str]) -> list[_Translation]:
        for line in lines:
            if line not in self.known:
                self.known[line] = _translate(line)
                self.added = True
        return [self.known[line] for line in lines]

    def save(self) -> None:
        if not self.added or self.file is None:
            return
        from pmap_migrate.cache import store_pickle

        if store_pickle(self.file, self.known):
            for stale in self.file.parent.glob("patterns-*.pickle"):  # of another pathspec
                if stale != self.file:
                    stale.unlink(missing_ok=True)


class _Ignores:
    """.gitignore files, read lazily per directory, applied relative to the directory holding them."""

    def __init__(self, translator: _Translator) -> None:
        self._specs: dict[str, _Matcher | None] = {}
        self._translator = translator

    def spec_for(self, directory: str) -> _Matcher | None:
        if directory not in self._specs:
            spec = None
            try:
                with open(os.path.join(directory, ".gitignore"), encoding="utf-8", errors="replace") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                lines = None
            if lines:
                spec = _Matcher(lines, self._translator.translate(lines))
            self._specs[directory] = spec
        return self._specs[directory]


# The .gitignore files that apply below a directory, from the git root down: each one's matcher
# with the directory's path relative to the one holding it ("" for that directory itself).
_Chain = list[tuple[_Matcher, str]]


def _chain_below(chain: _Chain, name: str) -> _Chain:
    """The chain of a directory's subdirectory ``name`` (before its own .gitignore joins it)."""
    return [(matcher, f"{prefix}/{name}" if prefix else name) for matcher, prefix in chain]


def _ignored(chain: _Chain, entry: str, by_name: bool) -> bool:
    """Whether the ``entry`` of a directory with this chain (its name, with a ``/`` for a directory)
    is git-ignored (the deepest .gitignore that has a say decides, a negation re-including what one
    above excluded). ``by_name``: no matcher of the chain has a negation, so no directory above the
    entry matched (the walk would not be here) and each may judge slash-free patterns by the name."""
    verdict = False
    for matcher, prefix in chain:
        relative = f"{prefix}/{entry}" if prefix else entry
        result = matcher.match_entry(relative, entry) if by_name else matcher.check_file(relative)
        if result is not None:
            verdict = result
    return verdict


def _git_root(path: Path) -> Path | None:
    for directory in [path, *path.parents]:
        if (directory / ".git").exists():
            return directory
    return None


def discover(paths: list[str], settings: Settings, *, force_exclude: bool = False,
             cache_dir: Path | None = None) -> Discovered:
    """Python files under ``paths``. A path named on the command line is itself never excluded
    unless ``force_exclude`` (what pre-commit hooks want, since pre-commit passes file names);
    what lies below a named directory is filtered by the excludes and .gitignore files."""
    root = settings.root
    # `exclude` adds to the defaults rather than replacing them: nobody wants .venv linted.
    translator = _Translator(cache_dir)
    lines = [*DEFAULT_EXCLUDE, *settings.exclude, *settings.extend_exclude]
    translations = translator.translate(lines)
    for line, translation in zip(lines, translations):
        if translation is None:
            raise ConfigError(f"invalid exclude pattern {line!r} (a gitignore-style pattern)")
    exclude = _Matcher(lines, translations)
    ignores = _Ignores(translator)
    files: list[str] = []
    problems: list[PathProblem] = []
    seen: dict[str, int] = {}  # real path -> index in files

    def excluded(path: Path, is_dir: bool, base: Path = root) -> bool:
        suffix = "/" if is_dir else ""
        try:
            relative = path.relative_to(base).as_posix() + suffix
        except ValueError:
            relative = path.name + suffix
        return exclude.match_file(relative)

    # What lies below a named directory may be a symbolic link; it is followed only where it
    # stays inside the named paths (`fix` writes through links, never outside what it was given).
    roots = [Path(given).resolve() for given in paths if Path(given).exists()]

    def add(path: str, named: bool = False, real: str | None = None) -> None:
        """``real``: the file's real path when the walk knows it (no link on the way), which
        also means it lies inside a named directory."""
        if real is None:
            try:
                resolved = Path(path).resolve()
            except (OSError, RuntimeError):  # a link loop
                return
            if not named and not any(resolved == r or r in resolved.parents for r in roots):
                return
            real = str(resolved)
        if real not in seen:  # a file reached through several links is looked at once
            seen[real] = len(files)
            files.append(path)
        elif os.path.islink(files[seen[real]]) and not os.path.islink(path):
            files[seen[real]] = path  # ... and shown under its own name rather than a link's

    for given in paths:
        path = Path(given)
        absolute = path.absolute()
        try:
            os.stat(absolute)
        except OSError as error:  # missing, a link that leads nowhere, a directory above it unreadable
            problems.append(PathProblem(given, error))
            continue
        if absolute.is_file():
            if not (force_exclude and excluded(absolute, False)):
                add(str(path), named=True)
            continue
        if excluded(absolute, True):
            if force_exclude:
                continue
            # The user named an excluded directory: check it, judging what lies below it by the
            # patterns relative to it (so `__pycache__` and the like still stay out).
            base = absolute
        else:
            base = root
        git_root = _git_root(absolute) if settings.respect_gitignore else None
        chain: _Chain = []
        if git_root is not None:
            # Those above the walked directory; its own, and those below, the walk finds in its listings.
            directories = [git_root, *[p for p in reversed(absolute.parents) if git_root in p.parents]]
            for directory in directories if absolute != git_root else []:
                spec = ignores.spec_for(str(directory))
                if spec is not None:
                    below = absolute.relative_to(directory).as_posix()
                    chain.append((spec, "" if below == "." else below))
        try:
            relative = absolute.relative_to(base).as_posix()
            relative = "" if relative == "." else relative
        except ValueError:
            relative = None  # outside the base: entries are judged by their names
        _walk(str(path), str(absolute), str(absolute.resolve()), relative, chain, git_root is not None, ignores,
              exclude, add, problems.append)
    files.sort(key=_parts)
    problems.sort(key=lambda problem: _parts(problem.path))
    translator.save()
    return Discovered(files, problems)


def excluded_path(path: str, settings: Settings) -> bool:
    """Whether the excludes rule out ``path`` (which need not exist), as `--force-exclude` judges a
    file named on the command line: the source read from stdin under its `--stdin-filename`."""
    lines = [*DEFAULT_EXCLUDE, *settings.exclude, *settings.extend_exclude]
    translations = _Translator(None).translate(lines)
    exclude = _Matcher([line for line, t in zip(lines, translations) if t is not None],
                       [t for t in translations if t is not None])
    absolute = Path(path).absolute()
    try:
        relative = absolute.relative_to(settings.root).as_posix()
    except ValueError:
        relative = absolute.name
    return exclude.match_file(relative)


def _parts(path: str) -> list[str]:
    """What `Path.parts` holds (the order of a sorted listing): the root of an absolute path first."""
    parts = path.split(os.sep)
    if not parts[0]:
        parts[0] = os.sep
    return parts


def _walk(shown: str, absolute: str, real: str, relative: str | None, chain: _Chain, use_git: bool,
          ignores: _Ignores, exclude: _Matcher, add, problem) -> None:
    """Walk ``absolute`` (shown as ``shown``, a normal path as `pathlib` spells it): ``real`` is its
    real path (directory links are never entered, so the real path of what lies below follows
    without asking the file system), ``relative`` its path relative to the base of the exclude
    patterns (None: outside it, entries judged by name). ``problem`` gets what cannot be looked
    into: this directory when it cannot be listed, a Python file's link that leads nowhere."""
    try:
        entries = sorted(os.scandir(absolute), key=_NAME)
    except OSError as error:
        problem(PathProblem(shown, error, directory=True))
        return
    if use_git and any(entry.name == ".gitignore" for entry in entries):
        spec = ignores.spec_for(absolute)
        if spec is not None:
            chain = [*chain, (spec, "")]
    by_name = all(matcher.names is not None for matcher, _ in chain)
    below = "" if shown == "." else os.path.join(shown, "")
    absolute_below, real_below = os.path.join(absolute, ""), os.path.join(real, "")
    for entry in entries:
        name = entry.name
        try:
            is_dir = entry.is_dir()  # follows symlinks; loops are cut by the visited check in add
            is_file = entry.is_file()
        except OSError:  # a link to itself, say
            is_dir = is_file = False
        dangling = not is_dir and not is_file and name.endswith(PYTHON_SUFFIXES) and entry.is_symlink()
        if not is_dir and not (is_file and name.endswith(PYTHON_SUFFIXES)) and not dangling:
            continue  # nothing to check: no need to ask the patterns
        entry_relative = name if not relative else f"{relative}/{name}"
        judged = name + "/" if is_dir else name  # a directory's patterns see its trailing slash
        if exclude.match_entry(entry_relative + "/" if is_dir else entry_relative, judged):
            continue
        if chain and _ignored(chain, judged, by_name):
            continue
        if dangling:  # a Python file's link to nothing (or to itself): not checked, and said so
            try:
                os.stat(absolute_below + name)
            except OSError as error:
                problem(PathProblem(below + name, error))
            continue
        if is_dir:
            if entry.is_symlink():
                continue  # never leave the tree through a directory link
            _walk(below + name, absolute_below + name, real_below + name,
                  None if relative is None else entry_relative, _chain_below(chain, name), use_git, ignores,
                  exclude, add, problem)
        else:  # a Python file or notebook (anything else was passed over above)
            add(below + name, real=None if entry.is_symlink() else real_below + name)
