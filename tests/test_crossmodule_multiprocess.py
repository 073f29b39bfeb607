"""PM501 across modules (issue 26): a multi-process program (a module using `jax.process_index()`,
`jax.distributed`, ...) that calls a function another module of the project pmaps passes it this
process's rows. The other module's own fix does not see the program: it rewrites the pmap for one
process (`jax.jit(_shard_mapped(f, "i"))`, which raises on several). `check` says so at the call,
before the fix (the pmap) and after it (the single-process rewrite); a rewrite written for every
process (`_global_call(...)`, the other module's own PM501 fix) is what legacy did, and is not
reported; nor is the call of a pmap whose own module uses the multi-process API (its own PM501
finding and fix take it)."""

from __future__ import annotations

import os
from pathlib import Path

from pmap_migrate.rules.analysis.facts import module_facts
from tests.support.projects import json_records, run_cli

STEPS = "import jax\n\n\ndef double(x):\n    return x * 2\n\n\np_double = jax.pmap(double, axis_name='i')\n"
MAIN = ("import jax\nimport numpy as np\n\nfrom pkg import steps\n\njax.distributed.initialize()\n"
        "print(steps.p_double(np.ones((jax.local_device_count(), 3))))\n")


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"pkg/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return root


def _findings(root: Path, *files: str) -> list[str]:
    result = run_cli(root, "check", "--no-cache", "--output-format", "concise", *(files or (".",)))
    return sorted(" ".join(line.split(" ")[:2]) for line in result.output.splitlines() if " PM" in line)


def _messages(root: Path, path: str) -> list[str]:
    result = run_cli(root, "check", "--no-cache", "--output-format", "concise", ".")
    return [line for line in result.output.splitlines() if line.startswith(path)]


def test_a_multi_process_program_calling_another_modules_pmap_is_told_at_the_call(tmp_path: Path):
    root = _project(tmp_path, {"pkg/steps.py": STEPS, "pkg/main.py": MAIN})
    assert _findings(root) == ["pkg/main.py:7:7: PM501", "pkg/steps.py:8:12: PM101"]
    (message,) = _messages(root, "pkg/main.py")
    assert "through `steps.p_double` (pmapped in `pkg.steps`)" in message
    assert "`fix` of `pkg.steps` writes it for every process" in message
    # pre-commit: the program alone, the pmap's module read from the tree
    assert _findings(root, "pkg/main.py") == ["pkg/main.py:7:7: PM501"]


def test_a_single_process_rewrite_is_still_reported(tmp_path: Path):
    """`steps.py` fixed before the program existed: its pmap is written for one process."""
    root = _project(tmp_path, {"pkg/steps.py": STEPS})
    assert run_cli(root, "fix", "--no-cache", "pkg/steps.py").exit_code == 0
    assert "p_double = jax.jit(_shard_mapped(double, 'i'))" in (root / "pkg" / "steps.py").read_text()
    (root / "pkg" / "main.py").write_text(MAIN)
    assert _findings(root) == ["pkg/main.py:7:7: PM501"]
    (message,) = _messages(root, "pkg/main.py")
    assert "is a pmap rewritten for one process, called in a multi-process program" in message


def test_a_rewrite_for_every_process_is_not_reported(tmp_path: Path):
    """The pmap's module is a multi-process one itself: its fix writes the global-mesh form for
    callers it does not see (`_global_pmap(...)`, local), which takes this process's rows."""
    steps = STEPS + "\nRANK = jax.process_index()\n"
    root = _project(tmp_path, {"pkg/steps.py": steps, "pkg/main.py": MAIN})
    assert _findings(root) == ["pkg/steps.py:8:12: PM101", "pkg/steps.py:8:12: PM501"]
    assert run_cli(root, "fix", "--no-cache", "pkg/steps.py").exit_code == 0
    fixed = (root / "pkg" / "steps.py").read_text()
    assert "p_double = _global_pmap(double, 'i')\n" in fixed, fixed
    assert _findings(root) == []


