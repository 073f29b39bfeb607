"""The helpers fixes may share across a package, and the text of the module that holds them.

A fix that needs one of these helpers (``Helper.shared`` names it) gets it imported from the
package's shared module, ``_pmap_compat.py``, which the engine creates or extends
(pmap_migrate/shared_module.py decides where it goes); where no package location is safe, the
helper is written in the fixed module itself. The module is plain JAX (no import of this project
nor of the shim); its text is a function of the set of helpers it holds (sorted by name), so that
it is recognisable as this tool's own, and extending it is re-rendering it with one more.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst
from libcst.helpers import get_full_name_for_node

from pmap_migrate.rules.fixes.pmap_render import ALL_FEATURES, HELPER_FEATURES, helper_features, shard_mapped_helper
from pmap_migrate.rules.fixes.shared_multiprocess import (  # (the multi-process helpers, re-exported)
    GLOBAL_CALL,
    GLOBAL_PMAP,
    HOST_LOCAL,
    SHARD_MAPPED,
    TO_GLOBAL,
    global_call_helper,
    global_pmap_helper,
    host_local_helper,
    to_global_helper,
)
from pmap_migrate.rules.fixes.spec import ImportSpec

MODULE_NAME = "_pmap_compat"
INDENT = "    "
FIRST_LINE = '"""Helpers of the modules that `pmap-migrate fix` rewrote in this package.'


@dataclass(frozen=True)
class SharedHelper:
    name: str
    source: str  # the definition, at module level, indented by INDENT
    imports: tuple[ImportSpec, ...]
    requires: tuple[str, ...] = ()  # the helpers it calls, held beside it


REPLICATE = "_replicate"  # jax.device_put_replicated / flax replicate (placement_fixes.stack_fix)
PUT_SHARDED = "_put_sharded"  # jax.device_put_sharded (placement_fixes.stack_fix)
_SHARDING_IMPORTS = (ImportSpec("jax"), ImportSpec("jax.numpy", None, "jnp"), ImportSpec("numpy", None, "np"),
                     ImportSpec("jax.sharding", "Mesh"),
                     ImportSpec("jax.sharding", "NamedSharding"), ImportSpec("jax.sharding", "PartitionSpec", "P"))

# A shared module's set of helpers also names the options its `_shard_mapped` takes (the features
# of pmap_render.shard_mapped_helper): "_shard_mapped:axes" and so on, only those its importers pass.
FEATURE_MARK = SHARD_MAPPED + ":"


def feature_names(features) -> frozenset[str]:
    """The members of a set of helpers that say `_shard_mapped` takes ``features``."""
    return frozenset(FEATURE_MARK + feature for feature in features)


def features_of(names) -> frozenset[str]:
    """The features of `_shard_mapped` that a set of helpers (``feature_names``) asks for."""
    return frozenset(name[len(FEATURE_MARK):] for name in names if name.startswith(FEATURE_MARK))


def replicate_helper(name: str, indent: str) -> str:
    """`jax.device_put_replicated(tree, devices)` as it was: one row per device, each put on its own
    device and assembled without device compute (typed PRNG keys go through); a weakly typed
    leaf is broadcast on one device and put in place, so that it stays weakly typed."""
    i1, i2 = indent, indent * 2
    return "\n".join([
        f"def {name}(tree, devices):",
        f'{i1}"""jax.device_put_replicated(tree, devices): a row per device."""',
        "",
        f"{i1}def stack(leaf):",
        f'{i2}sharding = NamedSharding(Mesh(devices, ("i",)), P("i"))',
        f"{i2}shape = (len(devices), *np.shape(leaf))",
        f"{i2}if jax.typeof(leaf).weak_type:  # stays weakly typed",
        f"{i2}{i1}return jax.device_put(jnp.broadcast_to(leaf, shape), sharding)",
        f"{i2}rows = [jax.device_put(leaf, device)[None] for device in devices]",
        f"{i2}return jax.make_array_from_single_device_arrays(shape, sharding, rows)",
        "",
        f"{i1}return jax.tree.map(stack, tree)",
    ]) + "\n"


