"""Per-file result cache, keyed by content hash, tool version and the enabled rules.

Stored under the project (``.pmap_migrate_cache/``, which git-ignores itself). An unchanged file
(same size and mtime) is answered without being read; a touched but identical file is answered
after hashing; anything else is checked again.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from codemod.diagnostics import FileResult

CACHE_DIR_NAME = ".pmap_migrate_cache"
# Result files of other tool versions or rule selections kept besides the current one.
KEEP_OTHER_RESULTS = 7


try:  # hashlib's own blake2b, without hashlib loading OpenSSL's bindings (a few ms of every run)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b


def digest(data: bytes) -> bytes:
    return blake2b(data, digest_size=16).digest()


# An entry: (size, mtime_ns, content digest, result); the result is None for a file without findings
# or errors (most files), which keeps the pickle small and quick to load.
Entry = tuple[int, int, bytes, "FileResult | None"]


class ResultCache:
    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.file = directory / f"results-{key}.pickle"
        self.entries: dict[str, Entry] = {}
        self.dirty = False
        try:
            with open(self.file, "rb") as handle:
                loaded = pickle.load(handle)
            if isinstance(loaded, dict):
                self.entries = loaded
        except FileNotFoundError:
            pass
        except Exception:  # a corrupt or foreign cache is only a slower run
            self.entries = {}

    @staticmethod
    def _result(entry: Entry, shown: str) -> FileResult:
        return FileResult(shown) if entry[3] is None else entry[3].shown_as(shown)

    def lookup_stat(self, key: str, stat: os.stat_result, shown: str) -> FileResult | None:
        """The result for the file ``key`` (shown as ``shown``) if its size and mtime are unchanged."""
        entry = self.entries.get(key)
        if entry is not None and entry[0] == stat.st_size and entry[1] == stat.st_mtime_ns:
            return self._result(entry, shown)
        return None

    def lookup_digest(self, key: str, stat: os.stat_result, content_digest: bytes, shown: str) -> FileResult | None:
        entry = self.entries.get(key)
        if entry is not None and entry[2] == content_digest:
            self.entries[key] = (stat.st_size, stat.st_mtime_ns, entry[2], entry[3])
            self.dirty = True
            return self._result(entry, shown)
        return None

    def store(self, key: str, stat: os.stat_result, content_digest: bytes, result: FileResult) -> None:
        empty = not result.diagnostics and result.error is None
        self.entries[key] = (stat.st_size, stat.st_mtime_ns, content_digest, None if empty else result)
        self.dirty = True

    def _prune(self) -> None:
        """Results of other versions or selections: keep the few most recently written."""
        others = sorted((p for p in self.directory.glob("results-*.pickle") if p != self.file),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in others[KEEP_OTHER_RESULTS:]:
            stale.unlink(missing_ok=True)

    def save(self) -> None:
        if not self.dirty:
            return
        import tempfile  # only a run that stores something needs it

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            gitignore = self.directory / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# Created by pmap-migrate automatically.\n*\n")
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".results-", suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                pickle.dump(self.entries, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, self.file)
            self._prune()
        except OSError:
            pass  # a read-only checkout still gets its findings, only no cache
