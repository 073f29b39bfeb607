"""Settings from ``[tool.pmap-migrate]`` in pyproject.toml; command-line flags win."""

from __future__ import annotations

import os
import re
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
    "extend-exclude", "respect-gitignore", "cache-dir", "idiomatic", "shim", "rule-docs-url",
}
# The keys whose values are rule codes or prefixes (checked against the rules).
CODE_KEYS = ("select", "ignore", "extend-select", "extend-ignore")
# Every selection starts from every rule: all codes start with it.
ALL_RULES = "PM"
# `rule-docs-url`: where a rule's documentation page is; `{code}` stands for the lower-case code.
DOCS_URL_PLACEHOLDER = "{code}"


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
    shim: bool = True  # fall back to runtime_shim where no plain rewrite exists (false: leave such sites)
    rule_docs_url: str | None = None  # a URL template with `{code}`; None: derived from the installation
    extra: dict = field(default_factory=dict, compare=False)

    def fingerprint(self, version: str, codes: tuple[str, ...]) -> str:
        """Everything a cached result depends on besides the file's bytes."""
        text = repr((version, codes, self.idiomatic, self.shim))
        from pmap_migrate.cache import blake2b

        return blake2b(text.encode(), digest_size=12).hexdigest()


# A table header or dotted key naming the settings table (`[tool.pmap-migrate]`,
# `[tool.pmap-migrate.per-file-ignores]`, `tool.pmap-migrate.select = ...`), outside a comment: how a
# file that is not valid TOML is known to hold the settings.
_NAMES_SECTION = re.compile(r"""^[^#\n]*\btool\s*\.\s*["']?pmap-migrate\b""", re.M)