def put_sharded_helper(name: str, indent: str) -> str:
    """`jax.device_put_sharded(shards, devices)` as it was: row k of each leaf from ``shards[k]``,
    put on ``devices[k]``; weakly typed leaves as in ``replicate_helper``."""
    i1, i2, i3 = indent, indent * 2, indent * 3
    return "\n".join([
        f"def {name}(shards, devices):",
        f'{i1}"""jax.device_put_sharded(shards, devices): shard k on device k."""',
        "",
        f"{i1}def stack(*leaves):",
        f'{i2}sharding = NamedSharding(Mesh(devices, ("i",)), P("i"))',
        f"{i2}if jax.typeof(leaves[0]).weak_type:  # stays weakly typed",
        f"{i2}{i1}return jax.device_put(jnp.stack(leaves), sharding)",
        f"{i2}rows = [",
        f"{i3}jax.device_put(leaf, device)[None]",
        f"{i3}for leaf, device in zip(leaves, devices, strict=True)",
        f"{i2}]",
        f"{i2}shape = (len(devices), *np.shape(leaves[0]))",
        f"{i2}return jax.make_array_from_single_device_arrays(shape, sharding, rows)",
        "",
        f"{i1}return jax.tree.map(stack, *shards)",
    ]) + "\n"


_MULTIHOST = ImportSpec("jax.experimental", "multihost_utils")

SHARED_HELPERS: dict[str, SharedHelper] = {
    helper.name: helper for helper in (
        SharedHelper(
            SHARD_MAPPED,
            shard_mapped_helper(SHARD_MAPPED, INDENT),
            (ImportSpec("functools"), ImportSpec("jax"), ImportSpec("jax.numpy", None, "jnp"),
             ImportSpec("jax.sharding", "Mesh"), ImportSpec("jax.sharding", "PartitionSpec", "P"))),
        SharedHelper(REPLICATE, replicate_helper(REPLICATE, INDENT), _SHARDING_IMPORTS),
        SharedHelper(PUT_SHARDED, put_sharded_helper(PUT_SHARDED, INDENT), _SHARDING_IMPORTS),
        SharedHelper(TO_GLOBAL, to_global_helper(INDENT),
                     (ImportSpec("jax"), ImportSpec("jax.sharding", "Mesh"),
                      ImportSpec("jax.sharding", "NamedSharding"), ImportSpec("jax.sharding", "PartitionSpec", "P"),
                      _MULTIHOST)),
        SharedHelper(HOST_LOCAL, host_local_helper(INDENT),
                     (ImportSpec("jax"), ImportSpec("jax.sharding", "NamedSharding"), _MULTIHOST)),
        SharedHelper(GLOBAL_CALL, global_call_helper(INDENT),
                     (ImportSpec("functools"), ImportSpec("jax"), ImportSpec("jax.sharding", "PartitionSpec", "P")),
                     requires=(TO_GLOBAL, HOST_LOCAL)),
        SharedHelper(GLOBAL_PMAP, global_pmap_helper(INDENT),
                     (ImportSpec("functools"), ImportSpec("jax"), ImportSpec("jax.sharding", "PartitionSpec", "P"),
                      _MULTIHOST),
                     requires=(TO_GLOBAL, SHARD_MAPPED)),
    )
}


# Every helper, `_shard_mapped` with every option (earlier versions wrote them all, but for
# "nests", beside tests).
EVERY_HELPER = frozenset(SHARED_HELPERS) | feature_names(ALL_FEATURES)


def _import_line(spec: ImportSpec) -> str:
    alias = f" as {spec.asname}" if spec.asname else ""
    if spec.name is None:
        return f"import {spec.module}{alias}"
    return f"from {spec.module} import {spec.name}{alias}"


_STDLIB = frozenset({"functools"})
_THIRD_PARTY_ORDER = ("jax", "numpy")  # isort: by module name


def with_required(names) -> frozenset[str]:
    """``names`` and the helpers they call."""
    found, todo = set(names), list(names)
    while todo:
        name = todo.pop()
        for needed in SHARED_HELPERS[name].requires if name in SHARED_HELPERS else ():
            if needed not in found:
                found.add(needed)
                todo.append(needed)
    return frozenset(found)


def helper_source(name: str, indent: str = INDENT, features: frozenset[str] = ALL_FEATURES) -> str:
    """The text of the shared helper ``name`` at ``indent``, taking ``features``."""
    if indent == INDENT and features == ALL_FEATURES:
        return SHARED_HELPERS[name].source
    return _RENDERERS[name](indent, features)


