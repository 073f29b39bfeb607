from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.imports import imported_names
from pmap_migrate.rules.base import Fixable, ImportRule, Invalid, Valid
from pmap_migrate.rules.fixes.api import (
    FixParts,
    Unfixable,
    applying_call,
    as_keyword,
    as_positional,
    parenthesized,
    spec_or_none,
)
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.code import code_of
from pmap_migrate.rules.fixes.placement_fixes import remove_line
from pmap_migrate.rules.fixes.spec import Edit, FixSpec
from pmap_migrate.rules.knowledge import gates, tables

_EXPERIMENTAL = "jax.experimental.shard_map.shard_map"
_KEYWORD_MESSAGES = {
    "check_rep": "`check_rep=` is rejected by `jax.shard_map`; it was renamed `check_vma=`",
    "auto": "`auto=` is rejected by `jax.shard_map` (and by the experimental shard_map since jax 0.10); "
            "name the manual axes instead with `axis_names=` (the mesh axes not in `auto`)",
}


# The experimental shard_map's parameters, in order (jax 0.7.2; `auto` is gone in later releases).
_PARAMETERS = ("f", "mesh", "in_specs", "out_specs", "check_rep", "auto")
_RENAMED = {"mesh": "mesh", "in_specs": "in_specs", "out_specs": "out_specs", "check_rep": "check_vma"}
_NEW_ONLY = frozenset({"check_vma", "axis_names"})  # jax.shard_map's own names for the same options
# Mesh constructors whose axis names a fix may read statically: qualified name -> position.
_MESH_AXIS_NAMES = {"jax.sharding.Mesh": 1, "jax._src.mesh.Mesh": 1, "jax.make_mesh": 1}
_UNUSED_MODULE = ("`jax.experimental.shard_map` is deprecated: importing it warns on the newest jax (an error where "
                  "warnings are), and nothing here reads it")
_SUMMARY = ("use `jax.shard_map` (mesh, in_specs and out_specs by keyword, `check_vma=` for `check_rep=`, "
            "`axis_names=` for `auto=`)")


