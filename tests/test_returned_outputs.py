"""Functions that return pmap outputs or per-device stacks (issue 26): `def run_step(x): return
p_double(x)`, a tuple of a pmap's outputs, a `jax.device_put_replicated` stack. A row read from
what they return (`run_step(x)[0]`) is the same cross-device gather as a row of the pmap's output,
in the module and in its importers (`from .steps import run_step`, `steps.run_step(x)[0]`), which
need not spell `pmap`. The index keeps such functions (`ReturnsFact`); a warm run notices when one
stops returning an output; the findings stand after the defining module's fix (its rewrite returns
the same stacks).

`fixtures/projects/returned_outputs/` is a runnable package: legacy jax 0.7.2 vs its fixed form on
the newest jax."""

from __future__ import annotations

import shutil
from pathlib import Path

from pmap_migrate.engine import lint_bytes
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.analysis.facts import ReturnsFact, module_facts
from tests.support.projects import findings, package_stdout, run_cli

PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "returned_outputs"
MAIN = ["ro/main.py:10:12: PM201", "ro/main.py:15:12: PM201", "ro/main.py:24:12: PM201",
        "ro/main.py:28:12: PM202", "ro/main.py:33:12: PM201"]


def _codes(source: str) -> list[tuple[int, str]]:
    result = lint_bytes(source.encode(), "m.py", all_rules())
    return sorted((d.line, d.code) for d in result.diagnostics if d.code in ("PM201", "PM202"))


# ------------------------------------------------------------------ the facts
STEPS = '''import jax
from flax import jax_utils


def _f(x):
    return x


p = jax.pmap(_f)
p_tuple = jax.pmap(lambda x: (x, x))
p_unstacked = jax.pmap(_f, out_axes=None)


def plain(x):
    return p(x)


def named(x):
    out = p(x)
    if x is None:
        out = p(x + 1)
    return out


def pair(x):
    a, b = p(x)
    return a, float(b.sum())


def inline(x):
    return jax.pmap(_f)(x)


def chained(x):
    return plain(x)


def replicated(tree):
    return jax_utils.replicate(tree)


def maybe_host(x):
    out = p(x)
    out = jax.device_get(out)
    return out


def parameter(out):
    return out


def unstacked(x):
    return p_unstacked(x)


def generator(x):
    yield p(x)


def bare(x):
    if x is None:
        return
    return p(x)


@jax.jit
def decorated(x):
    return p(x)
'''


def test_the_facts_keep_the_functions_whose_every_return_is_a_stack():
    facts = module_facts(STEPS, "pkg.steps", False)
    assert facts.returning == {
        "plain": ReturnsFact("pkg.steps", "plain", ("pmap",)),
        "named": ReturnsFact("pkg.steps", "named", ("pmap",)),
        "pair": ReturnsFact("pkg.steps", "pair", ("pmap",), (("pmap",), ()), True),
        "inline": ReturnsFact("pkg.steps", "inline", ("pmap",)),
        "chained": ReturnsFact("pkg.steps", "chained", ("pmap",)),
        "replicated": ReturnsFact("pkg.steps", "replicated", ("replicated",)),
    }


def test_a_module_without_pmap_returning_a_replicated_stack_has_the_fact():
    facts = module_facts("import jax\n\n\ndef rep(t):\n    return jax.device_put_replicated(t, jax.devices())\n",
                         "pkg.utils", False)
    assert facts.returning == {"rep": ReturnsFact("pkg.utils", "rep", ("replicated",))}


def test_the_facts_of_a_function_returning_a_tuple_output_say_so():
    facts = module_facts(STEPS + "\n\ndef both(x):\n    return p_tuple(x)\n", "pkg.steps", False)
    assert facts.returning["both"] == ReturnsFact("pkg.steps", "both", ("pmap",), sequence=True)


