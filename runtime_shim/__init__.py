"""Legacy-compatible ``jax.pmap`` built on ``jax.jit(jax.shard_map)``.

For code that cannot be rewritten: ``from runtime_shim import pmap``, or
``runtime_shim.install()`` to replace ``jax.pmap`` process-wide, or
``python -m runtime_shim script.py``. Depends on jax only; importing it queries no device.
"""

from runtime_shim._install import install, installed, uninstall
from runtime_shim._pmap import pmap
from runtime_shim._transfer import device_put_replicated, device_put_sharded, unreplicate

__all__ = [
    "device_put_replicated",
    "device_put_sharded",
    "install",
    "installed",
    "pmap",
    "uninstall",
    "unreplicate",
]
