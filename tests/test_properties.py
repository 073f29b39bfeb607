"""Property-based tests of `fix` (hypothesis): programs with pmap sites in many spellings, placed
inside random valid code, with random indentation, line endings, BOM and final newline.

For every generated program: the output compiles, a second fix changes nothing, every line of
the surrounding code is still there byte for byte and in order, suppressed sites are untouched.
A few generated programs that can run are also run: under the legacy pmap (jax 0.7.2) before the
fix and under the current jax after it, and must print the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

RULES = all_rules()

# A program is a list of lines, each tagged: "keep" lines are the surrounding code, which `fix`
# must leave byte for byte; "site" lines belong to a pmap site (rewritten); "import" lines may be
# completed or pruned (an import that only the pmap used goes away).
KEEP, SITE, IMPORT = "keep", "site", "import"


@dataclass(frozen=True)
class Line:
    depth: int
    text: str
    tag: str


# --------------------------------------------------------------------------- surrounding code
_counter = st.integers(min_value=0, max_value=10**6)


@st.composite
def filler(draw, depth: int, k: int) -> list[Line]:
    """A few statements of ordinary code (names made unique with ``k``)."""
    kind = draw(st.sampled_from([
        "assign", "comment", "blank", "string", "function", "class", "if", "for", "try", "with_match",
        "comprehension", "fstring", "decorated", "docstring", "continuation", "lambda", "while",
    ]))
    n = draw(_counter)
    keep = lambda d, text: Line(depth + d, text, KEEP)  # noqa: E731
    if kind == "assign":
        return [keep(0, f"v_{k} = {n}")]
    if kind == "comment":
        return [keep(0, draw(st.sampled_from([f"# note {n}: jax.pmap is legacy", f"# caf\u00e9 {n}", "#", f"# {n}  "])))]
    if kind == "blank":
        return [Line(0, "", KEEP)]
    if kind == "string":
        return [keep(0, f"s_{k} = 'jax.pmap(f) stays a string {n}'")]
    if kind == "function":
        return [keep(0, f"def f_{k}(a, b={n}):"), keep(1, f"c_{k} = a + b"), keep(1, f"return c_{k}")]
    if kind == "class":
        return [keep(0, f"class C_{k}:"), keep(1, f"attr = {n}"), keep(0, ""),
                keep(1, "def method(self, x):"), keep(2, "return x")]
    if kind == "if":
        return [keep(0, f"if {n} % 2:"), keep(1, f"w_{k} = {n}"), keep(0, "else:"), keep(1, f"w_{k} = -{n}")]
    if kind == "for":
        return [keep(0, f"for i_{k} in range(2):"), keep(1, f"acc_{k} = i_{k} * {n}")]
    if kind == "while":
        return [keep(0, f"n_{k} = 0"), keep(0, f"while n_{k} < 2:"), keep(1, f"n_{k} += 1")]
    if kind == "try":
        return [keep(0, "try:"), keep(1, f"t_{k} = int('{n}')"), keep(0, "except (ValueError, TypeError):"),
                keep(1, f"t_{k} = None"), keep(0, "finally:"), keep(1, "pass")]
    if kind == "with_match":
        return [keep(0, f"match {n} % 3:"), keep(1, "case 0:"), keep(2, f"m_{k} = 'zero'"),
                keep(1, "case _:"), keep(2, f"m_{k} = 'other'")]
    if kind == "comprehension":
        return [keep(0, f"sq_{k} = {{j: [i * j for i in range(3) if i] for j in range({n % 5})}}")]
    if kind == "fstring":
        return [keep(0, f"label_{k} = f\"{{{n}!r:>8}} {{'pmap'}}\"")]
    if kind == "decorated":
        return [keep(0, "@functools.lru_cache(maxsize=None)"), keep(0, f"def cached_{k}(x):"), keep(1, "return x")]
    if kind == "docstring":
        return [keep(0, f"def documented_{k}():"), keep(1, '"""Calls jax.pmap(f) in the old days.'),
                keep(0, ""), keep(1, 'Indented text."""'), keep(1, "return None")]
    if kind == "continuation":
        return [keep(0, f"total_{k} = ({n} +"), keep(2, f"{n % 7})"), keep(0, f"other_{k} = 1 + \\"), keep(1, "2")]
    return [keep(0, f"fn_{k} = lambda a, *rest, **kw: (a, rest, kw)")]