# ------------------------------------------------------------------ one module
def test_in_one_module_a_row_of_what_a_function_returns_is_reported():
    source = STEPS + (
        "\n\nprint(plain(x)[0], named(x)[1], chained(x)[0], inline(x)[0], replicated(t)[0])\n"
        "a, host = pair(x)\nprint(a[0], host)\nprint(pair(x)[0])\nwhole = pair(x)\nprint(whole[0][0])\n"
        "print(maybe_host(x)[0], parameter(x)[0], unstacked(x)[0], bare(x)[0], decorated(x)[0])\n"
        "print(jax.tree.map(lambda v: v[0], plain(x)))\n")
    lines = {n: line for n, line in enumerate(source.splitlines(), 1)}
    first = next(n for n, line in lines.items() if line.startswith("print(plain"))
    assert _codes(source) == [
        (first, "PM201"), (first, "PM201"), (first, "PM201"), (first, "PM201"), (first, "PM201"),
        (first + 2, "PM201"),  # a[0]; not `host`, nor `pair(x)[0]` (an element of the tuple)
        (first + 5, "PM201"),  # whole[0][0]
        (first + 7, "PM202"),
    ]


def test_a_row_of_what_a_function_returns_has_no_fix():
    """Its pmap's mesh and processes are not seen where the row is read: reported, not rewritten."""
    source = STEPS + "\n\nprint(plain(x)[0])\nprint(jax.tree.map(lambda v: v[0], plain(x)))\n"
    result = lint_bytes(source.encode(), "m.py", all_rules())
    rows = [d for d in result.diagnostics if d.code in ("PM201", "PM202")]
    assert len(rows) == 2 and all(d.fix is None for d in rows), rows


# ------------------------------------------------------------------ across modules
def test_check_reports_the_rows_read_in_importers_that_never_spell_pmap():
    assert [f for f in findings(PACKAGE) if f.startswith("ro/main.py")] == MAIN


def test_a_warm_run_notices_a_function_that_stops_returning_an_output(tmp_path: Path):
    root = shutil.copytree(PACKAGE, tmp_path / "project")
    assert [f for f in findings(root, ".") if f.startswith("ro/main.py")] == MAIN
    steps = root / "ro" / "steps.py"
    text = steps.read_text()
    steps.write_text(text.replace("    return p_double(x)\n", "    return jax.device_get(p_double(x))\n"))
    # `run_step` returns a host array now: its rows (and `run_logged`'s) are no gather
    assert [f for f in findings(root, ".") if f.startswith("ro/main.py")] == [
        "ro/main.py:15:12: PM201", "ro/main.py:33:12: PM201"]
    steps.write_text(text)
    assert [f for f in findings(root, ".") if f.startswith("ro/main.py")] == MAIN


def test_the_rows_stay_reported_after_the_defining_modules_fix(tmp_path: Path):
    """`fix` of the pmaps' module (and of the replicating one) writes stacks all the same; a row of
    them is still a gather on the new jax."""
    root = shutil.copytree(PACKAGE, tmp_path / "project")
    assert run_cli(root, "fix", "--no-cache", "ro/steps.py", "ro/utils.py").exit_code == 0
    assert "jax.pmap" not in (root / "ro" / "steps.py").read_text()
    assert "device_put_replicated(" not in (root / "ro" / "utils.py").read_text().split('"""')[0]
    assert findings(root) == MAIN


# ------------------------------------------------------------------ differential
def test_the_fixed_package_prints_on_the_newest_jax_what_the_legacy_package_printed(tmp_path: Path):
    from tests.support import jaxenv

    legacy = shutil.copytree(PACKAGE, tmp_path / "legacy")
    fixed = shutil.copytree(PACKAGE, tmp_path / "fixed")
    result = run_cli(fixed, "fix", "--no-cache", ".")
    assert "Found 5 legacy patterns in 1 file." in result.output, result.output  # main.py's, no fix
    assert "runtime_shim" not in "".join(p.read_text() for p in (fixed / "ro").glob("*.py"))
    reference = package_stdout(jaxenv.LEGACY, legacy)
    assert reference.count("\n") == 7, reference
    for env in (jaxenv.NEWEST, jaxenv.LEGACY):
        assert package_stdout(env, fixed) == reference, env.name
