"""The baseline ratchet: a CI gate for a codebase that is not migrated yet.

``check --write-baseline FILE`` records how many findings each file has per rule; ``check
--baseline FILE`` then fails only where such a count grew. Counts, not positions: editing a file
moves its findings without making them new, and fixing one lowers the count that is allowed
(write the baseline again to make the lower count the new ceiling).

The file is JSON, small and reviewable in a diff::

    {
      "version": 1,
      "tool": "pmap-migrate 0.1.0",
      "findings": {"src/train.py": {"PM101": 2, "PM201": 1}}
    }

Paths are relative to the directory holding the baseline file, with ``/`` separators, so the
same baseline works whatever directory the check runs from.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pmap_migrate import __version__
from pmap_migrate.config import ConfigError
from pmap_migrate.diagnostics import Diagnostic

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Growth:
    path: str  # as shown in this run
    code: str
    allowed: int
    found: int


@dataclass
class Verdict:
    new: list[Diagnostic] = field(default_factory=list)  # every finding of a (file, rule) whose count grew
    grown: list[Growth] = field(default_factory=list)
    hidden: int = 0  # findings within the baseline
    shrunk: int = 0  # how many fewer findings than the baseline allows (the ratchet can tighten)


def _key(path: str, base: Path) -> str:
    """A finding's path, relative to the baseline's directory (stdin paths are taken as given)."""
    absolute = os.path.abspath(path)
    try:
        return Path(os.path.relpath(absolute, base)).as_posix()
    except ValueError:  # another drive on Windows
        return Path(absolute).as_posix()


def counts(diagnostics: Sequence[Diagnostic], base: Path) -> dict[str, dict[str, int]]:
    tally: Counter[tuple[str, str]] = Counter((_key(d.path, base), d.code) for d in diagnostics)
    table: dict[str, dict[str, int]] = {}
    for (path, code), number in sorted(tally.items()):
        table.setdefault(path, {})[code] = number
    return table


def write(file: Path, diagnostics: Sequence[Diagnostic]) -> dict[str, dict[str, int]]:
    base = file.resolve().parent
    table = counts(diagnostics, base)
    document = {"version": FORMAT_VERSION, "tool": f"pmap-migrate {__version__}", "findings": table}
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot write baseline {file}: {error.strerror or error}") from None
    return table


def load(file: Path) -> dict[str, dict[str, int]]:
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"baseline not found: {file} (create it with --write-baseline)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read baseline {file}: {error}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{file}: not a pmap-migrate baseline (invalid JSON: {error.msg})") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{file}: not a pmap-migrate baseline of format version {FORMAT_VERSION}")
    findings = document.get("findings")
    valid = isinstance(findings, dict) and all(
        isinstance(codes, dict) and all(isinstance(n, int) and n >= 0 for n in codes.values())
        for codes in findings.values())
    if not valid:
        raise ConfigError(f"{file}: `findings` must map paths to {{code: count}} tables")
    return findings


def compare(file: Path, diagnostics: Sequence[Diagnostic], checked: Sequence[str] = ()) -> Verdict:
    """What the gate reports given the baseline in ``file``; ``checked``: the paths this run looked
    at (a baseline entry of a file not checked now, as under pre-commit, has not shrunk)."""
    allowed = load(file)
    base = file.resolve().parent
    groups: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault((_key(d.path, base), d.code), []).append(d)
    verdict = Verdict()
    for (path, code), found in groups.items():
        ceiling = allowed.get(path, {}).get(code, 0)
        if len(found) > ceiling:
            # Which of them are new cannot be told from counts: show the whole group.
            verdict.new.extend(found)
            verdict.grown.append(Growth(found[0].path, code, ceiling, len(found)))
        else:
            verdict.hidden += len(found)
            verdict.shrunk += ceiling - len(found)
    looked_at = {_key(path, base) for path in checked}
    for path, codes in allowed.items():
        if path in looked_at:
            verdict.shrunk += sum(n for code, n in codes.items() if (path, code) not in groups)
    verdict.new.sort(key=Diagnostic.sort_key)
    verdict.grown.sort(key=lambda g: (g.path, g.code))
    return verdict