# --------------------------------------------------------------------------- pmap sites
SPELLINGS = [
    "decorator", "decorator_partial", "assigned_lambda", "assigned_function", "in_axes", "out_axes_none",
    "static", "donate", "devices", "from_import", "alias_module", "local_alias", "inline_call",
    "method", "nested", "as_value", "noqa", "async_decorator", "defaults", "partial_of_function",
]


def site(spelling: str, k: int, depth: int) -> list[Line]:
    """The lines of one pmap site in ``spelling``; ``k`` makes its names unique."""
    s = lambda d, text: Line(depth + d, text, SITE)  # noqa: E731
    keep = lambda d, text: Line(depth + d, text, KEEP)  # noqa: E731
    name = f"step_{k}"
    if spelling == "decorator":
        return [s(0, "@jax.pmap"), s(0, f"def {name}(x):"), s(1, "return x * 2")]
    if spelling == "decorator_partial":
        return [s(0, '@functools.partial(jax.pmap, axis_name="batch")'), s(0, f"def {name}(x, y):"),
                s(1, 'return jax.lax.psum(x * y, "batch")')]
    if spelling == "assigned_lambda":
        return [s(0, f"{name} = jax.pmap(lambda x: x + 1)")]
    if spelling == "assigned_function":
        return [keep(0, f"def body_{k}(x, y):"), keep(1, "return x - y"), s(0, f"{name} = jax.pmap(body_{k})")]
    if spelling == "in_axes":
        return [keep(0, f"def body_{k}(x, w):"), keep(1, "return x * w"),
                s(0, f"{name} = jax.pmap(body_{k}, in_axes=(0, None))")]
    if spelling == "out_axes_none":
        return [s(0, f'{name} = jax.pmap(lambda x: jax.lax.pmean(x, "i"), axis_name="i", out_axes=None)')]
    if spelling == "static":
        return [s(0, "@functools.partial(jax.pmap, static_broadcasted_argnums=(1,))"), s(0, f"def {name}(x, k):"),
                s(1, "return x * k")]
    if spelling == "donate":
        return [s(0, f"{name} = jax.pmap(lambda x: x * 2, donate_argnums=0)")]
    if spelling == "devices":
        return [s(0, f"{name} = jax.pmap(lambda x: x, devices=jax.devices()[:2])")]
    if spelling == "from_import":
        return [s(0, f"{name} = pmap(lambda x: -x)")]
    if spelling == "alias_module":
        return [s(0, f"{name} = J.pmap(lambda x: x * x)")]
    if spelling == "local_alias":
        return [s(0, f"mapper_{k} = jax.pmap"), s(0, f"{name} = mapper_{k}(lambda x: x + 3)")]
    if spelling == "inline_call":
        return [keep(0, f"def run_{k}(xs):"), s(1, "return jax.pmap(lambda v: v * 3)(xs)")]
    if spelling == "method":
        return [keep(0, f"class Trainer_{k}:"), keep(1, "def __init__(self):"),
                s(2, "self.step = jax.pmap(self._step)"), keep(0, ""),
                keep(1, "def _step(self, x):"), keep(2, "return x + 1")]
    if spelling == "nested":
        return [s(0, f'{name} = jax.pmap(jax.pmap(lambda x: x + 1, axis_name="j"), axis_name="i")')]
    if spelling == "as_value":
        return [s(0, f"mappers_{k} = [jax.pmap, jax.vmap]")]
    if spelling == "noqa":  # suppressed: must not change at all
        return [keep(0, f"{name} = jax.pmap(lambda x: x)  # noqa: PM101")]
    if spelling == "async_decorator":
        return [s(0, "@jax.pmap"), s(0, f"async def {name}(x):"), s(1, "return x")]
    if spelling == "defaults":
        return [s(0, "@jax.pmap"), s(0, f"def {name}(x, scale=2):"), s(1, "return x * scale")]
    assert spelling == "partial_of_function"
    return [keep(0, f"def body_{k}(x, y):"), keep(1, "return x + y"),
            s(0, f"{name} = jax.pmap(functools.partial(body_{k}, y=1))")]


