"""One JSON line per check, so that runs on different jax versions can be compared.

Programs in this directory are ordinary legacy-pmap programs; they print what they
computed through ``show`` / ``show_error`` and never assert anything themselves.
"""

from __future__ import annotations

import json

import jax
import numpy as np


def _leaf(x):
    if isinstance(x, (bool, int, float, str, type(None))):
        return {"value": x}
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.extended):
        x = jax.random.key_data(x)
    a = np.asarray(x)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "value": a.tolist()}


def show(check: str, value) -> None:
    """Print every leaf of ``value`` (a pytree) under ``check``."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(value)
    for path, leaf in leaves:
        print(json.dumps({"check": check + jax.tree_util.keystr(path), **_leaf(leaf)}),
              flush=True)


def devices_of(x) -> list[int]:
    """Sorted ids of the devices holding ``x``."""
    return sorted(d.id for d in x.devices())


def show_error(check: str, thunk) -> None:
    """Run ``thunk``; print its result, or the type and message of what it raised."""
    try:
        value = thunk()
        jax.block_until_ready(value)
    except Exception as e:  # noqa: BLE001 - the type is what gets compared
        print(json.dumps({"check": check, "error": type(e).__name__,
                          "message": str(e).strip()}), flush=True)
    else:
        show(check, value)

