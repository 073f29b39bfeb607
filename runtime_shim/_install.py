"""Process-wide replacement of ``jax.pmap`` and the removed transfer helpers."""

from __future__ import annotations

import threading

import jax

from runtime_shim._pmap import pmap
from runtime_shim._transfer import device_put_replicated, device_put_sharded

_REPLACEMENTS = {
    "pmap": pmap,
    "device_put_replicated": device_put_replicated,
    "device_put_sharded": device_put_sharded,
}
# Legacy programs pinned the old pmap with this flag; jax 0.10 removed it and rejects it.
_REMOVED_FLAG = "jax_pmap_shmap_merge"
_ABSENT = object()
_saved: dict = {}
_lock = threading.Lock()


def install() -> None:
    """Make ``jax.pmap`` (and ``jax.device_put_replicated`` / ``_sharded``) the shim's.

    Affects every later ``jax.pmap(...)`` and ``from jax import pmap``; names imported
    before the call keep what they were bound to. On jax versions without the
    ``jax_pmap_shmap_merge`` flag, ``jax.config.update("jax_pmap_shmap_merge", ...)``
    becomes a no-op instead of an error: with the shim, pmap is legacy either way.
    Idempotent.
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


def _accepting_removed_flag(update):
    def config_update(name, value):
        if name != _REMOVED_FLAG:
            update(name, value)

    return config_update


def uninstall() -> None:
    """Undo :func:`install`. Idempotent."""
    with _lock:
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
