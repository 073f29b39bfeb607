"""Helpers written once per package: `fix` creates the package's `_pmap_compat.py` (or extends it),
the fixed modules import from it (pmap_migrate/shared_module.py says where it goes and how it is
imported), and a small package with a tests directory prints on the newest jax, fixed, what it
printed on jax 0.7.2's legacy pmap."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pmap_migrate.rules.fixes.pmap_render import ALL_FEATURES
from pmap_migrate.rules.fixes.shared import EVERY_HELPER, SHARED_HELPERS, feature_names, helpers_in, module_text
from tests.support.projects import run_cli

OPS = '''import functools

import jax
import numpy as np
from jax import lax


@functools.partial(jax.pmap, axis_name="i")
def normalize(x):
    return x / lax.psum(x, "i")


def weights():
    return jax.device_put_replicated(np.float32(2.0), jax.local_devices())
'''

STEPS = '''import jax

from .. import ops


def _shift(x):
    return x - jax.lax.pmean(x, "d")


shift = jax.pmap(_shift, "d")


def run(x):
    return ops.normalize(shift(x))
'''

TEST = '''import jax
import numpy as np

from pkg import ops
from pkg.sub import steps

square = jax.pmap(lambda x: x * x)
scale = jax.pmap(lambda x, w: x * w)


def test_run():
    x = np.arange(1.0, 17.0).reshape(8, 2)
    out = square(steps.run(x))
    print(np.round(np.asarray(out), 6).tolist(), out.shape)
    weighted = scale(out, ops.weights())
    print(np.round(np.asarray(weighted), 6).tolist(), weighted.dtype)


if __name__ == "__main__":
    test_run()
'''

ALONE = '''import jax
import numpy as np

cube = jax.pmap(lambda x: x ** 3)


def test_cube():
    print(np.asarray(cube(np.arange(8.0).reshape(8, 1))).tolist())
'''

FILES = {"pkg/__init__.py": "", "pkg/ops.py": OPS, "pkg/sub/__init__.py": "", "pkg/sub/steps.py": STEPS,
         "tests/test_pkg.py": TEST, "checks/test_alone.py": ALONE}


def make_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.py"))}


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path / "project")


def test_the_shared_module_is_created_once_per_package_and_imported(project):
    result = run_cli(project, "fix", "--no-cache", "--jobs", "2", ".")
    assert result.exit_code == 0, result.output
    files = tree(project)
    created = sorted(set(files) - set(FILES))
    # the package's top (not pkg/sub), also for the test that imports the package; beside the
    # test of a directory without __init__.py that imports nothing of the project
    assert created == ["checks/_pmap_compat.py", "pkg/_pmap_compat.py"]
    assert helpers_in(files["pkg/_pmap_compat.py"]) == {"_shard_mapped", "_replicate"}  # what the package uses
    assert helpers_in(files["checks/_pmap_compat.py"]) == {"_shard_mapped"}  # beside tests: what tests there use
    assert "from pkg._pmap_compat import _replicate, _shard_mapped\n" in files["pkg/ops.py"]  # absolute
    assert "from .._pmap_compat import _shard_mapped\n" in files["pkg/sub/steps.py"]  # relative, as steps does
    assert "from pkg._pmap_compat import _shard_mapped\n" in files["tests/test_pkg.py"]  # the package it tests
    assert "from _pmap_compat import _shard_mapped\n" in files["checks/test_alone.py"]
    for rel in FILES:
        assert "def _shard_mapped" not in files[rel] and "jax.pmap" not in files[rel], rel
    assert "@functools.partial(_shard_mapped" in files["pkg/ops.py"]
    # idempotent: a second run changes nothing; check finds nothing, in the created modules either
    again = run_cli(project, "fix", "--no-cache", ".")
    assert again.exit_code == 0 and tree(project) == files
    check = run_cli(project, "check", "--no-cache", ".")
    assert check.exit_code == 0, check.output


def test_the_shared_modules_imports_follow_the_projects_isort_settings(tmp_path):
    # in a project that has a `jax` package of its own (jax's repository), jax is first-party
    root = make_project(tmp_path / "project")
    (root / "jax").mkdir()
    (root / "jax" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n[tool.isort]\nforce_single_line = true\n")
    result = run_cli(root, "fix", "--no-cache", "pkg", "tests", "checks")
    assert result.exit_code == 0, result.output
    text = (root / "jax" / "_pmap_compat.py").read_text()  # (the tests import `jax`: the project's)
    block = text[text.index("import functools"):text.index("\n\n\ndef ")]
    assert block.split("\n") == [
        "import functools", "", "import jax", "import jax.numpy as jnp", "from jax.sharding import Mesh",
        "from jax.sharding import PartitionSpec as P"]
    assert helpers_in(text) == {"_shard_mapped"}  # still the tool's own module: used, extended
    text = (root / "pkg" / "_pmap_compat.py").read_text()  # numpy: third party, before jax
    block = text[text.index("import functools"):text.index("\n\n\ndef ")]
    assert block.split("\n") == [
        "import functools", "", "import numpy as np", "", "import jax", "import jax.numpy as jnp",
        "from jax.sharding import Mesh", "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P"]
    files = tree(root)
    again = run_cli(root, "fix", "--no-cache", "pkg", "tests", "checks")
    assert again.exit_code == 0 and tree(root) == files
    assert helpers_in(module_text({"_shard_mapped"}).replace("import jax\n", "")) is None


def test_file_by_file_or_all_at_once_gives_the_same_tree(tmp_path):
    at_once = make_project(tmp_path / "at_once")
    assert run_cli(at_once, "fix", "--no-cache", "--jobs", "1", ".").exit_code == 0
    by_file = make_project(tmp_path / "by_file")
    for rel in ("pkg/sub/steps.py", "tests/test_pkg.py", "checks/test_alone.py", "pkg/ops.py"):
        result = run_cli(by_file, "fix", "--no-cache", rel)
        # what fix says is left is what check then finds (a use of ops.py's pmapped `normalize` is
        # left while ops.py is legacy, when the index sees a reason to report it)
        assert result.exit_code == run_cli(by_file, "check", "--no-cache", rel).exit_code, result.output
        if rel == "pkg/sub/steps.py":
            assert (by_file / "pkg" / "_pmap_compat.py").is_file()
    assert tree(by_file) == tree(at_once)
    assert run_cli(by_file, "check", "--no-cache", ".").exit_code == 0


def test_a_later_run_extends_the_shared_module(project):
    assert run_cli(project, "fix", "--no-cache", "pkg/ops.py").exit_code == 0
    shared = project / "pkg" / "_pmap_compat.py"
    assert helpers_in(shared.read_text()) == {"_shard_mapped", "_replicate"}
    (project / "pkg" / "stack.py").write_text(
        "import jax\n\n\ndef put(xs):\n    return jax.device_put_sharded(xs, jax.local_devices())\n")
    assert run_cli(project, "fix", "--no-cache", "pkg/stack.py").exit_code == 0
    assert shared.read_text() == module_text({"_shard_mapped", "_replicate", "_put_sharded"})  # one module
    fixed = (project / "pkg" / "stack.py").read_text()
    assert "from pkg._pmap_compat import _put_sharded\n" in fixed
    assert "return _put_sharded(xs, jax.local_devices())" in fixed and "def _put_sharded" not in fixed


def test_a_module_keeps_using_the_copy_an_earlier_run_wrote_in_it(project):
    from pmap_migrate.fixer import fix_bytes
    from pmap_migrate.rules import all_rules

    ops = project / "pkg" / "ops.py"
    ops.write_bytes(fix_bytes(OPS.encode(), str(ops), all_rules(), unsafe=True).fixed)  # no shared module
    assert "def _shard_mapped(" in ops.read_text()
    ops.write_text(ops.read_text() + '\n\nsquare = jax.pmap(lambda x: x * x, "i")\n')
    assert run_cli(project, "fix", "--no-cache", "pkg/ops.py").exit_code == 0
    text = ops.read_text()
    assert "square = jax.jit(_shard_mapped(lambda x: x * x, \"i\"))" in text and "_pmap_compat" not in text
    assert not (project / "pkg" / "_pmap_compat.py").exists()


def test_diff_shows_the_new_module_and_writes_nothing(project):
    result = run_cli(project, "fix", "--no-cache", "--diff", ".")
    assert result.exit_code == 1
    assert "--- /dev/null\n+++ b/pkg/_pmap_compat.py\n" in result.output
    assert "+def _shard_mapped(f, axis_name=None" in result.output
    assert "+from pkg._pmap_compat import _replicate, _shard_mapped" in result.output
    assert tree(project) == FILES


def test_a_module_of_that_name_not_written_by_the_tool_is_left_alone(project):
    (project / "pkg" / "_pmap_compat.py").write_text("VALUE = 1\n")
    assert run_cli(project, "fix", "--no-cache", "pkg").exit_code == 0
    files = tree(project)
    assert files["pkg/_pmap_compat.py"] == "VALUE = 1\n"
    assert "def _shard_mapped(" in files["pkg/ops.py"] and "_pmap_compat" not in files["pkg/ops.py"]
    # edited since the tool wrote it: the same
    edited = module_text({"_shard_mapped"}) + "\nEXTRA = 2\n"
    assert helpers_in(edited) is None and helpers_in(module_text(set(SHARED_HELPERS))) == set(SHARED_HELPERS)


def test_a_script_of_a_package_that_imports_nothing_of_it_keeps_its_own_helper(project):
    """`python pkg/run.py` puts pkg/ on the path, not its parent: `pkg` may not be importable."""
    script = project / "pkg" / "run.py"
    script.write_text(OPS + '\n\nif __name__ == "__main__":\n    print(normalize)\n')
    user = project / "pkg" / "use.py"  # a script that imports its package: the package is importable there
    user.write_text("from pkg import ops\n" + OPS.replace("normalize", "scaled") + 'if __name__ == "__main__":\n    pass\n')
    assert run_cli(project, "fix", "--no-cache", "pkg/run.py", "pkg/use.py").exit_code == 0
    assert "def _shard_mapped(" in script.read_text() and "_pmap_compat" not in script.read_text()
    assert "from pkg._pmap_compat import _replicate, _shard_mapped\n" in user.read_text()


def test_a_module_of_a_namespace_directory_keeps_its_own_helper(tmp_path):
    """A directory without __init__.py whose module is neither a script nor a test may be imported
    as a namespace package; so is one inside a package, and one whose script imports its own
    directory by name (`python -m tools.run`): no plain-name import would be safe there."""
    root = make_project(tmp_path / "ns")
    main = '\n\nif __name__ == "__main__":\n    pass\n'
    cases = {"lib/ops.py": OPS, "pkg/tools/test_ops.py": OPS, "tools/run.py": "from tools import util\n" + OPS + main}
    for rel, text in cases.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert run_cli(root, "fix", "--no-cache", *cases).exit_code == 0
    for rel in cases:
        assert not (root / rel).with_name("_pmap_compat.py").exists(), rel
        assert "def _shard_mapped(" in (root / rel).read_text(), rel


def test_an_unwritable_shared_module_leaves_its_importers_unchanged(project, monkeypatch):
    from pmap_migrate import files

    write = files.write_atomic

    def refuse_shared(path, data, **kwargs):
        if Path(path).name == "_pmap_compat.py":
            raise PermissionError(13, "Permission denied")
        return write(path, data, **kwargs)

    monkeypatch.setattr(files, "write_atomic", refuse_shared)
    result = run_cli(project, "fix", "--no-cache", "pkg")
    assert "cannot write" in result.output and result.exit_code == 1
    files_now = tree(project)
    assert files_now["pkg/ops.py"] == OPS and files_now["pkg/sub/steps.py"] == STEPS
    assert "pkg/_pmap_compat.py" not in files_now


# --------------------------------------------------------------------------- differential
def _stdout(env, root: Path) -> str:
    from tests.support import jaxenv

    try:
        python = jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as why:
        pytest.skip(str(why))
    proc = jaxenv.run_program(python, root / "tests" / "test_pkg.py", cwd=root, repo_on_path=False,
                              extra_env={"PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_fixed_package_prints_what_the_legacy_package_printed(tmp_path):
    """Legacy package on jax 0.7.2 vs the same package fixed (`fix --unsafe-fixes`), run unchanged
    on jax 0.7.2, on jax 0.10.2 and on the newest jax; the fixed code imports nothing of this
    project (the repository is not on the path)."""
    from tests.support import jaxenv

    legacy = make_project(tmp_path / "legacy")
    fixed = tmp_path / "fixed"
    shutil.copytree(legacy, fixed)
    assert run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", ".").exit_code == 0
    assert (fixed / "pkg" / "_pmap_compat.py").is_file()
    reference = _stdout(jaxenv.LEGACY, legacy)
    assert reference.strip().endswith("float32"), reference
    for env in (jaxenv.LEGACY, jaxenv.NEW_311, jaxenv.NEWEST):
        assert _stdout(env, fixed) == reference, env.name


EXAMPLE = '''import jax
import numpy as np

from pkg import ops

double = jax.pmap(lambda x: 2 * x)


def main():
    out = double(ops.normalize(np.arange(1.0, 9.0).reshape(8, 1)))
    print(np.round(np.asarray(out), 6).tolist())


if __name__ == "__main__":
    main()
'''


def _legacy_and_fixed_outputs(legacy: Path, fixed: Path, *command, on_path: bool = False) -> list[str]:
    """What ``command`` (a program or `-m module`, run in each root; with ``on_path``, the root on
    PYTHONPATH) printed on jax 0.7.2's legacy pmap in ``legacy`` and on the newest jax in
    ``fixed``; skips where an environment is missing."""
    from tests.support import jaxenv

    outputs = []
    for env, root in ((jaxenv.LEGACY, legacy), (jaxenv.NEWEST, fixed)):
        try:
            python = jaxenv.python_for(env)
        except jaxenv.EnvUnavailable as why:
            pytest.skip(str(why))
        args = [root / c if isinstance(c, Path) else c for c in command]
        proc = jaxenv.run_program(python, *args, cwd=root, repo_on_path=False,
                                  **({"extra_env": {"PYTHONPATH": str(root)}} if on_path else {}))
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs.append(proc.stdout)
    return outputs


EXAMPLES = ("examples/train.py", "benchmarks/bench.py", "examples/released/train.py",
            "examples/by_distribution/train.py", "examples/by_url/train.py", "examples/pep508/train.py",
            "examples/extras/train.py")


def make_example_project(root: Path) -> Path:
    make_project(root)
    (root / "setup.py").write_text('from setuptools import setup\n\nsetup(name="dm-pkg")\n')
    for rel in EXAMPLES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(EXAMPLE)
    for directory, text in {"released": "numpy\npkg==1.0\n", "by_distribution": "dm_pkg>=1  # the release\n",
                            "by_url": "git+https://example.com/org/pkg.git\n",
                            "pep508": "--extra-index-url https://example.com/simple\npkg[x] @ https://e.com/main.zip\n",
                            "extras": "# not pkg\nnumpy\nflax==0.6.0\n-r ../base.txt\n-e ../..\n"
                                      "--extra-index-url https://example.com/pkg\n"}.items():
        (root / "examples" / directory / "requirements.txt").write_text(text)
    return root


def test_examples_and_benchmarks_of_a_package_import_its_module_unless_they_install_a_release(tmp_path):
    """`examples/` and `benchmarks/` run from the repository against its package (as tests do):
    they import the package's shared module, one copy; a directory whose requirements file names
    the package (by its name, its distribution's name or a URL) installs a released package, which
    has no such module: it keeps a module of its own. A requirements file of other packages only
    does not change where the package comes from."""
    root = make_example_project(tmp_path / "p")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    released = ("by_distribution", "by_url", "pep508", "released")
    assert sorted(set(files) - set(FILES) - {*EXAMPLES, "setup.py"}) == [
        "checks/_pmap_compat.py", *(f"examples/{d}/_pmap_compat.py" for d in released), "pkg/_pmap_compat.py"]
    for rel in ("examples/train.py", "benchmarks/bench.py", "examples/extras/train.py"):
        assert "from pkg._pmap_compat import _shard_mapped\n" in files[rel], files[rel]
    for directory in released:
        assert "from _pmap_compat import _shard_mapped\n" in files[f"examples/{directory}/train.py"]


def test_the_tests_of_a_src_layout_package_import_its_module(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    for rel, text in {"src/pkg/__init__.py": "", "src/pkg/ops.py": OPS, "tests/test_ops.py": EXAMPLE}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert sorted(set(files) - {"src/pkg/__init__.py", "src/pkg/ops.py", "tests/test_ops.py"}) \
        == ["src/pkg/_pmap_compat.py"]
    assert "from pkg._pmap_compat import _shard_mapped\n" in files["tests/test_ops.py"]
    assert "from pkg._pmap_compat import _replicate, _shard_mapped\n" in files["src/pkg/ops.py"]


def test_a_repository_named_as_its_package_is_not_taken_for_the_package(tmp_path):
    """`diffusers/` holding `src/diffusers/` and a `utils/` directory: an example's `from
    diffusers.utils import ...` names the installed package, not the repository's directory; an
    example that installs a release (its requirements file) keeps a module of its own."""
    root = tmp_path / "diffusers"
    (root / "src" / "diffusers" / "utils").mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "utils" / "check_copies.py").write_text("")
    (root / "setup.py").write_text("")
    for rel in ("src/diffusers/__init__.py", "src/diffusers/utils/__init__.py"):
        (root / rel).write_text("")
    (root / "examples" / "flax").mkdir(parents=True)
    (root / "examples" / "flax" / "requirements_flax.txt").write_text("diffusers\n")
    (root / "examples" / "flax" / "train.py").write_text(
        "import jax\nfrom diffusers.utils import check_min_version\n\nstep = jax.pmap(lambda x: x)\n\n"
        "if __name__ == '__main__':\n    print(step(jax.numpy.ones((1, 2))))\n")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    assert not (root / "_pmap_compat.py").exists()
    assert "from _pmap_compat import _shard_mapped\n" in (root / "examples" / "flax" / "train.py").read_text()
    assert (root / "examples" / "flax" / "_pmap_compat.py").is_file()


def test_a_project_whose_directory_its_modules_import_by_name_keeps_one_module(tmp_path):
    """deepmind-research's subprojects: `physics_inspired_models/` with its own `setup.py` and no
    `__init__.py`, its modules importing `physics_inspired_models.utils` (run from the directory
    above): the project's directory is the one they import, and its module serves them all."""
    root = tmp_path / "alpha"
    root.mkdir()
    (root / "setup.py").write_text("")
    (root / "utils.py").write_text(
        "import jax\nfrom alpha import train\n\nmean = jax.pmap(lambda x: x)\n")
    (root / "train.py").write_text(
        "import jax\nfrom alpha import utils\n\nstep = jax.pmap(lambda x: x * 2)\n")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    for rel in ("utils.py", "train.py"):
        assert "from alpha._pmap_compat import _shard_mapped\n" in (root / rel).read_text(), rel
    assert (root / "_pmap_compat.py").is_file()


def test_the_example_importing_the_package_module_prints_what_it_printed_on_legacy_pmap(tmp_path):
    """Run from the repository (its root on PYTHONPATH): legacy jax 0.7.2 unchanged vs fixed on
    the newest jax."""
    legacy = make_example_project(tmp_path / "legacy")
    fixed = tmp_path / "fixed"
    shutil.copytree(legacy, fixed)
    assert run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", ".").exit_code == 0
    outputs = _legacy_and_fixed_outputs(legacy, fixed, Path("examples", "train.py"), on_path=True)
    assert outputs[0] == outputs[1] and outputs[0].count(",") == 7, outputs


def test_a_namespace_directory_inside_a_package_uses_the_package_module_when_it_imports_the_package(tmp_path):
    """`pkg/sub/ns/trainer.py` (ns without __init__.py) that imports `pkg` by name runs where `pkg`
    is importable: it imports `pkg._pmap_compat`."""
    root = make_project(tmp_path / "nsp")
    trainer = root / "pkg" / "sub" / "ns" / "trainer.py"
    trainer.parent.mkdir(parents=True)
    (root / "pkg" / "sub" / "__init__.py").write_text("")
    trainer.write_text("from pkg import ops\n" + OPS)
    assert run_cli(root, "fix", "--no-cache", "pkg/sub/ns/trainer.py").exit_code == 0
    text = trainer.read_text()
    assert "from pkg._pmap_compat import " in text and "def _shard_mapped(" not in text, text
    assert (root / "pkg" / "_pmap_compat.py").exists()
    assert not (trainer.parent / "_pmap_compat.py").exists()


# --------------------------------------------------------------------------- what the imports show
# A project of namespace directories (no __init__.py anywhere), run from its root as
# `python -m big.trainers.train`: its modules import each other by the names above them.
BUILDER = '''import numpy as np


def batch():
    return np.arange(1.0, 17.0).reshape(8, 2)
'''

EVALUATOR = '''import jax
from jax import lax

import big.pp.builder as pp_builder


def _mean(x):
    return lax.pmean(x, "data")


def evaluate():
    return jax.pmap(_mean, axis_name="data")(pp_builder.batch())
'''

TRAINER = '''import jax
import numpy as np

from big.evaluators import psnr
from big.pp import builder


@jax.pmap
def _double(x):
    return 2 * x


def main():
    out = _double(builder.batch()) + psnr.evaluate()
    print(np.round(np.asarray(out), 6).tolist(), out.shape)


if __name__ == "__main__":
    main()
'''

NAMESPACE_FILES = {"big/pp/builder.py": BUILDER, "big/evaluators/psnr.py": EVALUATOR, "big/trainers/train.py": TRAINER}


def make_namespace_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    for rel, text in NAMESPACE_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_modules_of_namespace_directories_import_the_module_of_the_directory_they_import_by_name(tmp_path):
    """`import big.pp.builder` in `big/evaluators/psnr.py` (with `big/pp/builder.py` there): `big`
    is importable wherever the module runs, so the helpers go in `big/_pmap_compat.py`, once, and
    both the module and the script (which `python -m big.trainers.train` runs) import them by
    that name."""
    root = make_namespace_project(tmp_path / "ns")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert set(files) == {*NAMESPACE_FILES, "big/_pmap_compat.py"}
    for rel in ("big/evaluators/psnr.py", "big/trainers/train.py"):
        assert "from big._pmap_compat import _shard_mapped\n" in files[rel], files[rel]
        assert "def _shard_mapped(" not in files[rel]


def test_the_namespace_project_prints_what_it_printed_on_legacy_pmap(tmp_path):
    """Run as its imports say it runs (`python -m big.trainers.train` from the root): legacy jax
    0.7.2 unchanged vs the fixed project on the newest jax."""
    legacy = make_namespace_project(tmp_path / "legacy")
    fixed = tmp_path / "fixed"
    shutil.copytree(legacy, fixed)
    assert run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", ".").exit_code == 0
    outputs = _legacy_and_fixed_outputs(legacy, fixed, "-m", "big.trainers.train")
    assert outputs[0] == outputs[1] and "(8, 2)" in outputs[0], outputs


def test_a_module_that_imports_a_module_beside_it_by_its_plain_name_uses_a_sibling_module(tmp_path):
    """`import models` with `models.py` beside it (a directory without __init__.py, not a
    script): its directory is on `sys.path` wherever it runs, so is a sibling `_pmap_compat.py`."""
    root = tmp_path / "plain"
    (root / "wmt").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "wmt" / "models.py").write_text("SCALE = 2\n")
    (root / "wmt" / "train.py").write_text("import models\n" + OPS)
    (root / "wmt" / "alone.py").write_text(OPS)  # imports nothing beside it: keeps its own helper
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert "from _pmap_compat import _replicate, _shard_mapped\n" in files["wmt/train.py"]
    assert "def _shard_mapped(" in files["wmt/alone.py"] and "_pmap_compat" not in files["wmt/alone.py"]
    assert "wmt/_pmap_compat.py" in files


def test_a_package_below_a_namespace_directory_is_imported_by_the_name_its_modules_use(tmp_path):
    """`byol/utils/` is a package, `byol/` a namespace directory, and the package's modules import
    it as `byol.utils`: the helpers are imported as `byol.utils._pmap_compat` (`utils` alone is
    not importable when the project runs from its root)."""
    root = tmp_path / "nested"
    (root / "byol" / "utils").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "byol" / "utils" / "__init__.py").write_text("")
    (root / "byol" / "utils" / "helpers.py").write_text(OPS)
    (root / "byol" / "utils" / "checkpointing.py").write_text("from byol.utils import helpers\n")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    text = (root / "byol" / "utils" / "helpers.py").read_text()
    assert "from byol.utils._pmap_compat import _replicate, _shard_mapped\n" in text, text
    assert (root / "byol" / "utils" / "_pmap_compat.py").is_file()


# --------------------------------------------------------------------------- what the siblings show
LONELY = '''import jax
import numpy as np


def _triple(x):
    return 3 * x


def evaluate():
    return jax.pmap(_triple)(np.arange(1.0, 17.0).reshape(8, 2))
'''

TRAINER_OF_LONELY = '''import numpy as np

from big.evaluators import lonely


def main():
    out = lonely.evaluate()
    print(np.round(np.asarray(out), 6).tolist(), out.shape)


if __name__ == "__main__":
    main()
'''


def test_a_module_that_imports_nothing_above_it_is_imported_as_its_siblings_are(tmp_path):
    """`big/evaluators/lonely.py` imports nothing of `big`, but the modules beside it import
    `big.pp.builder`: it is imported the way they are (`big.evaluators.lonely`), so it imports
    `big._pmap_compat` too, instead of keeping a copy of the helper."""
    root = make_namespace_project(tmp_path / "ns")
    (root / "big/evaluators/lonely.py").write_text(LONELY)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert "from big._pmap_compat import _shard_mapped\n" in files["big/evaluators/lonely.py"]
    assert "def _shard_mapped(" not in files["big/evaluators/lonely.py"]
    assert "def _shard_mapped(" in files["big/_pmap_compat.py"]


def test_the_module_imported_as_its_siblings_are_prints_what_it_printed_on_legacy_pmap(tmp_path):
    """Legacy jax 0.7.2 unchanged vs fixed on the newest jax, run as `python -m big.trainers.lonely`."""
    legacy = make_namespace_project(tmp_path / "legacy")
    (legacy / "big/evaluators/lonely.py").write_text(LONELY)
    (legacy / "big/trainers/lonely.py").write_text(TRAINER_OF_LONELY)
    fixed = tmp_path / "fixed"
    shutil.copytree(legacy, fixed)
    assert run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", ".").exit_code == 0
    assert "from big._pmap_compat import" in (fixed / "big/evaluators/lonely.py").read_text()
    outputs = _legacy_and_fixed_outputs(legacy, fixed, "-m", "big.trainers.lonely")
    assert outputs[0] == outputs[1] and "(8, 2)" in outputs[0], outputs


def test_a_package_below_an_unimportable_top_uses_the_name_its_siblings_import_it_by(tmp_path):
    """A repository whose root holds `__init__.py` (`deep-mind/`, not importable by that name):
    `alpha/utils.py` imports nothing of its package, but `alpha/optimizer.py` imports it as
    `from alpha import utils`, so both import `alpha._pmap_compat`; a script beside them that
    imports nothing of the package (it may be run as `python alpha/run.py`) keeps its copy."""
    root = tmp_path / "deep-mind"
    (root / "alpha").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "__init__.py").write_text("")
    (root / "alpha" / "__init__.py").write_text("")
    (root / "alpha" / "utils.py").write_text(OPS)
    (root / "alpha" / "optimizer.py").write_text("from alpha import utils\n" + OPS)
    (root / "alpha" / "run.py").write_text(OPS + '\n\nif __name__ == "__main__":\n    pass\n')
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    for rel in ("alpha/utils.py", "alpha/optimizer.py"):
        assert "from alpha._pmap_compat import _replicate, _shard_mapped\n" in files[rel], files[rel]
        assert "def _shard_mapped(" not in files[rel]
    assert "def _shard_mapped(" in files["alpha/run.py"] and "_pmap_compat" not in files["alpha/run.py"]
    assert "alpha/_pmap_compat.py" in files


# --------------------------------------------------------------------------- earlier versions
OLDER = (Path(__file__).parent.parent / "fixtures" / "shared" / "older_pmap_compat.py").read_text()


def package_holding(root: Path, module: str) -> Path:
    """A project at ``root`` whose package `pkg` holds ``module`` as its `_pmap_compat.py`."""
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "_pmap_compat.py").write_text(module)
    return root


def test_a_shared_module_an_earlier_version_wrote_is_written_anew_when_a_fix_needs_it(tmp_path):
    """`pkg/_pmap_compat.py` as an earlier version of the tool wrote it (one parameter a line, a
    docstring listing the helpers): still this tool's, so a module fixed today imports it rather
    than keeping a copy, and the module is rewritten with today's helpers (which accept every call
    the earlier one's importers make); left as it is by a run that needs nothing of it."""
    root = package_holding(tmp_path / "older", OLDER)
    every_option = {"_shard_mapped", *feature_names(ALL_FEATURES)}  # (an earlier version's took them all)
    assert helpers_in(OLDER) == every_option and OLDER != module_text(every_option)
    fixed_before = "import jax\n\nfrom pkg._pmap_compat import _shard_mapped\n\nsquare = jax.jit(_shard_mapped(lambda x: x * x))\n"
    (root / "pkg" / "a.py").write_text(fixed_before)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    assert (root / "pkg" / "_pmap_compat.py").read_text() == OLDER  # nothing needed it
    (root / "pkg" / "b.py").write_text(OPS)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert "from pkg._pmap_compat import _replicate, _shard_mapped\n" in files["pkg/b.py"], files["pkg/b.py"]
    assert "def _shard_mapped(" not in files["pkg/b.py"]
    assert files["pkg/_pmap_compat.py"] == module_text({"_replicate", *every_option})  # its importers' options kept
    assert files["pkg/a.py"] == fixed_before


OLDER_MULTIPROCESS_DIR = Path(__file__).parent.parent / "fixtures" / "shared"
OLDER_MULTIPROCESS = (OLDER_MULTIPROCESS_DIR / "older_multiprocess_pmap_compat.py").read_text()


def test_a_multi_process_shared_module_of_the_previous_version_keeps_its_options_when_written_anew(tmp_path):
    """The multi-process helpers as the previous version wrote them (each process's devices
    grouped by hand): still this tool's, with the options its `_shard_mapped` took (in_axes,
    static positions, processes; not every option, as for older versions), and written anew with
    today's text, taking the same ones, when a fix needs something of it."""
    options = feature_names({"axes", "static", "processes"})
    held = {"_global_pmap", "_replicate", "_shard_mapped", "_to_global", *options}
    assert helpers_in(OLDER_MULTIPROCESS) == held and OLDER_MULTIPROCESS != module_text(held)
    root = package_holding(tmp_path / "older", OLDER_MULTIPROCESS)
    (root / "pkg" / "b.py").write_text(OPS)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert "from pkg._pmap_compat import _replicate, _shard_mapped\n" in files["pkg/b.py"], files["pkg/b.py"]
    assert files["pkg/_pmap_compat.py"] == module_text(held)
    assert "jax.local_devices(process_index=p)" in files["pkg/_pmap_compat.py"]
    # static positions without in_axes: `_global_pmap` converted the arguments through the in_axes loop
    static_only = (OLDER_MULTIPROCESS_DIR / "older_multiprocess_static_pmap_compat.py").read_text()
    held = {"_global_pmap", "_shard_mapped", "_to_global", *feature_names({"static", "processes"})}
    assert helpers_in(static_only) == held and static_only != module_text(held)
    assert len(module_text(held).splitlines()) < len(static_only.splitlines())


@pytest.mark.parametrize("name, options", [
    ("previous_multiprocess_pmap_compat.py", {"processes"}),
    ("previous_multiprocess_devices_pmap_compat.py", {"static", "processes", "devices"}),
])
def test_a_multi_process_module_whose_to_global_placed_arrays_by_hand_is_written_anew(tmp_path, name, options):
    """`_to_global` as the previous version wrote it (its own branch for rows already on this
    process's devices, a mesh of `np.array(devices)`): still this tool's, with its options, and
    written anew with today's shorter text when a fix needs the module."""
    previous = (OLDER_MULTIPROCESS_DIR / name).read_text()
    held = {"_global_pmap", "_shard_mapped", "_to_global", *feature_names(options)}
    assert helpers_in(previous) == held and previous != module_text(held)
    root = package_holding(tmp_path / "previous", previous)
    (root / "pkg" / "b.py").write_text(OPS)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    written = (root / "pkg" / "_pmap_compat.py").read_text()
    assert written == module_text(held | {"_replicate"}), written
    assert "host_local_array_to_global_array(  # no copy" in written and "import numpy as np" in written  # (_replicate's)


def test_a_shared_module_edited_by_hand_is_not_taken_for_an_earlier_versions(tmp_path):
    edited = OLDER.replace("    return mapped\n", "    return mapped  # ours now\n")
    assert helpers_in(edited) is None
    assert helpers_in(OLDER.replace('"""\n\nimport functools', '"""\n\nimport os\nimport functools')) is None


# --------------------------------------------------------------------------- the module's own names
BINDS_MESH = '''import jax
import numpy as np
from jax._src.mesh import Mesh

mesh = Mesh(np.array(jax.devices()), ("x",))


def double(x):
    return jax.pmap(lambda v: v * 2)(x)
'''


def test_a_module_binding_a_name_the_helper_uses_imports_the_helper_from_the_shared_module(tmp_path):
    """The compact call site uses `jax` only; the helper's `Mesh`, `P`, `jnp` are its module's.
    A module that binds `Mesh` otherwise (`from jax._src.mesh import Mesh`) is rewritten where the
    helper comes from the shared module; where the helper would be copied into it, the copy's
    `from jax.sharding import Mesh` would rebind the module's name: the name check keeps that site
    on the shim, with the reason."""
    root = tmp_path / "binds"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(BINDS_MESH)
    (root / "lone.py").write_text(BINDS_MESH)  # no package, no script: no shared module
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    files = tree(root)
    assert "return jax.jit(_shard_mapped(lambda v: v * 2))(x)" in files["pkg/mod.py"], files["pkg/mod.py"]
    assert "from jax._src.mesh import Mesh\n" in files["pkg/mod.py"] and "runtime_shim" not in files["pkg/mod.py"]
    assert "runtime_shim.pmap(lambda v: v * 2)(x)" in files["lone.py"], files["lone.py"]
    assert "would leave `Mesh` imported" in files["lone.py"]


def test_a_multi_process_site_names_only_its_helper_and_leaves_no_unused_import_jax(tmp_path):
    """`jax.pmap(f)(x)` of a multi-process module becomes `_global_pmap(f, "i")(x)` in its place:
    where nothing else uses `jax`, its `import jax` goes (no new F401; where a read's rewrite
    names `jax`, as in fixtures/fix/pm501_global_mesh.py, it stays)."""
    root = tmp_path / "mp"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "m.py").write_text(
        "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import multihost_utils\n\n\n"
        "def f(x):\n    out = jax.pmap(lambda v: v * 2)(jnp.asarray(x))\n"
        "    return multihost_utils.process_allgather(out)\n")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    text = tree(root)["pkg/m.py"]
    assert 'out = _global_pmap(lambda v: v * 2, "i")(jnp.asarray(x))\n' in text, text
    assert not re.search(r"^import jax$", text, re.M) and "import jax.numpy as jnp\n" in text, text
    compile(text, "m.py", "exec")


def test_a_multi_process_module_binding_mesh_otherwise_is_rewritten_too(tmp_path):
    """The multi-process form names its helper only at its sites (`_global_pmap(...)`): a
    multi-process module that binds `Mesh` from `jax._src.mesh` is rewritten, its helpers imported
    from the package's shared module."""
    root = tmp_path / "mp"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "m.py").write_text(
        "import jax\nimport jax.numpy as jnp\nfrom jax._src.mesh import Mesh\n"
        "from jax.experimental import multihost_utils\n\n\n"
        "def f():\n    out = jax.pmap(lambda x: x)(jnp.arange(2.0))\n"
        "    return multihost_utils.process_allgather(out), Mesh\n")
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    text = tree(root)["pkg/m.py"]
    assert "runtime_shim" not in text and re.search(r"_global_pmap\(lambda x: x", text), text
    assert "from jax._src.mesh import Mesh\n" in text and "from pkg._pmap_compat import" in text


@pytest.mark.parametrize("indent", ["  ", "    "])
def test_every_helper_line_fits_in_80_columns_in_a_module_of_that_indent(indent):
    """The strictest limit of the corpus's projects (brax, ferminet, flax's examples: 80), at the
    indentations the corpus uses: the helpers add no E501 there."""
    from pmap_migrate.rules.fixes import shared

    renders = {shared.GLOBAL_CALL: shared.global_call_helper, shared.HOST_LOCAL: shared.host_local_helper,
               shared.TO_GLOBAL: shared.to_global_helper}
    from pmap_migrate.rules.fixes.pmap_render import shard_mapped_helper

    texts = {name: render(indent) for name, render in renders.items()}
    texts["_shard_mapped"] = shard_mapped_helper("_shard_mapped", indent)
    long = {(name, line) for name, text in texts.items() for line in text.splitlines() if len(line) > 80}
    assert not long, long


# ------------------------------------------------------------- directories of tests, one session
FIRST_TEST = '''import jax
import numpy as np


def test_double():
    out = jax.pmap(lambda x: x * 2, axis_name="i")(np.arange(4.0).reshape(2, 2))
    print("double", np.asarray(out).tolist())
'''

SECOND_TEST = '''import jax
import numpy as np


def test_scaled():
    w = jax.device_put_replicated(np.float32(3.0), jax.local_devices()[:2])
    out = jax.pmap(lambda x, w: x * w, in_axes=(1, 0))(np.arange(4.0).reshape(2, 2), w)
    print("scaled", np.asarray(out).tolist())
'''

# What pytest's default import mode does with two directories of tests in one session: each test's
# directory first on sys.path, its module imported; `_pmap_compat` is imported once, from the first.
SESSION = '''import importlib
import sys

for directory, name, test in (("tests", "test_first", "test_double"), ("tests/more", "test_second", "test_scaled")):
    sys.path.insert(0, directory)
    getattr(importlib.import_module(name), test)()
'''


def _test_dirs(root: Path) -> Path:
    (root / "tests" / "more").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "tests" / "test_first.py").write_text(FIRST_TEST)
    (root / "tests" / "more" / "test_second.py").write_text(SECOND_TEST)
    (root / "session.py").write_text(SESSION)
    return root


def test_the_modules_beside_tests_hold_the_same_helpers_grown_together(tmp_path):
    """Fixed one directory at a time, the modules beside the project's tests end up identical,
    each with what any of them needs (not every helper): a second run that needs more grows the
    first directory's module too; either imported first serves both."""
    legacy = _test_dirs(tmp_path / "legacy")
    fixed = tmp_path / "fixed"
    shutil.copytree(legacy, fixed)
    assert run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", "tests/test_first.py").exit_code == 0
    first = (fixed / "tests" / "_pmap_compat.py").read_text()
    assert helpers_in(first) == {"_shard_mapped"}
    assert run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", "tests/more").exit_code == 0
    files = tree(fixed)
    assert files["tests/_pmap_compat.py"] == files["tests/more/_pmap_compat.py"] != first
    held = helpers_in(files["tests/_pmap_compat.py"])
    assert {"_shard_mapped", "_replicate", "_shard_mapped:axes"} <= held and held < EVERY_HELPER, held
    assert "jax.pmap" not in files["tests/test_first.py"] + files["tests/more/test_second.py"]
    again = run_cli(fixed, "fix", "--no-cache", "--unsafe-fixes", ".")
    assert again.exit_code == 0 and tree(fixed) == files
    outputs = _legacy_and_fixed_outputs(legacy, fixed, Path("session.py"))
    assert outputs[0] == outputs[1] != "", outputs


# --------------------------------------------------------------------------- the project's indentation
def test_a_package_written_with_two_spaces_gets_its_shared_module_in_two_spaces(tmp_path):
    """Most of Google's projects indent by two spaces: the shared module `fix` creates in such a
    package is written so (recognised as this tool's, current, and left as it is by the next
    run); a package indented by four keeps four."""
    two = {rel: re.sub(r"(?m)^((?:    )+)", lambda m: "  " * (len(m[1]) // 4), text) for rel, text in FILES.items()}
    root = tmp_path / "two"
    for rel, text in {"pyproject.toml": "[tool.pmap-migrate]\n", **two}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    written = (root / "pkg" / "_pmap_compat.py").read_text()
    held = helpers_in(written)
    assert held and '\n  """pmap(f, axis_name, ...) as shard_map' in written and "\n    key = " not in written, written
    assert written == module_text(held, "  "), written
    before = tree(root)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    assert tree(root) == before  # a fixpoint: the two-space module is current
    legacy = tmp_path / "legacy"
    for rel, text in two.items():
        (legacy / rel).parent.mkdir(parents=True, exist_ok=True)
        (legacy / rel).write_text(text)
    from tests.support import jaxenv

    assert _stdout(jaxenv.NEWEST, root) == _stdout(jaxenv.LEGACY, legacy)
    four = make_project(tmp_path / "four")
    assert run_cli(four, "fix", "--no-cache", ".").exit_code == 0
    assert '\n    """pmap(f, axis_name, ...) as shard_map' in (four / "pkg" / "_pmap_compat.py").read_text()
