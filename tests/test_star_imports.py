"""Star imports through the project index (issue 26): `from .constants import *` in the module that
uses the alias, or in a package's `__init__.py` that re-exports it, binds the names the star module
lets it bind (`__all__`, else those without a leading underscore); `check` reports the uses, `fix`
rewrites them, and an alias a package re-exports with a star is kept for that package's importers.

`fixtures/projects/star_imports/` is a runnable package: legacy jax 0.7.2 vs its fixed form on the
newest jax."""

from __future__ import annotations

import shutil
from pathlib import Path

from pmap_migrate.rules.analysis.facts import module_facts
from tests.support.projects import package_stdout, run_cli

PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "star_imports"
ALIAS = "import functools\n\nimport jax\n\npmap = functools.partial(jax.pmap, axis_name='i')\n"
USE = "from jax import lax\n\n{imports}\n\n\ndef total(x):\n    return pmap(lambda v: lax.psum(v, 'i'))(x)\n"


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return root


def _findings(root: Path) -> list[str]:
    result = run_cli(root, "check", "--no-cache", "--output-format", "concise", ".")
    return sorted(line.split(" ")[0] + " " + line.split(" ")[1] for line in result.output.splitlines()
                  if " PM" in line)


def test_the_facts_of_a_module_name_its_star_imports_and_its_all():
    facts = module_facts("from .constants import *\nfrom . import other\n__all__ = ['pmap', 'AXIS']\n",
                         "pkg", True)
    assert facts.stars == ["pkg.constants"] and facts.public == ["pmap", "AXIS"]
    assert facts.star_exports("pmap") and not facts.star_exports("other_name")
    plain = module_facts("from .constants import *\n", "pkg.use", False)
    assert plain.stars == ["pkg.constants"] and plain.star_exports("pmap") and not plain.star_exports("_pmap")


def test_check_reports_the_uses_of_a_star_imported_alias():
    assert _findings(PACKAGE) == [
        "sp/constants.py:10:11: PM101",  # `_legacy = jax.pmap`: reported where defined, bound by no star
        "sp/constants.py:9:8: PM101",
        "sp/evaluate.py:9:12: PM101",  # `from sp.api import pmap`: api.py star-imports constants
        "sp/evaluate.py:9:12: PM201",
        "sp/train.py:10:12: PM101",  # `from .constants import *` in the module itself
    ]


def test_a_package_that_re_exports_with_a_star_keeps_the_alias_for_its_importers(tmp_path: Path):
    root = _project(tmp_path, {"pkg/__init__.py": "from .constants import *\n", "pkg/constants.py": ALIAS,
                               "pkg/use.py": USE.format(imports="from pkg import pmap")})
    assert _findings(root) == ["pkg/constants.py:5:8: PM101", "pkg/use.py:7:12: PM101"]
    assert run_cli(root, "fix", "--no-cache", ".").exit_code == 0
    use = (root / "pkg" / "use.py").read_text()
    assert "pmap(" not in use.replace("_shard_mapped", "") and "from pkg import pmap" not in use
    constants = (root / "pkg" / "constants.py").read_text()
    assert "kept on the legacy shim: the public alias `pmap` is kept for uses not\n#   rewritten in: " \
           "pkg/__init__.py" in constants, constants


def test_all_and_underscores_say_what_a_star_binds(tmp_path: Path):
    root = _project(tmp_path, {"pkg/__init__.py": "", "pkg/constants.py": ALIAS + "__all__ = ['AXIS']\nAXIS = 'i'\n",
                               "pkg/use.py": USE.format(imports="from .constants import *  # noqa: F403")})
    # `pmap` is not in `__all__`: the star does not bind it, the name stays unresolved
    assert _findings(root) == ["pkg/constants.py:5:8: PM101"]


def test_star_imports_of_each_other_end(tmp_path: Path):
    root = _project(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from .b import *\n", "pkg/b.py": "from .a import *\n",
                               "pkg/use.py": USE.format(imports="from .a import *  # noqa: F403")})
    assert _findings(root) == []


# ------------------------------------------------------------------ differential
def test_the_fixed_package_prints_on_the_newest_jax_what_the_legacy_package_printed(tmp_path: Path):
    from tests.support import jaxenv

    legacy = shutil.copytree(PACKAGE, tmp_path / "legacy")
    fixed = shutil.copytree(PACKAGE, tmp_path / "fixed")
    result = run_cli(fixed, "fix", "--no-cache", ".")
    # left: `[0]` of a pmap output (PM201), read from the first device as legacy did
    assert result.exit_code == 1 and "Found 1 legacy pattern in 1 file." in result.output, result.output
    assert _findings(fixed) == ["sp/evaluate.py:10:12: PM201"]
    assert not [p for p in fixed.rglob("*.py") if "runtime_shim" in p.read_text()]
    assert "pmap =" not in (fixed / "sp" / "constants.py").read_text()  # no module needs the alias any more
    assert "# noqa: F405" in (fixed / "sp" / "train.py").read_text()  # the line's own comment stays
    reference = package_stdout(jaxenv.LEGACY, legacy, repo_on_path=False)
    assert reference.count("\n") == 2, reference
    for env in (jaxenv.NEWEST, jaxenv.LEGACY):
        assert package_stdout(env, fixed, repo_on_path=False) == reference, env.name
