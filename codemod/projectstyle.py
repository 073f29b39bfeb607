"""The style settings of the project a file belongs to, as its own tools read them: the line length
generated code must respect, and the project root that tells first-party imports from third-party.

The line length comes from the nearest directory above the file whose configuration sets one:
``ruff.toml`` / ``.ruff.toml`` / ``[tool.ruff]`` of ``pyproject.toml`` (E501's limit:
``lint.pycodestyle.max-line-length``, or the older top-level ``pycodestyle``, wins over
``line-length``), then ``[tool.black]`` / ``[tool.pyink]`` ``line-length``, then ``[flake8]
max-line-length`` of ``setup.cfg`` / ``tox.ini`` / ``.flake8``; else 88 (black's and ruff's default).
Each directory's files are read once per process.
"""

from __future__ import annotations

import configparser
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_LINE_LENGTH = 88
RUFF_FILES = ("ruff.toml", ".ruff.toml")
FLAKE8_FILES = ("setup.cfg", "tox.ini", ".flake8")
CONFIG_FILES = (*RUFF_FILES, "pyproject.toml", *FLAKE8_FILES)
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


@dataclass(frozen=True)
class LineLength:
    length: int
    source: str  # the file (and table) that sets it, relative to its directory; "default": none does
    directory: Path | None = None  # where that file is


def _toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _ruff_length(table: dict) -> int | None:
    lint = table.get("lint") if isinstance(table.get("lint"), dict) else {}
    for section in (lint.get("pycodestyle"), table.get("pycodestyle")):
        if isinstance(section, dict) and _positive(section.get("max-line-length")):
            return section["max-line-length"]
    length = table.get("line-length")
    return length if _positive(length) else None


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def line_length_in(directory: Path) -> tuple[int, str] | None:
    """The line length this directory's own configuration sets, and where; None: it sets none."""
    for name in RUFF_FILES:
        if (directory / name).is_file():
            length = _ruff_length(_toml(directory / name))
            if length is not None:
                return length, f"{name} line-length"
    if (directory / "pyproject.toml").is_file():
        tool = _toml(directory / "pyproject.toml").get("tool", {})
        tool = tool if isinstance(tool, dict) else {}
        if isinstance(tool.get("ruff"), dict):
            length = _ruff_length(tool["ruff"])
            if length is not None:
                return length, "pyproject.toml [tool.ruff]"
        for formatter in ("black", "pyink"):
            table = tool.get(formatter)
            if isinstance(table, dict) and _positive(table.get("line-length")):
                return table["line-length"], f"pyproject.toml [tool.{formatter}]"
    for name in FLAKE8_FILES:
        if not (directory / name).is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(directory / name, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue
        for option in ("max-line-length", "max_line_length"):
            if parser.has_option("flake8", option):
                try:
                    length = int(parser.get("flake8", option).strip())
                except ValueError:
                    continue
                if length > 0:
                    return length, f"{name} [flake8]"
    return None


class StyleFinder:
    """Each file's settings, from the directories between it and ``stop`` (default: the file
    system's root), each directory read once."""

    def __init__(self) -> None:
        self._length: dict[Path, tuple[int, str] | None] = {}
        self._marked: dict[Path, bool] = {}

    @staticmethod
    def directories(path: Path, stop: Path | None = None) -> list[Path]:
        found = []
        for directory in path.parents:
            found.append(directory)
            if directory == stop or directory == directory.parent:
                break
        return found

    def line_length(self, path: Path, stop: Path | None = None) -> LineLength:
        for directory in self.directories(path, stop):
            if directory not in self._length:
                self._length[directory] = line_length_in(directory)
            found = self._length[directory]
            if found is not None:
                return LineLength(found[0], found[1], directory)
        return LineLength(DEFAULT_LINE_LENGTH, "default")

    def project_root(self, path: Path, stop: Path | None = None) -> Path | None:
        """The nearest directory above ``path`` with a project marker (``pyproject.toml``,
        ``setup.py``, ``setup.cfg``, ``.git``); None: none up to ``stop``."""
        for directory in self.directories(path, stop):
            if directory not in self._marked:
                self._marked[directory] = any((directory / m).exists() for m in PROJECT_MARKERS)
            if self._marked[directory]:
                return directory
        return None


_FINDER = StyleFinder()


def _real(path: str) -> Path | None:
    """The file ``path`` names, absolute; None for a path that names no file (stdin, a test's
    made-up name in a directory that does not exist)."""
    if not path or path == "-":
        return None
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):
        return None
    return real if real.parent.is_dir() else None


