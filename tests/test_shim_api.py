"""runtime_shim's own surface: what legacy jax had no equivalent of, so there is no
reference run to compare with. Checked in-process where no device is needed (install,
argument validation) and otherwise through ``tests/shim_programs/shim_behaviour.py`` and
small scripts run under ``python -m runtime_shim`` in the cached jax environments."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import jaxenv, shim_runs

jax = pytest.importorskip("jax", reason="the shim needs jax (the `test` extra installs it)")
import runtime_shim  # noqa: E402

ENVS = {"jax-0.7.2": jaxenv.LEGACY, "jax-0.10.2": jaxenv.NEW_311, "newest": jaxenv.NEWEST}


def _python(env: jaxenv.JaxEnv) -> Path:
    try:
        return jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as e:
        pytest.skip(str(e))


# ---------------------------------------------------------------------- in-process


@pytest.fixture
def restore_jax():
    yield
    runtime_shim.uninstall()


def test_install_replaces_pmap_and_removed_helpers_until_uninstall(restore_jax):
    original = jax.pmap
    had_helper = "device_put_replicated" in vars(jax)

    runtime_shim.install()
    runtime_shim.install()  # idempotent
    from jax import device_put_sharded, pmap  # after install(): must be the shim's

    assert (jax.pmap, pmap, device_put_sharded, jax.device_put_replicated) == (
        runtime_shim.pmap, runtime_shim.pmap, runtime_shim.device_put_sharded,
        runtime_shim.device_put_replicated)
    assert runtime_shim.installed()

    runtime_shim.uninstall()
    runtime_shim.uninstall()
    assert jax.pmap is original and not runtime_shim.installed()
    assert ("device_put_replicated" in vars(jax)) == had_helper


def test_install_accepts_the_removed_pmap_flag(restore_jax):
    if hasattr(jax.config, "jax_pmap_shmap_merge"):
        pytest.skip(f"jax {jax.__version__} still has the flag")
    with pytest.raises(AttributeError, match="jax_pmap_shmap_merge"):
        jax.config.update("jax_pmap_shmap_merge", False)
    runtime_shim.install()
    jax.config.update("jax_pmap_shmap_merge", False)  # a legacy program pinning old pmap
    jax.config.update("jax_enable_x64", False)  # other flags still go through
    runtime_shim.uninstall()
    with pytest.raises(AttributeError, match="jax_pmap_shmap_merge"):
        jax.config.update("jax_pmap_shmap_merge", False)


def test_install_puts_back_the_removed_names_with_an_exact_replacement(restore_jax):
    """From the table PM404 reports (runtime_shim.removed_api): the names whose replacement is the
    same object or function, where this jax lacks them; uninstall takes them away again."""
    import importlib

    from runtime_shim import removed_api

    if hasattr(jax, "tree_map"):
        pytest.skip(f"jax {jax.__version__} still has jax.tree_map")
    runtime_shim.install()
    assert (jax.tree_map, jax.tree_leaves, jax.tree_util.tree_multimap) == (jax.tree.map, jax.tree.leaves, jax.tree.map)
    from jax.experimental.pjit import PartitionSpec  # an import of a restored name works too

    assert PartitionSpec is jax.sharding.PartitionSpec
    optimizers = importlib.import_module("jax.experimental.optimizers")  # a moved module, importable again
    assert optimizers is importlib.import_module("jax.example_libraries.optimizers")
    assert jax.tree_map(lambda x: x + 1, [1, 2]) == [2, 3]
    restored = runtime_shim.restored()
    assert {"jax.tree_map", "jax.tree_util.tree_multimap", "jax.experimental.optimizers"} <= set(restored)
    exact = {entry.name for entry in removed_api.exact_replacements()}
    assert set(restored) <= exact
    # only exact replacements: `jnp.fix` -> `jnp.trunc` assumes no `out=` (an unsafe fix for PM404)
    assert "jax.numpy.fix" not in exact and not hasattr(jax.numpy, "fix")
    # every exact entry is put back, or this jax still has the name, or its module is gone
    for entry in removed_api.exact_replacements():
        parent, _, name = entry.name.rpartition(".")
        try:
            module = importlib.import_module(parent)
        except ImportError:
            assert entry.name not in restored
            continue
        if entry.name in restored:
            assert getattr(module, name) is _resolve(entry.replacement), entry.name
    assert "jax.lib.xla_bridge" not in sys.modules or jax.__version__.startswith("0.7")  # no module rebuilt

    runtime_shim.uninstall()
    assert not hasattr(jax, "tree_map") and not hasattr(jax.tree_util, "tree_multimap")
    assert "jax.experimental.optimizers" not in sys.modules and runtime_shim.restored() == []
    with pytest.raises(ImportError):
        importlib.import_module("jax.experimental.optimizers")


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            value = getattr(value, part)
        return value
    raise LookupError(dotted)


def test_install_never_shadows_a_name_jax_still_has(restore_jax, monkeypatch):
    from runtime_shim import _install, removed_api

    if "jax.experimental.jax2tf" in sys.modules:
        pytest.skip("jax.experimental.jax2tf is imported already")
    original = jax.tree_util.tree_map
    entries = (removed_api.RemovedName("jax.tree_util.tree_map", "0.7.2", "jax.tree.leaves", rename="same"),
               # a module this jax has, not imported yet (so no attribute of its package)
               removed_api.RemovedName("jax.experimental.jax2tf", "0.7.2", "jax.example_libraries.stax", rename="same"))
    monkeypatch.setattr(_install, "exact_replacements", lambda: entries)
    runtime_shim.install()
    assert jax.tree_util.tree_map is original
    assert "jax.experimental.jax2tf" not in sys.modules and runtime_shim.restored() == []


def test_global_arg_shapes_is_accepted_with_a_warning():
    with pytest.warns(UserWarning, match="global_arg_shapes"):
        f = runtime_shim.pmap(lambda x: x, global_arg_shapes=((8, 2),))
    assert callable(f) and callable(f.lower)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(fun=3), TypeError, "Expected a callable value, got 3"),
    (dict(in_axes=0.5), TypeError, "pmap in_axes must be an int, None, or"),
    (dict(out_axes=(0, "a")), TypeError, "pmap out_axes must be an int, None, or"),
])
def test_definition_errors_are_raised_before_any_call(kwargs, error, message):
    fun = kwargs.pop("fun", lambda x: x)
    with pytest.raises(error, match=message):
        runtime_shim.pmap(fun, **kwargs)


def test_negative_out_axes_fail_when_called_not_when_defined():
    # Legacy pmap accepted the definition and died on an assertion at the call: a pmap that is
    # built but never called (one branch of a program) must not fail.
    f = runtime_shim.pmap(lambda x: x + 1, out_axes=-1)
    with pytest.raises(ValueError, match="pmap out_axes must be non-negative, got -1"):
        f(jax.numpy.ones((1, 3)))


def test_decorator_forms_keep_the_function_metadata():
    import functools

    @functools.partial(runtime_shim.pmap, axis_name="batch", static_broadcasted_argnums=1)
    def step(x, k):
        """Docstring."""
        return x * k

    assert (step.__name__, step.__doc__, step.__wrapped__.__name__) == ("step", "Docstring.",
                                                                       "step")


def _looks_transformed(fn) -> bool:
    """How libraries tell a jax-transformed function from a plain one: chex 0.1.91's
    ``asserts_internal.is_traceable``, reproduced (tokens of jax's wrappers in the function's
    str or type; else follow ``__wrapped__``, true at a wrapper defined beside ``api_boundary``)."""
    str_tokens = (".reraise_with_filtered_traceback", "CompiledFunction", "pmap.", "PmapFunction",
                  "vmap.", "_python_pjit", "_cpp_pjit")
    type_tokens = ("PmapFunction", "PjitFunction")
    while True:
        if any(t in str(fn) for t in str_tokens) or any(t in str(type(fn)) for t in type_tokens):
            return True
        if not hasattr(fn, "__wrapped__"):
            return False
        fn_globals = getattr(fn, "__globals__", {})
        if fn_globals.get("__name__") == "jax.api" or "api_boundary" in fn_globals:
            return True
        fn = fn.__wrapped__


def _typed_as_pmapped(fn) -> bool:
    """haiku 0.0.15's ``transform.check_not_jax_transformed``, reproduced: the type's name."""
    return any(t in str(type(fn)) for t in ("PmapFunction", "PjitFunction"))


def test_the_pmapped_function_is_recognisable_as_a_jax_transform():
    def plain(x):
        return x

    assert not _looks_transformed(plain) and not _typed_as_pmapped(plain)
    assert not _looks_transformed(functools.wraps(plain)(lambda x: x))  # a plain decorator
    assert _looks_transformed(jax.jit(plain)) and _looks_transformed(jax.vmap(plain))
    shimmed = runtime_shim.pmap(plain, axis_name="i")
    assert _looks_transformed(shimmed) and _typed_as_pmapped(shimmed)
    assert shimmed.__wrapped__ is plain  # as on legacy pmap
    # A wrapper of it (chex's variants wrap the pmapped function with functools.wraps).
    assert _looks_transformed(functools.wraps(shimmed)(lambda *a: shimmed(*a)))


def test_the_pmapped_function_binds_as_a_method():
    class Model:
        scale = 3.0

        @functools.partial(runtime_shim.pmap, static_broadcasted_argnums=0)
        def apply(self, x):
            return x * self.scale

    assert Model.apply.__name__ == "apply"
    assert Model().apply(jax.numpy.ones((1, 2))).tolist() == [[3.0, 3.0]]


# ---------------------------------------------------------------------- programs


@pytest.fixture(scope="module", params=list(ENVS))
def behaviour(request) -> tuple[str, subprocess.CompletedProcess]:
    """``shim_behaviour.py`` (run directly: it imports the shim itself) on each jax."""
    runner = shim_runs.Runner(_python(ENVS[request.param]), shim=False)
    return request.param, runner.run(shim_runs.BEHAVIOUR)


@pytest.mark.jax_envs
def test_shim_only_behaviour(behaviour):
    env, proc = behaviour
    shim_runs.assert_expected_behaviour(proc, env)


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


REPORT = """
    import json, sys
    import jax, runtime_shim
    import helper  # a sibling module: the script's directory is on sys.path
    print(json.dumps({"argv": sys.argv, "name": __name__, "shim": jax.pmap is runtime_shim.pmap,
                      "double": jax.pmap(lambda x: x * 2)(jax.numpy.arange(2.0)).tolist()}))
    sys.exit(int(sys.argv[-1]))
