"""Settings from ``[tool.pmap-migrate]`` in pyproject.toml; command-line flags win."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

# The project's record of fixes skipped in review (codemod/skips.py), in its root.
SKIPS_FILE = ".pmap-migrate-skips.json"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SECTION = "pmap-migrate"

# Directories nobody wants linted (the same spirit as ruff's defaults).
DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".mypy_cache", ".nox", ".pants.d",
    ".pytype", ".ruff_cache", ".pmap_migrate_cache", ".svn", ".tox", ".venv", "__pypackages__",
    "_build", "buck-out", "build", "dist", "node_modules", "site-packages", "venv", "__pycache__",
    ".ipynb_checkpoints",
)

KNOWN_KEYS = {
    "select", "ignore", "extend-select", "extend-ignore", "per-file-ignores", "exclude",
    "extend-exclude", "respect-gitignore", "cache-dir", "idiomatic",
}


class ConfigError(Exception):
    """A configuration problem the user must fix; reported in one line, exit code 2."""


@dataclass(frozen=True)
class Settings:
    root: Path  # paths in the report and patterns in the config are relative to this
    config_file: Path | None = None
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True
    cache_dir: Path | None = None
    idiomatic: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    def fingerprint(self, version: str, codes: tuple[str, ...]) -> str:
        """Everything a cached result depends on besides the file's bytes."""
        text = repr((version, codes, self.idiomatic))
        from pmap_migrate.cache import blake2b

        return blake2b(text.encode(), digest_size=12).hexdigest()


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` that has a [tool.pmap-migrate] table."""
    start = start.resolve()
    for directory in [start, *start.parents] if start.is_dir() else list(start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue
            if SECTION in data.get("tool", {}):
                return candidate
    return None


def load_settings(config_file: Path | None, cwd: Path) -> Settings:
    if config_file is None:
        config_file = find_config(cwd)
    if config_file is None:
        return Settings(root=cwd.resolve())
    config_file = config_file.resolve()
    try:
        data = tomllib.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {config_file}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {config_file}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{config_file}: invalid TOML: {error}") from None
    # pyproject.toml-style files keep the settings under [tool.pmap-migrate]; a dedicated TOML file
    # may hold them at the top level.
    nested = data.get("tool", {}).get(SECTION) if isinstance(data.get("tool"), dict) else None
    table = nested if nested is not None else ({} if config_file.name == "pyproject.toml" else data)
    if not isinstance(table, dict):
        raise ConfigError(f"{config_file}: [tool.{SECTION}] must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{config_file}: unknown key(s) in [tool.{SECTION}]: {', '.join(unknown)}")
    root = config_file.parent

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{config_file}: `{key}` must be a list of strings")
        return tuple(value)

    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{config_file}: `per-file-ignores` must be a table of pattern = [codes]")
    per_file: list[tuple[str, tuple[str, ...]]] = []
    for pattern, codes in pfi.items():
        if isinstance(codes, str):
            codes = [codes]
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise ConfigError(f"{config_file}: per-file-ignores[{pattern!r}] must be a list of codes")
        per_file.append((pattern, tuple(c.upper() for c in codes)))
    cache_dir = table.get("cache-dir")
    return Settings(
        root=root,
        config_file=config_file,
        select=strings("select") + strings("extend-select") if "select" in table else strings("extend-select"),
        ignore=strings("ignore") + strings("extend-ignore"),
        per_file_ignores=tuple(per_file),
        exclude=strings("exclude"),
        extend_exclude=strings("extend-exclude"),
        respect_gitignore=bool(table.get("respect-gitignore", True)),
        cache_dir=(root / cache_dir) if isinstance(cache_dir, str) else None,
        idiomatic=bool(table.get("idiomatic", False)),
    )


def with_overrides(settings: Settings, *, select=None, ignore=None, extend_exclude=None, idiomatic=None) -> Settings:
    """Command-line flags replace (select, ignore, idiomatic) or extend (exclude) the configured values."""
    changes = {}
    if idiomatic is not None:
        changes["idiomatic"] = bool(idiomatic)
    if select:
        changes["select"] = tuple(select)
    if ignore:
        changes["ignore"] = tuple(ignore)
    if extend_exclude:
        changes["extend_exclude"] = settings.extend_exclude + tuple(extend_exclude)
    return replace(settings, **changes)
