from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid
from rules.import_names import imported_names
from rules.semantic import JIT

_PJIT = "jax.experimental.pjit.pjit"


def pjit_message(name: str) -> str:
    if name in tables.PJIT_GONE:
        return f"`{name}` does not exist in current jax; use `{tables.PJIT_REPLACEMENT}` (same parameters as pjit)"
    return (f"`{name}` is deprecated; use `{tables.PJIT_REPLACEMENT}`, which takes the same "
            "`in_shardings=` / `out_shardings=`")


def keyword_message(keyword: str) -> str:
    return (f"`{keyword}=` was removed from pjit and is not accepted by `jax.jit`; "
            f"use `{tables.REMOVED_PJIT_KEYWORDS[keyword]}=`")


class ExperimentalPjit(Rule):
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

    @partial(jax.jit, in_shardings=P("data"), out_shardings=None)  # under `with mesh:` / jax.set_mesh
    def step(batch):
        return batch.sum()
    ```

    ## Fix safety
    Report only for now. `pjit` -> `jax.jit` and the keyword renames keep the meaning when the
    call runs under the same mesh context (bare `PartitionSpec`s need one); both are safe fix
    candidates.

    ## References
    - https://docs.jax.dev/en/latest/_autosummary/jax.jit.html
    - https://docs.jax.dev/en/latest/notebooks/Distributed_arrays_and_automatic_parallelization.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM403"
    NAME = "experimental-pjit"
    MESSAGE = pjit_message(_PJIT)
    TRIGGERS = ("pjit", "axis_resources")

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
        Invalid("from jax.experimental.pjit import pjit\nstep = pjit(f, in_shardings=s)\n", lines=(1,)),
        Invalid("from jax.experimental.pjit import pjit as pj\n", lines=(1,)),
        Invalid("from jax import pjit\n", lines=(1,)),
        Invalid("import jax\nstep = jax.experimental.pjit.pjit(f)\n", lines=(2,)),
        Invalid("from jax.experimental import pjit as pjit_lib\nstep = pjit_lib.pjit(f)\n", lines=(2,)),
        Invalid(
            "from jax.experimental.pjit import pjit\n"
            "step = pjit(f, in_axis_resources=P('data'), out_axis_resources=None)\n",
            lines=(1, 2, 2),
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
        ),
        Invalid("import jax\nstep = jax.jit(f, in_axis_resources=P('x'))\n", lines=(2,)),
        Invalid(
            "import jax\n"
            "from functools import partial\n"
            "sharded = partial(jax.jit, out_axis_resources=P('x'))\n",
            lines=(3,),
        ),
        Invalid(
            "import jax\n"
            "jit_ = jax.jit\n"
            "step = jit_(f, in_axis_resources=P('x'))\n",
            lines=(3,),
        ),
    ]

    def visit_Import(self, node: cst.Import) -> None:
        self._check_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._check_import(node)

    def _check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            if full in tables.PJIT:
                self.report(alias, pjit_message(full))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "pjit":
            return
        names = self.model.qualified_names(node) & tables.PJIT
        if names:
            self.report(node, pjit_message(min(names)))

    def visit_Call(self, node: cst.Call) -> None:
        removed = [a for a in node.args if a.keyword is not None and a.keyword.value in tables.REMOVED_PJIT_KEYWORDS]
        if not removed or not self._applies_jit(node):
            return
        for arg in removed:
            self.report(arg, keyword_message(arg.keyword.value))

    def _applies_jit(self, node: cst.Call) -> bool:
        """``pjit(f, ...)`` / ``jax.jit(f, ...)`` / aliases of them, or ``partial(pjit, ...)``."""
        for expr in (node.func, node):
            callee = self.model.callee(expr)
            if callee is not None and callee.transform == JIT:
                return True
        return False
