"""A fix as rules describe it: edits of the tree they saw, imports to add and remove; the engine
applies it (``pmap_migrate.fixer``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from pmap_migrate.rules.fixes.choices import Applicability


@dataclass(frozen=True)
class ImportSpec:
    """``import module`` (name None), or ``from module import name [as asname]``; ``relative``:
    the number of leading dots of a relative ``from`` import."""

    module: str
    name: str | None = None
    asname: str | None = None
    relative: int = 0


@dataclass(frozen=True)
class Edit:
    """Replace ``target`` (a node of the tree the rule saw) by ``replacement``; or, with
    ``before``, insert statements before the statement ``target`` and keep it (with whatever
    other fixes change inside it); ``blank_lines``: the statement ``target`` (or what replaces
    it) gets at least that many empty lines before it."""

    target: cst.CSTNode
    replacement: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel | None = None
    before: tuple[cst.BaseStatement, ...] = ()
    blank_lines: int = 0


@dataclass(frozen=True)
class Helper:
    """A module-level definition that fixes share: written once per module, by the first fix that
    needs it, after the module's imports (the engine skips it where ``name`` is bound already).
    ``imports`` are the ones its statements need. ``shared``: the name of the same definition in
    the package's shared module (rules/fixes/shared.py), which the engine imports instead of
    writing the statements where the package has one; None: written in the module only."""

    name: str
    statements: tuple[cst.BaseStatement, ...]
    imports: tuple[ImportSpec, ...] = ()
    shared: str | None = None
    # Called only by another helper: where the package's shared module holds them, it holds this
    # one beside it and the module does not import it.
    support: bool = False
    # The helper's statements taking only some of its options (`_shard_mapped`'s features): the
    # engine writes the one that takes what the module's calls pass.
    variant: Callable[[frozenset[str]], tuple[cst.BaseStatement, ...]] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class FixSpec:
    """A fix as rules describe it; the engine owns applying it.

    ``replacement`` replaces ``target`` (default: the reported node); ``edits`` lists further
    edits applied together with it. ``add_imports`` are added once per file; ``remove_imports``
    are removed only if nothing uses them after the fix. ``shimmed`` marks fixes that route the
    site to ``runtime_shim`` instead of rewriting it to plain JAX, ``why`` says why."""

    applicability: Applicability
    summary: str
    replacement: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel | None = None
    target: cst.CSTNode | None = None
    edits: tuple[Edit, ...] = ()
    add_imports: tuple[ImportSpec, ...] = ()
    remove_imports: tuple[ImportSpec, ...] = ()
    shimmed: bool = False
    # Why a shimmed site keeps legacy semantics: written as a comment above the statement that holds
    # the site (`# pmap-migrate: kept on the legacy shim: ...`), which `report` reads back.
    why: str = ""
    helpers: tuple[Helper, ...] = ()
    # Higher goes first when fixes overlap: a rewrite spanning several statements (the idiomatic
    # PM101 fix) before the local fixes of the code it recognises, which would change that code.
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.applicability, Applicability):
            raise TypeError(f"a fix's applicability is an Applicability, not {self.applicability!r}")

    def all_edits(self, reported: cst.CSTNode) -> tuple[Edit, ...]:
        first = () if self.replacement is None else (Edit(self.target or reported, self.replacement),)
        return first + self.edits
