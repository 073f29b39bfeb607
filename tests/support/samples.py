"""Python sources for tests that compare our traversal and positions with libcst's on all of it:
the fixtures, the project's own modules, every rule example and syntax the fixtures may lack."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from pmap_migrate.rules import all_rules

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for d in ("fixtures/lint", "fixtures/fix", "fixtures/programs", "fixtures/programs_api",
                           "fixtures/programs_idiomatic", "fixtures/programs_multiprocess", "fixtures/programs_flax",
                           "fixtures/example", "codemod", "rules", "runtime_shim")
               for p in (ROOT / d).glob("*.py"))
EXAMPLES = [ex.code for rule in all_rules() for ex in (*rule.VALID, *rule.INVALID)]

# Syntax the fixtures may lack: every shape of libcst's node walks and code generation.
SYNTAX = [
    "from . import *\nfrom .. a import (b as c, d,)\nimport x.y as z\n",
    "f'{a!r:>{width}} {b=} {c:{d}.{e}}' f\"{x}\" 'plain'\n",
    "match p:\n    case [1, *rest] | {'k': v, **kw} if v: pass\n    case Point(x=0, y=_) as pt: pass\n"
    "    case None | True | -1 | 1+2j: pass\n",
    "async def f(a, /, b: int = 1, *args, c, d=2, **kw) -> 'T':\n    async with a as b, c:\n"
    "        async for x in y: await z\n    yield from w\n    return (yield)\n",
    "@dec(1)\n@other . attr\nclass C(B, metaclass=M):\n    x: int = 1; y = lambda a, *b, **c: a\n"
    "    def m(self): global g; nonlocal_ = [i for i in r if i for j in i]; return {k: v for k, v in d}\n",
    "try:\n    pass\nexcept (A, B) as e:\n    raise C from e\nelse:\n    del a[1:2, ::3], b.c\nfinally:\n"
    "    assert x, 'm'\nwhile a if b else c: break\nelse: continue\nwith (open(a) as f, open(b)): x @= y ** -z\n",
    "x = not a and b or c in d is not e < f <= g\ny = {*a, 1}, (*b,), [~c], {**d}\nprint(*a, sep='', **k)\n"
    "z = a[...] ; q = 1_000.5e-3 # comment\n\\\n# trailing\n",
    "if a:\r\n\tx = '''multi\r\nline'''\r\n\ty = (1,\r\n\t     2)\r\nelse:\r\n\tpass\r\n",  # CRLF, tabs
    "def f():\n    return 1",  # no trailing newline
    "",
    "# only a comment",
    "\ufeffx = 'é'  # ünïcode\nλ = x\n",
]
if sys.version_info >= (3, 12):
    SYNTAX.append("type A[T: int, *Ts, **P] = list[T]\ndef f[T = int](x: T) -> T: ...\n")


def samples() -> list[tuple[str, str]]:
    return ([(p.name, p.read_text()) for p in FILES] + [(f"example {i}", c) for i, c in enumerate(EXAMPLES)]
            + [(f"syntax {i}", c) for i, c in enumerate(SYNTAX)])


def parsed_samples() -> Iterator[tuple[str, cst.Module]]:
    for name, text in samples():
        try:
            yield name, cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue
