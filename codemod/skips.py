"""Fixes a person skipped in `fix --interactive`, remembered in the project so that nobody is asked
again and plain `fix` leaves them alone; `report` lists them as *skipped in review*.

The record is ``.pmap-migrate-skips.json`` in the project root (the directory of the
``pyproject.toml`` holding ``[tool.pmap-migrate]``; the working directory without one). It is
meant to be committed, so that a team shares its decisions: small, sorted JSON, one object per
skipped site::

    {"version": 1, "skips": [{"path": "src/train.py", "code": "PM101", "fingerprint": "9c1d0e6f2b7a4c31",
                              "occurrence": 0, "source": "step = jax.pmap(lambda x: x * 2)",
                              "date": "2025-06-02", "reason": ""}]}

A site is known by its file (relative to the project root), its rule and a fingerprint of its
source text — the code the finding covers and the whole lines it is on, without comments,
whitespace collapsed — with
``occurrence`` counting identical sites before it in the file. No line number: lines added or
removed elsewhere do not lose the decision, while a change to the site's own lines asks again.
An entry that matches no finding (the site was fixed, edited or deleted) does nothing; the next
`fix --interactive` over that file drops it. ``source`` is for people reading the file; ``reason``
is what the reviewer typed after ``s`` (or wrote into the file), and is kept.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import tempfile
import tokenize
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pmap_migrate.config import SKIPS_FILE, ConfigError
from pmap_migrate.diagnostics import Diagnostic, State
from pmap_migrate.sourcetext import lines_by_cell

VERSION = 1
_SOURCE_CHARS = 160


@dataclass(frozen=True, order=True)
class SiteKey:
    """A site within one file, independent of its line number."""

    code: str
    fingerprint: str
    occurrence: int  # identical sites (same rule and fingerprint) before it in the file


@dataclass(frozen=True)
class Skip:
    key: SiteKey
    source: str  # the site's lines, for people reading the file
    date: str  # ISO date of the decision
    reason: str = ""


def today() -> str:
    return datetime.date.today().isoformat()


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _without_comments(lines: list[str]) -> list[str]:
    """``lines`` without their comments (a `# noqa` or a note added to a skipped line keeps it the
    same site). Lines the tokenizer cannot follow to the end keep the comments it did not reach."""
    cuts: dict[int, int] = {}
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    try:
        for token in tokens:
            if token.type == tokenize.COMMENT:
                cuts[token.start[0] - 1] = token.start[1]
    except (tokenize.TokenError, SyntaxError):  # a fragment of a statement
        pass
    return [line[:cuts[i]] if i in cuts else line for i, line in enumerate(lines)]


def _fingerprint(d: Diagnostic, lines: list[str]) -> tuple[str, str]:
    """``(fingerprint, source)`` of one finding: a hash of the code it covers and of the lines it is
    on, comments left out."""
    first, last = d.line, max(d.line, d.end_line)
    span = _without_comments(lines[first - 1:last])
    if not span:
        covered = ""
    elif len(span) == 1:
        covered = span[0][d.column - 1:d.end_column - 1 if d.end_line == d.line else None]
    else:
        covered = "\n".join([span[0][d.column - 1:], *span[1:-1], span[-1][:d.end_column - 1]])
    statement = _collapse("\n".join(span))
    digest = hashlib.blake2b(f"{_collapse(covered)}\0{statement}".encode("utf-8", "surrogatepass"), digest_size=8)
    source = statement if len(statement) <= _SOURCE_CHARS else statement[:_SOURCE_CHARS - 3] + "..."
    return digest.hexdigest(), source


def site_keys(diagnostics: Sequence[Diagnostic], data: bytes, path: str) -> list[tuple[SiteKey, str]]:
    """``(key, source)`` of each of ``diagnostics`` — every finding of one file, located as the user
    sees the file (``data``: its bytes) — in their order. Occurrences count over the findings given,
    so the caller passes all of them (every state), as the linter reports them."""
    from pmap_migrate.notebooks import is_notebook

    views = lines_by_cell(data, is_notebook(path))
    prints = [_fingerprint(d, views.get(d.cell, [])) for d in diagnostics]
    seen: Counter = Counter()
    occurrences = [0] * len(diagnostics)
    for index in sorted(range(len(diagnostics)), key=lambda i: diagnostics[i].sort_key()):
        alike = (diagnostics[index].code, prints[index][0])
        occurrences[index] = seen[alike]
        seen[alike] += 1
    return [(SiteKey(d.code, fp, n), source) for d, (fp, source), n in zip(diagnostics, prints, occurrences)]


def recorded_sites(diagnostics: Sequence[Diagnostic], data: bytes, path: str,
                   recorded: dict[SiteKey, Skip]) -> list[tuple[int, SiteKey, Skip]]:
    """``(index, key, skip)`` for each of ``diagnostics`` (every finding of one file, as for
    ``site_keys``) that a recorded skip names."""
    if not recorded:
        return []
    return [(index, key, recorded[key]) for index, (key, _) in enumerate(site_keys(diagnostics, data, path))
            if key in recorded]


def held_in_review(diagnostics: Sequence[Diagnostic], data: bytes, path: str,
                   recorded: dict[SiteKey, Skip]) -> list[Diagnostic]:
    """The findings whose fix plain `fix` leaves alone: active, fixable, their site skipped in review."""
    return [diagnostics[index] for index, _, _ in recorded_sites(diagnostics, data, path, recorded)
            if diagnostics[index].state is State.ACTIVE and diagnostics[index].fix is not None]


def project_path(shown: str, root: Path) -> str:
    """A file's path relative to the project root, as the record keys it (``/`` separators)."""
    absolute = os.path.abspath(shown)
    candidates = [absolute, os.path.realpath(absolute)]
    for candidate in candidates:
        with contextlib.suppress(ValueError):
            relative = os.path.relpath(candidate, root)
            if not relative.startswith(".."):
                return relative.replace(os.sep, "/")
    with contextlib.suppress(ValueError):
        return os.path.relpath(absolute, root).replace(os.sep, "/")
    return absolute.replace(os.sep, "/")


