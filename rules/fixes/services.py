"""The fix builders of one file, made when a rule first asks for one and shared by all its rules.

The rules of a file see the same tree and must agree: one name allocator (fixes applied in the same
round never take the same name), one rewriter (its generated code is what the multi-process plan
composes), one placement builder, one multi-process plan and one idiomatic plan per module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property

import libcst as cst

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.idiomatic import Idiomatic
from pmap_migrate.rules.fixes.multiprocess import GlobalRewrite
from pmap_migrate.rules.fixes.naming import NameAllocator
from pmap_migrate.rules.fixes.placement import Placement
from pmap_migrate.rules.fixes.pmap_options import Unsupported
from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter
from pmap_migrate.rules.fixes.spec import FixSpec, ImportSpec


class FileFixes:
    """Each builder is made on first use: a file whose rules need none builds none."""

    def __init__(self, model: SemanticModel, refused: Mapping[tuple[str, str], str] | None = None) -> None:
        self.model = model
        self.refused = refused or {}

    @cached_property
    def names(self) -> NameAllocator:
        return NameAllocator(self.model)

    @cached_property
    def rewriter(self) -> Rewriter:
        return Rewriter(self.model, self.names)

    @cached_property
    def placement(self) -> Placement:
        return Placement(self.model, self.names)

    @cached_property
    def global_rewrite(self) -> GlobalRewrite:
        """The module's multi-process (global mesh) plan (PM501)."""
        return GlobalRewrite(self.rewriter, self.placement)

    @cached_property
    def idiomatic(self) -> Idiomatic:
        """The module's data-parallel loop, recognised once (``reason`` says why not)."""
        return Idiomatic(self.rewriter, self.placement)

    @cached_property
    def pmap_patched(self) -> str | None:
        """Why the module's pmaps and their outputs are left as they are: the module replaces
        `jax.pmap` while it runs (a test fake), and its pmaps must keep going through `jax.pmap`;
        None when it does not."""
        node = self.model.pmap_patched_at()
        if node is None:
            return None
        what = f"`{code_of(node.func)}(...)`" if isinstance(node, cst.Call) else "`jax.pmap = ...`"
        return (f"the module replaces `jax.pmap` while it runs ({what}, a test fake): its pmaps must keep "
                "going through `jax.pmap`")

    def pmap_fix(self, site: TransformSite) -> FixSpec | None:
        """PM101's fix of a pmap: the faithful rewrite, or in a multi-process module the global-mesh
        rewrite; where neither is exact, `runtime_shim.pmap` with the reason. None in a module that
        patches `jax.pmap` (``pmap_patched``)."""
        if self.pmap_patched is not None:
            return None
        refused = self.refused.get(("PM101", code_of(site.node)))
        if refused is not None:
            return self.rewriter.shim_fix(site, refused)
        try:
            if self.model.multi_process():
                # Host-local inputs and outputs (PM501): a global mesh where the data flow is visible.
                self.rewriter.check_rewritable(site)
                return self.global_rewrite.fix_for(site)
            return self.rewriter.faithful(site)
        except Unsupported as why:
            return self.rewriter.shim_fix(site, str(why))

    def imported_pmap_fix(self, site: TransformSite) -> tuple[FixSpec | None, str]:
        """PM101's fix of a use of an alias another module of the project defines
        (``constants.pmap(f)``, analysis/imported.py): the rewrite a local alias's use gets, with
        the alias's options spelled for this module and the imports they need; ``(None, why)``
        where the use keeps the alias (which its own module's fix keeps on `runtime_shim.pmap`)."""
        imported = site.callee.imported
        why = imported.problem if imported is not None else "the alias's options are not known here"
        if self.pmap_patched is not None:
            return None, self.pmap_patched
        why = why or self.refused.get(("PM101", code_of(site.node)), "")
        fix = None
        if not why:
            try:
                if self.model.multi_process():
                    self.rewriter.check_rewritable(site)
                    fix = self.global_rewrite.fix_for(site)
                else:
                    fix = self.rewriter.faithful(site)
            except Unsupported as problem:
                why = str(problem)
            if fix is not None and fix.shimmed:
                fix, why = None, fix.why or "no exact rewrite"
        if fix is None:
            return self._kept_on_alias(site, why), why
        adds = tuple(ImportSpec(module, name, None, dots) for module, dots, name in imported.needs)
        removes: tuple[ImportSpec, ...] = ()
        if imported.by_name is not None:
            module, dots, name, local = imported.by_name
            removes = (ImportSpec(module, name, None if local == name else local, dots),)
        return replace(fix, add_imports=fix.add_imports + adds, remove_imports=fix.remove_imports + removes), ""

    def _kept_on_alias(self, site: TransformSite, why: str) -> FixSpec | None:
        """The fix of a use of an imported alias that is not rewritten: none of its own; the alias
        module's fix keeps the alias on `runtime_shim.pmap` (rules/pm101_pmap_call.py), which
        covers this use, when that module is among the files of the run (else None)."""
        imported = site.callee.imported
        project = self.model.project
        if imported is None or project is None or not project.index.defined_in_run(imported.module, imported.name):
            return None
        return FixSpec(Applicability.SAFE, f"keep `{site.callee.via[0]}`, which the fix of `{imported.module}` keeps "
                       f"on `runtime_shim.pmap` (legacy semantics at run time): {why}", shimmed=True, why=why)

    def global_fix(self, site: TransformSite) -> FixSpec | None:
        """PM501's fix: the global-mesh rewrite of a pmap of a multi-process module, or None where
        the site keeps the shim (PM101's fix says why)."""
        if self.pmap_patched is not None:
            return None
        if site.callee.origin is not None:
            return self.imported_pmap_fix(site)[0]
        try:
            self.rewriter.check_rewritable(site)
            return self.global_rewrite.fix_for(site)
        except Unsupported:
            return None