# Each shared helper's text by indentation and features (those without features take none).
_RENDERERS = {
    SHARD_MAPPED: lambda indent, features: shard_mapped_helper(SHARD_MAPPED, indent, features),
    REPLICATE: lambda indent, _: replicate_helper(REPLICATE, indent),
    PUT_SHARDED: lambda indent, _: put_sharded_helper(PUT_SHARDED, indent),
    HOST_LOCAL: lambda indent, _: host_local_helper(indent),
    TO_GLOBAL: to_global_helper, GLOBAL_CALL: global_call_helper, GLOBAL_PMAP: global_pmap_helper,
}


def indent_of(text: str) -> str:
    """The indentation unit of a shared module's ``text`` (its helpers' docstrings'); four
    spaces where it shows none."""
    match = re.search(r"^( +)\"\"\"", text, re.MULTILINE)
    return match[1] if match else INDENT


def module_text(names: frozenset[str] | set[str], indent: str = INDENT) -> str:
    """The shared module holding the helpers ``names`` (every one a key of SHARED_HELPERS): a
    docstring saying what it is, the imports they need (isort's order:
    the standard library, then jax; ``import`` lines before ``from`` lines), the helpers by name,
    `_shard_mapped` with the options ``names`` ask for (``feature_names``), at ``indent`` (the
    project's)."""
    helpers = [SHARED_HELPERS[name] for name in sorted(with_required(names)) if name in SHARED_HELPERS]
    features = features_of(names)
    if features != ALL_FEATURES or indent != INDENT:
        helpers = [dataclasses.replace(h, source=helper_source(h.name, indent, features)) for h in helpers]
    specs = {spec for helper in helpers for spec in helper.imports}
    lines = [FIRST_LINE + '"""', ""]  # (plain JAX: `fix` writes it, and adds the helpers fixes need)
    for group in ([s for s in specs if s.module.split(".")[0] in _STDLIB],
                  [s for s in specs if s.module.split(".")[0] not in _STDLIB]):
        plain = [_import_line(s) for s in sorted((s for s in group if s.name is None), key=lambda s: s.module)]
        froms = []  # ruff's isort: one line per module for the names without `as`, one per aliased name
        for module in sorted({s.module for s in group if s.name is not None}):
            names = sorted((s for s in group if s.module == module and s.name is not None), key=lambda s: s.name)
            bare = [s.name for s in names if s.asname is None]
            froms += [f"from {module} import {', '.join(bare)}"] if bare else []
            froms += [_import_line(s) for s in names if s.asname is not None]
        if plain or froms:
            lines += [*plain, *froms, ""]
    text = "\n".join(lines)
    for helper in helpers:
        text += "\n\n" + helper.source
    return text


# What earlier versions of this tool wrote for each helper (sha256 of the definition's text, its
# first 16 hex digits): a shared module holding them is still this tool's, and is written anew
# (current helpers accept every call an earlier version wrote) when a fix needs it.
_OLDER_TEXTS = {
    "_global_call": frozenset({"2c3edceb47850ab9", "e2fa1718804f1887", "296c78bd45d9c5e8", "f2436949b7735625",
                                "d389175296926851"}),
    "_global_pmap": frozenset({"18bfa518defcdb88"}),  # static positions, no in_axes: with the in_axes loop
    "_host_local": frozenset({"154eac9fad91f8c5"}),
    "_put_sharded": frozenset({"f7adeab83ee10695"}),
    "_replicate": frozenset({"8ffd517d6a147f6f"}),
    "_shard_mapped": frozenset({"112b0323086a94cb", "13b90b7578367271", "1b4f7bcb87bdc4e0", "505684a747ce7471",
                                "a39fc6c3089b86d0", "dc5175209a1084e3", "e78ca28ccc0ffbe1", "fa1a4b081e62a371"}),
    "_to_global": frozenset({"3853e1795fa44596", "c2df8f1f5c1c31a1", "7a0bb0760cc2ece9", "4c58c3b565fd3488",
                             "0fb52b2bbedf92bd"}),
}
# `_shard_mapped` with "processes" as earlier versions wrote it (each process's devices grouped by
# hand, before `jax.local_devices(process_index=p)`; with "devices", the process rows chosen over
# the given devices): by the hash of its text, its other options, so that a module holding it is
# written anew taking the same ones.
_OLDER_PROCESSES_VARIANTS = {
    "44e4054517fafe74": "", "d3693350119dee66": "axes", "3e23f5b850aea06f": "devices",
    "3213635a8aad8b09": "axes devices", "8dfb2557a0be0a9d": "nests", "aade187b7db66999": "axes nests",
    "e83476cccb2b9082": "devices nests", "e4f948e0619f35d8": "axes devices nests", "02962a45f5801571": "static",
    "280ed4126483249c": "axes static", "5e28b1ccb4a64a3c": "devices static", "f20681e4913c5b4e": "axes devices static",
    "2bd8ef2967289a2a": "nests static", "5c543f34a011667d": "axes nests static",
    "593810cd3db7fe3d": "devices nests static", "a27136afbe37062c": "axes devices nests static",
    # (and with "devices" as the version before devices= was taken in multi-process programs wrote it)
    "cb43f7665d323fcf": "devices", "e42a46959b9fc642": "axes devices", "6c2775df6ba3322d": "devices nests",
    "2d6be86cf2736ce9": "devices static", "859cf9dbd2f00c8e": "axes devices nests",
    "2f4d405715a34d99": "axes devices static", "689dd54bcf2e3046": "devices nests static",
    "11a0f143af149d50": "axes devices nests static",
}
_PRELUDE_IMPORTS = re.compile(r"(import (functools|types|jax|jax\.numpy as jnp|numpy as np)"
                              r"|from (jax\.sharding|jax\.experimental) import [\w ,]+)")


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:16]


