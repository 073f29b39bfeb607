"""Which files a run looks at: the given paths, minus .gitignore'd and excluded ones."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pathspec

from codemod.config import DEFAULT_EXCLUDE, Settings

PYTHON_SUFFIXES = (".py", ".ipynb")  # notebooks are checked through their code cells


@dataclass(frozen=True)
class Discovered:
    files: list[Path]
    missing: list[str]  # paths given on the command line that do not exist


class _Ignores:
    """.gitignore files, read lazily per directory, applied relative to the directory holding them."""

    def __init__(self) -> None:
        self._specs: dict[Path, pathspec.PathSpec | None] = {}

    def spec_for(self, directory: Path) -> pathspec.PathSpec | None:
        if directory not in self._specs:
            spec = None
            gitignore = directory / ".gitignore"
            try:
                lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                lines = None
            if lines:
                spec = pathspec.GitIgnoreSpec.from_lines(lines)
            self._specs[directory] = spec
        return self._specs[directory]

    def ignored(self, path: Path, is_dir: bool, chain: list[Path]) -> bool:
        """``chain``: directories from the git root down to ``path``'s parent."""
        verdict = False
        for directory in chain:
            spec = self.spec_for(directory)
            if spec is None:
                continue
            relative = path.relative_to(directory).as_posix() + ("/" if is_dir else "")
            result = spec.check_file(relative)
            if result.include is not None:
                verdict = result.include
        return verdict


def _git_root(path: Path) -> Path | None:
    for directory in [path, *path.parents]:
        if (directory / ".git").exists():
            return directory
    return None


def discover(paths: list[str], settings: Settings, *, force_exclude: bool = False) -> Discovered:
    """Python files under ``paths``. A path named on the command line is itself never excluded
    unless ``force_exclude`` (what pre-commit hooks want, since pre-commit passes file names);
    what lies below a named directory is filtered by the excludes and .gitignore files."""
    root = settings.root
    # `exclude` adds to the defaults rather than replacing them: nobody wants .venv linted.
    exclude = pathspec.GitIgnoreSpec.from_lines([*DEFAULT_EXCLUDE, *settings.exclude, *settings.extend_exclude])
    ignores = _Ignores()
    files: list[Path] = []
    missing: list[str] = []
    seen: dict[Path, int] = {}  # real path -> index in files

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

    def add(path: Path, named: bool = False) -> None:
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a link loop
            return
        if not named and not any(real == r or r in real.parents for r in roots):
            return
        if real not in seen:  # a file reached through several links is looked at once
            seen[real] = len(files)
            files.append(path)
        elif files[seen[real]].is_symlink() and not path.is_symlink():
            files[seen[real]] = path  # ... and shown under its own name rather than a link's

    for given in paths:
        path = Path(given)
        absolute = path.absolute()
        if not absolute.exists():
            missing.append(given)
            continue
        if absolute.is_file():
            if not (force_exclude and excluded(absolute, False)):
                add(path, named=True)
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
        chain: list[Path] = []
        if git_root is not None:
            chain = [git_root, *[p for p in reversed(absolute.parents) if git_root in p.parents]]
            if absolute != git_root:
                chain.append(absolute)
        _walk(path, absolute, chain, git_root is not None, ignores,
              lambda p, is_dir, base=base: excluded(p, is_dir, base), add)
    files.sort()
    return Discovered(files, missing)


def _walk(shown: Path, absolute: Path, chain: list[Path], use_git: bool, ignores: _Ignores, excluded, add) -> None:
    try:
        entries = sorted(os.scandir(absolute), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        entry_abs = absolute / entry.name
        try:
            is_dir = entry.is_dir()  # follows symlinks; loops are cut by the visited check in add
            is_file = entry.is_file()
        except OSError:
            continue
        if excluded(entry_abs, is_dir):
            continue
        if use_git and ignores.ignored(entry_abs, is_dir, chain):
            continue
        if is_dir:
            if entry.is_symlink():
                continue  # never leave the tree through a directory link
            _walk(shown / entry.name, entry_abs, chain + [entry_abs], use_git, ignores, excluded, add)
        elif is_file and entry.name.endswith(PYTHON_SUFFIXES):
            add(shown / entry.name)
