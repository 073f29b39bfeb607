"""The helpers fixes may share across a package, and the text of the module that holds them.

A fix that needs one of these helpers (``Helper.shared`` names it) gets it imported from the
package's shared module, ``_pmap_compat.py``, which the engine creates or extends
(pmap_migrate/shared_module.py decides where it goes); where no package location is safe, the
helper is written in the fixed module itself. The module is plain JAX (no import of this project
nor of the shim); its text is a function of the set of helpers it holds (sorted by name), so that
it is recognisable as this tool's own, and extending it is re-rendering it with one more.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from pmap_migrate.rules.fixes.pmap_render import shard_mapped_helper
from pmap_migrate.rules.fixes.spec import ImportSpec

MODULE_NAME = "_pmap_compat"
INDENT = "    "
FIRST_LINE = '"""Helpers of the modules that `pmap-migrate fix` rewrote in this package.'


@dataclass(frozen=True)
class SharedHelper:
    name: str
    summary: str  # one line of the module's docstring
    source: str  # the definition, at module level, indented by INDENT
    imports: tuple[ImportSpec, ...]


SHARD_MAPPED = "_shard_mapped"  # the compact form of the faithful pmap rewrite (pmap_render)

SHARED_HELPERS: dict[str, SharedHelper] = {
    helper.name: helper for helper in (
        SharedHelper(
            SHARD_MAPPED,
            "jax.pmap(f, axis_name) as a shard_map on the local devices.",
            shard_mapped_helper(SHARD_MAPPED, INDENT),
            (ImportSpec("functools"), ImportSpec("jax"), ImportSpec("jax.numpy", None, "jnp"),
             ImportSpec("jax.sharding", "Mesh"), ImportSpec("jax.sharding", "PartitionSpec", "P"))),
    )
}


def _import_line(spec: ImportSpec) -> str:
    alias = f" as {spec.asname}" if spec.asname else ""
    if spec.name is None:
        return f"import {spec.module}{alias}"
    return f"from {spec.module} import {spec.name}{alias}"


_STDLIB = frozenset({"functools"})


def module_text(names: frozenset[str] | set[str]) -> str:
    """The shared module holding the helpers ``names`` (every one a key of SHARED_HELPERS): a
    docstring saying what it is and what each helper does, the imports they need (isort's order:
    the standard library, then jax; ``import`` lines before ``from`` lines), the helpers by name."""
    helpers = [SHARED_HELPERS[name] for name in sorted(names)]
    specs = {spec for helper in helpers for spec in helper.imports}
    lines = [FIRST_LINE, "", "Plain JAX, written by pmap-migrate (it adds the helpers fixes need).", ""]
    lines += [f"{helper.name}: {helper.summary}" for helper in helpers]
    lines += ['"""', ""]
    for group in ([s for s in specs if s.module.split(".")[0] in _STDLIB],
                  [s for s in specs if s.module.split(".")[0] not in _STDLIB]):
        plain = sorted((s for s in group if s.name is None), key=lambda s: s.module)
        froms = sorted((s for s in group if s.name is not None), key=lambda s: (s.module, s.name.lower()))
        if plain or froms:
            lines += [_import_line(s) for s in (*plain, *froms)] + [""]
    text = "\n".join(lines)
    for helper in helpers:
        text += "\n\n" + helper.source
    return text


def helpers_in(text: str) -> frozenset[str] | None:
    """The helpers a shared module holds, when ``text`` is exactly what this tool writes for them;
    None: a file of someone else's (or edited since), which fixes must not rely on nor change."""
    if not text.startswith(FIRST_LINE):
        return None
    names = frozenset(name for name in SHARED_HELPERS if f"\ndef {name}(" in text)
    return names if names and module_text(names) == text else None


def imported_name(module: cst.Module, name: str) -> str | None:
    """The name ``module`` binds the shared helper ``name`` to by a top-level import from its
    package's shared module (`from ._pmap_compat import _shard_mapped`), if it does."""
    for statement in module.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            source = small.module
            while isinstance(source, cst.Attribute):
                source = source.attr
            if not isinstance(source, cst.Name) or source.value != MODULE_NAME:
                continue
            for alias in small.names:
                if isinstance(alias.name, cst.Name) and alias.name.value == name:
                    return alias.asname.name.value if alias.asname is not None else name
    return None
