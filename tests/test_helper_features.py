"""The compact form's helper takes only the options its calls pass: `_shard_mapped(f, axis_name)`
alone where every pmap of a module (or of a package, for the shared module) maps every argument
and output on axis 0 over this process's first devices; `in_axes`/`out_axes`, the static
arguments, `devices`/`backend` and the multi-process mesh each only where a call passes them
(pmap_render.shard_mapped_helper). A later fix that passes one more grows the helper; the
programs before and after compute what legacy pmap computed."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.fixes.pmap_render import ALL_FEATURES, FEATURE_SETS, helper_features, shard_mapped_helper
from pmap_migrate.rules.fixes.shared import called_features, feature_names, helpers_in
from pmap_migrate.rules.knowledge import tables
from tests.support.projects import package_stdout, run_cli


@pytest.mark.parametrize("indent", ["  ", "    "])
@pytest.mark.parametrize("features", FEATURE_SETS, ids=lambda f: "+".join(sorted(f)) or "core")
def test_each_variant_compiles_fits_in_79_columns_and_is_recognised(features, indent):
    text = shard_mapped_helper("_shard_mapped", indent, features)
    compile(text, "<helper>", "exec")
    assert max(len(line) for line in text.splitlines()) <= 79
    assert helper_features(text, "_shard_mapped") == features
    assert helper_features(text.replace("made.clear()", "made.clear()  # mine"), "_shard_mapped") is None
    assert any(marker in text for marker in tables.REWRITTEN_PMAP)  # `check` admits the fixed file (PM201)
    # each option's parameter is there exactly when its feature is
    signature = text[:text.index(":  #") if features == ALL_FEATURES else text.index("):")]
    for option, feature in (("in_axes", "axes"), ("static_broadcasted_argnums", "static"),
                            ("devices", "devices"), ("processes", "processes"), ("nested", "nests")):
        assert (option in signature) == (feature in features), (option, signature)


@pytest.mark.parametrize("indent", ["  ", "    "])
@pytest.mark.parametrize("features", [frozenset(), frozenset({"axes"}), frozenset({"static"}), ALL_FEATURES],
                         ids=["short", "axes", "static", "long"])
def test_the_multi_process_helpers_compile_and_fit_in_79_columns(features, indent):
    from pmap_migrate.rules.fixes.shared import global_pmap_helper, host_local_helper, to_global_helper

    # (`_global_call`, which only modules an earlier version fixed import, keeps its text)
    for text in (global_pmap_helper(indent, features), to_global_helper(indent), host_local_helper(indent)):
        compile(text, "<helper>", "exec")
        assert max(len(line) for line in text.splitlines()) <= 79, text


def test_the_core_helper_is_a_third_of_the_whole_one():
    core, whole = (len(shard_mapped_helper("_shard_mapped", "    ", f).splitlines())
                   for f in (frozenset(), ALL_FEATURES))
    assert core <= 30 and whole == 91, (core, whole)


def _features(code: str) -> frozenset[str]:
    return called_features(cst.parse_module(code), "_shard_mapped")


def test_the_options_a_module_passes_are_read_from_its_calls():
    assert _features('p = jax.jit(_shard_mapped(f, "i"))\nq = jax.jit(_shard_mapped(g, axis_name="j"))\n') == set()
    assert _features("p = jax.jit(_shard_mapped(f, 'i', in_axes=(0, None)))\n") == {"axes"}
    assert _features("p = jax.jit(_shard_mapped(f, 'i', static_broadcasted_argnums=(1,)), static_argnums=(1,))\n"
                     "q = _global_call(jax.jit(_shard_mapped(g, 'i', processes=True)))\n") == {"static", "processes"}
    assert _features("@jax.jit\n@functools.partial(_shard_mapped, axis_name='i', backend='cpu')\n"
                     "def f(x):\n    return x\n") == {"devices"}
    assert _features("@jax.jit\n@_shard_mapped\ndef f(x):\n    return x\n") == set()
    assert _features("p = jax.jit(_shard_mapped(jax.jit(_shard_mapped(f, 'j', nested=True)), 'i', nested=True))\n") \
        == {"nests"}
    # the helper passed on, given an option it does not know or by position: it may need any
    assert _features("maps = [_shard_mapped]\n") == ALL_FEATURES
    assert _features("p = _shard_mapped(f, 'i', 0)\n") == ALL_FEATURES
    assert _features("p = _shard_mapped(f, 'i', axis_size=2)\n") == ALL_FEATURES
    assert _features("p = _shard_mapped(*args)\n") == ALL_FEATURES
    # its own definition, an import and an attribute of that name are not uses
    own = shard_mapped_helper("_shard_mapped", "    ", frozenset())
    assert _features("from pkg._pmap_compat import _shard_mapped\n" + own + "x = ops._shard_mapped\n") == set()


PLAIN = '''import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import numpy as np


def total(x):
    return jax.lax.psum(x, "i")


p_total = jax.pmap(total, "i")


def main():
    x = np.arange(24.0, dtype=np.float32).reshape(8, 3)
    print(np.asarray(p_total(x)).tolist())
'''

MORE = '''

def scaled(x, w, k):
    return x * w + k


p_scaled = jax.pmap(scaled, "i", in_axes=(0, None, 0), static_broadcasted_argnums=(2,))


def more():
    x = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    out = p_scaled(x, np.float32(3.0), 2)
    print(np.asarray(out).tolist(), out.shape)
'''

RUN = '''
if __name__ == "__main__":
    main()
'''


def _helper_text(text: str) -> str:
    start = text.index("def _shard_mapped(")
    return text[start:text.index("    return mapped\n", start)] + "    return mapped\n"


def _fixed(text: str) -> str:
    """``text`` after `fix` (unsafe fixes too) of a module that keeps its helpers (the fixer API
    without a shared module, as for a notebook)."""
    outcome = fix_bytes(text.encode(), "run.py", all_rules(), unsafe=True)
    assert outcome.error is None and outcome.fixed is not None
    return outcome.fixed.decode()


def test_a_module_gets_the_helper_its_pmaps_need_and_a_later_fix_grows_it(tmp_path: Path):
    first = _fixed(PLAIN + RUN)
    assert "def _shard_mapped(f, axis_name=None):\n" in first, first
    assert helper_features(_helper_text(first), "_shard_mapped") == frozenset()
    # a pmap with in_axes and static arguments joins the module: the helper takes them now
    second = _fixed(first.replace(RUN, MORE + RUN.replace("main()\n", "main()\n    more()\n")))
    assert second.count("def _shard_mapped(") == 1
    assert helper_features(_helper_text(second), "_shard_mapped") == {"axes", "static"}
    assert 'p_total = jax.jit(_shard_mapped(total, "i"))' in second
    assert fix_bytes(second.encode(), "run.py", all_rules(), unsafe=True).fixed is None  # a fixpoint
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "run.py").write_text(second)
    _same_as_legacy(tmp_path, fixed, PLAIN + MORE + RUN.replace("main()\n", "main()\n    more()\n"))


def test_the_shared_module_takes_what_its_importers_pass(tmp_path: Path):
    root = tmp_path / "pkgs"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "plain.py").write_text(PLAIN.replace("def main", "def run_plain"))
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    shared = root / "pkg" / "_pmap_compat.py"
    assert helpers_in(shared.read_text()) == {"_shard_mapped"}
    plain_fixed = (root / "pkg" / "plain.py").read_text()
    (root / "pkg" / "more.py").write_text("import jax\nimport numpy as np\n" + MORE)
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    assert helpers_in(shared.read_text()) == {"_shard_mapped", *feature_names({"axes", "static"})}
    assert (root / "pkg" / "plain.py").read_text() == plain_fixed  # its calls hold with the larger helper
    main = "from pkg.more import more\nfrom pkg.plain import run_plain\n\nrun_plain()\nmore()\n"
    (root / "run.py").write_text(main)
    legacy = tmp_path / "legacy"
    (legacy / "pkg").mkdir(parents=True)
    (legacy / "pkg" / "__init__.py").write_text("")
    (legacy / "pkg" / "plain.py").write_text(PLAIN.replace("def main", "def run_plain"))
    (legacy / "pkg" / "more.py").write_text("import jax\nimport numpy as np\n" + MORE)
    (legacy / "run.py").write_text(main)
    _compare(legacy, root)


def _same_as_legacy(tmp_path: Path, fixed: Path, legacy_text: str) -> None:
    legacy = tmp_path / "legacy_one"
    legacy.mkdir()
    (legacy / "run.py").write_text(legacy_text)
    _compare(legacy, fixed)


def _compare(legacy: Path, fixed: Path) -> None:
    from tests.support import jaxenv

    assert not [p for p in fixed.rglob("*.py") if "runtime_shim" in p.read_text() or "jax.pmap" in p.read_text()]
    reference = package_stdout(jaxenv.LEGACY, legacy, repo_on_path=False)
    assert reference.count("[") > 2, reference
    shutil.rmtree(fixed / "__pycache__", ignore_errors=True)
    for env in (jaxenv.NEWEST, jaxenv.LEGACY):
        assert package_stdout(env, fixed, repo_on_path=False) == reference, env.name


def test_a_multi_process_package_whose_pmaps_map_on_axis_0_gets_the_shorter_global_call():
    """`_global_call` reads in_axes and static positions from `_shard_mapped`'s function: where no
    importer passes them, the shared module holds the form for axis 0 only; one that passes them
    makes it the whole form again (the 2-process differential of a package using the shorter form:
    tests/test_crossmodule_multiprocess.py)."""
    from pmap_migrate.rules.fixes.shared import GLOBAL_CALL, global_call_helper, module_text

    mp = {"_global_call", "_shard_mapped"}
    short = module_text(mp | feature_names({"processes"}))
    assert "def _global_call(jitted, local=False):\n" in short
    assert max(len(line) for line in global_call_helper("    ", frozenset()).splitlines()) <= 80
    compile(short, "<shared>", "exec")
    assert helpers_in(short) == mp | {"_host_local", "_to_global"} | feature_names({"processes"})
    for more in ({"axes"}, {"static"}):
        whole = module_text(mp | feature_names({"processes", *more}))
        assert global_call_helper("    ").strip() in whole, more
        assert helpers_in(whole) == mp | {"_host_local", "_to_global"} | feature_names({"processes", *more})
    # a module that a version writing the whole form wrote is still this tool's, and written anew
    older = short.replace(global_call_helper("    ", frozenset()).strip(), global_call_helper("    ").strip())
    assert helpers_in(older) is not None and GLOBAL_CALL in helpers_in(older)


@pytest.mark.parametrize("features", [frozenset(), frozenset({"axes"}), frozenset({"static"}),
                                      frozenset({"axes", "static"})], ids=["none", "axes", "static", "both"])
def test_the_multi_process_pmap_passes_on_exactly_the_options_its_package_uses(features):
    """`_global_pmap` takes and passes on to `_shard_mapped` the options its package's calls pass
    (in_axes/out_axes, static_broadcasted_argnums), and `_shard_mapped` takes no other."""
    from pmap_migrate.rules.fixes.shared import GLOBAL_PMAP, module_text

    text = module_text({GLOBAL_PMAP} | feature_names(features | {"processes"}))
    namespace: dict = {}
    exec(compile(text, "_pmap_compat.py", "exec"), namespace)
    import inspect

    pmap_params = set(inspect.signature(namespace["_global_pmap"]).parameters)
    mapped_params = set(inspect.signature(namespace["_shard_mapped"]).parameters)
    for option, feature in (("in_axes", "axes"), ("static_broadcasted_argnums", "static")):
        assert (option in pmap_params) == (feature in features) == (option in mapped_params), (option, text)
    assert "def _global_call(" not in text and "def _host_local(" not in text



def test_the_compact_helper_names_nothing_of_the_multi_process_api():
    """A single-process module's own copy of `_shard_mapped` takes every option, `processes` too:
    were it to call `jax.process_count()`, the fixed module would look multi-process to PM501, and
    a pmap the fix left (a `# noqa`) would be rewritten for every process by the next round."""
    from pmap_migrate.rules.fixes.pmap_render import FEATURE_SETS

    for features in FEATURE_SETS:
        for indent in ("  ", "    "):
            text = shard_mapped_helper("_shard_mapped", indent, features)
            assert not any(name in text for name in ("process_count", "process_index(", "host_id", "host_count",
                                                     "multihost_utils", "jax.distributed")), text
