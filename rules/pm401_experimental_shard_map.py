from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid
from rules.import_names import imported_names

_EXPERIMENTAL = "jax.experimental.shard_map.shard_map"
_KEYWORD_MESSAGES = {
    "check_rep": "`check_rep=` is rejected by `jax.shard_map`; it was renamed `check_vma=`",
    "auto": "`auto=` is rejected by `jax.shard_map` (and by the experimental shard_map since jax 0.10); "
            "name the manual axes instead with `axis_names=` (the mesh axes not in `auto`)",
}


class ExperimentalShardMap(Rule):
    """Use of the deprecated `jax.experimental.shard_map.shard_map` or of its removed keywords.

    ## What it does
    Finds `jax.experimental.shard_map.shard_map` however it is named: imported
    (`from jax.experimental.shard_map import shard_map [as smap]` — the import is reported), through
    a module alias (`import jax.experimental.shard_map as shmap; shmap.shard_map(...)`) or as an
    attribute (`jax.experimental.shard_map.shard_map(...)`). Also finds the keywords `check_rep=` and
    `auto=` on any shard_map call, including `functools.partial(shard_map, ..., check_rep=False)`.

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
    Report only for now. Switching to `jax.shard_map` with keyword arguments and
    `check_rep=` -> `check_vma=` keeps the meaning (a safe fix); `auto=` has to be turned into
    the complementary `axis_names=` set, which needs the mesh's axis names.

    ## References
    - https://docs.jax.dev/en/latest/notebooks/shard_map.html
    - https://docs.jax.dev/en/latest/_autosummary/jax.shard_map.html
    """

    CODE = "PM401"
    NAME = "experimental-shard-map"
    MESSAGE = (
        f"`{_EXPERIMENTAL}` is deprecated; use `{tables.SHARD_MAP_REPLACEMENT}` "
        "(mesh, in_specs and out_specs are keyword-only there; `check_rep=` became `check_vma=`)"
    )
    TRIGGERS = ("shard_map",)

    VALID = [
        Valid("import jax\nf = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_vma=False)\n"),
        Valid("from jax import shard_map\nf = shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'))\n"),
        Valid("import jax\nf = jax.shard_map(g, mesh=m, in_specs=P(), out_specs=P(), axis_names={'i'})\n"),
        # A local shard_map, or another library's, with keywords of its own.
        Valid("def shard_map(f, mesh, check_rep=True):\n    return f\ng = shard_map(h, m, check_rep=False)\n"),
        Valid("from mylib.parallel import shard_map\ng = shard_map(h, m, check_rep=False, auto=frozenset())\n"),
        Valid("import jax\nf = jax.jit(g, auto=True)\n"),
        # The module itself still imports; only its shard_map is reported, where it is named.
        Valid("import jax.experimental.shard_map\n"),
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
                lines=(1,)),
        Invalid("from jax.experimental.shard_map import shard_map as smap\n", lines=(1,)),
        Invalid("import jax\nf = jax.experimental.shard_map.shard_map(g, m, P('i'), P('i'))\n", lines=(2,)),
        Invalid("import jax.experimental.shard_map as shmap\nf = shmap.shard_map(g, m, P('i'), P('i'))\n",
                lines=(2,)),
        Invalid("from jax.experimental import shard_map\nf = shard_map.shard_map(g, m, P('i'), P('i'))\n",
                lines=(2,)),
        Invalid("import jax\nf = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n",
                lines=(2,)),
        Invalid(
            "import jax\n"
            "f = jax.shard_map(\n"
            "    g, mesh=m, in_specs=P('i'), out_specs=P('i'),\n"
            "    auto=frozenset({'j'}),\n"
            ")\n",
            lines=(4,),
        ),
        # The import and the keyword are two edits.
        Invalid(
            "from jax.experimental.shard_map import shard_map as smap\n"
            "f = smap(g, m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n",
            lines=(1, 2),
        ),
        Invalid(
            "import functools\n"
            "from jax import shard_map\n"
            "@functools.partial(shard_map, mesh=m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n"
            "def body(x):\n"
            "    return x\n",
            lines=(3,),
        ),
        Invalid(
            "import jax\n"
            "f = jax.experimental.shard_map.shard_map(g, m, P('i'), P('i'), check_rep=False, auto=a)\n",
            lines=(2, 2, 2),
        ),
    ]

    def visit_Import(self, node: cst.Import) -> None:
        self._check_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._check_import(node)

    def _check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            if full in tables.EXPERIMENTAL_SHARD_MAP:
                self.report(alias)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "shard_map" and self.model.matches(node, tables.EXPERIMENTAL_SHARD_MAP):
            self.report(node)

    def visit_Call(self, node: cst.Call) -> None:
        removed = [a for a in node.args if a.keyword is not None and a.keyword.value in _KEYWORD_MESSAGES]
        if not removed or not self._is_shard_map_call(node):
            return
        for arg in removed:
            self.report(arg, _KEYWORD_MESSAGES[arg.keyword.value])

    def _is_shard_map_call(self, node: cst.Call) -> bool:
        if self.model.matches(node.func, tables.SHARD_MAP):
            return True
        if node.args and self.model.matches(node.func, tables.PARTIAL):
            first = node.args[0]
            return first.keyword is None and not first.star and self.model.matches(first.value, tables.SHARD_MAP)
        return False