def test_a_single_process_caller_is_not_told(tmp_path: Path):
    main_ = MAIN.replace("jax.distributed.initialize()\n", "")
    root = _project(tmp_path, {"pkg/steps.py": STEPS, "pkg/main.py": main_})
    assert _findings(root) == ["pkg/steps.py:8:12: PM101"]


def test_the_facts_tell_a_rewrite_for_every_process_from_one_for_one():
    one = module_facts("import jax\nfrom ._pmap_compat import _shard_mapped\n\n"
                       "p = jax.jit(_shard_mapped(f, 'i'))\n", "pkg.steps", False)
    every = module_facts("import jax\nfrom ._pmap_compat import _global_pmap\n\np = _global_pmap(f, 'i')\n",
                         "pkg.steps", False)
    # (as an earlier version wrote it)
    older = module_facts("import jax\nfrom ._pmap_compat import _global_call, _shard_mapped\n\n"
                         "p = _global_call(jax.jit(_shard_mapped(f, 'i', processes=True)), local=True)\n",
                         "pkg.steps", False)
    other = module_facts("import jax\nfrom ._pmap_compat import _global_pmap\n\n"
                         "p = _global_pmap(f, 'i', out_axes=None)\n", "pkg.steps", False)
    assert one.pmapped["p"].rewritten and not one.pmapped["p"].processes
    assert every.pmapped["p"].rewritten and every.pmapped["p"].processes
    assert older.pmapped["p"].rewritten and older.pmapped["p"].processes
    assert "p" not in other.pmapped or not other.pmapped["p"].rewritten


def test_a_pmap_whose_own_module_is_multi_process_is_left_to_that_modules_finding(tmp_path: Path):
    """`steps.py` uses the multi-process API: its own PM501 finding (and fix) takes the pmap for
    every process; the program's call is not reported again."""
    steps = STEPS.replace("import jax\n", "import jax\nfrom jax.experimental import multihost_utils\n", 1) \
        + "\n\ndef sync():\n    multihost_utils.sync_global_devices('x')\n"
    root = _project(tmp_path, {"pkg/steps.py": steps, "pkg/main.py": MAIN})
    assert _findings(root) == ["pkg/steps.py:9:12: PM101", "pkg/steps.py:9:12: PM501"]
    assert module_facts(steps, "pkg.steps", False).pmapped["p_double"].multi_process
    assert not module_facts(STEPS, "pkg.steps", False).pmapped["p_double"].multi_process


def test_a_warm_run_follows_the_pmaps_module_into_and_out_of_the_multi_process_api(tmp_path: Path):
    root = _project(tmp_path, {"pkg/steps.py": STEPS, "pkg/main.py": MAIN})

    def program() -> list[str]:
        result = run_cli(root, "check", "--output-format", "concise", ".")
        return [line.split(" ")[1] for line in result.output.splitlines() if line.startswith("pkg/main.py")]

    assert program() == ["PM501"]
    assert program() == ["PM501"]  # from the cache
    steps = root / "pkg" / "steps.py"
    stat = steps.stat()
    steps.write_text(STEPS + "\nRANK = jax.process_index()\n")
    os.utime(steps, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000_000))
    assert program() == []
    steps.write_text(STEPS)
    os.utime(steps, ns=(stat.st_atime_ns, stat.st_mtime_ns + 20_000_000_000))
    assert program() == ["PM501"]


# ------------------------------------------------------------------ fix
def test_fix_writes_the_pmap_for_every_process_where_a_program_of_the_project_calls_it(tmp_path: Path):
    """`fix` of the whole tree, and of the pmap's module alone (pre-commit: the program is read
    from the tree): the boundary form, which takes and returns this process's rows."""
    for files in ((".",), ("pkg/steps.py",)):
        root = _project(tmp_path / files[0].replace("/", "_"), {"pkg/steps.py": STEPS, "pkg/main.py": MAIN})
        assert run_cli(root, "fix", "--no-cache", *files).exit_code == 0
        fixed = (root / "pkg" / "steps.py").read_text()
        assert "p_double = _global_pmap(double, 'i')\n" in fixed, fixed
        assert (root / "pkg" / "main.py").read_text() == MAIN
        assert _findings(root) == []


