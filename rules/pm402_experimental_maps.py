from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.imports import imported_names, is_within
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.api import (
    FixParts,
    Unfixable,
    alias_index,
    import_reads,
    rename_to,
    replace_dotted_import,
    rewrite_import,
    rewrite_import_from,
)
from pmap_migrate.rules.fixes.spec import FixSpec
from pmap_migrate.rules.knowledge import gates, tables

_MODULE = tables.EXPERIMENTAL_MAPS_MODULE
_GENERAL = "use `jax.sharding.Mesh` for `Mesh` and `jax.shard_map` over a Mesh for `xmap`"


def maps_message(full: str, *, imported: bool) -> str:
    """What replaces ``full`` (the module or a name in it)."""
    head = f"`{_MODULE}` was removed from jax" + (" (the import fails)" if imported else "")
    full = full.removesuffix(".*")
    entry = tables.EXPERIMENTAL_MAPS_BY_NAME.get(full)
    if entry is None:
        if full != _MODULE:
            return f"{head}, `{full}` with it; {_GENERAL}"
        return f"{head}; {_GENERAL}"
    if entry.replacement is None:
        return f"{head}; {entry.note}"
    message = f"{head}; use `{entry.replacement}` for `{entry.last}`"
    return f"{message} ({entry.note})" if entry.note else message


