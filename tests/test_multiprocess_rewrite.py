"""The global-mesh rewrite of the pmaps of multi-process programs (PM501), judged by running them.

Each program of `fixtures/programs_multiprocess/` (2 processes x 4 CPU devices on 127.0.0.1, gloo
collectives) runs under jax 0.7.2's legacy pmap; after `pmap-migrate fix --unsafe-fixes` it must
print on every process, on jax 0.10.2, the newest jax and (the same file) jax 0.7.2, what that
process printed under the legacy pmap. The same programs run as one process (the rewritten code
with `process_count() == 1`) must print what the legacy single-process pmap printed.
"""

from __future__ import annotations

import re

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import jaxenv
from support.projects import json_records
from support.shim_runs import differences, free_port, parse

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "fixtures" / "programs_multiprocess"
REPORT = Path(__file__).parent / "shim_programs" / "_report.py"  # what the programs import as `_report`
NAMES = ("data_parallel_training", "collectives", "host_readback", "partial_steps", "unseen_callers",
         "computed_options", "devices_option")
FIXED_ENVS = {"jax-0.10.2": jaxenv.NEW_311, "newest": jaxenv.NEWEST, "jax-0.7.2": jaxenv.LEGACY}


def _fix(source: bytes, name: str):
    outcome = fix_bytes(source, name, all_rules(), unsafe=True)
    assert outcome.error is None, outcome.error
    return outcome


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> Path:
    """A directory holding the programs as they are, with `_report.py` next to them."""
    root = tmp_path_factory.mktemp("multiprocess_legacy")
    shutil.copy(REPORT, root / "_report.py")
    for name in NAMES:
        shutil.copy(PROGRAMS / f"{name}.py", root / f"{name}.py")
    return root


@pytest.fixture(scope="module")
def fixed(tmp_path_factory) -> dict:
    """name -> (fixed program path, fix outcome); `_report.py` next to them."""
    root = tmp_path_factory.mktemp("multiprocess_rewrite")
    shutil.copy(REPORT, root / "_report.py")
    out = {}
    for name in NAMES:
        outcome = _fix((PROGRAMS / f"{name}.py").read_bytes(), f"{name}.py")
        target = root / f"{name}.py"
        target.write_bytes(outcome.fixed or b"")
        out[name] = (target, outcome)
    return out


def _python(env: jaxenv.JaxEnv) -> Path:
    try:
        return jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as exc:
        pytest.skip(str(exc))


def _two_processes(env: jaxenv.JaxEnv, script: Path) -> list[subprocess.CompletedProcess]:
    python, port = _python(env), str(free_port())
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(jaxenv.run_program, python, script, port, str(i), devices=4, timeout=600,
                            cwd=script.parent) for i in range(2)]
        return [run.result() for run in runs]


def _one_process(env: jaxenv.JaxEnv, script: Path) -> subprocess.CompletedProcess:
    return jaxenv.run_program(_python(env), script, "0", "0", "1", devices=4, timeout=600, cwd=script.parent)


def _checks(proc: subprocess.CompletedProcess, what: str) -> dict:
    assert proc.returncode == 0, f"{what} failed:\n{proc.stderr[-4000:]}"
    checks = parse(gloo_free(proc.stdout))
    assert checks, f"{what} printed no checks:\n{proc.stdout[-2000:]}"
    return checks


def gloo_free(stdout: str) -> str:
    """The checks a program printed, one per line. gloo prints its connection messages to stdout from
    C++, unsynchronised with Python's lines: one (or a part of one) can land before or after a check
    on the same line."""
    return "\n".join(json.dumps(record) for record in json_records(stdout))


def _same(reference: dict, candidate: dict, what: str) -> None:
    diff = differences(reference, candidate)
    assert not diff, f"{what}: {len(diff)} of {len(reference)} checks differ:\n" + "\n".join(diff)


# ---------------------------------------------------------------------- the rewrite itself (no jax)


@pytest.mark.parametrize("name", NAMES)
def test_every_pmap_becomes_plain_jax_and_the_fix_is_a_fixpoint(fixed, name):
    target, outcome = fixed[name]
    text = target.read_text()
    assert "jax.pmap(" not in text and "runtime_shim.pmap(" not in text, text
    assert "jax.shard_map(" in text and "make_array_from_process_local_data" in text
    summaries = [d.fix.summary for d in outcome.applied if d.code in ("PM101", "PM501")]
    assert summaries and all("global mesh" in s for s in summaries), summaries
    again = _fix(text.encode(), f"{name}.py")
    assert again.fixed is None and again.applied == [], (again.fixed or b"").decode()