def _shard_mapped_features(chunk: str) -> frozenset[str] | None:
    """The options of ``chunk``, a `_shard_mapped` as this version or the previous one wrote it
    in a shared module; None: neither did."""
    held = helper_features(chunk, SHARD_MAPPED)
    older = _OLDER_PROCESSES_VARIANTS.get(_text_hash(chunk))
    return held if held is not None or older is None else frozenset({"processes", *older.split()})


def helpers_in(text: str) -> frozenset[str] | None:
    """The helpers a shared module holds, when ``text`` is what this tool writes for them (its
    imports in the order of the project's isort settings, ``pmap_migrate.shared_module``), now or
    in an earlier version (``is_current`` tells); None: a file of someone else's (or edited
    since), which fixes must not rely on nor change."""
    if not text.startswith(FIRST_LINE):
        return None
    indent = indent_of(text)
    chunks = _chunks(text)
    names = frozenset(name for name in SHARED_HELPERS if f"\ndef {name}(" in text)
    if SHARD_MAPPED in names:  # the options it takes; an earlier version's took every one
        chunk = next((c for c in chunks if c.startswith(f"def {SHARD_MAPPED}(")), "")
        held = _shard_mapped_features(chunk)
        names |= feature_names(ALL_FEATURES if held is None else held)
    if is_current(text, names):
        return names
    # An earlier version's: its docstring, imports that helpers use, and definitions of helpers
    # each as some version wrote it.
    found = set()
    for chunk in chunks:
        if not chunk or _PRELUDE_IMPORTS.fullmatch(chunk):
            continue
        name = chunk[4:].partition("(")[0] if chunk.startswith("def ") else None
        if (name == SHARD_MAPPED and _shard_mapped_features(chunk) is not None) or (
                name == GLOBAL_CALL and chunk == global_call_helper(indent, frozenset()).strip()) or (
                chunk in _multi_process_variants(indent).get(name, ())):
            found.add(name)  # (the shorter forms this version writes)
            continue
        if name not in SHARED_HELPERS or _text_hash(chunk) not in (
                _OLDER_TEXTS.get(name, frozenset()) | {_text_hash(helper_source(name, indent))}):
            return None
        found.add(name)
    if not found or not with_required(found) <= found:
        return None
    found |= names - frozenset(SHARED_HELPERS)  # (the features)
    present, needed = _imports_aside(text), _imports_aside(module_text(found, indent))
    return frozenset(found) if present and needed and needed[1] <= present[1] else None


@lru_cache(maxsize=4)
def _multi_process_variants(indent: str = INDENT) -> dict[str, frozenset[str]]:
    """The texts this version writes for `_global_pmap` and `_to_global` at ``indent``, each set
    of the options they depend on (in_axes, static positions, devices)."""
    options = [frozenset(c) for k in range(4) for c in itertools.combinations(("axes", "static", "devices"), k)]
    return {GLOBAL_PMAP: frozenset(global_pmap_helper(indent, f).strip() for f in options),
            TO_GLOBAL: frozenset(to_global_helper(indent, f).strip() for f in options)}


