"""The idiomatic rewrite's one fix: the step on a mesh without the stacked device axis, the loop's
state and batch placed with `NamedSharding`, the reads of outputs rewritten."""

from __future__ import annotations

import re

import libcst as cst

from pmap_migrate.rules.fixes.api import removal_spec
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.idiomatic_match import (
    ALL,
    PLACEHOLDER,
    PRIORITY,
    STATE,
    TEMPLATE_NAMES,
    Reject,
    Rename,
    Step,
    tuple_literal,
)
from pmap_migrate.rules.fixes.spec import Edit, FixSpec, ImportSpec


class IdiomaticBuild:
    """Building the fix once the loop is recognised (mixed into ``idiomatic.Idiomatic``)."""

    # ------------------------------------------------------------------------------- the fix
    def _sharding(self, kind: str) -> str:
        return f"NamedSharding({self.mesh}(), {'P()' if kind == STATE else f'P({self.axis})'})"

    def _put(self, value: cst.BaseExpression, kind: str) -> cst.BaseExpression:
        return cst.parse_expression(f"jax.device_put({code_of(value)}, {self._sharding(kind)})")

    def _remove_import_of(self, func: cst.BaseExpression | None) -> None:
        if isinstance(func, cst.Name):
            spec = removal_spec(self.model, func)
            if spec is not None:
                self.removes.append(spec)

    def _build(self) -> None:
        counts = {c for c in self.counts if c is not None}
        if not counts:
            raise Reject("the device count is not visible (no replicate/reshape names it)")
        if len(counts) != 1:
            raise Reject("the replicated values and the batches name different device counts")
        count = counts.pop()
        devices = "jax.local_devices()" if count == ALL else f"jax.local_devices()[:{count}]"
        for step in self.steps:
            fed_back = {t.value for call in step.calls for t in self._targets(call)} & self.state_names
            if fed_back and not self._differentiates(step.func):
                raise Reject(f"`{step.name}` updates {', '.join(sorted(fed_back))} without gradients reduced over "
                              f"{self.axis}: the copies may differ per device")
            missing = [step.params[i] for i in range(len(step.params)) if i not in step.kinds]
            if missing:
                raise Reject(f"cannot tell how `{step.name}` gets `{missing[0]}`")
        self.rewriter.check_names_free()
        scope = self.model.scope_of(self.model.module)
        for name, meanings in TEMPLATE_NAMES.items():
            if scope is not None and name in scope.assignments:
                if not {q.name for q in scope.get_qualified_names_for(name)} <= meanings:
                    raise Reject(f"the module binds `{name}` to something else")
        axis_word = self.axis.strip("\"'")
        literal = self.axis[:1] in "\"'"  # a constant's name (`_PMAP_AXIS_NAME`) makes no mesh name
        self.mesh = self.rewriter.names.fresh(f"{axis_word}_mesh" if literal and re.fullmatch(r"[A-Za-z_]\w*", axis_word)
                                               else "data_mesh")
        self._rename_mesh_in_edits()  # the placements above were built before the name was chosen
        indent = self.model.indent
        helper = cst.parse_statement(
            f"@functools.cache\ndef {self.mesh}():  # the program's one mesh, built on first use: "
            f"importing the module queries no device\n{indent}return Mesh({devices}, ({self.axis},))\n")
        helper = helper.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        first = self.steps[0]
        anchor = first.statement if isinstance(self.model.parent(first.statement), cst.Module) \
            else self._top_level(first.statement)
        self.edits.append(Edit(anchor, before=(helper,)))
        for step in self.steps:
            self.edits.append(self._step_edit(step))
            expr = step.site.node.func if isinstance(step.site.node, cst.Call) else step.site.node.decorator
            self.removes.extend(self.rewriter.pmap_imports(expr))
        names = ", ".join(f"`{s.name}`" for s in self.steps)
        state = sorted({a.value.value for s in self.steps for c in s.calls for k, a in enumerate(c.args)
                        if s.kinds.get(k) == STATE and isinstance(a.value, cst.Name)})
        assumptions = [f"{', '.join(f'`{n}`' for n in state) or 'the replicated values'} hold identical copies "
                       f"on every device (the step reduces its gradients over {self.axis})",
                       "the batch's two leading axes (devices, per device) merge into one global batch axis"]
        if self.printed:
            assumptions.append(f"printing {', '.join(f'`{n}`' for n in sorted(self.printed))} may show one copy "
                               "instead of one per device")
        summary = (f"idiomatic rewrite of {names}: one mesh, replicated values `NamedSharding(mesh, P())`, the "
                   f"batch `P({self.axis})`, `jax.jit(jax.shard_map(...))` with the body unchanged, no stacking "
                   f"and no `[0]`; assumes " + "; ".join(assumptions))
        self.imports += [ImportSpec("jax"), ImportSpec("functools"), ImportSpec("jax.sharding", "Mesh"),
                         ImportSpec("jax.sharding", "NamedSharding"), ImportSpec("jax.sharding", "PartitionSpec", "P")]
        imports = tuple(spec for spec in dict.fromkeys(self.imports) if not self._bound(spec))
        self.fix = FixSpec(Applicability.UNSAFE, summary, edits=tuple(self.edits), add_imports=imports,
                           remove_imports=tuple(dict.fromkeys(self.removes)), priority=PRIORITY)

    def _bound(self, spec: ImportSpec) -> bool:
        """The module already binds the name ``spec`` would import, to that very thing (an import
        below other statements is not seen by the import adder, which would add a second one)."""
        local = spec.asname or spec.name or spec.module
        scope = self.model.scope_of(self.model.module)
        if scope is None or "." in local or local not in scope.assignments:
            return False
        wanted = f"{spec.module}.{spec.name}" if spec.name else spec.module
        return {q.name for q in scope.get_qualified_names_for(local)} == {wanted}

    def _rename_mesh_in_edits(self) -> None:
        """Placements were rendered with the placeholder mesh name; give them the chosen one."""
        renamer = Rename(PLACEHOLDER, self.mesh)
        fixed = []
        for edit in self.edits:
            replacement = edit.replacement
            if isinstance(replacement, cst.CSTNode):
                replacement = replacement.visit(renamer)
            before = tuple(s.visit(renamer) for s in edit.before)
            fixed.append(Edit(edit.target, replacement, before))
        self.edits = fixed

    def _top_level(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in [node, *self.model.ancestors(node)]:
            if isinstance(self.model.parent(ancestor), cst.Module):
                return ancestor
        raise Reject("a step outside the module body")

    def _step_edit(self, step: Step) -> Edit:
        indent = self.model.indent
        in_specs = [("P()" if step.kinds[k] == STATE else f"P({self.axis})") for k in range(len(step.params))]
        in_text = "(" + ", ".join(in_specs) + ("," if len(in_specs) == 1 else "") + ")"
        if step.tuple_return:
            out_text = "(" + ", ".join("P()" for _ in step.elements) + ("," if len(step.elements) == 1 else "") + ")"
        else:
            out_text = "P()"
        decorator = (f"@functools.partial(jax.jit, donate_argnums={tuple_literal(step.donate)})" if step.donate
                     else "@jax.jit")
        params = ", ".join(step.params)
        if step.site.is_decorator:
            body_name = self.rewriter.names.fresh("_" + step.name)
        else:
            body_name = step.site.fun.value
        if self._differentiates(step.func):
            why = [f"{indent}# check_vma=False keeps legacy autodiff: with True, grads of the P() values would arrive",
                   f"{indent}# already summed over {self.axis}, and the body's pmean would scale them by the device "
                   "count."]
        else:
            why = [f"{indent}# check_vma=False, as legacy pmap: a P() output is device 0's value, unchecked."]
        text = "\n".join([
            decorator,
            f"def {step.name}({params}):",
            *why,
            f"{indent}return jax.shard_map({body_name}, mesh={self.mesh}(), in_specs={in_text},",
            f"{indent}{' ' * len('return jax.shard_map(')}out_specs={out_text}, check_vma=False)({params})",
        ]) + "\n"
        wrapper = cst.parse_statement(text)
        if step.site.is_decorator:
            body = step.func.with_changes(name=cst.Name(body_name), decorators=[])
            wrapper = wrapper.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
            return Edit(step.func, cst.FlattenSentinel([body, wrapper]))
        leading = list(step.statement.leading_lines)
        first = self.model.parent(step.statement).body[0] is step.statement
        if not first and (not leading or leading[0].comment is not None):
            leading.insert(0, cst.EmptyLine(indent=False))
        return Edit(step.statement, wrapper.with_changes(leading_lines=leading))