KEPT = {  # fixtures/fix/pm501_kept_on_shim.py: line of the pmap -> why it keeps the shim
    9: "`backend=`",
    13: "traced",
    19: "in_axes=None argument from a caller not seen",
}


def test_what_the_rewrite_cannot_see_keeps_the_shim_and_says_why():
    source = (ROOT / "fixtures" / "fix" / "pm501_kept_on_shim.py").read_bytes()
    outcome = _fix(source, "pm501_kept_on_shim.py")
    found = {d.line: d.fix.summary for d in outcome.applied if d.code == "PM101"}
    assert set(found) == set(KEPT), found
    for line, reason in KEPT.items():
        assert found[line].startswith("use `runtime_shim.pmap`") and reason in found[line], (line, found[line])


def test_callers_not_seen_get_the_boundary_form():
    """A pmap public at module level, stored on `self`, returned as a value or whose output is updated
    in place: rewritten anyway, converting at its own boundary (host-local rows in and out)."""
    source = (ROOT / "fixtures" / "fix" / "pm501_unseen_callers.py").read_bytes()
    outcome = _fix(source, "pm501_unseen_callers.py")
    text = outcome.fixed.decode()
    assert "jax.pmap(" not in text and "runtime_shim.pmap(" not in text and "import runtime_shim" not in text, text
    summaries = [d.fix.summary for d in outcome.applied if d.code == "PM101"]
    assert len(summaries) == 1 and "taking and returning this process's rows" in summaries[0], summaries
    assert all(f"`{name}`" in summaries[0] for name in ("step", "self.p_step", "fn", "scaled")), summaries
    # Each a call of the helper that takes this process's rows in and returns them (local, its
    # default: it also refuses traced inputs), written once; on `self`, in the pmap's place.
    for wrapper in ("step = ", r"self\.p_step = ", "return ", "scaled = "):
        assert re.search(rf"(?<![\w.]){wrapper}_global_pmap\([^=\n]*\)(  #|\n)", text), (wrapper, text)
    assert not re.search(r"_global_pmap\([^\n]*local=False", text) and text.count("def _global_pmap(") == 1
    assert "out = scaled(batch)\n    out += np.ones" in text  # the output is read as it is


def test_one_unreadable_output_gets_the_boundary_form_only():
    """A pmap whose output the program updates in place returns host-local rows (its boundary form);
    the other pmaps of the module keep global outputs, and what they hand to it goes in as it is."""
    source = b'''import jax
import numpy as np

jax.distributed.initialize()
double = jax.pmap(lambda x: x * 2, axis_name="i")
half = jax.pmap(lambda x: x / 2, axis_name="i")


def run(batch):
    out = half(double(batch))
    out += np.ones(4)
    return out
'''
    outcome = _fix(source, "mixed.py")
    text = outcome.fixed.decode()
    assert "runtime_shim.pmap(" not in text
    assert 'half = _global_pmap(lambda x: x / 2, "i")\n' in text, text
    assert 'double = _global_pmap(lambda x: x * 2, "i", local=False)\n' in text, text
    assert "out = half(double(batch))\n    out += np.ones(4)" in text, text
    summary = next(d.fix.summary for d in outcome.applied if d.code == "PM101")
    assert "rewrite `double` as" in summary and "; and `half` the same way, taking and returning" in summary, summary


