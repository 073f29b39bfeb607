"""The rule contract: one class per rule, reporting through its context, never printing.

A rule is a libcst ``BatchableCSTVisitor``: the engine runs every enabled rule in one batched
visit over one ``MetadataWrapper``. Rules read shared facts (which calls are pmaps, which names
hold pmap outputs, ...) from ``self.model`` instead of recomputing them.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

import libcst as cst

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.fixes import api
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.choices import RuleOptions  # re-exported; apart so that the cached path needs no libcst
from pmap_migrate.rules.fixes.services import FileFixes
from pmap_migrate.rules.fixes.spec import FixSpec
from pmap_migrate.rules.knowledge import gates


class Fixable(str, Enum):
    """Whether a rule's findings carry a fix of their own (safe or unsafe), as `pmap-migrate rules`
    shows it. Each rule declares it (``FIXABLE``); its VALID/INVALID examples bear it out (the tests
    check: ALWAYS, every finding of the examples has a fix; NEVER, none has; SOMETIMES, some have
    and some have not)."""

    ALWAYS = "always"
    SOMETIMES = "sometimes"
    NEVER = "never"


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


@dataclass
class Report:
    node: cst.CSTNode
    message: str
    fix: FixSpec | None = None


@dataclass
class RuleContext:
    """What the rules of one file share: the file, its analysis, its fix builders, the options."""

    path: str
    model: SemanticModel
    reports: list[tuple[Rule, Report]] = field(default_factory=list)
    options: RuleOptions = field(default_factory=RuleOptions)
    # Fixes the engine refused (they would have left the module broken), by (code, the reported
    # node's code), with the reason: a rule offers its next-best fix there, or none.
    refused: Mapping[tuple[str, str], str] = field(default_factory=dict)
    fixes: FileFixes = field(init=False)

    def __post_init__(self) -> None:
        self.fixes = FileFixes(self.model, self.refused)


_VISITOR_NAMES: dict[type, tuple[str, ...]] = {}


class Rule(cst.BatchableCSTVisitor):
    """Base class of every rule. Subclasses set CODE, NAME, MESSAGE, FIXABLE, VALID, INVALID and a
    docstring with the sections What it does / Why is this bad? / Example / Use instead /
    Fix safety / References."""

    CODE: ClassVar[str]
    NAME: ClassVar[str]
    MESSAGE: ClassVar[str]
    FIXABLE: ClassVar[Fixable]  # whether its findings carry a fix of their own
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
    def model(self) -> SemanticModel:
        return self.context.model

    def report(self, node: cst.CSTNode, message: str | None = None, *, fix: FixSpec | None = None) -> None:
        self.context.reports.append((self, Report(node, message or self.MESSAGE, fix)))

    def with_shimmed_pmaps(self, nodes: list[cst.CSTNode], what: str) -> FixSpec | None:
        """For a finding about pmaps (their inputs, their outputs) with no fix of its own, asked
        once every pmap's fix is known (``leave_Module``): where PM101's fix of each pmap at
        ``nodes`` routes it to `runtime_shim.pmap` (here, or by keeping an alias its module keeps
        on the shim), that fix takes the finding with it (code calling the shim keeps legacy
        semantics; `check` reports nothing on it). The finding then carries it, with nothing to
        edit: shimmed, as safe as the weakest of those fixes, ``what`` it keeps and why."""
        fixes = self.pmap_fixes()
        found = [fixes.get(id(node)) for node in nodes]
        if not found or not all(fix is not None and fix.shimmed for fix in found):
            return None
        why = next((fix.why for fix in found if fix.why), "no exact rewrite")
        return FixSpec(weakest(found), f"keep {what}: the pmap goes to `runtime_shim.pmap` with its own fix (legacy "
                       f"semantics at run time): {why}", shimmed=True, why=why)

    def _global_rewrite_offered(self) -> bool:
        """Whether PM501 (enabled) offers the module's global-mesh rewrite (not the shim) here."""
        return any(rule.CODE == "PM501" and report.fix is not None and not report.fix.shimmed
                   for rule, report in self.context.reports)

    def with_nesting_pmaps(self, nodes: list[cst.CSTNode]) -> FixSpec | None:
        """For a nesting of pmaps (PM102), asked once every pmap's fix is known: where PM101's fixes
        rewrite every pmap at ``nodes`` in the compact form for nests (`_shard_mapped(...,
        nested=True)`: an inner pmap runs as a vmap with its axis name), the finding goes with
        them, with nothing to edit of its own."""
        fixes = self.pmap_fixes()
        found = [fixes.get(id(node)) for node in nodes]
        if not found or not all(fix is not None and not fix.shimmed for fix in found):
            return None
        return FixSpec(weakest(found), "keep the nesting: both pmaps take `_shard_mapped(..., nested=True)`, the inner "
                       "one a vmap with its axis name on the outer one's devices")

    def pmap_fixes(self) -> dict[int, FixSpec | None]:
        """PM101's fix of each pmap reported so far, by the id of its node."""
        return {id(report.node): report.fix for rule, report in self.context.reports if rule.CODE == "PM101"}

    def with_global_rewrite(self, node: cst.CSTNode) -> FixSpec | None:
        """For a read of a pmap output with no fix of its own (``node``: `out[0]`, a
        `tree_map(lambda x: x[0], out)`) in a multi-process module: where the module's global-mesh
        rewrite (PM501's fix) reads this process's row from the device that holds it there, that
        fix takes the finding with it, with nothing to edit of its own. A read the rewrite leaves
        (of a name bound elsewhere too) keeps its finding."""
        if not self._global_rewrite_offered():
            return None
        fix = self.context.fixes.global_rewrite.reads_row(node)
        if fix is None:
            return None
        return FixSpec(fix.applicability, "read this process's row from the device that holds it, as the "
                       "multi-process rewrite of its pmap does (PM501's fix)")

    @classmethod
    def documentation(cls) -> str:
        return textwrap.dedent(inspect.getdoc(cls) or "").strip()

    @classmethod
    def summary(cls) -> str:
        return cls.documentation().splitlines()[0] if cls.documentation() else cls.MESSAGE


def weakest(fixes: list[FixSpec]) -> Applicability:
    """Safe when every one of ``fixes`` is safe, else unsafe: a finding that goes with them."""
    return Applicability.SAFE if all(fix.applicability is Applicability.SAFE for fix in fixes) else Applicability.UNSAFE


class ImportRule(Rule):
    """Base of the rules that report an old name where it is imported (for a removed one, the
    import is what fails): ``check_import`` sees every import statement."""

    def visit_Import(self, node: cst.Import) -> None:
        self.check_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.check_import(node)

    def check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        raise NotImplementedError

    def reads_fix(self, statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias | cst.ImportStar,
                  rewrite_use: Callable[[cst.Name], api.FixParts], summary: str) -> FixSpec | None:
        """The fix of a reported import: every read of the name it binds rewritten by
        ``rewrite_use`` (see ``rewrite_reads``), the import removed once unused; an import nothing
        reads is removed, except from a package's `__init__.py` (it may be a re-export)."""
        if not isinstance(alias, cst.ImportAlias):
            return None
        try:
            result = api.rewrite_reads(self.model, statement, alias, rewrite_use)
        except api.Unfixable:
            return None
        if not result.rewritten and self.context.path.endswith("__init__.py"):
            return None
        what = summary if result.rewritten else "remove the unused import"
        return result.parts.spec(api.reads_summary(what, result))
