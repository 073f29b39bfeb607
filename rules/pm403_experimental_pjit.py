from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.imports import imported_names
from pmap_migrate.rules.analysis.sites import JIT
from pmap_migrate.rules.base import Fixable, ImportRule, Invalid, Valid
from pmap_migrate.rules.fixes.api import (
    FixParts,
    Unfixable,
    applying_call,
    as_keyword,
    as_positional,
    spec_or_none,
)
from pmap_migrate.rules.fixes.spec import Edit
from pmap_migrate.rules.knowledge import gates, tables

_PJIT = "jax.experimental.pjit.pjit"
# Positional parameters every pjit release agreed on (the oldest named the two shardings
# in_axis_resources / out_axis_resources); jax.jit takes all but the function by keyword.
_POSITIONAL = ("fun", "in_shardings", "out_shardings")
_SUMMARY = "use `jax.jit` (the same parameters; in_shardings/out_shardings by keyword)"
# pjit reads the mesh of a legacy `with mesh:` block; jax.jit does not (checked on jax 0.7.2 and
# 0.12: `jax.jit(f, in_shardings=P("x"))` called under `with mesh:` raises "jit requires a
# non-empty mesh in context"), and pjit's `None` sharding means replicated where jit's means
# unspecified (the same values, another layout).
_JIT_ASSUMES = ("the call does not rely on a legacy `with mesh:` block: jax.jit resolves bare PartitionSpecs "
                "only under `jax.set_mesh(mesh)` (or given NamedShardings), and a `None` sharding leaves the "
                "layout to the compiler instead of replicating")


def pjit_message(name: str) -> str:
    if name in tables.PJIT_GONE:
        return f"`{name}` does not exist in current jax; use `{tables.PJIT_REPLACEMENT}` (same parameters as pjit)"
    return (f"`{name}` is deprecated; use `{tables.PJIT_REPLACEMENT}`, which takes the same "
            "`in_shardings=` / `out_shardings=`")


def keyword_message(keyword: str) -> str:
    return (f"`{keyword}=` was removed from pjit and is not accepted by `jax.jit`; "
            f"use `{tables.REMOVED_PJIT_KEYWORDS[keyword]}=`")