def line_length(path: str) -> int:
    """The line length of the project ``path`` belongs to (88 when nothing sets one)."""
    real = _real(path)
    return DEFAULT_LINE_LENGTH if real is None else _FINDER.line_length(real).length


def project_root(path: str) -> Path | None:
    real = _real(path)
    return None if real is None else _FINDER.project_root(real)


def _isort_settings(directory: Path) -> dict | None:
    """The isort settings of a directory's configuration, in ruff's spelling
    (``known-first-party``, ``force-sort-within-sections``, ``combine-as-imports``,
    ``force-single-line``); None: it has none."""
    for name in RUFF_FILES:
        if (directory / name).is_file():
            lint = _toml(directory / name).get("lint", {})
            table = lint.get("isort") if isinstance(lint, dict) else None
            if isinstance(table, dict):
                return table
    if (directory / "pyproject.toml").is_file():
        tool = _toml(directory / "pyproject.toml").get("tool", {})
        tool = tool if isinstance(tool, dict) else {}
        ruff = tool.get("ruff") if isinstance(tool.get("ruff"), dict) else {}
        lint = ruff.get("lint") if isinstance(ruff.get("lint"), dict) else {}
        for table in (lint.get("isort"), ruff.get("isort")):
            if isinstance(table, dict):
                return table
        table = tool.get("isort")
        if isinstance(table, dict):
            settings = {key.replace("_", "-"): value for key, value in table.items()}
            if settings.get("profile") == "google":
                settings.setdefault("force-sort-within-sections", True)
                settings.setdefault("force-single-line", True)
            return settings
    return None


class _FirstParty:
    """Whether a top-level package is the project's own: named in ``known-first-party``, or a
    package or module in the project's root or its ``src`` (ruff's default ``src``)."""

    def __init__(self, root: Path | None, known: frozenset[str]) -> None:
        self.root = root
        self.known = known
        self.answers: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        if name in self.known:
            return True
        if self.root is None:
            return False
        if name not in self.answers:
            self.answers[name] = any((base / name).is_dir() or (base / f"{name}.py").is_file()
                                     for base in (self.root, self.root / "src"))
        return self.answers[name]


ISORT_KEYS = ("known-first-party", "force-sort-within-sections", "combine-as-imports", "force-single-line")


def isort_settings(path: str) -> dict:
    """The isort settings ``fix`` follows for ``path``, from the nearest configuration up to its
    project root that has some, in ruff's spelling (``ISORT_KEYS``, those set, with values of
    the right type): ``lint.isort`` options for ruff to measure by the same rules."""
    real = _real(path)
    if real is None:
        return {}
    settings: dict = {}
    for directory in _FINDER.directories(real, _FINDER.project_root(real)):
        found = _isort_settings(directory)
        if found is not None:
            settings = found
            break
    out: dict = {}
    known = settings.get("known-first-party")
    if isinstance(known, list) and any(isinstance(k, str) for k in known):
        out["known-first-party"] = sorted(k for k in known if isinstance(k, str))
    for key in ISORT_KEYS[1:]:
        if isinstance(settings.get(key), bool):
            out[key] = settings[key]
    return out


def import_order(path: str):
    """How the project ``path`` belongs to sorts its imports (``pmap_migrate.importorder``)."""
    from pmap_migrate.importorder import ImportOrder

    real = _real(path)
    if real is None:
        return ImportOrder()
    settings = isort_settings(path)
    return ImportOrder(_FirstParty(_FINDER.project_root(real), frozenset(settings.get("known-first-party", ()))),
                       settings.get("force-sort-within-sections") is True,
                       settings.get("combine-as-imports") is True, settings.get("force-single-line") is True)