class ExperimentalShardMap(ImportRule):
    """Use of the deprecated `jax.experimental.shard_map.shard_map` or of its removed keywords.

    ## What it does
    Finds `jax.experimental.shard_map.shard_map` however it is named: imported
    (`from jax.experimental.shard_map import shard_map [as smap]` — the import is reported), through
    a module alias (`import jax.experimental.shard_map as shmap; shmap.shard_map(...)`) or as an
    attribute (`jax.experimental.shard_map.shard_map(...)`). Also finds the keywords `check_rep=` and
    `auto=` on any shard_map call, including `functools.partial(shard_map, ..., check_rep=False)`,
    and a plain `import jax.experimental.shard_map` that nothing reads (once its uses are migrated):
    importing that module warns on the newest jax, an error where warnings are.

    Uses of a name bound by a reported import are not reported again. `jax.shard_map` calls
    with `check_vma=` / `axis_names=` are the migrated form and not reported.

    ## Why is this bad?
    `jax.experimental.shard_map` is deprecated (a DeprecationWarning since jax 0.8) in favour of
    `jax.shard_map`, which exists from jax 0.7 on. `jax.shard_map` takes `mesh`, `in_specs` and
    `out_specs` as keywords only and rejects `check_rep=` (now `check_vma=`) and `auto=` (now
    `axis_names=`, its complement), so a plain import swap raises `TypeError`.

    ## Example
    ```python
    from jax.experimental.shard_map import shard_map
    from jax.sharding import PartitionSpec as P

    f = shard_map(body, mesh, in_specs=P("i"), out_specs=P("i"), check_rep=False)
    ```

    ## Use instead
    ```python
    import jax
    from jax.sharding import PartitionSpec as P

    f = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    ```

    ## Fix safety
    Safe: every call (and `functools.partial` decorator) of the experimental shard_map becomes
    `jax.shard_map` with `mesh=`, `in_specs=`, `out_specs=` as keywords and `check_rep=X` as
    `check_vma=X` -- what the experimental function itself passes on (jax 0.7.2 and later; so
    check_rep=True keeps the replication-checked autodiff, whose gradients of `P()` parameters
    differ from check_rep=False ones, verified by running both on jax 0.7.2 and the newest jax).
    `auto=A` becomes `axis_names=` the mesh axes not in `A`: a literal set when the mesh is bound
    once to `Mesh(devices, ("i", "j"))` and `A` is a literal set, else
    `frozenset(mesh.axis_names) - A`, as jax 0.7.2 computed it. The import goes once unused; a
    plain `import jax.experimental.shard_map` too (safe: nothing reads it), replaced by `import jax`
    where it was the module's only import binding `jax`.
    Unsafe: a mesh expression other than a name that the run-time form evaluates twice, and a
    partial stored for later calls (its callers could pass `check_rep=` or the specs by position).
    No fix: shard_map used as a value, arguments passed with `*`/`**`. On jax 0.7.2 only,
    `jax.shard_map` also checks that a context mesh (`jax.set_mesh`) matches the mesh it is given,
    which the experimental function skipped; later releases check it in both.

    ## References
    - https://docs.jax.dev/en/latest/notebooks/shard_map.html
    - https://docs.jax.dev/en/latest/_autosummary/jax.shard_map.html
    """

    CODE = "PM401"
    NAME = "experimental-shard-map"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = (
        f"`{_EXPERIMENTAL}` is deprecated; use `{tables.SHARD_MAP_REPLACEMENT}` "
        "(mesh, in_specs and out_specs are keyword-only there; `check_rep=` became `check_vma=`)"
    )
    # The experimental shard_map by name; the removed keywords on any shard_map.
    TRIGGERS = gates.PM401.TRIGGERS
    NAMES = gates.PM401.NAMES
    KEYWORDS = gates.PM401.KEYWORDS
    KEYWORD_NAMES = gates.PM401.KEYWORD_NAMES

    VALID = [
        Valid("import jax\nf = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_vma=False)\n"),
        Valid("from jax import shard_map\nf = shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"),
        Valid("import jax\nf = jax.shard_map(g, mesh=m, in_specs=P(), out_specs=P(), axis_names={'i'})\n"),
        # A local shard_map, or another library's, with keywords of its own.
        Valid("def shard_map(f, mesh, check_rep=True):\n    return f\ng = shard_map(h, m, check_rep=False)\n"),
        Valid("from mylib.parallel import shard_map\ng = shard_map(h, m, check_rep=False, auto=frozenset())\n"),
        Valid("import jax\nf = jax.jit(g, auto=True)\n"),
        # The module itself still imports; only its shard_map is reported, where it is named.
        Valid("import jax.experimental.shard_map\nmodule = jax.experimental.shard_map\n"),
        Valid("import jax\nname = 'jax.experimental.shard_map.shard_map'\n"),
        Valid(
            "import jax\n"
            "if hasattr(jax, 'shard_map'):\n"
            "    smap = jax.shard_map\n"
            "else:\n"
            "    from jax.experimental.shard_map import shard_map as smap\n"
        ),
        Valid(
            "try:\n"
            "    from jax import shard_map\n"
            "except ImportError:\n"
            "    from jax.experimental.shard_map import shard_map\n"
        ),
    ]
    INVALID = [
        Invalid("from jax.experimental.shard_map import shard_map\nf = shard_map(g, m, P('i'), P('i'))\n",
                lines=(1,),
                expected=(
                    "import jax\n"
                    "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"
                )),
        Invalid("from jax.experimental.shard_map import shard_map as smap\n", lines=(1,),
                expected="\n"),
        Invalid("import jax\nf = jax.experimental.shard_map.shard_map(g, m, P('i'), P('i'))\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"
                )),
        Invalid("import jax.experimental.shard_map as shmap\nf = shmap.shard_map(g, m, P('i'), P('i'))\n",
                lines=(2,),
                expected=(
                    "import jax\n"
                    "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"
                )),
        Invalid("from jax.experimental import shard_map\nf = shard_map.shard_map(g, m, P('i'), P('i'))\n",
                lines=(2,),
                expected=(
                    "import jax\n"
                    "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"
                )),
        Invalid("import jax\nf = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n",
                lines=(2,),
                expected=(
                    "import jax\n"
                    "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_vma=False)\n"
                )),
        Invalid(
            "import jax\n"
            "f = jax.shard_map(\n"
            "    g, mesh=m, in_specs=P('i'), out_specs=P('i'),\n"
            "    auto=frozenset({'j'}),\n"
            ")\n",
            lines=(4,),
            expected=(
                "import jax\n"
                "f = jax.shard_map(\n"
                "    g, mesh=m, in_specs=P('i'), out_specs=P('i'),\n"
                "    axis_names=frozenset(m.axis_names) - frozenset({'j'}),\n"
                ")\n"
            ),
        ),
        # The import and the keyword are two edits.
        Invalid(
            "from jax.experimental.shard_map import shard_map as smap\n"
            "f = smap(g, m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n",
            lines=(1, 2),
            expected=(
                "import jax\n"
                "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_vma=False)\n"
            ),
        ),
        Invalid(
            "import functools\n"
            "from jax import shard_map\n"
            "@functools.partial(shard_map, mesh=m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n"
            "def body(x):\n"
            "    return x\n",
            lines=(3,),
            expected=(
                "import functools\n"
                "from jax import shard_map\n"
                "@functools.partial(shard_map, mesh=m, in_specs=P('i'), out_specs=P('i'), check_vma=False)\n"
                "def body(x):\n"
                "    return x\n"
            ),
        ),
        Invalid(
            "import jax\n"
            "f = jax.experimental.shard_map.shard_map(g, m, P('i'), P('i'), check_rep=False, auto=a)\n",
            lines=(2, 2, 2),
            expected=(
                "import jax\n"
                "f = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_vma=False, axis_names=frozenset(m.axis_names) - a)\n"
            ),
        ),
        # auto= -> axis_names=: a literal set when the mesh's axes are literals...
        Invalid(
            "from jax.experimental.shard_map import shard_map\n"
            "from jax.sharding import Mesh, PartitionSpec as P\n"
            "mesh = Mesh(devices, ('i', 'j'))\n"
            "f = shard_map(g, mesh, P('i'), P('i'), auto=frozenset({'j'}))\n",
            lines=(1, 4),
            expected=(
                "import jax\n"
                "from jax.sharding import Mesh, PartitionSpec as P\n"
                "mesh = Mesh(devices, ('i', 'j'))\n"
                "f = jax.shard_map(g, mesh=mesh, in_specs=P('i'), out_specs=P('i'), axis_names={'i'})\n"
            ),
        ),
        # ... else computed at run time; a mesh expression evaluated twice makes the fix unsafe.
        Invalid(
            "import jax\n"
            "def build(self, g):\n"
            "    return jax.shard_map(g, mesh=self.mesh, in_specs=P('i'), out_specs=P('i'), auto={'j'})\n",
            lines=(3,),
            expected=(
                "import jax\n"
                "def build(self, g):\n"
                "    return jax.shard_map(\n"
                "        g, mesh=self.mesh, in_specs=P('i'), out_specs=P('i'), "
                "axis_names=frozenset(self.mesh.axis_names) - {'j'}\n"
                "    )\n"
            ),
        ),
        # A plain import of the deprecated module: it goes once nothing reads it, `jax` kept bound.
        Invalid("import jax.experimental.shard_map\n", lines=(1,), expected="import jax\n"),
        Invalid("import jax\nimport jax.experimental.shard_map\nf = jax.experimental.shard_map.shard_map(g, m, P('i'), P('i'))\n",
                lines=(3,), expected="import jax\nf = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"),
        # Used as a value: its callers may pass the mesh by position; no fix.
        Invalid("from jax.experimental.shard_map import shard_map\nregistry = {'shard_map': shard_map}\n",
                lines=(1,)),
        # A partial stored for later calls: unsafe (its callers could pass check_rep=).
        Invalid(
            "import functools\n"
            "from jax.experimental.shard_map import shard_map\n"
            "smap_i = functools.partial(shard_map, mesh=m, in_specs=P('i'), out_specs=P('i'))\n",
            lines=(2,),
            expected=(
                "import functools\n"
                "import jax\n"
                "smap_i = functools.partial(jax.shard_map, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"
            ),
        ),
    ]

    def check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            if full in tables.EXPERIMENTAL_SHARD_MAP:
                self.report(alias, fix=self.reads_fix(node, alias, self._rewrite_use, _SUMMARY))
            elif full == tables.EXPERIMENTAL_SHARD_MAP_MODULE and isinstance(node, cst.Import) \
                    and alias.asname is None and not self._module_used():
                self.report(alias, _UNUSED_MODULE, fix=self._unused_module_fix(node, alias))

    def _module_used(self) -> bool:
        """Whether the module reads anything of `jax.experimental.shard_map`: every path through
        it (`jax.experimental.shard_map.shard_map(...)`) holds an attribute `....shard_map` naming
        the module, which the index lists (imports aside)."""
        module = frozenset({tables.EXPERIMENTAL_SHARD_MAP_MODULE})
        return any(self.model.matches(attr, module) for attr in self.model.index.attributes.get("shard_map", ()))

    def _unused_module_fix(self, node: cst.Import, alias: cst.ImportAlias) -> FixSpec | None:
        """`import jax.experimental.shard_map` that nothing reads (its uses migrated): removed, or
        `import jax` where it was the module's only import binding `jax`."""
        line = self.model.parent(node)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        binds_jax = any(isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, cst.Import) and any(
                a is not alias and a.asname is None and code_of(a.name).split(".")[0] == "jax" for a in small.names)
            for small in statement.body) for statement in self.model.module.body)
        # (`jax` stays bound: the alias goes where another import binds it, else `import jax` takes its place)
        names = [a for a in node.names if a is not alias] if binds_jax else [
            a.with_changes(name=cst.Name("jax")) if a is alias else a for a in node.names]
        if not names:
            replacement = remove_line(self.model, line)
        else:
            names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            replacement = line.with_changes(body=[node.with_changes(names=names)])
        return FixSpec(Applicability.SAFE, "remove the import of the deprecated module, which nothing reads",
                       replacement=replacement, target=line)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "shard_map" and self.model.matches(node, tables.EXPERIMENTAL_SHARD_MAP):
            self.report(node, fix=spec_or_none(lambda: self._rewrite_use(node), _SUMMARY))

    def visit_Call(self, node: cst.Call) -> None:
        removed = [a for a in node.args if a.keyword is not None and a.keyword.value in _KEYWORD_MESSAGES]
        if not removed or not self._is_shard_map_call(node):
            return
        for arg in removed:
            self.report(arg, _KEYWORD_MESSAGES[arg.keyword.value],
                        fix=spec_or_none(lambda: self._rewrite_call(node), _SUMMARY))

    def _is_shard_map_call(self, node: cst.Call) -> bool:
        if self.model.matches(node.func, tables.SHARD_MAP):
            return True
        if node.args and self.model.matches(node.func, tables.PARTIAL):
            first = node.args[0]
            return first.keyword is None and not first.star and self.model.matches(first.value, tables.SHARD_MAP)
        return False

    # ------------------------------------------------------------------------------ fixes
    def _rewrite_use(self, use: cst.BaseExpression) -> FixParts:
        """A reference to the experimental shard_map: the call or partial that applies it."""
        call = applying_call(self.model, use)
        if call is None:
            raise Unfixable("used as a value: its callers may pass mesh, in_specs and out_specs by position")
        return self._rewrite_call(call)

    def _rewrite_call(self, call: cst.Call) -> FixParts:
        """``call`` (a shard_map call, or `functools.partial(shard_map, ...)`) in `jax.shard_map`'s
        terms, as one edit of the whole call."""
        is_partial = self.model.matches(call.func, tables.PARTIAL)
        callee = call.args[0].value if is_partial else call.func
        args = list(call.args[1:] if is_partial else call.args)
        names = self.model.qualified_names(callee) & tables.SHARD_MAP
        experimental = names == tables.EXPERIMENTAL_SHARD_MAP
        if any(a.star for a in args):
            raise Unfixable("arguments passed with * or **")
        parameters: list[str] = []
        position = 0
        for arg in args:
            if arg.keyword is None:
                if position >= len(_PARAMETERS):
                    raise Unfixable("more positional arguments than shard_map takes")
                parameters.append(_PARAMETERS[position])
                position += 1
            else:
                parameters.append(arg.keyword.value)
        if len(set(parameters)) != len(parameters) or {"check_rep", "check_vma"} <= set(parameters) or {
                "auto", "axis_names"} <= set(parameters):
            raise Unfixable("an option is given twice")
        if not experimental and any(a.keyword is None for a in args[1:]):
            raise Unfixable("mesh/in_specs/out_specs passed by position to what may be `jax.shard_map`")
        bound = dict(zip(parameters, args))
        parts = FixParts()
        new_args: list[cst.Arg] = []
        for parameter, arg in zip(parameters, args):
            if parameter == "f":
                if arg.keyword is not None:
                    if is_partial or arg is not args[0]:
                        raise Unfixable("`f=` passed by keyword (jax.shard_map takes the function by position)")
                    arg = as_positional(arg)
                new_args.append(arg)
            elif parameter in _RENAMED:
                new_args.append(as_keyword(arg, _RENAMED[parameter]))
            elif parameter == "auto":
                names_value = self._manual_axes(bound.get("mesh"), arg.value, parts)
                if names_value is not None:
                    new_args.append(as_keyword(arg, "axis_names").with_changes(value=names_value))
            elif parameter in _NEW_ONLY and not experimental:
                new_args.append(arg)
            else:
                raise Unfixable(f"`{parameter}=` is not a shard_map option")
        if new_args and args and new_args[-1] is not args[-1]:
            new_args[-1] = new_args[-1].with_changes(comma=args[-1].comma)
        if experimental:
            callee = parts.renamed(self.model, callee, tables.SHARD_MAP_REPLACEMENT)
        if is_partial:
            new_call = call.with_changes(args=[call.args[0].with_changes(value=callee), *new_args])
            if experimental and not isinstance(self.model.parent(call), cst.Decorator):
                parts.assumptions.append("the partial's callers pass only the function (jax.shard_map takes mesh, "
                                         "in_specs and out_specs by keyword, and no check_rep=/auto=)")
        else:
            new_call = call.with_changes(func=callee, args=new_args)
        parts.edits.append(Edit(call, new_call))
        return parts

    def _manual_axes(self, mesh_arg: cst.Arg | None, auto: cst.BaseExpression,
                     parts: FixParts) -> cst.BaseExpression | None:
        """`axis_names=` for `auto=`: the mesh axes not in ``auto`` (what the experimental shard_map
        of jax 0.7.2 computed: `frozenset(mesh.axis_names) - auto`). A literal set when the mesh's
        axes and ``auto`` are literals; None when that leaves every axis manual (the default)."""
        if mesh_arg is None:
            raise Unfixable("`auto=` without a mesh argument")
        mesh = mesh_arg.value
        axes = self._literal_mesh_axes(mesh)
        automatic = _literal_strings(auto) if self._builtin_set_calls(auto) else None
        if axes is not None and automatic is not None:
            manual = [node for node in axes if node.evaluated_value not in automatic]
            if len(manual) in (0, len(axes)):  # empty axis_names means every mesh axis
                return None
            return cst.Set([cst.Element(cst.SimpleString(n.value)) for n in manual])
        if not isinstance(mesh, cst.Name):
            parts.assumptions.append(f"evaluating `{code_of(mesh)}` a second time gives the same mesh")
        axis_names = cst.Attribute(parenthesized(mesh), cst.Name("axis_names"))
        mesh_axes = cst.Call(cst.Name("frozenset"), [cst.Arg(axis_names)])
        return cst.BinaryOperation(mesh_axes, cst.Subtract(), parenthesized(auto))

    def _builtin_set_calls(self, node: cst.BaseExpression) -> bool:
        """`frozenset(...)` / `set(...)` are the builtins here (or ``node`` is no such call)."""
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            return self.model.qualified_names(node.func) <= {"builtins.frozenset", "builtins.set"}
        return True

    def _literal_mesh_axes(self, mesh: cst.BaseExpression) -> list[cst.SimpleString] | None:
        """The axis names of a mesh bound once, in this scope, to `Mesh(devices, ("i", "j"))`."""
        if not isinstance(mesh, cst.Name):
            return None
        assignments = self.model.assignments_of(mesh)
        if len(assignments) != 1:
            return None
        value = self.model.assigned_value(getattr(assignments[0], "node", None))
        if not isinstance(value, cst.Call):
            return None
        position = next((p for n, p in _MESH_AXIS_NAMES.items() if self.model.matches(value.func, {n})), None)
        if position is None:
            return None
        positional = [a for a in value.args if a.keyword is None]
        if any(a.star for a in value.args):
            return None
        names = next((a.value for a in value.args if a.keyword is not None and a.keyword.value == "axis_names"),
                     positional[position].value if len(positional) > position else None)
        if isinstance(names, cst.SimpleString):
            return [names]
        if isinstance(names, (cst.Tuple, cst.List)) and all(
                isinstance(e.value, cst.SimpleString) for e in names.elements):
            return [e.value for e in names.elements]
        return None


def _literal_strings(node: cst.BaseExpression) -> set[str] | None:
    """The strings of a literal set: `{"a"}`, `frozenset({"a"})`, `frozenset(("a",))`, `frozenset()`.
    (A bare tuple or list is not a set: `frozenset(...) - ("a",)` raised in jax 0.7.2, and still does.)"""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("frozenset", "set"):
        if not node.args:
            return set()
        if len(node.args) != 1 or node.args[0].keyword is not None or node.args[0].star:
            return None
        node = node.args[0].value
        if not isinstance(node, (cst.Set, cst.Tuple, cst.List)):
            return None
    elif not isinstance(node, cst.Set):
        return None
    values = set()
    for element in node.elements:
        if not isinstance(element.value, cst.SimpleString):
            return None
        values.add(element.value.evaluated_value)
    return values