def _shown(path: Path) -> str:
    """A config file's path as the user would type it: relative to the working directory when below it."""
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` that has a [tool.pmap-migrate] table. One that
    names the table but is not valid TOML is an error (its settings would be silently lost)."""
    start = start.resolve()
    for directory in [start, *start.parents] if start.is_dir() else list(start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as error:
                if _NAMES_SECTION.search(text):
                    raise ConfigError(f"{_shown(candidate)}: invalid TOML: {error}") from None
                continue
            if isinstance(data.get("tool"), dict) and SECTION in data["tool"]:
                return candidate
    return None


# What marks a project's top directory where no configuration names one: a repository's, or a
# package's own files (pre-commit runs hooks at the repository's top).
PROJECT_MARKERS = (".git", ".hg", "pyproject.toml", "setup.py", "setup.cfg")


def project_top(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` (a directory) that holds one of
    ``PROJECT_MARKERS``; None when there is none below the home directory."""
    start = start.resolve()
    home = Path.home().resolve() if "HOME" in os.environ else None
    for directory in [start, *start.parents]:
        if directory == home or directory.parent == directory:
            return None
        if any(os.path.exists(directory / marker) for marker in PROJECT_MARKERS):
            return directory
    return None


def _describe(value: object) -> str:
    """A TOML value as the user wrote it, for an error message: ``the string "yes"``, ``the integer 3``."""
    import json

    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, str):
        return f"the string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, list):
        odd = next((v for v in value if not isinstance(v, str)), None)
        return "a list" if odd is None else f"a list holding {_describe(odd)}"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def unknown_codes(codes) -> list[str]:
    """The codes or prefixes among ``codes`` that name no rule."""
    from pmap_migrate.rules import unknown_selectors

    return unknown_selectors(list(codes))


def _unknown_message(unknown: list[str]) -> str:
    return (f"unknown rule code{'s' if len(unknown) != 1 else ''} or prefix{'es' if len(unknown) != 1 else ''} "
            f"{', '.join(unknown)} (`pmap-migrate rules` lists the codes)")


def load_settings(config_file: Path | None, cwd: Path) -> Settings:
    if config_file is None:
        config_file = find_config(cwd)
    if config_file is None:
        return Settings(root=cwd.resolve())
    config_file = config_file.resolve()
    where = _shown(config_file)
    try:
        data = tomllib.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: a directory, not a config file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: cannot read: {getattr(error, 'strerror', None) or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: invalid TOML: {error}") from None
    # pyproject.toml-style files keep the settings under [tool.pmap-migrate]; a dedicated TOML file
    # may hold them at the top level.
    nested = data.get("tool", {}).get(SECTION) if isinstance(data.get("tool"), dict) else None
    table = nested if nested is not None else ({} if config_file.name == "pyproject.toml" else data)
    prefix = f"[tool.{SECTION}]" if nested is not None else ""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tool.{SECTION}] must be a table, not {_describe(table)}")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key{'s' if len(unknown) != 1 else ''} "
                          f"{', '.join(f'`{k}`' for k in unknown)} in {prefix or 'the settings'}; "
                          f"expected one of {', '.join(sorted(KNOWN_KEYS))}")
    root = config_file.parent

    def fail(key: str, expected: str, value: object) -> ConfigError:
        return ConfigError(f"{where}: `{key}` must be {expected}, not {_describe(value)}")

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(key, 'a list of strings (e.g. ["a", "b"])', value)
        return tuple(value)

    def codes(key: str) -> tuple[str, ...]:
        found = tuple(code.strip().upper() for code in strings(key))
        unknown = unknown_codes(found)
        if unknown:
            raise ConfigError(f"{where}: `{key}`: {_unknown_message(unknown)}")
        return found

    def boolean(key: str, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            raise fail(key, "true or false", value)
        return value

    def string(key: str) -> str | None:
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise fail(key, "a string", value)
        return value

    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise fail("per-file-ignores", 'a table of pattern = [codes] (e.g. "tests/*" = ["PM201"])', pfi)
    per_file: list[tuple[str, tuple[str, ...]]] = []
    for pattern, listed in pfi.items():
        key = f'per-file-ignores."{pattern}"'
        if not isinstance(listed, list) or not all(isinstance(c, str) for c in listed):
            raise fail(key, 'a list of rule codes (e.g. ["PM201"])', listed)
        found = tuple(c.strip().upper() for c in listed)
        unknown = unknown_codes(found)
        if unknown:
            raise ConfigError(f"{where}: `{key}`: {_unknown_message(unknown)}")
        per_file.append((pattern, found))
    selected = {key: codes(key) for key in CODE_KEYS}
    cache_dir = string("cache-dir")
    docs_url = string("rule-docs-url")
    if docs_url is not None and DOCS_URL_PLACEHOLDER not in docs_url:
        raise fail("rule-docs-url", f"a URL template holding {DOCS_URL_PLACEHOLDER} (the rule code, lower case)",
                   docs_url)
    # `extend-select` adds to `select`, whose default is every rule.
    select = selected["select"] if "select" in table else ()
    if selected["extend-select"]:
        select = (select if "select" in table else (ALL_RULES,)) + selected["extend-select"]
    return Settings(
        root=root,
        config_file=config_file,
        select=select,
        ignore=selected["ignore"] + selected["extend-ignore"],
        per_file_ignores=tuple(per_file),
        exclude=strings("exclude"),
        extend_exclude=strings("extend-exclude"),
        respect_gitignore=boolean("respect-gitignore", True),
        cache_dir=(root / cache_dir) if cache_dir is not None else None,
        idiomatic=boolean("idiomatic", False),
        shim=boolean("shim", True),
        rule_docs_url=docs_url,
    )


def check_flag_codes(option: str, codes) -> None:
    """``--select`` / ``--ignore`` name known codes or prefixes (else a ConfigError naming the flag)."""
    unknown = unknown_codes(codes)
    if unknown:
        raise ConfigError(f"{option}: {_unknown_message(unknown)}")


def with_overrides(settings: Settings, *, select=None, ignore=None, extend_exclude=None, idiomatic=None,
                   shim=None, rule_docs_url=None) -> Settings:
    """Command-line flags replace (select, ignore, idiomatic, shim, rule_docs_url) or extend (exclude)
    the configured values."""
    changes = {}
    if rule_docs_url is not None:
        if DOCS_URL_PLACEHOLDER not in rule_docs_url:
            raise ConfigError(f"--rule-docs-url: must be a URL template holding {DOCS_URL_PLACEHOLDER} "
                              f"(the rule code, lower case), not {rule_docs_url!r}")
        changes["rule_docs_url"] = rule_docs_url
    if idiomatic is not None:
        changes["idiomatic"] = bool(idiomatic)
    if shim is not None:
        changes["shim"] = bool(shim)
    if select:
        changes["select"] = tuple(select)
    if ignore:
        changes["ignore"] = tuple(ignore)
    if extend_exclude:
        changes["extend_exclude"] = settings.extend_exclude + tuple(extend_exclude)
    return replace(settings, **changes)
