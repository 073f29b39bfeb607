"""Legacy-compatible ``jax.pmap`` built on ``jax.jit(jax.shard_map)``.

For code that cannot be rewritten: ``from runtime_shim import pmap``, or
``runtime_shim.install()`` to replace ``jax.pmap`` process-wide, or
``python -m runtime_shim script.py``. Depends on jax only; importing it queries no device.

The package's names load with their first use: importing ``runtime_shim.removed_api`` (the table
of removed jax names, which the linter reads) imports no jax.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime_shim._install import install, installed, restored, uninstall
    from runtime_shim._pmap import pmap
    from runtime_shim._transfer import device_put_replicated, device_put_sharded, unreplicate

# Each public name and the module that defines it.
_HOMES = {
    "device_put_replicated": "runtime_shim._transfer",
    "device_put_sharded": "runtime_shim._transfer",
    "install": "runtime_shim._install",
    "installed": "runtime_shim._install",
    "pmap": "runtime_shim._pmap",
    "restored": "runtime_shim._install",
    "uninstall": "runtime_shim._install",
    "unreplicate": "runtime_shim._transfer",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
