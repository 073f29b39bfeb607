from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.sites import PMAP, TransformSite
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid, weakest
from pmap_migrate.rules.fixes.api import delete_line
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter
from pmap_migrate.rules.fixes.spec import FixSpec, ImportSpec
from pmap_migrate.rules.knowledge import gates


class PmapCall(Rule):
    """Use of the legacy `jax.pmap`.

    ## What it does
    Finds every application of `jax.pmap` to a function, however it is spelled: a call
    (`jax.pmap(f)`), a decorator (`@jax.pmap`, `@functools.partial(jax.pmap, axis_name="i")`),
    and module-level aliases (`from jax import pmap as p`, `import jax as J`, `p = jax.pmap`,
    `pmap_i = partial(jax.pmap, axis_name="i")`) wherever they are applied. Alias definitions are
    reported too, since they are where `jax.pmap` is named.

    ## Why is this bad?
    JAX 0.8 re-implemented `jax.pmap` on `jax.jit` + `jax.shard_map`, and 0.10 removed the legacy
    implementation and its escape hatch. Code written for the old pmap breaks in known ways:
    nested pmaps raise, inputs committed to other devices are no longer resharded, `out[0]`
    became a cross-device gather, and every call pays Python work the old C++ fast path avoided.

    ## Example
    ```python
    import jax

    @jax.pmap
    def double(x):
        return 2 * x
    ```

    ## Use instead
    ```python
    import jax
    from jax.sharding import Mesh, PartitionSpec as P

    def _double(x):
        return 2 * x

    @jax.jit
    def double(x):
        mesh = Mesh(jax.local_devices()[: x.shape[0]], ("i",))
        return jax.shard_map(jax.vmap(_double), mesh=mesh, in_specs=P("i"),
                             out_specs=P("i"), check_vma=False)(x)
    ```

    ## Fix safety
    `pmap-migrate fix` rewrites call sites whose options are all visible in the module into the
    faithful `jax.jit(jax.shard_map(...))` form above (safe: same values for all inputs); a
    computed `axis_name` is read once where pmap read it. Sites whose other options are computed
    at run time (`in_axes`, argnums) are swapped to `runtime_shim.pmap` instead. A use of an
    alias another module of the project defines is rewritten the same way, with the alias's
    options spelled in the importer (`constants.AXIS`); the alias itself goes when every module
    of the project that imports it is rewritten in the same run, and is otherwise kept on
    `runtime_shim.pmap`, its comment naming the importers that keep it.

    With `--idiomatic` (or `idiomatic = true` in the config) and `--unsafe-fixes`, a whole
    data-parallel loop in one module (params replicated with `device_put_replicated` / flax
    `replicate` / stacked copies, batches reshaped to `(devices, per_device, ...)` or `shard`-ed, a
    step that `pmean`s its gradients, outputs read with `[0]` / `unreplicate`) is rewritten the way
    it is written today instead: one mesh, the params `NamedSharding(mesh, P())`, the global batch
    `P("batch")`, a `jax.jit(jax.shard_map(...))` step with the body unchanged, and no stacked
    device axis (unsafe: it assumes the replicated copies are identical, and printed stacked values
    show one copy). Anything that does not fit exactly gets the faithful rewrite.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/notebooks/shard_map.html
    """

    CODE = "PM101"
    NAME = "pmap-call"
    FIXABLE = Fixable.SOMETIMES
    TRIGGERS = gates.PM101.TRIGGERS
    NAMES = gates.PM101.NAMES
    CONTEXT_NAMES = gates.PM101.CONTEXT_NAMES
    MESSAGE = "`jax.pmap` is the legacy pmap; migrate to `jax.jit(jax.shard_map(...))`"

    VALID = [
        Valid("import jax\nf = jax.jit(jax.vmap(g))\n"),
        Valid("from flax import nnx\nstep = nnx.pmap(f, axis_name='i')\n"),
        Valid("from runtime_shim import pmap\nstep = pmap(f, axis_name='i')\n"),
        Valid("import jax\njax.shard_map(f, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"),
        Valid("def pmap(f):\n    return f\nstep = pmap(g)\n"),
        Valid("import jax\nname = 'jax.pmap'\n# jax.pmap(f)\n"),
        Valid(
            "import jax\n"
            "if hasattr(jax, 'shard_map'):\n"
            "    step = jax.jit(g)\n"
            "else:\n"
            "    step = jax.pmap(g)\n"
        ),
        Valid(
            "import jax\n"
            "try:\n"
            "    step = jax.shard_map(g, mesh=m, in_specs=s, out_specs=s)\n"
            "except AttributeError:\n"
            "    step = jax.pmap(g)\n"
        ),
    ]
    INVALID = [
        Invalid("import jax\nstep = jax.pmap(f)\n", lines=(2,)),
        Invalid("import jax\nstep = jax.pmap(f, 'batch')\n", lines=(2,)),
        Invalid("import jax\n@jax.pmap\ndef step(x):\n    return x\n", lines=(2,)),
        Invalid("import jax as J\nstep = J.pmap(lambda x: x * 2)\n", lines=(2,)),
        Invalid("from jax import pmap\nstep = pmap(f)\n", lines=(2,)),
        Invalid("from jax import pmap as p\nstep = p(f)\n", lines=(2,)),
        Invalid(
            "import functools\nimport jax\n"
            "@functools.partial(jax.pmap, axis_name='i')\n"
            "def step(x):\n    return x\n",
            lines=(3,),
        ),
        Invalid(
            "from functools import partial\nimport jax\n"
            "pmap_i = partial(jax.pmap, axis_name='i')\n"
            "@pmap_i\n"
            "def step(x):\n    return x\n"
            "other = pmap_i(g)\n",
            lines=(3, 4, 7),
        ),
        Invalid("import jax\np = jax.pmap\nq = p\nstep = q(f)\n", lines=(2, 3, 4)),
        Invalid("import jax, functools\nstep = jax.pmap(functools.partial(f, k=1))\n", lines=(2,)),
        Invalid(
            "import jax\nclass T:\n    def __init__(self):\n"
            "        self.p_step = jax.pmap(self.step, axis_name='i')\n"
            "    def step(self, x):\n        return x\n",
            lines=(4,),
        ),
        Invalid("import jax\nout = jax.pmap(lambda x: x)(xs)\n", lines=(2,)),
        Invalid("import jax.api\nstep = jax.api.pmap(f)\n", lines=(2,)),
    ]

    @property
    def rewriter(self) -> Rewriter:
        return self.context.fixes.rewriter

    def _report_site(self, site: TransformSite) -> None:
        if site.transform != PMAP:
            return
        via = site.callee.via
        patched = self.context.fixes.pmap_patched
        if site.callee.origin is not None:
            # An alias another module defines (the project index): rewritten here as a local alias's
            # use is, where its options can be spelled here; else it keeps the alias (the alias
            # module's fix keeps that on `runtime_shim.pmap`).
            fix, why = self.context.fixes.imported_pmap_fix(site)
            note = f"; not rewritten here: {why}" if why else ""
        elif patched is not None:
            fix, note = None, f"; not rewritten: {patched}"
        else:
            fix = self.context.fixes.idiomatic.fix_for(site) if self.context.options.idiomatic else None
            note = "; idiomatic fix: the whole data-parallel loop, without the stacked device axis" if fix else ""
        # not asked for, or the module's loop does not fit the pattern exactly
        if fix is None and patched is None and site.callee.origin is None:
            fix = self.context.fixes.pmap_fix(site)
        if via:
            message = f"`{via[0]}` applies the legacy `jax.pmap` (alias); migrate to `jax.jit(jax.shard_map(...))`"
            if site.callee.ambiguous:
                message += f"; `{via[0]}` is also bound to something else, so this site needs a manual check"
            self.report(site.node, message + note, fix=fix)
        else:
            self.report(site.node, self.MESSAGE + note, fix=fix)

    def visit_Call(self, node: cst.Call) -> None:
        site = self.model.site(node)
        if site is not None:
            self._report_site(site)
        self._alias_definition(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        site = self.model.site(node)
        if site is not None:
            self._report_site(site)

    def visit_Name(self, node: cst.Name) -> None:
        self._alias_definition(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._alias_definition(node)

    def _alias_definition(self, node: cst.BaseExpression) -> None:
        definition = self.model.alias_definitions.get(node)
        if definition is not None and definition[1].transform == PMAP:
            name, _ = definition
            message = f"`{name}` is an alias of the legacy `jax.pmap`; its uses are reported where applied"
            fix = self._unused_alias_removal(node)
            if fix is None:  # its uses here may all be fixed: known at the end of the module
                self._aliases_in_use.append((node, message))
            else:
                self.report(node, message, fix=fix)

    def visit_Module(self, node: cst.Module) -> None:
        self._aliases_in_use: list[tuple[cst.BaseExpression, str]] = []

    def leave_Module(self, original_node: cst.Module) -> None:
        for node, message in self._aliases_in_use:
            self.report(node, message, fix=self._after_its_uses(node))

    def _after_its_uses(self, value: cst.BaseExpression) -> FixSpec | None:
        """An alias still used here, where every use has a fix of its own: once those are applied
        the alias is removed (or kept for importers on the shim), which `fix` does in its next
        round; the finding goes with them, as safe as the weakest, with nothing to edit itself."""
        assign = self.model.parent(value)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or \
                not isinstance(assign.targets[0].target, cst.Name):
            return None
        target = assign.targets[0].target
        assignment = self.model.assignment_for_target(target)
        if assignment is None or not assignment.references or self.context.fixes.pmap_patched is not None:
            return None
        fixes = self.pmap_fixes()
        found = []
        for access in assignment.references:
            node = access.node
            fix = next((fixes[id(a)] for a in (node, *self.model.ancestors(node)) if id(a) in fixes), None)
            if fix is None or (not fix.edits and fix.replacement is None):
                return None
            found.append(fix)
        return FixSpec(weakest(found),
                       f"remove `{target.value}` once its uses are rewritten (or keep it on the shim for importers)")

    def _unused_alias_removal(self, value: cst.BaseExpression) -> FixSpec | None:
        """Once every local use of an alias is rewritten, the alias goes too. A public module-level
        alias of a library module may be imported by other modules: it becomes
        `runtime_shim.pmap` instead (a script, with an `if __name__ == "__main__":` block, loses it)."""
        assign = self.model.parent(value)
        line = self.model.parent(assign) if isinstance(assign, cst.Assign) else None
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1 or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        if not isinstance(target, cst.Name):
            return None
        assignment = self.model.assignment_for_target(target)
        if assignment is None or assignment.references:
            return None  # still used here: the uses are fixed first
        module_level = self.model.scope_of(target) is self.model.scope_of(self.model.module)
        summary, kept = f"remove the unused alias `{target.value}`", None
        if module_level and not target.value.startswith("_") and not self.model.is_script:
            if self.context.fixes.pmap_patched is not None:
                return None
            # `fix` knows the alias's importers in the project (codemod/crossmodule.py)
            kept = dict(self.context.options.alias_importers).get(target.value)
            if kept == "":
                summary = f"remove the alias `{target.value}`: every module of the project that imports it is rewritten"
            else:
                reference = self.rewriter.pmap_reference(value)
                if reference is None:
                    return None
                why = f"the public alias `{target.value}` keeps working for importers" if kept is None \
                    else f"the public alias `{target.value}` is kept for {kept}"
                return self.rewriter.shim_reference(
                    reference, f"keep the public alias `{target.value}` working for importers through "
                    "`runtime_shim.pmap`", why)
        removes = self.rewriter.pmap_imports(value)
        if kept == "":  # `import jax` too, if nothing else uses it
            reference = self.rewriter.pmap_reference(value)
            while isinstance(reference, cst.Attribute):
                reference = reference.value
            if isinstance(reference, cst.Name):
                removes += (ImportSpec(reference.value),)
        return FixSpec(Applicability.SAFE, summary, edits=delete_line(self.model, line), remove_imports=removes)
