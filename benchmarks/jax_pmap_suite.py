"""JAX's legacy pmap suite as a real-library run: `tests/pmap_test.py` of a jax source tree (tag
jax-v0.7.2) prepared so that every test is a `jax.pmap` call site, then `real_suites.py` over it.

    python benchmarks/jax_pmap_suite.py JAX_TREE [--out DIR] [real_suites.py options ...]

The preparation writes ``DIR/tests/pmap_test.py`` (default DIR: ``<suites cache>/jax-pmap_test/src``):
- each ``self.pmap`` (the test classes' property choosing the Python or C++ legacy pmap) is spelled
  ``jax.pmap``, so each test calls ``jax.pmap`` where the fixer sees it;
- each top-level ``from jax.<module> import ...`` (``jax._src`` internals, ``jax.ad_checkpoint``)
  is wrapped in ``try/except ImportError`` binding its names to None: a name that newer jax no
  longer has fails the tests that use it, not the whole file's collection. ``import jax``,
  ``import jax.numpy as jnp`` and ``from jax import ...`` stay as they are (they exist in every
  version, and the fixer must see them as written).
Nothing else changes: no configuration of the jax repository comes along (its pytest settings
turn every warning into an error). `fix` sees the file with ``self.pmap`` spelled ``jax.pmap``
and its imports as written (the wrapping would make them compatibility code, which the fixer
leaves alone); the wrapping is applied to the fixed file afterwards, for the names the fix left.

Then ``real_suites.py DIR --name jax-pmap_test --no-install --no-shim --fixed-shim-run --shim-run
--pip absl-py`` runs (the further options given here are passed on): the tests run against the
installed jax of each venv; ``fixed`` has no shim installed, ``fixed+shim`` is the same fixed file
with the shim importable, and ``shim`` is the unchanged file with ``runtime_shim.install()``.
``--no-shim-run`` / ``--no-fixed-shim-run`` leave those two out; ``--fix-arg=--no-shim`` fixes the
file without the shim fallback (nothing in it imports the shim).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

# run as a script, so benchmarks/ is sys.path[0]
import real_suites

SELF_PMAP = re.compile(r"\bself\.pmap\b(?!_)")
SUITE = "tests/pmap_test.py"
# Stand-ins for what newer jax no longer has. Defined in the prepared file, before its imports.
TOLERANCE = '''
class _Missing:
  """A name this jax does not have: expressions built from it evaluate (so the module still
  defines its classes), anything that needs its value fails the test that does it."""

  def __init__(self, name):
    self._name = name

  def __getattr__(self, attr):
    if attr.startswith("__"):
      raise AttributeError(attr)
    return _Missing(f"{self._name}.{attr}")

  def __call__(self, *args, **kwargs):
    return _Missing(f"{self._name}(*{args!r}, **{kwargs!r})")

  def __repr__(self):
    return f"<missing {self._name}>"

  def __bool__(self):
    raise TypeError(f"{self._name} does not exist in this jax")


class _Tolerant:
  """A module whose missing attributes are _Missing instead of raising AttributeError."""

  def __init__(self, module):
    self._module = module

  def __getattr__(self, attr):
    try:
      return getattr(self._module, attr)
    except AttributeError:
      return _Missing(f"{self._module.__name__}.{attr}")


'''


def prepare(source: str) -> str:
    return tolerate(SELF_PMAP.sub("jax.pmap", source))


def tolerate(source: str) -> str:
    """``source`` with each top-level ``from jax.<module> import`` wrapped (see the docstring)."""
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    wrapped_any = False
    for node in reversed(tree.body):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("jax."):
            continue
        wrapped_any = True
        statement = "".join(lines[node.lineno - 1:node.end_lineno])
        fallbacks = "".join(f"  {a.asname or a.name} = _Missing({f'{node.module}.{a.name}'!r})\n" for a in node.names)
        tolerant = "".join(f"{a.asname or a.name} = _tolerant({a.asname or a.name})\n" for a in node.names)
        lines[node.lineno - 1:node.end_lineno] = [
            "try:\n" + "".join(f"  {ln}" for ln in statement.splitlines(keepends=True))
            + "except ImportError:\n" + fallbacks + tolerant]
    if wrapped_any:
        first = next(n for n in tree.body if isinstance(n, ast.Import)
                     or isinstance(n, ast.ImportFrom) and n.module != "__future__")
        lines[first.lineno - 1:first.lineno - 1] = [
            "import types\n", TOLERANCE,
            "def _tolerant(value):\n  return _Tolerant(value) if isinstance(value, types.ModuleType) else value\n\n\n"]
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=True)
    parser.add_argument("jax_tree", type=Path, help="a jax source tree at tag jax-v0.7.2 (a scratch checkout)")
    parser.add_argument("--out", type=Path, default=real_suites.CACHE / "jax-pmap_test" / "src")
    parser.add_argument("--no-shim-run", action="store_true",
                        help="leave out the run of the unchanged file with runtime_shim.install()")
    parser.add_argument("--no-fixed-shim-run", action="store_true",
                        help="leave out the run of the fixed file with the shim importable (after fix --no-shim)")
    args, rest = parser.parse_known_args(argv)
    original = (args.jax_tree / SUITE).read_text()
    target = args.out / SUITE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(prepare(original))
    print(f"prepared {target} from {args.jax_tree / SUITE}")
    shim_runs = ([] if args.no_fixed_shim_run else ["--fixed-shim-run"]) + ([] if args.no_shim_run else ["--shim-run"])

    def before_fix(copy: Path) -> None:  # the fixer sees the imports as written
        (copy / SUITE).write_text(SELF_PMAP.sub("jax.pmap", original))

    def after_fix(copy: Path) -> None:  # what the fix left of the missing names is tolerated
        (copy / SUITE).write_text(tolerate((copy / SUITE).read_text()))

    return real_suites.main([str(args.out), SUITE, "--name", "jax-pmap_test", "--no-install", "--no-shim",
                             *shim_runs, "--pip", "absl-py", *rest], around_fix=(before_fix, after_fix))


if __name__ == "__main__":
    sys.exit(main())
