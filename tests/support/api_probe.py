"""Which dotted names an installed jax has, asked of any interpreter in one subprocess.

Run as a script (``python api_probe.py``) it reads a JSON request on stdin and writes a JSON answer
on stdout, so the same probe checks the test interpreter's jax and the cached venvs' (legacy 0.7.2,
newest). It imports only the standard library besides jax, and nothing from this repository.

Request: ``{"names": [...], "signatures": [...], "identical": [[old, new], ...], "wraps": [[old, new],
...]}``. Answer: ``{"version": "0.10.2", "names": {name: true|false}, "signatures": {name: [parameter,
...] | null}, "identical": {old: true|false|null}, "wraps": {old: true|false|null}}`` (null: one of the
two does not exist; ``wraps``: ``new.__wrapped__`` is ``old``, a ``functools.wraps`` wrapper).
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import warnings
from typing import Any

_MISSING = object()


def resolve(name: str) -> Any:
    """The object ``name`` denotes, importing submodules on the way; ``_MISSING`` if it does not exist.

    A name exists when ``import``/``getattr`` succeed (a deprecation warning still counts as existing);
    AttributeError or ImportError anywhere on the path means it is gone."""
    parts = name.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return _MISSING
    prefix = parts[0]
    for part in parts[1:]:
        prefix = f"{prefix}.{part}"
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        if not inspect.ismodule(obj):
            return _MISSING
        try:
            obj = importlib.import_module(prefix)
        except ImportError:
            return _MISSING
    return obj


def exists(name: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return resolve(name) is not _MISSING


def parameters(name: str) -> list[str] | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = resolve(name)
    if obj is _MISSING:
        return None
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return None


def identical(old: str, new: str) -> bool | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = resolve(old), resolve(new)
    if a is _MISSING or b is _MISSING:
        return None
    return a is b


def wraps(old: str, new: str) -> bool | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = resolve(old), resolve(new)
    if a is _MISSING or b is _MISSING:
        return None
    return getattr(b, "__wrapped__", None) is a


def answer(request: dict) -> dict:
    import jax

    return {
        "version": jax.__version__,
        "names": {n: exists(n) for n in request.get("names", ())},
        "signatures": {n: parameters(n) for n in request.get("signatures", ())},
        "identical": {old: identical(old, new) for old, new in request.get("identical", ())},
        "wraps": {old: wraps(old, new) for old, new in request.get("wraps", ())},
    }


def main() -> None:
    json.dump(answer(json.load(sys.stdin)), sys.stdout)


if __name__ == "__main__":
    main()
