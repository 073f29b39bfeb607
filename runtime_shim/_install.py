"""Process-wide replacement of ``jax.pmap`` and the removed transfer helpers, and the removed
names whose replacement is exact put back."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import warnings

import jax

from runtime_shim._pmap import pmap
from runtime_shim._transfer import device_put_replicated, device_put_sharded
from runtime_shim.removed_api import RemovedName, exact_replacements

_REPLACEMENTS = {
    "pmap": pmap,
    "device_put_replicated": device_put_replicated,
    "device_put_sharded": device_put_sharded,
}
# Legacy programs pinned the old pmap with this flag; jax 0.10 removed it and rejects it.
_REMOVED_FLAG = "jax_pmap_shmap_merge"
_ABSENT = object()
_saved: dict = {}
# The removed names put back: (module, attribute), and the modules made importable under an old name.
_restored: list[tuple[object, str]] = []
_aliased: list[str] = []
_lock = threading.Lock()


def install() -> None:
    """Make ``jax.pmap`` (and ``jax.device_put_replicated`` / ``_sharded``) the shim's, and put
    back the removed names whose replacement is exact (``jax.tree_map`` as ``jax.tree.map``).

    Affects every later ``jax.pmap(...)`` and ``from jax import pmap``; names imported
    before the call keep what they were bound to. On jax versions without the
    ``jax_pmap_shmap_merge`` flag, ``jax.config.update("jax_pmap_shmap_merge", ...)``
    becomes a no-op instead of an error: with the shim, pmap is legacy either way.

    The removed names come from the table PM404 reports (``runtime_shim.removed_api``): those
    whose replacement is the same object or a function with the same parameters (the tree
    aliases, ``jax.experimental.PartitionSpec``, ``jax.interpreters.pxla.Mesh``, the moved
    ``optimizers`` / ``stax`` modules, ...). A name the running jax still has is left as it is,
    and so is a name in a module this jax no longer has (``jax.lib.xla_bridge``). Idempotent.
    """
    with _lock:
        if _saved:
            return
        for name, replacement in _REPLACEMENTS.items():
            # vars(): on new jax the removed helpers live behind a module __getattr__
            # that raises; they count as absent and are deleted again by uninstall().
            _saved[name] = vars(jax).get(name, _ABSENT)
            setattr(jax, name, replacement)
        if not hasattr(jax.config, _REMOVED_FLAG):
            _saved["config.update"] = jax.config.update
            jax.config.update = _accepting_removed_flag(jax.config.update)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated modules say so when imported or read
            for entry in exact_replacements():
                _restore(entry)


def restored() -> list[str]:
    """The removed names :func:`install` put back in this process (empty before it)."""
    return sorted(f"{module.__name__}.{name}" for module, name in _restored)


def _restore(entry: RemovedName) -> None:
    """Put back one removed name (under ``_lock``), unless its module is gone, the name is still
    there, or its replacement is not."""
    parent_name, _, name = entry.name.rpartition(".")
    try:
        parent = importlib.import_module(parent_name)
    except ImportError:
        return  # a module this jax no longer has: not rebuilt
    if name in vars(parent) or hasattr(parent, name) or _is_module(entry.name):
        return  # jax still has it: never shadowed
    replacement = _resolve(entry.replacement)
    if replacement is _ABSENT:
        return
    setattr(parent, name, replacement)
    _restored.append((parent, name))
    if isinstance(replacement, type(sys)) and entry.name not in sys.modules:
        sys.modules[entry.name] = replacement  # `import jax.experimental.optimizers` works too
        _aliased.append(entry.name)


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module that is importable (not imported yet, so not an attribute)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _resolve(dotted: str):
    """The object a fully qualified name names: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            value = getattr(value, part, _ABSENT)
            if value is _ABSENT:
                break
        return value
    return _ABSENT


def _accepting_removed_flag(update):
    def config_update(name, value):
        if name != _REMOVED_FLAG:
            update(name, value)

    return config_update


def uninstall() -> None:
    """Undo :func:`install`. Idempotent."""
    with _lock:
        for module, name in reversed(_restored):
            if name in vars(module):
                delattr(module, name)
        for name in _aliased:
            sys.modules.pop(name, None)
        _restored.clear()
        _aliased.clear()
        if "config.update" in _saved:
            del jax.config.update  # the instance attribute; the method shows again
        for name, original in _saved.items():
            if name == "config.update":
                continue
            if original is _ABSENT:
                delattr(jax, name)
            else:
                setattr(jax, name, original)
        _saved.clear()


def installed() -> bool:
    return bool(_saved)