class SkipStore:
    """The project's record of skipped fixes, by file (paths relative to ``root``)."""

    def __init__(self, root: Path, files: dict[str, dict[SiteKey, Skip]] | None = None) -> None:
        self.root = root
        self.file = root / SKIPS_FILE
        self.files: dict[str, dict[SiteKey, Skip]] = files or {}
        self.changed = False

    @classmethod
    def load(cls, root: Path) -> SkipStore:
        """The record under ``root`` (empty when there is none); a file that is not a valid record is
        a configuration error: it holds a team's decisions, which must not be dropped silently."""
        store = cls(root)
        try:
            text = store.file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return store
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read {store.file}: {error}") from None
        try:
            document = json.loads(text)
            if not isinstance(document, dict) or document.get("version") != VERSION:
                raise ValueError(f"expected an object with \"version\": {VERSION}")
            for entry in document.get("skips", []):
                key = SiteKey(str(entry["code"]), str(entry["fingerprint"]), int(entry["occurrence"]))
                skip = Skip(key, str(entry.get("source", "")), str(entry.get("date", "")), str(entry.get("reason") or ""))
                store.files.setdefault(str(entry["path"]), {})[key] = skip
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ConfigError(f"{store.file}: not a record of skipped fixes ({error}); fix or delete it") from None
        return store

    def __len__(self) -> int:
        return sum(len(skips) for skips in self.files.values())

    def relative(self, shown: str) -> str:
        return project_path(shown, self.root)

    def of_file(self, shown: str) -> dict[SiteKey, Skip]:
        return self.files.get(self.relative(shown), {})

    def replace_file(self, shown: str, codes: Iterable[str], skips: Iterable[Skip]) -> None:
        """After a review of ``shown`` by rules ``codes``: its entries for those rules become ``skips``
        (entries of other rules were not looked at, and stay)."""
        relative = self.relative(shown)
        codes = set(codes)
        old = self.files.get(relative, {})
        new = {key: skip for key, skip in old.items() if key.code not in codes}
        new.update((skip.key, skip) for skip in skips)
        if new != old:
            self.changed = True
            if new:
                self.files[relative] = new
            else:
                self.files.pop(relative, None)

    def drop_missing(self) -> None:
        """Forget the entries of files that no longer exist (their sites are gone)."""
        for relative in [r for r in self.files if not (self.root / r).exists()]:
            del self.files[relative]
            self.changed = True

    def to_json(self) -> str:
        entries = [
            {"path": path, "code": key.code, "fingerprint": key.fingerprint, "occurrence": key.occurrence,
             "source": skip.source, "date": skip.date, "reason": skip.reason}
            for path, skips in sorted(self.files.items()) for key, skip in sorted(skips.items())
        ]
        return json.dumps({"version": VERSION, "skips": entries}, indent=2, ensure_ascii=False) + "\n"

    def save(self) -> None:
        """Write the record if it changed (atomically; none is created for no skips)."""
        if not self.changed or (not self.files and not self.file.exists()):
            return
        fd, temporary = tempfile.mkstemp(dir=self.root, prefix=f"{SKIPS_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(self.to_json())
            try:
                mode = self.file.stat().st_mode & 0o777
            except OSError:
                mode = 0o666 & ~_umask()
            os.chmod(temporary, mode)
            os.replace(temporary, self.file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        self.changed = False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