def test_fix_finds_a_program_calling_a_function_that_returns_the_pmaps_output(tmp_path: Path):
    steps = STEPS + "\n\ndef run(x):\n    return p_double(x)\n"
    main_ = MAIN.replace("steps.p_double(", "steps.run(")
    root = _project(tmp_path, {"pkg/steps.py": steps, "pkg/main.py": main_})
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    assert "p_double = _global_pmap(double, 'i')\n" in (root / "pkg" / "steps.py").read_text()


def test_fix_of_a_pmap_only_single_process_modules_call_is_for_one_process(tmp_path: Path):
    main_ = MAIN.replace("jax.distributed.initialize()\n", "")
    root = _project(tmp_path, {"pkg/steps.py": STEPS, "pkg/main.py": main_})
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    fixed = (root / "pkg" / "steps.py").read_text()
    assert "p_double = jax.jit(_shard_mapped(double, 'i'))" in fixed and "_global_" not in fixed, fixed


def test_the_callers_are_the_multi_process_modules_naming_the_functions(tmp_path: Path):
    from pmap_migrate.crossmodule import multi_process_callers

    root = _project(tmp_path, {
        "pkg/steps.py": STEPS + "\n\ndef run(x):\n    return p_double(x)\n",
        "pkg/main.py": MAIN,
        "pkg/by_name.py": "import jax\nfrom .steps import run\n\nprint(jax.process_index(), run)\n",
        "pkg/single.py": "from pkg import steps\n\nprint(steps.p_double)\n",  # one process
        "pkg/other.py": "import jax\n\nprint(jax.process_index())\n",  # names none of them
        "scripts/far.py": "import jax\nimport pkg.steps as s\n\njax.distributed.initialize()\ns.p_double(1)\n",
    })
    found = multi_process_callers([str(root / "pkg" / "steps.py"), str(root / "pkg" / "main.py")], str(root))
    assert found == {str(root / "pkg" / "steps.py"): ("pkg/by_name.py", "pkg/main.py", "scripts/far.py")}


# ------------------------------------------------------------------ differential (2 processes)
PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "multiprocess_callers"


def _runs(env, root: Path, processes: int) -> list[str]:
    from concurrent.futures import ThreadPoolExecutor

    import pytest

    from tests.support import jaxenv
    from tests.support.shim_runs import free_port

    try:
        python = jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as why:
        pytest.skip(str(why))
    port = str(free_port())
    with ThreadPoolExecutor(processes) as pool:
        runs = [pool.submit(jaxenv.run_program, python, root / "train.py", port, str(i), str(processes), devices=4,
                            timeout=600, cwd=root) for i in range(processes)]
        procs = [run.result() for run in runs]
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return [json_records(proc.stdout) for proc in procs]


def test_the_fixed_package_runs_on_two_processes_as_the_legacy_one_did(tmp_path: Path):
    import shutil

    from tests.support import jaxenv

    legacy = shutil.copytree(PACKAGE, tmp_path / "legacy")
    fixed = shutil.copytree(PACKAGE, tmp_path / "fixed")
    result = run_cli(fixed, "fix", "--no-cache", ".")
    assert "Fixed 3 of 3 legacy patterns in 2 files." in result.output, result.output
    steps = (fixed / "mpc" / "steps.py").read_text()
    assert steps.count("= _global_pmap(") == 2 and "runtime_shim" not in steps, steps
    reference = _runs(jaxenv.LEGACY, legacy, 2)
    assert reference[0] != reference[1] and all(len(r) == 2 for r in reference), reference
    for env in (jaxenv.NEWEST, jaxenv.LEGACY):
        assert _runs(env, fixed, 2) == reference, env.name
    # as one process, what the legacy pmap computed on one
    assert _runs(jaxenv.NEWEST, fixed, 1) == _runs(jaxenv.LEGACY, legacy, 1)
