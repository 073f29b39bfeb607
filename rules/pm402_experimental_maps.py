from __future__ import annotations

import libcst as cst

from rules import tables
from rules.base import Invalid, Rule, Valid
from rules.import_names import imported_names, is_within

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
    Report only for now. `maps.Mesh` -> `jax.sharding.Mesh` is a rename (a safe fix candidate);
    `xmap` and `thread_resources` need a manual rewrite.

    ## References
    - https://docs.jax.dev/en/latest/changelog.html
    - https://docs.jax.dev/en/latest/notebooks/shard_map.html
    - https://docs.jax.dev/en/latest/jax.sharding.html
    """

    CODE = "PM402"
    NAME = "experimental-maps"
    MESSAGE = f"`{_MODULE}` was removed from jax; {_GENERAL}"
    # Every spelling names the module, in the import or as an attribute.
    TRIGGERS = ("maps",)

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
        Invalid("from jax.experimental import maps\n", lines=(1,)),
        Invalid("from jax.experimental.maps import Mesh, xmap\nm = Mesh(d, ('i',))\nf = xmap(g)\n", lines=(1, 1)),
        Invalid("from jax.experimental.maps import thread_resources\n", lines=(1,)),
        Invalid("import jax.experimental.maps\n", lines=(1,)),
        Invalid("from jax.experimental.maps import *\nm = Mesh(d, ('i',))\n", lines=(1,)),
        Invalid(
            "from jax.experimental import maps\n"
            "with maps.Mesh(devices, ('data',)):\n"
            "    out = f(x)\n",
            lines=(1, 2),
        ),
        Invalid(
            "import jax.experimental.maps as M\n"
            "f = M.xmap(g, in_axes=['i', ...], out_axes=['i', ...], axis_resources={'i': 'x'})\n"
            "mesh = M.thread_resources.env.physical_mesh\n",
            lines=(1, 2, 3),
        ),
        # Reached through `import jax` alone (the submodule was imported elsewhere).
        Invalid("import jax\nm = jax.experimental.maps.Mesh(devices, ('i',))\n", lines=(2,)),
        Invalid(
            "def current_mesh():\n"
            "    return maps.thread_resources.env.physical_mesh\n"
            "from jax.experimental import maps\n",
            lines=(2, 3),
        ),
        Invalid("from jax.experimental import maps\nregistry = [maps]\n", lines=(1, 2)),
        Invalid("from jax.experimental import maps\nenv = maps.ResourceEnv(mesh, ())\n", lines=(1, 2)),
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
            self.report(alias, maps_message(full, imported=True))
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
                self.report(parent, maps_message(f"{_MODULE}.{parent.attr.value}", imported=False))
            else:
                self.report(ref, maps_message(_MODULE, imported=False))
