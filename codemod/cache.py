"""Per-file result cache, keyed by content hash, tool version and the enabled rules.

Stored under the project (``.pmap_migrate_cache/``, which git-ignores itself). An unchanged file
(same size and mtime) is answered without being read; a touched but identical file is answered
after hashing; anything else is checked again. A result that used what other modules define (the
project index: an alias of pmap imported from ``constants.py``) is kept with the fingerprints of
those modules' facts, and holds only while they are unchanged: editing ``constants.py`` re-checks
its importers.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable
from pathlib import Path

from pmap_migrate.diagnostics import FileResult

CACHE_DIR_NAME = ".pmap_migrate_cache"
# Result files of other tool versions or rule selections kept besides the current one.
KEEP_OTHER_RESULTS = 7


try:  # hashlib's own blake2b, without hashlib loading OpenSSL's bindings (a few ms of every run)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b


def digest(data: bytes) -> bytes:
    return blake2b(data, digest_size=16).digest()


# An entry: (size, mtime_ns, content digest, result[, dependencies]); the result is None for a file
# without findings or errors (most files), which keeps the pickle small and quick to load. The
# dependencies, for a result that used the project index: ((path, module name, facts fingerprint,
# in the run), ...).
Entry = tuple

# The key (no file's path) under which the entries keep the facts fingerprints of the modules results
# depend on: {(path, module name): (size, mtime_ns, fingerprint)}. By path and name: one file can be
# two modules of the run (`acme/jax/__init__.py` is `acme.jax` from the repository's root and `jax`
# from its package's directory), and keyed by path alone the two names evicted each other, so every
# warm run read such files again and rewrote the whole cache.
FACTS_KEY = "\0facts"
# The key of what decides which modules not spelling `pmap` are analysed with the project index
# (codemod/crossmodule.py): ({path: (size, mtime_ns, contribution)}, the exports the results used,
# the files whose contributions they were made from).
EXPORTS_KEY = "\0exports"


class ResultCache:
    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.file = directory / f"results-{key}.pickle"
        loaded = load_pickle(self.file)
        self.entries: dict[str, Entry] = loaded if isinstance(loaded, dict) else {}
        facts = self.entries.pop(FACTS_KEY, None)
        self.facts: dict[tuple[str, str], tuple[int, int, str]] = facts if isinstance(facts, dict) else {}
        exports = self.entries.pop(EXPORTS_KEY, None)
        if not (isinstance(exports, tuple) and len(exports) == 3):
            exports = ({}, None, None)
        # each module's contribution to the project's exports, the exports the results used (None:
        # no run recorded them), and the files whose contributions those were made from
        self.contributions: dict[str, tuple] = exports[0]
        self.exports: frozenset | None = exports[1]
        self.sources: frozenset[str] | None = exports[2]
        self.dirty = False
        self._now: dict[tuple[str, str], str | None] = {}  # this run's fingerprints (many results share a module)

    @staticmethod
    def result(entry: Entry, shown: str) -> FileResult:
        """The result an entry holds, for the file shown as ``shown`` (the caller has compared the
        entry's size and mtime with the file's: ``unchanged``)."""
        return FileResult(shown) if entry[3] is None else entry[3].shown_as(shown)

    def lookup_digest(self, key: str, stat: os.stat_result, content_digest: bytes, shown: str) -> FileResult | None:
        entry = self.entries.get(key)
        if entry is not None and entry[2] == content_digest:
            self.entries[key] = (stat.st_size, stat.st_mtime_ns, entry[2], entry[3])
            self.dirty = True
            return self.result(entry, shown)
        return None

    def store(self, key: str, stat: os.stat_result, content_digest: bytes, result: FileResult,
              dependencies: tuple = ()) -> None:
        """``dependencies``: ((path, module name, fingerprint, size, mtime_ns, in the run), ...) of
        the modules whose facts the result used (whether a module was among the run's files decides
        some fixes: rules/fixes/services.py ``imported_pmap_fix``)."""
        empty = not result.diagnostics and result.error is None
        entry = (stat.st_size, stat.st_mtime_ns, content_digest, None if empty else result)
        if dependencies:
            entry += (tuple((path, name, fingerprint, in_run)
                            for path, name, fingerprint, _, _, in_run in dependencies),)
            for path, name, fingerprint, size, mtime, _ in dependencies:
                self.facts[path, name] = (size, mtime, fingerprint)
        self.entries[key] = entry
        self.dirty = True

    def dependencies_changed(self, key: str, run: frozenset[str] = frozenset()) -> bool:
        """Whether a module whose facts the result of ``key`` used defines something else now, or
        is in the run (``run``: its files' absolute paths) where it was not, or the reverse."""
        entry = self.entries.get(key)
        if entry is None or len(entry) < 5:
            return False
        return any(self._fingerprint(path, name) != fingerprint or (path in run) != in_run
                   for path, name, fingerprint, in_run in entry[4])

    def _fingerprint(self, path: str, name: str) -> str | None:
        """The fingerprint of the facts of module ``name`` in ``path`` now: from the cache while the
        file's size and mtime are unchanged, else read again (once per run)."""
        key = (path, name)
        if key not in self._now:
            self._now[key] = self._fingerprint_now(path, name)
        return self._now[key]

    def _fingerprint_now(self, path: str, name: str) -> str | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        known = self.facts.get((path, name))
        if known is not None and known[:2] == (stat.st_size, stat.st_mtime_ns):
            return known[2]
        from pmap_migrate.rules.analysis.facts import module_facts
        from pmap_migrate.rules.analysis.project import facts_fingerprint

        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        fingerprint = facts_fingerprint(module_facts(data, name, path.endswith("__init__.py")))
        self.facts[path, name] = (stat.st_size, stat.st_mtime_ns, fingerprint)
        self.dirty = True
        return fingerprint

    def _prune(self) -> None:
        """Results of other versions or selections: keep the few most recently written."""
        others = sorted((p for p in self.directory.glob("results-*.pickle") if p != self.file),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in others[KEEP_OTHER_RESULTS:]:
            stale.unlink(missing_ok=True)

    def unchanged(self, path: str, stat: os.stat_result) -> bool:
        """Whether the file ``path`` has the size and mtime its cached result was computed for."""
        entry = self.entries.get(path)
        return entry is not None and entry[0] == stat.st_size and entry[1] == stat.st_mtime_ns

    def use_exports(self, exports: frozenset, changed: bool, forgotten: Iterable[str] = (),
                    sources: frozenset[str] | None = None) -> frozenset:
        """Record the project's ``exports`` for this run's results (``changed``: some module's
        contribution was read anew or forgotten; ``sources``: the files whose contributions the
        exports were made from); the exports that the cached results did not know. ``forgotten``:
        files whose contributions mentioned pmap and are no longer kept, whose results go too
        (``unchanged`` would vouch for them as files without pmap)."""
        for path in forgotten:
            self.entries.pop(path, None)
        added = exports - self.exports if self.exports is not None else frozenset()
        if changed or exports != self.exports or sources != self.sources:
            self.exports, self.sources = exports, sources
            self.dirty = True
        return added

    def save(self) -> None:
        if not self.dirty:
            return
        # A contribution without pmap that a result now vouches for is the result's to keep: the
        # run that filled the cache read every file, and the next run would otherwise drop them
        # one by one and write the cache again.
        for path, (size, mtime, part) in list(self.contributions.items()):
            entry = self.entries.get(path)
            if part is None and entry is not None and entry[0] == size and entry[1] == mtime:
                del self.contributions[path]
        entries = {**self.entries, FACTS_KEY: self.facts} if self.facts else self.entries
        if self.exports is not None:
            entries[EXPORTS_KEY] = (self.contributions, self.exports, self.sources)
        if store_pickle(self.file, entries):
            self._prune()


def load_pickle(file: Path):
    """What ``file`` in the cache directory holds; None when it is missing, corrupt or foreign."""
    try:
        with open(file, "rb") as handle:
            return pickle.load(handle)
    except Exception:  # a corrupt or foreign file is only a slower run
        return None


def store_pickle(file: Path, value) -> bool:
    """``value`` pickled to ``file`` atomically, in a cache directory that is created git-ignoring
    itself; False when it cannot be written (a read-only checkout only goes without the cache)."""
    import tempfile  # only a run that stores something needs it

    directory = file.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        gitignore = directory / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("# Created by pmap-migrate automatically.\n*\n")
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{file.stem}-", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, file)
    except OSError:
        return False
    return True