class ExperimentalMaps(Rule):
    """Use of the removed `jax.experimental.maps` module (`Mesh`, `xmap`, `thread_resources`).

    ## What it does
    Finds every use of `jax.experimental.maps`: its imports (`from jax.experimental import maps`,
    `from jax.experimental.maps import Mesh, xmap`, `import jax.experimental.maps as M`) and the
    names read from it (`maps.Mesh(...)`, `M.xmap(...)`, `maps.thread_resources.env`,
    `jax.experimental.maps.Mesh`). Each imported name is reported with its replacement.

    A name bound by a reported import (`Mesh(...)` after `from jax.experimental.maps import Mesh`)
    is not reported again. Other modules called `maps` (`from mylib import maps`) are not reported.

    ## Why is this bad?
    `jax.experimental.maps` no longer exists (it was gone before jax 0.7.2): importing it raises
    `ModuleNotFoundError`. `maps.Mesh` became `jax.sharding.Mesh`; `xmap` was removed without a
    drop-in: `jax.shard_map` over a `Mesh` (or `jax.vmap` with `spmd_axis_name`) replaces it.

    ## Example
    ```python
    import numpy as np
    import jax
    from jax.experimental import maps

    with maps.Mesh(np.array(jax.devices()), ("data",)):
        out = step(batch)
    ```

    ## Use instead
    ```python
    import numpy as np
    import jax
    from jax.sharding import Mesh

    with Mesh(np.array(jax.devices()), ("data",)):
        out = step(batch)
    ```

    ## Fix safety
    Safe: `Mesh` imported from `jax.experimental.maps` is imported from `jax.sharding` instead
    (the same class, the local name kept), `maps.Mesh` becomes `jax.sharding.Mesh`, and an import
    of the module that nothing reads any more is deleted (`import jax.experimental.maps` becomes
    `import jax`, which it also bound). Unsafe: `maps.mesh(devices, names)`, a context manager
    around `Mesh` whose `as` target was None, becomes `jax.sharding.Mesh`. No fix, the message
    says the manual route: `xmap` (`jax.shard_map` over a Mesh, or `jax.vmap` with
    `spmd_axis_name`), `thread_resources` / `ResourceEnv` / `EMPTY_ENV` (pass the Mesh
    explicitly, or read the context mesh with `jax.sharding.get_abstract_mesh()`), star imports.

    ## References
    - https://docs.jax.dev/en/latest/changelog.html
    - https://docs.jax.dev/en/latest/notebooks/shard_map.html
    - https://docs.jax.dev/en/latest/jax.sharding.html
    """

    CODE = "PM402"
    NAME = "experimental-maps"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = f"`{_MODULE}` was removed from jax; {_GENERAL}"
    # Every spelling names the module, in the import or as an attribute.
    TRIGGERS = gates.PM402.TRIGGERS
    NAMES = gates.PM402.NAMES

    VALID = [
        Valid("from jax.sharding import Mesh\nm = Mesh(devices, ('i',))\n"),
        Valid("import jax\nm = jax.sharding.Mesh(devices, ('i',))\n"),
        Valid("from mylib import maps\nm = maps.Mesh(devices)\nf = maps.xmap(g)\n"),
        Valid("import maps\nm = maps.Mesh(devices)\n"),
        Valid("maps = {}\nmaps.get('Mesh')\n"),
        Valid("def xmap(f):\n    return f\ng = xmap(h)\n"),
        Valid("import jax\nout = jax.tree.map(f, heatmaps)\n"),
        Valid("import jax\nname = 'jax.experimental.maps'\n"),
        Valid(
            "try:\n"
            "    from jax.experimental.maps import Mesh\n"
            "except ImportError:\n"
            "    from jax.sharding import Mesh\n"
        ),
        Valid(
            "import jax\n"
            "if jax.__version__ < '0.4':\n"
            "    from jax.experimental import maps\n"
            "    Mesh = maps.Mesh\n"
        ),
    ]
    INVALID = [
        Invalid("from jax.experimental import maps\n", lines=(1,),
                expected="\n"),
        Invalid("from jax.experimental.maps import Mesh, xmap\nm = Mesh(d, ('i',))\nf = xmap(g)\n", lines=(1, 1),
                expected=(
                    "from jax.experimental.maps import xmap\n"
                    "from jax.sharding import Mesh\n"
                    "m = Mesh(d, ('i',))\n"
                    "f = xmap(g)\n"
                )),
        Invalid("from jax.experimental.maps import thread_resources\n", lines=(1,),
                expected="\n"),
        Invalid("import jax.experimental.maps\n", lines=(1,),
                expected="import jax\n"),
        Invalid("from jax.experimental.maps import *\nm = Mesh(d, ('i',))\n", lines=(1,)),
        Invalid(
            "from jax.experimental import maps\n"
            "with maps.Mesh(devices, ('data',)):\n"
            "    out = f(x)\n",
            lines=(1, 2),
            expected=(
                "import jax\n"
                "with jax.sharding.Mesh(devices, ('data',)):\n"
                "    out = f(x)\n"
            ),
        ),
        Invalid(
            "import jax.experimental.maps as M\n"
            "f = M.xmap(g, in_axes=['i', ...], out_axes=['i', ...], axis_resources={'i': 'x'})\n"
            "mesh = M.thread_resources.env.physical_mesh\n",
            lines=(1, 2, 3),
        ),
        # Reached through `import jax` alone (the submodule was imported elsewhere).
        Invalid("import jax\nm = jax.experimental.maps.Mesh(devices, ('i',))\n", lines=(2,),
                expected=(
                    "import jax\n"
                    "m = jax.sharding.Mesh(devices, ('i',))\n"
                )),
        Invalid(
            "def current_mesh():\n"
            "    return maps.thread_resources.env.physical_mesh\n"
            "from jax.experimental import maps\n",
            lines=(2, 3),
        ),
        Invalid("from jax.experimental import maps\nregistry = [maps]\n", lines=(1, 2)),
        Invalid("from jax.experimental import maps\nenv = maps.ResourceEnv(mesh, ())\n", lines=(1, 2)),
        # maps.mesh was a context manager around Mesh: an unsafe rename.
        Invalid("from jax.experimental.maps import mesh\nwith mesh(devices, ('x',)):\n    pass\n", lines=(1,),
                expected=(
                    "from jax.sharding import Mesh as mesh\n"
                    "with mesh(devices, ('x',)):\n"
                    "    pass\n"
                )),
        # The module's own alias for jax is kept.
        Invalid("import jax as J\nm = J.experimental.maps.Mesh(devices, ('i',))\n", lines=(2,),
                expected=(
                    "import jax as J\n"
                    "m = J.sharding.Mesh(devices, ('i',))\n"
                )),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        self._aliases: set[str] = set()

    def visit_Import(self, node: cst.Import) -> None:
        self._check_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._check_import(node)

    def _check_import(self, node: cst.Import | cst.ImportFrom) -> None:
        for alias, full in imported_names(node):
            if not is_within(full, _MODULE):
                continue
            fix = self._import_fix(node, alias, full) if isinstance(alias, cst.ImportAlias) else None
            self.report(alias, maps_message(full, imported=True), fix=fix)
            if full == _MODULE and isinstance(alias, cst.ImportAlias) and (
                alias.asname is not None or isinstance(node, cst.ImportFrom)
            ):
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name):
                    self._aliases.add(bound.value)

    def leave_Module(self, original_node: cst.Module) -> None:
        # At the end, so that uses placed before the import (in functions) are found too.
        for ref in self.model.references({_MODULE}, {"maps"} | self._aliases):
            parent = self.model.parent(ref)
            if isinstance(parent, cst.Attribute) and parent.value is ref:
                full = f"{_MODULE}.{parent.attr.value}"
                self.report(parent, maps_message(full, imported=False), fix=self._attribute_fix(parent, full))
            else:
                self.report(ref, maps_message(_MODULE, imported=False))

    # ------------------------------------------------------------------------------ fixes
    def _attribute_fix(self, node: cst.Attribute, full: str) -> FixSpec | None:
        entry = tables.EXPERIMENTAL_MAPS_BY_NAME.get(full)
        if entry is None or entry.rename is None:
            return None
        try:
            parts = rename_to(self.model, node, entry.replacement)
        except Unfixable:
            return None
        if entry.rename == tables.RENAME_SIMILAR:
            parts.assumptions.append(entry.assumes)
        return parts.spec(f"use `{entry.replacement}`")

    def _moved(self, statement: cst.ImportFrom, alias: cst.ImportAlias) -> tuple[str, str, str] | None:
        """(module, name, assumption) when ``alias`` can be imported from its replacement's module."""
        entry = tables.EXPERIMENTAL_MAPS_BY_NAME.get(f"{_MODULE}.{alias.evaluated_name}")
        if entry is None or entry.rename is None or statement.relative or statement.module is None:
            return None
        module, name = entry.replacement.rsplit(".", 1)
        return module, name, entry.assumes

    def _import_fix(self, statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias, full: str) -> FixSpec | None:
        index = alias_index(statement, alias)
        if isinstance(statement, cst.ImportFrom) and full != _MODULE:
            mine = self._moved(statement, alias)
            if mine is not None:
                # Every name of the statement that moved, in one edit (safe ones only, when this one is).
                moves, assumptions, names = {}, [], []
                for i, other in enumerate(statement.names):
                    found = self._moved(statement, other)
                    if found is None or (not mine[2] and found[2]):
                        continue
                    moves[i] = found[:2]
                    local = other.evaluated_alias or other.evaluated_name
                    names.append(f"`{found[0]}.{found[1]}`" + (f" as `{local}`" if local != found[1] else ""))
                    if found[2]:
                        assumptions.append(found[2])
                parts = FixParts(list(rewrite_import_from(self.model, statement, moves)), assumptions=assumptions)
                return parts.spec("import " + ", ".join(names))
        if isinstance(statement, cst.Import) and alias.asname is None:
            # `import jax.experimental.maps` also binds `jax`: once nothing reads the module it
            # becomes `import jax`.
            if self.model.references({_MODULE}, {"maps"}):
                return None
            return replace_dotted_import(self.model, statement, alias).spec(
                f"drop the import of the removed `{_MODULE}` (nothing reads it), keeping `jax` imported")
        if import_reads(self.model, statement, alias) != []:
            return None  # read somewhere: each use is a finding with its own fix, if it has one
        if isinstance(statement, cst.ImportFrom):
            edits = rewrite_import_from(self.model, statement, {index: None})
        else:
            edits = rewrite_import(self.model, statement, {index: None})
        return FixParts(list(edits)).spec(f"remove the unused import of `{full}`")