def _chunks(text: str) -> list[str]:
    """The top-level pieces of a shared module's text after its docstring: import lines, and each
    definition whole."""
    _, _, rest = text[len(FIRST_LINE):].partition('"""')
    chunks: list[str] = []
    for chunk in re.split(r"\n(?=\S)", rest.strip("\n")):
        if chunk.startswith(")") and chunks:  # the end of a signature written one parameter a line
            chunks[-1] += "\n" + chunk
        else:
            chunks.append(chunk)
    return [chunk.strip("\n") for chunk in chunks]


def is_current(text: str, names: frozenset[str]) -> bool:
    """Whether ``text``, a shared module holding the helpers ``names`` (``helpers_in``), is what
    this version writes for them."""
    return bool(names) and _imports_aside(module_text(names, indent_of(text))) == _imports_aside(text)


def _imports_aside(text: str) -> tuple[list[str], frozenset[str]] | None:
    """``text``'s lines with its block of top-level imports as one line, and what that block
    imports, one name per entry (``from m import a`` for each name of ``from m import a, b``)."""
    lines = text.split("\n")
    at = [k for k, line in enumerate(lines) if line.startswith(("import ", "from "))]
    if not at or any(line and not line.startswith(("import ", "from ")) for line in lines[at[0]:at[-1] + 1]):
        return None
    imports = set()
    for line in lines[at[0]:at[-1] + 1]:
        head, _, names = line.partition(" import ")
        if line.startswith("import ") or not names:
            imports.add(line)
        else:
            imports.update(f"{head} import {name.strip()}" for name in names.split(","))
    return [*lines[:at[0]], "<imports>", *lines[at[-1] + 1:]], frozenset(imports)


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


class _Calls(cst.CSTVisitor):
    """The options the calls of the helper ``name`` pass it (``called_features``)."""

    def __init__(self, name: str, passed_on: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.name = name
        self.passed_on = passed_on  # options the helper keeps for itself (`_global_pmap`'s)
        self.features: set[str] = set()
        self.seen: set[int] = set()  # the helper's name where it is called, defined or imported

    def _passed(self, args, positional: int) -> None:
        """``positional``: how many arguments may come by position (f, axis_name) before options."""
        for arg in args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword is None and not arg.star and positional > 0:
                positional -= 1
            elif keyword in HELPER_FEATURES:
                self.features.add(HELPER_FEATURES[keyword])
            elif keyword != "axis_name" and keyword not in self.passed_on:
                # *args, **kwargs, an option by position, one it does not know
                self.features.update(ALL_FEATURES)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value == self.name:
            self.seen.add(id(func))
            self._passed(node.args, 2)  # f, axis_name
        elif (get_full_name_for_node(func) in ("functools.partial", "partial") and node.args
              and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value == self.name):
            self.seen.add(id(node.args[0].value))
            self._passed(node.args[1:], 0)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        if isinstance(node.decorator, cst.Name):
            self.seen.add(id(node.decorator))  # `@_shard_mapped`: f alone

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.seen.add(id(node.name))
        return node.name.value != self.name  # (the helper refers to itself)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.seen.add(id(node.attr))

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self.seen:
            self.features.update(ALL_FEATURES)  # used as a value: it may be given anything


def called_features(node: cst.CSTNode, name: str, shared: str = SHARD_MAPPED) -> frozenset[str]:
    """The options of `_shard_mapped` (pmap_render.HELPER_FEATURES) that the calls of the helper
    bound to ``name`` in ``node`` pass it; every one where the helper is used otherwise (passed as
    a value, given options it does not know or by position). ``shared``: which helper ``name`` is,
    `_shard_mapped` or `_global_pmap` (which passes its options on, with ``processes=True``)."""
    if shared == GLOBAL_PMAP:
        calls = _Calls(name, frozenset({"local", "donate_argnums"}))
        node.visit(calls)
        return frozenset(calls.features | {"processes"})
    calls = _Calls(name)
    node.visit(calls)
    return frozenset(calls.features)


def fitted_helper(module: cst.Module, name: str, variant) -> cst.Module:
    """``module`` with its definition of the compact form's helper ``name`` (this tool's, of some
    features) replaced by ``variant(features)``: the one that takes the options its calls pass."""
    for k, statement in enumerate(module.body):
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            held = helper_features(module.code_for_node(statement), name)
            needed = called_features(module, name)
            if held is None or held == needed:
                return module
            new = variant(needed)[0].with_changes(leading_lines=statement.leading_lines)
            return module.with_changes(body=(*module.body[:k], new, *module.body[k + 1:]))
    return module