def test_an_output_read_whole_gets_the_boundary_form_and_its_row_reads_still_change():
    """`metrics["loss"]`, `return state`: reads of a whole output would each need the host-local view;
    the pmap returns host-local rows instead (no such read changes), and its row read still becomes
    the device's own row (no gather). A pmap whose outputs are only fed back stays global."""
    source = b'''import jax
import numpy as np

jax.distributed.initialize()
step = jax.pmap(lambda s, x: (s + x, {"loss": (s * x).sum()}), axis_name="i")
norm = jax.pmap(lambda x: x / 2, axis_name="i")


def run(batch):
    state, metrics = step(norm(batch), batch)
    print(metrics["loss"][0], state[0])
    return state
'''
    outcome = _fix(source, "whole.py")
    text = outcome.fixed.decode()
    assert "import runtime_shim" not in text and "_host_local(" not in text.split("\ndef run")[-1], text
    assert re.search(r"step = _global_pmap\([^\n]*\"i\"\)\n", text), text
    assert 'norm = _global_pmap(lambda x: x / 2, "i", local=False)\n' in text, text
    # (`metrics["loss"][0]`: a row of an output's leaf, read from its device too)
    assert 'print(metrics["loss"].addressable_shards[0].data.squeeze(0), state.addressable_shards[0].data.squeeze(0))\n' \
        '    return state\n' in text, text
    summary = next(d.fix.summary for d in outcome.applied if d.code == "PM101")
    assert "rewrite `norm` as" in summary and "; and `step` the same way, taking and returning" in summary, summary


def test_a_name_two_pmaps_bind_updated_in_place_keeps_both_rewritten():
    """`logs`, bound by the training step (already at its boundary: its metrics are read whole) and
    by the evaluation step, then updated in place: the evaluation step returns host-local rows too;
    neither goes to the shim (scenic's knowledge_visual_language trainer)."""
    source = b'''import jax

jax.distributed.initialize()
train = jax.pmap(lambda s, b: (s + b, {"loss": b.sum()}, {"a": b}), axis_name="batch")
evaluate = jax.pmap(lambda s, b: ({"loss": b.sum()}, {"e": b}), axis_name="batch")


def run(state, batches, log):
    for batch in batches:
        with jax.profiler.StepTraceAnnotation("train"):
            state, metrics, logs = train(state, batch)
        logs["lr"] = 0.1
        log(metrics, logs)
        if batch is not None:
            for _ in range(2):
                e_metrics, logs = evaluate(state, batch)
            log(e_metrics, logs)
    return state
'''
    outcome = _fix(source, "two.py")
    text = outcome.fixed.decode()
    assert "runtime_shim" not in text.split("\ndef run")[-1] and "import runtime_shim" not in text, text
    assert text.count("= _global_pmap(") == 2 and not re.search(r"_global_pmap\([^\n]*local=False", text), text
    summary = next(d.fix.summary for d in outcome.applied if d.code == "PM101")
    assert "`train`, `evaluate`" in summary and "taking and returning this process's rows" in summary, summary


def test_a_pmap_built_and_applied_in_one_expression_stays_in_its_place_in_either_form(fixed):
    """`jax.pmap(f)(x)` becomes `_global_pmap(f, ...)(x)` where it was, evaluated there: the
    boundary form (its output read whole or by rows: this process's rows) and the global form
    (fed to another pmap of the program) alike; no wrapper defined before the statement."""
    text = fixed["host_readback"][0].read_text()
    assert '    doubled = _global_pmap(lambda v: v * 2 + lax.axis_index("d"), "d")(' in text, text
    assert '    fed = _global_pmap(lambda v: v + lax.axis_index("d"), "d", local=False)(' in text, text
    assert "_mapped = " not in text, text


def test_a_row_read_of_a_call_goes_with_the_rewrite_and_a_tuple_element_stays_no_finding(fixed):
    """`double(rows)[0]` (a module-level pmap's call indexed where it is made) reads this
    process's row from its device, as a read of a name does (its pmap keeps global outputs);
    `pair(rows)[0]` picks an element of a tuple output, before the fix and after it: not a
    finding of the fixed file, whose PM201 findings are the ones the original had without a fix
    (`pair(rows)[1][2]` among them; `metrics["loss"][0]` is fixed, a row of an output's leaf)."""
    text = fixed["host_readback"][0].read_text()
    assert "double(rows).addressable_shards[0].data.squeeze(0).tolist()" in text, text
    assert 'double = _global_pmap(lambda v: v * 2 + lax.axis_index("d"), "d", local=False)' in text, text
    assert "np.asarray(pair(rows)[0])" in text and "pair(rows)[1][2]" in text, text
    again = fix_bytes(text.encode(), "host_readback.py", all_rules(), unsafe=True)  # (a fixpoint: the text's lines)
    assert again.fixed is None
    left = {(d.line, d.column) for d in again.remaining if d.code == "PM201"}
    lines = text.splitlines()
    row = next(k for k, line in enumerate(lines, 1) if "pair(rows)[1][2]" in line)
    assert (row, lines[row - 1].index("pair(rows)[1]") + 1) in left, left
    assert (row, lines[row - 1].index("pair(rows)[0]") + 1) not in left, left
    # and `state["count"][0]` of a helper's output (`advance(...)`, whose mesh is not seen here)
    assert len(left) == 2, left