HEADER = [Line(0, "import functools", IMPORT), Line(0, "", IMPORT), Line(0, "import jax", IMPORT),
          Line(0, "import jax as J", IMPORT), Line(0, "from jax import pmap", IMPORT), Line(0, "", KEEP)]


@st.composite
def programs(draw) -> tuple[bytes, list[Line], str, str, list[str]]:
    """(source bytes, lines, newline, indentation unit, site spellings): filler and sites at the top level, inside `if` blocks and
    inside functions; random indentation unit, line endings, BOM and final newline."""
    lines: list[Line] = list(HEADER)
    spellings: list[str] = []
    k = 0
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        k += 1
        where = draw(st.sampled_from(["top", "top", "if", "function"]))
        depth = 0
        if where == "if":
            lines.append(Line(0, f"if flag_{k} := True:", KEEP))
            depth = 1
        elif where == "function":
            lines.append(Line(0, f"def outer_{k}():", KEEP))
            depth = 1
        body: list[Line] = []
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            k += 1
            body += draw(filler(depth, k))
        if draw(st.booleans()):
            k += 1
            spelling = draw(st.sampled_from(SPELLINGS))
            spellings.append(f"{spelling} ({where})")
            body += site(spelling, k, depth)
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            k += 1
            body += draw(filler(depth, k))
        if depth and not any(line.depth == depth and line.text and not line.text.startswith("#") for line in body):
            body.append(Line(depth, "pass", KEEP))
        lines += body
        if where == "function":
            lines.append(Line(0, "", KEEP))
    indent = draw(st.sampled_from(["    ", "  ", "\t"]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    rendered = [(indent * line.depth + line.text if line.text else "") + newline for line in lines]
    text = "".join(rendered)
    if not draw(st.booleans()):
        text = text[: -len(newline)]  # no final newline
    data = text.encode("utf-8")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data, lines, newline, indent, spellings


def _rendered_keep_lines(lines: list[Line], indent: str, newline: str) -> list[bytes]:
    return [((indent * line.depth + line.text) if line.text else "").encode() for line in lines if line.tag == KEEP]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_fix_output_compiles_is_a_fixpoint_and_keeps_the_code_around(program):
    data, lines, newline, indent, spellings = program
    for spelling in spellings:
        event(f"site: {spelling}")
    compile(data, "generated.py", "exec", dont_inherit=True)  # the generator makes valid code
    outcome = fix_bytes(data, "generated.py", RULES, unsafe=True)
    assert outcome.error is None, outcome.error
    fixed = outcome.fixed if outcome.changed else data
    compile(fixed, "fixed.py", "exec", dont_inherit=True)

    again = fix_bytes(fixed, "fixed.py", RULES, unsafe=True)
    assert again.error is None and not again.changed, "the second fix changed the file:\n" + _diff(fixed, again.fixed)

    assert fixed.startswith(b"\xef\xbb\xbf") == data.startswith(b"\xef\xbb\xbf")
    body = fixed.removeprefix(b"\xef\xbb\xbf")
    after = body.split(newline.encode())
    if newline == "\n":
        assert b"\r" not in body
    else:
        assert b"\n" not in body.replace(b"\r\n", b"")
    position = 0
    for line in _rendered_keep_lines(lines, indent, newline):
        while position < len(after) and after[position] != line:
            position += 1
        assert position < len(after), f"{line!r} was changed or lost:\n{fixed.decode('utf-8-sig')}"
        position += 1
    assert fixed.endswith(newline.encode()) == data.endswith(newline.encode())
    if any(line.tag == SITE for line in lines):
        assert outcome.changed, "no site was fixed"
    for d in outcome.applied:
        event(f"fixed: {d.code} {'shimmed' if d.fix and d.fix.shimmed else 'plain JAX'}")
    for d in again.remaining:
        event(f"left: {d.code}")


def _diff(a: bytes, b: bytes | None) -> str:
    import difflib

    return "".join(difflib.unified_diff(a.decode("utf-8-sig").splitlines(True),
                                        (b or a).decode("utf-8-sig").splitlines(True)))


# --------------------------------------------------------------------------- runnable programs
RUNNABLE_SITES = {
    # spelling: (definition lines at module level, expression printed by main() given `x` (n, 3))
    "decorator": (["@jax.pmap", "def {name}(x):", "    return x * 2 + 1"], "{name}(x)"),
    "decorator_partial": (['@functools.partial(jax.pmap, axis_name="i")', "def {name}(x):",
                           '    return x - jax.lax.pmean(x, "i")'], "{name}(x)"),
    "assigned_lambda": (["{name} = jax.pmap(lambda x: jnp.sin(x))"], "{name}(x)"),
    "assigned_function": (["def body_{k}(x, y):", "    return x * y", "{name} = jax.pmap(body_{k})"], "{name}(x, x)"),
    "in_axes": (["def body_{k}(x, w):", "    return x * w", "{name} = jax.pmap(body_{k}, in_axes=(0, None))"],
                "{name}(x, 2.5)"),
    "out_axes_none": (['{name} = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i", out_axes=None)'], "{name}(x)"),
    "static": (["@functools.partial(jax.pmap, static_broadcasted_argnums=(1,))", "def {name}(x, k):",
                "    return x * k"], "{name}(x, 3)"),
    "inline_call": (["def {name}(xs):", "    return jax.pmap(lambda v: v * 3)(xs)"], "{name}(x)"),
    "local_alias": (["mapper_{k} = jax.pmap", "{name} = mapper_{k}(lambda x: x + 3)"], "{name}(x)"),
    "as_value": (["mappers_{k} = [jax.pmap]", "{name} = mappers_{k}[0](lambda x: x - 2)"], "{name}(x)"),
    "axis_index": (['{name} = jax.pmap(lambda x: x + jax.lax.axis_index("d"), axis_name="d")'], "{name}(x)"),
}


@st.composite
def runnable_programs(draw) -> str:
    n = draw(st.sampled_from([1, 2, 4, 8]))
    lines = ["import functools", "", "import jax", "import jax.numpy as jnp", "import numpy as np", ""]
    calls = []
    spellings = draw(st.lists(st.sampled_from(sorted(RUNNABLE_SITES)), min_size=1, max_size=4))
    for k, spelling in enumerate(spellings):
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            lines += ["    " * line.depth + line.text for line in draw(filler(0, 1000 + k * 10 + len(lines)))]
        definition, call = RUNNABLE_SITES[spelling]
        name = f"step_{k}"
        lines += [text.format(name=name, k=k) for text in definition] + [""]
        calls.append(call.format(name=name))
    lines += ["", "def main():", f"    x = np.arange({n * 3}, dtype=np.float32).reshape({n}, 3) / 7"]
    lines += [f"    print({i}, np.asarray({call}).round(4).tolist())" for i, call in enumerate(calls)]
    lines += ["", "", 'if __name__ == "__main__":', "    main()", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def legacy_env():
    from tests.support.jaxenv import LEGACY, EnvUnavailable, python_for

    try:
        python_for(LEGACY)
    except EnvUnavailable as error:
        pytest.skip(str(error))
    return LEGACY


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(runnable_programs(), min_size=3, max_size=3))
def test_generated_programs_compute_the_same_after_the_fix(legacy_env, tmp_path_factory, sources):
    """Legacy pmap (jax 0.7.2) before the fix, the current jax after it: the same output."""
    from tests.support import differential as diff

    root = tmp_path_factory.mktemp("generated")
    originals, rewritten = [], []
    for i, source in enumerate(sources):
        original = root / f"program_{i}.py"
        original.write_text(source)
        outcome = fix_bytes(source.encode(), original.name, RULES, unsafe=True)
        assert outcome.error is None and outcome.changed, outcome.error
        target = root / "fixed" / original.name
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(outcome.fixed)
        originals.append(original)
        rewritten.append(target)
    before = diff.run_batch(legacy_env, originals)
    after = diff.run_batch(None, rewritten)  # the interpreter running the tests: the current jax
    for original, target in zip(originals, rewritten):
        expected, actual = before.programs[original.name], after.programs[target.name]
        diff.assert_same_output(expected, actual, f"jax {before.jax_version} (legacy pmap)",
                                f"jax {after.jax_version} (fixed)", exact=False)