class ExperimentalPjit(ImportRule):
    """Use of the deprecated `jax.experimental.pjit.pjit` or of pjit's removed `*_axis_resources=`.

    ## What it does
    Finds `jax.experimental.pjit.pjit` however it is named: imported (`from jax.experimental.pjit
    import pjit` — the import is reported), through a module alias (`from jax.experimental import
    pjit as pjit_lib; pjit_lib.pjit(...)`) or as an attribute (`jax.experimental.pjit.pjit`), and
    the never-public `from jax import pjit`. Also finds `in_axis_resources=` and
    `out_axis_resources=` on any pjit or jit application: calls, `functools.partial(pjit, ...)`
    decorators and module-level aliases of them.

    Uses of a name bound by a reported import are not reported again. Other names of
    `jax.experimental.pjit` that were removed (`with_sharding_constraint`, `PartitionSpec`,
    `FROM_GDA`) are reported by PM404.

    ## Why is this bad?
    `jax.experimental.pjit.pjit` is `jax.jit` under another name (the same parameters in jax 0.7.2
    and later) and is deprecated (a DeprecationWarning in jax 0.10 and later). `in_axis_resources=` /
    `out_axis_resources=` were removed long before jax 0.7.2: calls that pass them raise
    `TypeError`. Their replacements are `in_shardings=` / `out_shardings=`.

    ## Example
    ```python
    from functools import partial
    from jax.experimental.pjit import pjit
    from jax.sharding import PartitionSpec as P

    @partial(pjit, in_axis_resources=P("data"), out_axis_resources=None)
    def step(batch):
        return batch.sum()
    ```

    ## Use instead
    ```python
    from functools import partial
    import jax
    from jax.sharding import PartitionSpec as P

    @partial(jax.jit, in_shardings=P("data"), out_shardings=None)  # called under `with jax.set_mesh(mesh):`
    def step(batch):
        return batch.sum()
    ```

    ## Fix safety
    Safe: `in_axis_resources=` / `out_axis_resources=` become `in_shardings=` / `out_shardings=`
    (pjit renamed the parameters; `jax.jit` rejects the old names). Unsafe: `pjit` becomes
    `jax.jit` with the two shardings, if passed by position, as keywords. pjit reads the mesh of a
    legacy `with mesh:` block and jit does not: under `with mesh:`,
    `jax.jit(f, in_shardings=P("x"))` raises "jit requires a non-empty mesh in context" (checked
    on jax 0.7.2 and 0.12), and a `None` sharding means replicated to pjit but unspecified to jit.
    With NamedShardings, or no shardings, the programs checked print the same; bare
    PartitionSpecs need the caller's `with mesh:` turned into `with jax.set_mesh(mesh):`. No fix: options after the shardings passed
    by position (their order changed between pjit releases), pjit used as a value.

    ## References
    - https://docs.jax.dev/en/latest/_autosummary/jax.jit.html
    - https://docs.jax.dev/en/latest/notebooks/Distributed_arrays_and_automatic_parallelization.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM403"
    NAME = "experimental-pjit"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = pjit_message(_PJIT)
    TRIGGERS = gates.PM403.TRIGGERS
    NAMES = gates.PM403.NAMES
    KEYWORDS = gates.PM403.KEYWORDS
    KEYWORD_NAMES = gates.PM403.KEYWORD_NAMES

    VALID = [
        Valid("import jax\nstep = jax.jit(f, in_shardings=s, out_shardings=s)\n"),
        Valid(
            "from functools import partial\nimport jax\n"
            "@partial(jax.jit, in_shardings=P('data'))\ndef f(x):\n    return x\n"
        ),
        # A local pjit, or a library wrapper with a keyword of the same name.
        Valid("def pjit(f, **kw):\n    return f\nstep = pjit(g, in_axis_resources=P('x'))\n"),
        Valid("from t5x import partitioning\nstep = partitioning.pjit(g, in_axis_resources=P('x'))\n"),
        Valid("import jax\nstep = jax.vmap(f, in_axis_resources=1)\n"),
        # The module still imports; removed names in it are PM404's.
        Valid("from jax.experimental import pjit as pjit_lib\n"),
        Valid("import jax\ndoc = 'jax.experimental.pjit.pjit(in_axis_resources=...)'\n"),
        Valid(
            "try:\n"
            "    from jax.experimental.pjit import pjit\n"
            "except ImportError:\n"
            "    from jax import jit as pjit\n"
        ),
        Valid(
            "import jax\n"
            "if jax.__version_info__ < (0, 4, 1):\n"
            "    step = jax.experimental.pjit.pjit(f, in_axis_resources=s, out_axis_resources=s)\n"
        ),
    ]
    INVALID = [
        Invalid("from jax.experimental.pjit import pjit\nstep = pjit(f, in_shardings=s)\n", lines=(1,),
                expected=(
                    "import jax\n"
                    "step = jax.jit(f, in_shardings=s)\n"
                )),
        Invalid("from jax.experimental.pjit import pjit as pj\n", lines=(1,),
                expected="\n"),
        Invalid("from jax import pjit\n", lines=(1,),
                expected="\n"),
        Invalid("import jax\nstep = jax.experimental.pjit.pjit(f)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "step = jax.jit(f)\n"
                )),
        Invalid("from jax.experimental import pjit as pjit_lib\nstep = pjit_lib.pjit(f)\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "step = jax.jit(f)\n"
                )),
        Invalid(
            "from jax.experimental.pjit import pjit\n"
            "step = pjit(f, in_axis_resources=P('data'), out_axis_resources=None)\n",
            lines=(1, 2, 2),
            expected=(
                "import jax\n"
                "step = jax.jit(f, in_shardings=P('data'), out_shardings=None)\n"
            ),
        ),
        Invalid(
            "import functools\n"
            "from jax.experimental.pjit import pjit\n"
            "@functools.partial(pjit,\n"
            "                   in_axis_resources=(P('data'), None),\n"
            "                   out_axis_resources=P('data'))\n"
            "def step(batch, params):\n"
            "    return batch\n",
            lines=(2, 4, 5),
            expected=(
                "import functools\n"
                "import jax\n"
                "@functools.partial(jax.jit,\n"
                "                   in_shardings=(P('data'), None),\n"
                "                   out_shardings=P('data'))\n"
                "def step(batch, params):\n"
                "    return batch\n"
            ),
        ),
        Invalid("import jax\nstep = jax.jit(f, in_axis_resources=P('x'))\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "step = jax.jit(f, in_shardings=P('x'))\n"
                )),
        Invalid(
            "import jax\n"
            "from functools import partial\n"
            "sharded = partial(jax.jit, out_axis_resources=P('x'))\n",
            lines=(3,),
            expected=(
                "import jax\n"
                "from functools import partial\n"
                "sharded = partial(jax.jit, out_shardings=P('x'))\n"
            ),
        ),
        Invalid(
            "import jax\n"
            "jit_ = jax.jit\n"
            "step = jit_(f, in_axis_resources=P('x'))\n",
            lines=(3,),
            expected=(
                "import jax\n"
                "jit_ = jax.jit\n"
                "step = jit_(f, in_shardings=P('x'))\n"
            ),
        ),
        # Options after the shardings passed by position changed order between releases: no fix.
        Invalid("from jax.experimental.pjit import pjit\nstep = pjit(f, P('x'), None, (0,))\n", lines=(1,)),
        Invalid(
            "from jax.experimental.pjit import pjit\n"
            "@pjit\n"
            "def step(x):\n"
            "    return x\n",
            lines=(1,),
            expected=(
                "import jax\n"
                "@jax.jit\n"
                "def step(x):\n"
                "    return x\n"
            ),
        ),
        Invalid("import jax\nstep = jax.jit(f, in_axis_resources=P('x'), in_shardings=P('x'))\n", lines=(2,)),
    ]

    def check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            if full in tables.PJIT:
                self.report(alias, pjit_message(full), fix=self.reads_fix(node, alias, self._rewrite_use, _SUMMARY))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "pjit":
            return
        names = self.model.qualified_names(node) & tables.PJIT
        if names:
            self.report(node, pjit_message(min(names)), fix=spec_or_none(lambda: self._rewrite_use(node), _SUMMARY))

    def visit_Call(self, node: cst.Call) -> None:
        removed = [a for a in node.args if a.keyword is not None and a.keyword.value in tables.REMOVED_PJIT_KEYWORDS]
        if not removed or not self._applies_jit(node):
            return
        for arg in removed:
            summary = f"rename `{arg.keyword.value}=` to `{tables.REMOVED_PJIT_KEYWORDS[arg.keyword.value]}=`"
            self.report(arg, keyword_message(arg.keyword.value),
                        fix=spec_or_none(lambda: self._rewrite_call(node, None), summary))

    def _applies_jit(self, node: cst.Call) -> bool:
        """``pjit(f, ...)`` / ``jax.jit(f, ...)`` / aliases of them, or ``partial(pjit, ...)``."""
        for expr in (node.func, node):
            callee = self.model.callee(expr)
            if callee is not None and callee.transform == JIT:
                return True
        return False

    # ------------------------------------------------------------------------------ fixes
    def _rewrite_use(self, use: cst.BaseExpression) -> FixParts:
        """A reference to pjit: the call, partial or decorator that applies it."""
        if isinstance(self.model.parent(use), cst.Decorator):
            parts = FixParts()
            parts.edits.append(Edit(use, self._jit_expression(use, parts)))
            return parts
        call = applying_call(self.model, use)
        if call is None:
            raise Unfixable("used as a value: its callers may pass in_shardings/out_shardings by position")
        return self._rewrite_call(call, use)

    def _jit_expression(self, callee: cst.BaseExpression, parts: FixParts) -> cst.BaseExpression:
        """`jax.jit` in place of the pjit reference ``callee``; its imports go into ``parts``."""
        expression = parts.renamed(self.model, callee, tables.PJIT_REPLACEMENT)
        if not self.model.qualified_names(callee).isdisjoint(tables.PJIT_GONE):
            parts.assumptions.append("`jax.pjit` meant `jax.experimental.pjit.pjit`")
        parts.assumptions.append(_JIT_ASSUMES)
        return expression

    def _rewrite_call(self, call: cst.Call, callee: cst.BaseExpression | None) -> FixParts:
        """``call`` (a pjit/jit call, or `partial(pjit, ...)`) with its shardings by keyword under
        their current names; ``callee`` (a pjit reference) becomes `jax.jit` (None: kept)."""
        is_partial = self.model.matches(call.func, tables.PARTIAL)
        args = list(call.args[1:] if is_partial else call.args)
        if any(a.star for a in args):
            raise Unfixable("arguments passed with * or **")
        keywords = {a.keyword.value for a in args if a.keyword is not None}
        new_args: list[cst.Arg] = []
        position = 0
        for arg in args:
            if arg.keyword is None:
                if position >= len(_POSITIONAL):
                    raise Unfixable("options after out_shardings passed by position (their order changed "
                                    "between pjit releases)")
                name = _POSITIONAL[position]
                position += 1
                if name == "fun":
                    new_args.append(arg)
                    continue
                if name in keywords or next((o for o, n in tables.REMOVED_PJIT_KEYWORDS.items() if n == name), None) \
                        in keywords:
                    raise Unfixable(f"`{name}` given twice")
                new_args.append(as_keyword(arg, name))
            elif arg.keyword.value == "fun":
                if is_partial or arg is not args[0]:
                    raise Unfixable("`fun=` passed by keyword (jax.jit takes the function by position)")
                new_args.append(as_positional(arg))
            elif arg.keyword.value in tables.REMOVED_PJIT_KEYWORDS:
                new = tables.REMOVED_PJIT_KEYWORDS[arg.keyword.value]
                if new in keywords:
                    raise Unfixable(f"both `{arg.keyword.value}=` and `{new}=`")
                new_args.append(as_keyword(arg, new))
            else:
                new_args.append(arg)
        parts = FixParts()
        if is_partial:
            first = call.args[0]
            if callee is not None:
                first = first.with_changes(value=self._jit_expression(callee, parts))
                if not isinstance(self.model.parent(call), cst.Decorator):
                    parts.assumptions.append("the partial's callers pass nothing but the function by position")
            new_call = call.with_changes(args=[first, *new_args])
        else:
            func = self._jit_expression(callee, parts) if callee is not None else call.func
            new_call = call.with_changes(func=func, args=new_args)
        parts.edits.append(Edit(call, new_call))
        return parts
