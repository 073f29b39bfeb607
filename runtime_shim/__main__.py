"""``python -m runtime_shim SCRIPT [ARGS...]`` / ``python -m runtime_shim -m MODULE [ARGS...]``.

Runs the program as ``__main__`` with the shim installed, the way ``python -m coverage run``
does: ``sys.argv`` and ``sys.path[0]`` are what they would be without the wrapper.
"""

from __future__ import annotations

import os
import runpy
import sys

from runtime_shim import install

USAGE = """usage: python -m runtime_shim SCRIPT [ARGS...]
       python -m runtime_shim -m MODULE [ARGS...]

Run a legacy-pmap program with jax.pmap, jax.device_put_replicated and
jax.device_put_sharded replaced by runtime_shim's legacy-compatible versions."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "-m" and len(argv) < 2:
        print("runtime_shim: -m needs a module name\n\n" + USAGE, file=sys.stderr)
        return 2

    install()
    if argv[0] == "-m":
        module, rest = argv[1], argv[2:]
        sys.argv = [module, *rest]  # run_module puts the module's path in argv[0]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = argv[0]
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