"""


@pytest.mark.jax_envs
@pytest.mark.parametrize("env", ["jax-0.7.2", "newest"])
def test_python_dash_m_runtime_shim_runs_a_script(tmp_path, env):
    script = _script(tmp_path, "app/train.py", REPORT)
    _script(tmp_path, "app/helper.py", "")
    proc = jaxenv.run_program(_python(ENVS[env]), "-m", "runtime_shim", script, "--lr", "3",
                              devices=2)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == {"argv": [str(script), "--lr", "3"], "name": "__main__",
                                       "shim": True, "double": [0.0, 2.0]}


@pytest.mark.jax_envs
def test_python_dash_m_runtime_shim_runs_a_module(tmp_path):
    _script(tmp_path, "pkg/__init__.py", "")
    module = _script(tmp_path, "pkg/cli.py", REPORT)
    _script(tmp_path, "helper.py", "")
    proc = jaxenv.run_program(_python(jaxenv.NEWEST), "-m", "runtime_shim", "-m", "pkg.cli",
                              "0", devices=2, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == {"argv": [str(module), "0"], "name": "__main__",
                                       "shim": True, "double": [0.0, 2.0]}


def test_python_dash_m_runtime_shim_usage():
    proc = jaxenv.run_program(sys.executable, "-m", "runtime_shim")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: python -m runtime_shim")
    proc = jaxenv.run_program(sys.executable, "-m", "runtime_shim", "--help")
    assert proc.returncode == 0 and "python -m runtime_shim -m MODULE" in proc.stdout


@pytest.mark.jax_envs
def test_the_legacy_example_runs_unmodified_under_the_shim():
    """`python -m runtime_shim fixtures/example/train.py` on each jax: its pmap, its
    `device_put_replicated` and its `jax.tree_map` (gone from all of these releases) work, and the
    five steps print the same losses everywhere."""
    example = jaxenv.REPO / "fixtures" / "example" / "train.py"
    runs = {}
    for env, spec in ENVS.items():
        proc = jaxenv.run_program(_python(spec), "-m", "runtime_shim", example, devices=2)
        assert proc.returncode == 0, (env, proc.stderr[-3000:])
        lines = proc.stdout.splitlines()
        assert [line.split()[0] for line in lines[:5]] == ["0", "1", "2", "3", "4"] and len(lines) == 6, proc.stdout
        runs[env] = [float(line.split()[1]) for line in lines[:5]]
    first = next(iter(runs.values()))
    assert first == sorted(first, reverse=True)
    for env, losses in runs.items():
        assert losses == pytest.approx(first, rel=1e-5), env
