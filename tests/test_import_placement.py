"""Where `fix` puts the imports its rewrites need.

jax reads some settings from the environment when it is imported (`JAX_ENABLE_X64`,
`JAX_PLATFORMS`): a program that sets them in `os.environ` between its first imports and
`import jax` must not have jax imported earlier by an added `from jax.sharding import ...`.
The unit tests pin the placements; the program test runs such a program, legacy on jax 0.7.2
and fixed on the newer releases, and compares what it prints (float64 numbers on the CPU).
"""

from __future__ import annotations

import pytest

from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from tests.support import jaxenv

REPLICATED = "x = jax.device_put_replicated(p, jax.devices())\n"


def fixed(source: str) -> str:
    outcome = fix_bytes(source.encode(), "program.py", all_rules(), unsafe=True)
    assert outcome.error is None, outcome.error
    assert outcome.fixed is not None, "nothing fixed"
    return outcome.fixed.decode()


def lines_before(text: str, line: str) -> list[str]:
    lines = text.splitlines()
    return lines[:lines.index(line)]


def test_added_imports_come_after_an_environment_setting_before_import_jax():
    text = fixed('import os\nos.environ["JAX_ENABLE_X64"] = "1"\nimport jax\n' + REPLICATED)
    before = lines_before(text, 'os.environ["JAX_ENABLE_X64"] = "1"')
    assert before == ["import os"]
    after = text.splitlines()[2:6]
    assert after == ["import jax", "import jax.numpy as jnp", "import numpy as np",
                     "from jax.sharding import Mesh, NamedSharding"]


def test_added_imports_after_the_last_import_of_jaxs_block_with_a_docstring_and_blank_lines():
    source = ('"""doc"""\nimport os\n\nos.environ.setdefault("JAX_PLATFORMS", "cpu")\n\nimport jax\nimport numpy as np\n\n\n'
              '@jax.pmap\ndef f(x):\n    return x\n')
    text = fixed(source)
    assert lines_before(text, 'os.environ.setdefault("JAX_PLATFORMS", "cpu")') == ['"""doc"""', "import os", ""]
    # in isort's order among the imports after the setting
    assert text.index("import jax\nimport jax.numpy as jnp\nimport numpy as np\nfrom jax.sharding import") > text.index(
        'os.environ.setdefault("JAX_PLATFORMS", "cpu")')


def test_without_a_top_level_jax_import_they_go_just_before_the_first_statement_using_them():
    source = 'import os\nos.environ["JAX_ENABLE_X64"] = "1"\n\n\ndef main():\n    import jax\n    return ' + REPLICATED.split(" = ")[1]
    text = fixed(source)
    assert lines_before(text, "import jax") == ["import os", 'os.environ["JAX_ENABLE_X64"] = "1"']
    assert text.index("from jax.sharding import") < text.index("def main():")


def test_flax_import_counts_as_importing_jax():
    source = ('import os\nos.environ["JAX_ENABLE_X64"] = "1"\nfrom flax import jax_utils\nfrom mylib import load\n'
              'N = 3\nstate = jax_utils.replicate(load())\n')
    text = fixed(source)
    assert text.startswith('import os\nos.environ["JAX_ENABLE_X64"] = "1"\nimport jax\n'), text  # isort's order
    assert text.index("from mylib import load") < text.index("N = 3")


@pytest.mark.parametrize("source", [
    "import jax\nimport os\nos.environ['X'] = '1'\n" + REPLICATED,  # jax first: libcst's place, at the top
    "import os\n\n\ndef helper():\n    return 1\n\n\nimport jax\n" + REPLICATED,  # only definitions before jax
])
def test_the_usual_place_at_the_top_when_nothing_runs_before_jax_is_imported(source):
    text = fixed(source)
    top = text.splitlines()
    assert "from jax.sharding import Mesh, NamedSharding" in top[:5], text


def test_an_import_the_module_has_further_down_is_not_added_twice():
    source = ('import os\nos.environ["JAX_ENABLE_X64"] = "1"\nimport jax\nimport numpy as np\n'
              'from jax.sharding import Mesh\n' + REPLICATED)
    text = fixed(source)
    assert text.count("import numpy as np") == 1
    assert text.count("from jax.sharding import") == 2, text  # `Mesh` merged, the `as` import on its own line
    assert "from jax.sharding import Mesh, NamedSharding\n" in text


PROGRAM = '''"""float64 numbers through device_put_replicated and a pmap, x64 set before jax is imported."""
import os

os.environ["JAX_ENABLE_X64"] = "1"

import jax
import jax.numpy as jnp
import numpy as np


@jax.pmap
def scale(x):
    return x * jnp.float64(1) / 3


def main():
    np.set_printoptions(precision=17)
    stacked = jax.device_put_replicated(np.arange(3.0), jax.local_devices()[:2])
    out = scale(stacked)
    print(out.dtype, out.shape)
    print(np.asarray(out))


if __name__ == "__main__":
    main()
'''


def _run(env, script):
    try:
        python = jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as e:
        pytest.skip(str(e))
    proc = jaxenv.run_program(python, script, devices=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_program_setting_x64_before_import_jax_prints_the_same_float64_numbers(tmp_path):
    legacy = tmp_path / "legacy.py"
    legacy.write_text(PROGRAM)
    rewritten = tmp_path / "rewritten.py"
    rewritten.write_text(fixed(PROGRAM))
    expected = _run(jaxenv.LEGACY, legacy)
    assert expected.startswith("float64 (2, 3)\n"), expected
    for env in (jaxenv.NEW_311, jaxenv.NEWEST):
        assert _run(env, rewritten) == expected, env.name


def test_in_a_notebook_they_go_to_the_cell_that_imports_jax_not_the_one_setting_the_environment():
    import json

    from pmap_migrate.notebooks import fix_notebook

    cells = ['import os\nos.environ["JAX_ENABLE_X64"] = "1"', "import jax\nimport numpy as np",
             "x = jax.device_put_replicated(np.ones(3), jax.local_devices())\nprint(x.dtype)"]
    document = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                           "source": c.splitlines(keepends=True)} for c in cells],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    outcome = fix_notebook(json.dumps(document, indent=1).encode(), "nb.ipynb", all_rules(), unsafe=True)
    assert outcome.fixed is not None
    sources = ["".join(c["source"]) for c in json.loads(outcome.fixed)["cells"]]
    assert sources[0] == cells[0]
    assert sources[1].startswith("import jax\nimport jax.numpy as jnp\nimport numpy as np\n"
                                 "from jax.sharding import Mesh, NamedSharding\n"
                                 "from jax.sharding import PartitionSpec as P\n")
    assert "def _replicate(tree, devices):" in sources[1]  # the helper goes with the imports of jax
    assert sources[2].startswith("x = _replicate(np.ones(3), jax.local_devices())\n")