def test_a_main_handed_to_absl_app_run_is_not_traced_code():
    """`app.run(main)` hands `main` over as a value; it runs it, it does not trace it."""
    source = b'''import jax
from absl import app


def main(argv):
    jax.distributed.initialize()
    step = jax.pmap(lambda x: x * 2, axis_name="i")
    out = step(argv)
    print(out[0])


if __name__ == "__main__":
    app.run(main)
'''
    text = _fix(source, "prog.py").fixed.decode()
    assert "runtime_shim.pmap(" not in text and "import runtime_shim" not in text, text
    assert "out.addressable_shards[0].data.squeeze(0)" in text, text
    wrapped = _fix(source.replace(b"app.run(main)", b"jax.jit(main)(0)"), "prog.py").fixed.decode()
    assert "step = runtime_shim.pmap(" in wrapped


# ---------------------------------------------------------------------- running (2 processes x 4 devices)


@pytest.fixture(scope="module")
def legacy_runs(legacy) -> dict:
    """name -> the checks each process printed under jax 0.7.2's legacy pmap."""
    return {name: [_checks(p, f"{name} process {i} on legacy pmap")
                   for i, p in enumerate(_two_processes(jaxenv.LEGACY, legacy / f"{name}.py"))]
            for name in NAMES}


@pytest.mark.parametrize("env", list(FIXED_ENVS))
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.jax_envs
@pytest.mark.multiprocess
def test_fixed_program_matches_legacy_pmap_on_two_processes(fixed, legacy_runs, name, env):
    target, _ = fixed[name]
    for i, proc in enumerate(_two_processes(FIXED_ENVS[env], target)):
        _same(legacy_runs[name][i], _checks(proc, f"fixed {name}, {env}, process {i}"), f"{name} process {i} on {env}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.jax_envs
def test_fixed_program_still_runs_as_one_process(fixed, legacy, name):
    target, _ = fixed[name]
    reference = _checks(_one_process(jaxenv.LEGACY, legacy / f"{name}.py"), f"{name} on one process, legacy pmap")
    candidate = _checks(_one_process(jaxenv.NEW_311, target), f"fixed {name} on one process, jax 0.10.2")
    _same(reference, candidate, f"{name} on one process")


@pytest.mark.parametrize("names, variant", [
    (("partial_steps", "computed_options"), "dynamic = [a for k, a in enumerate(args) if k not in static]"),
    (("collectives",), "axes = [None if k in static else a for k, a in enumerate(axes)]"),
])
@pytest.mark.jax_envs
@pytest.mark.multiprocess
def test_the_programs_fixed_with_a_shared_module_match_legacy_pmap_on_two_processes(tmp_path, legacy_runs, names,
                                                                                    variant):
    """`fix` of a directory of the programs (they import `_report` beside them): the helpers go in a
    `_pmap_compat.py` beside them, fitted to the options their pmaps use (`_global_pmap` for static
    positions alone, or with in_axes), not a module's own copy, which takes every option."""
    from support.projects import run_cli

    shutil.copy(REPORT, tmp_path / "_report.py")
    for name in names:
        shutil.copy(PROGRAMS / f"{name}.py", tmp_path / f"{name}.py")
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    result = run_cli(tmp_path, "fix", "--unsafe-fixes", "--no-cache", *(f"{name}.py" for name in names))
    assert result.exit_code in (0, 1) and "Traceback" not in result.output, result.output  # (1: reads left)
    shared = (tmp_path / "_pmap_compat.py").read_text()
    assert variant in shared and "def _global_pmap(" not in (tmp_path / f"{names[0]}.py").read_text(), shared
    for name in names:
        for i, proc in enumerate(_two_processes(jaxenv.NEWEST, tmp_path / f"{name}.py")):
            _same(legacy_runs[name][i], _checks(proc, f"fixed {name}, process {i}"), f"{name} process {i}")


def test_generated_code_is_copied_to_unindent_its_empty_lines_only_when_it_has_such_lines():
    """`unindented` takes the indentation off generated empty lines without a comment; code without
    any is returned as it is (no copy), and code of the original module is never entered."""
    from types import SimpleNamespace

    import libcst as cst

    from pmap_migrate.rules.fixes.edits import unindented

    original = cst.parse_statement("if x:\n\n    y = 1\n")
    model = SimpleNamespace(parents={original: None})
    plain = cst.parse_statement("def f():\n    return 1\n")
    assert unindented(model, plain, {}) is plain
    spaced = cst.parse_statement("def f():\n    a = 1\n    \n    # kept\n    return a\n")
    out = unindented(model, spaced, {})
    lines = [line for s in out.body.body for line in s.leading_lines]
    assert [(line.indent, line.comment is None) for line in lines] == [(False, True), (True, False)]
    assert out.deep_equals(spaced.with_deep_changes(spaced.body.body[1], leading_lines=lines))
    wrapper = cst.FlattenSentinel([plain, original])
    assert list(unindented(model, wrapper, {}).nodes) == [plain, original]  # the original: not entered


def test_generated_statements_known_to_need_no_unindenting_are_not_walked():
    """`Rewriter.parse_generated` records the statements whose empty lines carry no indentation
    (libcst indents a blank line only at module level, or a line of whitespace anywhere), with their
    direct children; `unindented` returns them, and a new node built around them, unwalked."""
    from types import SimpleNamespace

    import libcst as cst

    from pmap_migrate.rules.fixes.edits import unindented
    from pmap_migrate.rules.fixes.pmap_rewrite import Rewriter

    rewriter = Rewriter.__new__(Rewriter)
    rewriter.plain_generated = {}
    text = "x = 1\n\n\n@d\n\n# note\ndef f():\n    a = 1\n\n    return a\n\n\ny = 2\n"
    parsed = cst.parse_module(text).body
    assert [line.indent for line in parsed[1].leading_lines] == [True, True]  # libcst's module-level blank lines
    assert [line.indent for line in parsed[1].lines_after_decorators] == [True, True]
    statements = rewriter.parse_generated(text)
    assert all(id(statement) in rewriter.plain_generated for statement in statements)
    model = SimpleNamespace(parents={})
    for raw, statement in zip(parsed, statements):  # what `unindented` makes of the raw parse, already
        assert statement.deep_equals(unindented(model, raw, {}))
        assert unindented(model, statement, rewriter.plain_generated) is statement
    moved = statements[1].with_changes(leading_lines=[])  # a new node around recorded children: not entered
    assert unindented(model, moved, rewriter.plain_generated) is moved
    assert cst.Module(statements).code == text  # the same text at module level
    whitespace = rewriter.parse_generated("def g():\n    a = 1\n    \n    return a\n")
    assert not any(id(node) in rewriter.plain_generated for node in whitespace)


DECORATED = b'''from functools import partial

import jax
import numpy as np


@partial(jax.pmap, axis_name="batch", donate_argnums=(0,),
         static_broadcasted_argnums=(2,))
def update(x, y, power):
    return jax.lax.psum(x ** power, "batch") + y


@jax.pmap
def double(x):
    return x * 2


@partial(jax.pmap, axis_name="i", in_axes=(0, None), out_axes=0)
def scale(x, w):
    return x * w


def run(n):
    x = np.ones((n, 2), np.float32) * jax.process_index()
    loss = update(x, x, 2)
    return float(loss[0]), double(x), scale(x, 2.0)


if __name__ == "__main__":
    print(run(jax.local_device_count()))
'''


def test_a_decorator_pmap_keeps_its_place_its_options_as_written_and_its_name():
    text = _fix(DECORATED, "prog.py").fixed.decode()
    # pmap's name swapped, the continuation line where it was; local=False: the outputs stay global
    assert ('@partial(_global_pmap, axis_name="batch", donate_argnums=(0,),\n'
            '         static_broadcasted_argnums=(2,), local=False)\ndef update(x, y, power):\n') in text, text
    assert "@_global_pmap\ndef double(x):\n" in text  # outputs returned: this process's rows
    # in_axes and out_axes go as the rewrite reads them (here: out_axes=0, the default, left out)
    assert '@partial(_global_pmap, axis_name="i", in_axes=(0, None))\ndef scale(x, w):\n' in text
    assert "def _update" not in text and "(jax.pmap" not in text and "import runtime_shim" not in text
    assert "float(loss.addressable_shards[0].data.squeeze(0))" in text
