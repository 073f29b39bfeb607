"""The rule contract: one class per rule, reporting through its context, never printing.

A rule is a libcst ``BatchableCSTVisitor``: the engine runs every enabled rule in one batched
visit over one ``MetadataWrapper``. Rules read shared facts (which calls are pmaps, which names
hold pmap outputs, ...) from ``self.model`` instead of recomputing them.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from pmap_migrate.rules.knowledge import gates
from pmap_migrate.rules.fixes.choices import RuleOptions  # re-exported; apart so that the cached path needs no libcst

if TYPE_CHECKING:
    from pmap_migrate.rules.analysis.semantic import SemanticModel


def parse_module(source: str | bytes) -> cst.Module:
    """``cst.parse_module(source)`` without validating each node as the parser builds it: every
    libcst node checks its fields in ``__post_init__`` (about a tenth of a parse), which nodes made
    from source that parsed cannot fail. The check is back in force for every node made otherwise
    (fixes' ``with_changes``, nodes built by hand), also when the parse fails."""
    cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        cst.CSTNode.__post_init__ = _VALIDATING  # type: ignore[method-assign]


def _unchecked(self: cst.CSTNode) -> None:
    pass


# libcst's own hook, taken once: restored as it is even after parses that overlapped (threads).
_VALIDATING = cst.CSTNode.__dict__["__post_init__"]


@dataclass(frozen=True)
class Valid:
    """Code the rule must not report."""

    code: str


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report; ``lines`` are the 1-based lines of the expected findings
    (default: exactly one finding, on any line). ``expected``, when given, is the code after
    fixing with this rule alone, unsafe fixes included (equal to ``code`` when nothing is fixed)."""

    code: str
    lines: tuple[int, ...] | None = None
    count: int | None = None
    expected: str | None = None


@dataclass(frozen=True)
class ImportSpec:
    """``import module`` (name None), or ``from module import name [as asname]``."""

    module: str
    name: str | None = None
    asname: str | None = None


@dataclass(frozen=True)
class Edit:
    """Replace ``target`` (a node of the tree the rule saw) by ``replacement``; or, with
    ``before``, insert statements before the statement ``target`` and keep it (with whatever
    other fixes change inside it)."""

    target: cst.CSTNode
    replacement: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel | None = None
    before: tuple[cst.BaseStatement, ...] = ()


@dataclass(frozen=True)
class FixSpec:
    """A fix as rules describe it; the engine owns applying it.

    ``replacement`` replaces ``target`` (default: the reported node); ``edits`` lists further
    edits applied together with it. ``add_imports`` are added once per file; ``remove_imports``
    are removed only if nothing uses them after the fix. ``shimmed`` marks fixes that route the
    site to ``runtime_shim`` instead of rewriting it to plain JAX."""

    applicability: str  # "safe" | "unsafe"
    summary: str
    replacement: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel | None = None
    target: cst.CSTNode | None = None
    edits: tuple[Edit, ...] = ()
    add_imports: tuple[ImportSpec, ...] = ()
    remove_imports: tuple[ImportSpec, ...] = ()
    shimmed: bool = False
    # Higher goes first when fixes overlap: a rewrite spanning several statements (the idiomatic
    # PM101 fix) before the local fixes of the code it recognises, which would change that code.
    priority: int = 0

    def all_edits(self, reported: cst.CSTNode) -> tuple[Edit, ...]:
        first = () if self.replacement is None else (Edit(self.target or reported, self.replacement),)
        return first + self.edits


@dataclass
class Report:
    node: cst.CSTNode
    message: str
    fix: FixSpec | None = None


@dataclass
class RuleContext:
    path: str
    model: "SemanticModel"
    reports: list[tuple["Rule", Report]] = field(default_factory=list)
    shared: dict = field(default_factory=dict)  # per-file helpers shared by rules (e.g. the rewriter)
    options: RuleOptions = field(default_factory=RuleOptions)


_VISITOR_NAMES: dict[type, tuple[str, ...]] = {}


class Rule(cst.BatchableCSTVisitor):
    """Base class of every rule. Subclasses set CODE, NAME, MESSAGE, VALID, INVALID and a
    docstring with the sections What it does / Why is this bad? / Example / Use instead /
    Fix safety / References."""

    CODE: ClassVar[str]
    NAME: ClassVar[str]
    MESSAGE: ClassVar[str]
    # The prefilter's inputs; a registered rule takes them from rules/knowledge/gates.py (so that the
    # prefilter works without importing any rule). Substrings of which at least one must occur in
    # a file for the rule to possibly fire; the text prefilter skips parsing files that contain
    # none of any enabled rule's triggers.
    TRIGGERS: ClassVar[tuple[str, ...]] = ("pmap",)
    # Qualified names (or removed modules) of which the file must refer to one for the rule to
    # possibly fire, through its imports; tested with Python's `ast` when no trigger occurs
    # (codemod/prefilter.py). A rule with neither triggers nor names runs on every file.
    NAMES: ClassVar[frozenset[str]] = frozenset()
    # Keyword arguments (``check_rep``) the rule reports on calls of some functions: it may also fire
    # where a call passes one of them and the module refers to one of ``KEYWORD_NAMES``
    # (``jax.shard_map``), which the prefilter tests on the `ast`.
    KEYWORDS: ClassVar[frozenset[str]] = frozenset()
    KEYWORD_NAMES: ClassVar[frozenset[str]] = frozenset()
    # Qualified names (or modules) whose use anywhere in a module changes what the rule reports or
    # how it fixes (a multi-process program, PM501); `check` analyses only the parts of a large
    # module that may matter (codemod/slices.py), and keeps the parts that use these.
    CONTEXT_NAMES: ClassVar[frozenset[str]] = gates.MULTI_PROCESS_CONTEXT
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    # Rules read metadata through the shared SemanticModel (which resolves what it needs once), and
    # positions are resolved by the engine only when something is reported.
    METADATA_DEPENDENCIES = ()

    def __init__(self, context: RuleContext) -> None:
        super().__init__()
        self.context = context

    def get_visitors(self) -> dict[str, Callable]:
        """libcst's answer (its visit_/leave_ methods that are not no-op stubs), from a per-class
        table: libcst asks `inspect.getmembers` of every instance, which on every file cost more
        than a tenth of the analysis."""
        cls = type(self)
        names = _VISITOR_NAMES.get(cls)
        if names is None:
            # Each name's definition is the first in the MRO (what `inspect.getattr_static` finds,
            # at a fraction of its cost: libcst's stubs give a rule some 1,600 such names).
            defined: dict[str, object] = {}
            for klass in reversed(cls.__mro__):
                defined.update((n, v) for n, v in vars(klass).items() if n.startswith(("visit_", "leave_")))
            names = tuple(sorted(
                name for name, value in defined.items()
                if inspect.isfunction(value) and not getattr(value, "_is_no_op", False)))
            _VISITOR_NAMES[cls] = names
        return {name: getattr(self, name) for name in names}

    @property
    def model(self) -> "SemanticModel":
        return self.context.model

    def report(self, node: cst.CSTNode, message: str | None = None, *, fix: FixSpec | None = None) -> None:
        self.context.reports.append((self, Report(node, message or self.MESSAGE, fix)))

    @classmethod
    def documentation(cls) -> str:
        return textwrap.dedent(inspect.getdoc(cls) or "").strip()

    @classmethod
    def summary(cls) -> str:
        return cls.documentation().splitlines()[0] if cls.documentation() else cls.MESSAGE
