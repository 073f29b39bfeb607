"""The prefilter (codemod/prefilter.py) and the cached path: faster, and never a finding less.

A file the prefilter rules out is never analysed; a run is only as right as a full, slow run if
every file it rules out would have given no finding. Checked here on every rule example and every
fixture, on a generated tree through the CLI (prefilter on vs. off, cache cold vs. warm), and on
the spellings the names test must see through. `benchmarks/prefilter_identity.py` does the same on
real repositories.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.engine import lint_bytes
from pmap_migrate.notebooks import lint_notebook
from pmap_migrate.prefilter import _NOT_WORD_TO_SPACE, Gate, referenced_names
from pmap_migrate.rules import all_codes, all_rules, rules_by_code

ROOT = Path(__file__).resolve().parents[1]
RULES = all_rules()
GATE = Gate.of(RULES)


def _findings(data: bytes, path: str) -> list[tuple[str, int, int]]:
    lint = lint_notebook if path.endswith(".ipynb") else lint_bytes
    result = lint(data, path, RULES)
    return [(d.code, d.line, d.column) for d in result.diagnostics]


def test_rule_codes_are_known_without_importing_the_rules():
    assert all_codes() == tuple(rule.CODE for rule in RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.CODE)
def test_no_example_the_prefilter_rules_out_has_a_finding(rule):
    for example in [*rule.VALID, *rule.INVALID]:
        data = example.code.encode()
        if not GATE.needs_parse(data):
            assert _findings(data, "example.py") == [], example.code


def test_no_fixture_the_prefilter_rules_out_has_a_finding():
    files = [p for p in (ROOT / "fixtures").rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file()]
    assert len(files) > 100
    ruled_out = [p for p in files if not GATE.needs_parse(p.read_bytes(), p.suffix == ".ipynb")]
    assert ruled_out  # the test means something only if some files are ruled out
    for path in ruled_out:
        assert _findings(path.read_bytes(), path.name) == [], path


# Each spelling refers to the removed `jax.tree_map` (PM404) or a flax helper (PM303): the names test
# must admit it, and libcst must indeed report it.
REFERRING = [
    "import jax\njax.tree_map(f, x)\n",
    "import jax as J\nJ.tree_map(f, x)\n",
    "from jax import tree_map\n",
    "from jax import tree_map as tm\ny = tm(f, x)\n",
    "from jax import (\n    numpy,\n    tree_map,\n)\n",
    "import jax\ntm = jax.tree_map\n",
    "def f():\n    import jax\n    return jax.tree_map(g, x)\n",
    "import jax\ny = (jax\n     .tree_map)(f, x)\n",
    "from jax.experimental import maps\n",
    "import jax.experimental.maps\n",
    "from jax.experimental.maps import Mesh\n",
    "import jax as jé\njé.tree_map(f, x)\n",  # letters beyond ASCII next to a component
    "import jax\nφ=jax.tree_map(f, x)\n",
    "from jax.lib.xla_bridge import *\n",
    "from flax import jax_utils\nstate = jax_utils.replicate(state)\n",
    "import flax.jax_utils as fu\nstate = fu.replicate(state)\n",
    "from flax.training.common_utils import shard\nbatch = shard(batch)\n",
    "from jax.config import config\nconfig.update('jax_enable_x64', True)\n",
    "from jax import api\napi.jit(f)\n",
    # a chain of the last two components, its head bound to the name's prefix in another way
    "from jax import core\ncore.concrete_or_error(f, x)\n",
    "import jax as j\nj.core.concrete_or_error(f, x)\n",
    "import jax.core\njax.core.concrete_or_error(f, x)\n",
    "from jax.lib import xla_bridge\nxla_bridge.get_backend()\n",
    "import jax\nxb = jax.lib.xla_bridge\nxb.get_backend()\n",
    # a keyword reported on calls of any shard_map (PM401) or jit (PM403)
    "import jax\nf = jax.shard_map(g, mesh=m, in_specs=P('i'), out_specs=P('i'), check_rep=False)\n",
    "from jax import shard_map as sm\nf = sm(g, mesh=m, in_specs=P(), out_specs=P(), auto=frozenset({'j'}))\n",
    "import functools, jax\nf = functools.partial(jax.shard_map, check_rep=False)\n",
    "import jax\nf = jax.jit(g, in_axis_resources=P('x'))\n",
    "import jax\nj = jax.jit\nf = j(g,\n      out_axis_resources\n      =None)\n",
]


@pytest.mark.parametrize("code", REFERRING)
def test_the_names_test_sees_every_spelling(code):
    assert GATE.needs_parse(code.encode())
    assert _findings(code.encode(), "m.py"), "libcst should report this spelling too"


# Mentions of the same words that are not references: ruled out, and libcst agrees.
NOT_REFERRING = [
    "import jax\njax.tree_util.tree_map(f, x)\n",
    "from jax.tree_util import tree_map\ntree_map(f, x)\n",
    "import jax\nimport numpy as np\ndevices = jax.devices()\n",
    "# jax.tree_map is gone\nimport jax\nx = 'jax.tree_map'\n",
    "from mylib import replicate\nimport jax\nreplicate(jax.numpy.ones(3))\n",
    "import jax\nfrom jax.sharding import Mesh\nmaps = {}\nmaps['a'] = 1\n",
    # every component occurs, but only inside longer identifiers: no reference can resolve to it
    "import myjax as J\nJ.tree_mapper(f, x)\nmyjax.tree_map_fn = 1\n",
    "import jaxlib\njaxlib.tree_maps(f)\n",
    # the chain of the last two components, its head bound elsewhere (jax's own modules)
    "import jax\nfrom jax._src import core\ncore.concrete_or_error(f, x)\n",
    "import jax\nfrom jax._src.lib import xla_bridge\nxla_bridge.get_backend()\n",
    # the keywords without a call that passes them, or without the functions they are reported on
    "import jax\n# check_rep=False was renamed\nf = jax.shard_map(g, mesh=m, in_specs=P(), out_specs=P())\n",
    "import jax\nx = dict(auto=1)\nf = jax.pmapped_fn\n",
    "from mylib import shard_map\nf = shard_map(g, m, check_rep=False, auto=frozenset())\n",
    "import jax\nf = jax.jit(g)\nprint('in_axis_resources= is gone')\n",
    "import pjit_like\nf = pjit_like.pjit(g, in_axis_resources=P('x'))\n",
]


@pytest.mark.parametrize("code", NOT_REFERRING)
def test_mentions_that_are_not_references_are_ruled_out(code):
    assert not GATE.needs_parse(code.encode())
    assert _findings(code.encode(), "m.py") == []


def test_module_aliases_by_assignment_are_ruled_out_as_the_linter_does_not_follow_them():
    # libcst resolves names through imports, not assignments: `alias = jax` then `alias.tree_map`
    # is no reference to jax.tree_map for the rules, and the text test does not admit it either.
    code = b"import jax\nalias = jax\nalias.tree_map(f, x)\n"
    assert not GATE.needs_parse(code)
    assert _findings(code, "m.py") == []


@pytest.mark.parametrize("code", [
    "from jax import (\n    numpy as jnp,  # comment (with brackets)\n    tree_map,\n)\ntree_map(f, x)\n",
    "from jax import numpy as jnp, \\\n    tree_map\ntree_map(f, x)\n",
    "import jax as J\nJ.tree_map(f, x)\n",
    "from jax import lib as L\nL.xla_bridge.get_backend()\n",
    "import jax\ny = (jax.  # a comment inside brackets\n     tree_map(f, x))\n",
    "import jax\ny = jax.\\\n    tree_map(f, x)\n",
    "from jax . experimental . maps import Mesh\n",
    "from jax import *\ntree_map(f, x)\n",
])
def test_every_way_to_spell_a_reference_is_admitted(code):
    data = code.encode()
    assert GATE.needs_parse(data)
    assert _findings(data, "m.py") != [] or "import *" in code


@pytest.mark.parametrize("data", [
    bytes(range(256)) * 3,
    "jax.pmap(f)\nλ_jax = tree_map  # naïve\t\x0cjax_2.x\n".encode(),
    "import jax as j\r\nj . tree_util.tree_map(f)\\\n".encode("latin-1"),
    b"", b"___", b"\xff\xfejax\x00pmap",
])
def test_the_words_of_the_source_are_the_ascii_word_runs(data):
    """`spells_names` lists a file's words by translating every other byte to a space: exactly the
    runs a bytes pattern's ``\\w+`` finds."""
    assert data.translate(_NOT_WORD_TO_SPACE).split() == re.findall(rb"\w+", data)


def test_a_file_the_parser_rejects_is_left_to_libcst():
    assert GATE.needs_parse(b"import jax\njax.tree_map(f, x\n")


def test_a_notebook_whose_json_glues_an_escape_to_the_code_is_admitted():
    # "(\\ntree_map" in the JSON: as bytes `tree_map` is no word of its own, in the code it is.
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": "from jax import (\ntree_map,\n)\n"}
    notebook = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    assert b"(\\ntree_map" in notebook and b" tree_map" not in notebook
    assert GATE.needs_parse(notebook, notebook=True)


def test_a_notebook_is_judged_by_its_code_cells():
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["jax.tree_map is old"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import jax\n", "y = jax.tree_map(f, x)\n"]}]
    notebook = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    assert ast.parse(notebook)  # the JSON itself is a valid Python expression, with no reference
    assert GATE.needs_parse(notebook, notebook=True)
    cells[1]["source"] = ["import jax\n", "y = jax.tree_util.tree_map(f, x)\n"]
    clean = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    assert not GATE.needs_parse(clean, notebook=True)


def test_a_notebook_that_is_not_json_is_judged_by_its_bytes():
    """Not a readable notebook: admitted (libcst's notebook reader reports it) when some name's
    components occur in its bytes, ruled out otherwise, as before its code was read first."""
    broken = b'{"cells": [{"cell_type": "code", "source": "import jax\\njax.tree_map(f, x)"'
    assert GATE.needs_parse(broken, notebook=True)
    assert not GATE.needs_parse(b'{"cells": [{"cell_type": "code", "source": "import jax\\nf(x)"', notebook=True)
    assert not GATE.needs_parse(b'{"cells": [], "note": "no first component at all"', notebook=True)


def test_referenced_names_include_prefixes_and_star_imports():
    found = referenced_names(ast.parse("from jax.experimental import *\nmaps.Mesh\nimport a.b.c as d\nd.e\n"))
    assert {"jax.experimental.maps", "jax.experimental.maps.Mesh", "a", "a.b", "a.b.c", "a.b.c.e"} <= found


# ------------------------------------------------------------------ the CLI on a generated tree
def _tree(root: Path) -> None:
    """Fixture programs among decoys that mention the trigger words without a legacy pattern."""
    decoys = [
        "import jax\nx = jax.tree_util.tree_map(lambda a: a, {})\n",
        "# replicate the pmap-free path\nimport numpy as np\n",
        "import jax\nfrom jax.sharding import Mesh, PartitionSpec\nmesh = Mesh(jax.devices(), ('i',))\n",
        "heatmaps = bitmaps = None\ncall = lambda: None\n",
    ]
    sources = sorted((ROOT / "fixtures" / "lint").glob("*.py")) + sorted((ROOT / "fixtures" / "programs").glob("*.py"))
    for i, source in enumerate(sources):
        package = root / f"pkg{i % 7}"
        package.mkdir(exist_ok=True)
        (package / source.name).write_bytes(source.read_bytes())
        (package / f"decoy_{i}.py").write_text(decoys[i % len(decoys)])


def _check_json(tree: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(main, ["check", str(tree), "--output-format", "json", "--exit-zero", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_prefiltered_cached_and_full_runs_report_the_same(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    tree.mkdir()
    _tree(tree)
    monkeypatch.chdir(tmp_path)
    cold = _check_json(tree, "--jobs", "1")
    warm = _check_json(tree, "--jobs", "1")
    parallel = _check_json(tree, "--no-cache", "--jobs", "2")
    monkeypatch.setattr(Gate, "text_match", lambda self, data: True)  # no prefilter: analyse everything
    full = _check_json(tree, "--no-cache", "--jobs", "1")
    assert len(full) > 50
    assert cold == warm == parallel == full


def _run_in_a_fresh_process(cwd: Path, argv: list[str], modules: tuple[str, ...]) -> tuple[str, list[str]]:
    """``pmap-migrate ARGV`` in a new Python process: its output, then two lines: ``exit <code>`` and
    which of ``modules`` it had imported by the end."""
    script = (
        "import sys\n"
        "from pmap_migrate.cli import main\n"
        "try:\n"
        "    main(sys.argv[2:])\n"
        "except SystemExit as exit:\n"
        "    print('exit', exit.code)\n"
        "print(sorted(m for m in sys.argv[1].split(',') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, ",".join(modules), *argv], cwd=cwd, capture_output=True,
                          text=True, check=True)
    return done.stdout, done.stdout.splitlines()[-2:]


def test_a_run_answered_by_the_cache_does_not_import_libcst(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    _tree(tree)
    (cold, cold_last), (warm, warm_last) = [
        _run_in_a_fresh_process(tmp_path, ["check", str(tree), "--exit-zero", "--jobs", "1"], ("libcst", "jax"))
        for _ in range(2)]
    assert cold_last == ["exit 0", "['libcst']"]  # the cold run analyses files (and never imports jax)
    assert warm_last == ["exit 0", "[]"]
    assert cold.splitlines()[:-2] == warm.splitlines()[:-2] and "PM101" in warm


def test_each_rules_prefilter_inputs_are_its_declared_ones():
    from pmap_migrate.rules.knowledge.gates import BY_CODE

    assert tuple(BY_CODE) == all_codes()
    for rule in RULES:
        declared = BY_CODE[rule.CODE]
        assert (rule.TRIGGERS, rule.NAMES, rule.CONTEXT_NAMES, rule.KEYWORDS, rule.KEYWORD_NAMES) == (
            declared.TRIGGERS, declared.NAMES, declared.CONTEXT_NAMES, declared.KEYWORDS,
            declared.KEYWORD_NAMES), rule.CODE
        assert rule.NAMES or rule.TRIGGERS  # no rule runs on every file
        assert bool(rule.KEYWORDS) == bool(rule.KEYWORD_NAMES), rule.CODE


def test_the_declared_keywords_are_those_the_rules_report():
    from pmap_migrate.rules.knowledge import tables
    from pmap_migrate.rules.pm401_experimental_shard_map import _KEYWORD_MESSAGES

    assert set(_KEYWORD_MESSAGES) == set(rules_by_code()["PM401"].KEYWORDS) == {"check_rep", "auto"}
    assert set(rules_by_code()["PM403"].KEYWORDS) == set(tables.REMOVED_PJIT_KEYWORDS)


def test_the_gate_of_the_declarations_is_the_gate_of_the_rules():
    from pmap_migrate.prefilter import gate_of_codes

    codes = all_codes()
    assert gate_of_codes(codes) == GATE
    assert gate_of_codes(("PM104", "PM403")) == Gate.of(tuple(r for r in RULES if r.CODE in ("PM104", "PM403")))


def test_a_rule_without_a_declaration_is_read_from_its_class(monkeypatch):
    from pmap_migrate.prefilter import gate_of_codes
    from pmap_migrate.rules.knowledge import gates

    monkeypatch.setattr(gates, "BY_CODE", {code: value for code, value in gates.BY_CODE.items() if code != "PM104"})
    gate_of_codes.cache_clear()
    try:
        assert gate_of_codes(all_codes()) == GATE
    finally:
        gate_of_codes.cache_clear()


def test_a_run_whose_files_the_prefilter_rules_out_does_not_import_libcst(tmp_path):
    """A pre-commit run on a commit that touches no JAX code: no rule and no libcst is imported."""
    (tmp_path / "plain.py").write_text("import numpy as np\n\ndef pmapped_name():\n    return np.tree_map\n")
    (tmp_path / "legacy.py").write_text("import jax\nf = jax.pmap(lambda x: x)\n")
    check = ["check", "--no-cache", "--jobs", "1"]
    modules = ("libcst", "pmap_migrate.rules.base", "pmap_migrate.rules.analysis.model")
    out, last = _run_in_a_fresh_process(tmp_path, [*check, "plain.py"], modules)
    assert last == ["exit 0", "[]"], out
    out, last = _run_in_a_fresh_process(tmp_path, [*check, "plain.py", "legacy.py"], modules)
    assert "PM101" in out
    assert last == ["exit 1", str(sorted(modules))]


def test_a_fix_run_whose_files_the_prefilter_rules_out_does_not_import_libcst(tmp_path):
    """The pre-commit fix hook on a commit that touches no JAX code."""
    (tmp_path / "plain.py").write_text("import numpy as np\n\ndef pmapped_name():\n    return np.tree_map\n")
    (tmp_path / "legacy.py").write_text("import jax\nx = jax.tree_map(abs, [1])\n")
    fix = ["fix", "--no-cache", "--jobs", "1"]
    modules = ("libcst", "pmap_migrate.rules.base", "pmap_migrate.fixer")
    out, last = _run_in_a_fresh_process(tmp_path, [*fix, "plain.py"], modules)
    assert last == ["exit 0", "[]"], out
    out, last = _run_in_a_fresh_process(tmp_path, [*fix, "plain.py", "legacy.py"], modules)
    assert last == ["exit 0", str(sorted(modules))], out
    assert (tmp_path / "legacy.py").read_text() == "import jax\nx = jax.tree.map(abs, [1])\n"


def test_the_cache_keeps_only_a_few_result_files_of_other_selections(tmp_path):
    from pmap_migrate.cache import KEEP_OTHER_RESULTS, ResultCache
    from pmap_migrate.diagnostics import FileResult

    directory = tmp_path / "cache"
    for i in range(KEEP_OTHER_RESULTS + 5):
        cache = ResultCache(directory, f"key{i}")
        cache.store(str(tmp_path / "a.py"), (tmp_path).stat(), b"digest", FileResult("a.py"))
        cache.save()
    left = sorted(p.name for p in directory.glob("results-*.pickle"))
    assert len(left) == KEEP_OTHER_RESULTS + 1
    assert f"results-key{KEEP_OTHER_RESULTS + 4}.pickle" in left  # the newest stays


MANY_FORMS = '''
import a.b as c, d
from .e import (f as g, h)
from i import *
global_name: int = 1
async def k(p, /, q: "T" = 1, *r, s=2, **t) -> None:
    global global_name
    async with u as (v, w), x:
        async for y in z: pass
    def inner():
        nonlocal p
    try:
        pass
    except (E1, E2) as err:
        raise X from err
    finally:
        del v[0], w.attr
    match p:
        case {"k": 1, **rest}: pass
        case Point(x=0, y=[1, *others]) | None as found: pass
        case str() if (n := len(p)) > 2: pass
    return [i async for i in z if not i] or {k: -v for k, v in t.items()} and f"{p!r:>{q}}" + (lambda: p)()
@decorator(1)
class L(Base, metaclass=M):
    attr: list[int]
    x = yield_ = 3 if p else b"bytes" @ 2
'''


@pytest.mark.parametrize("path", [Path(ast.__file__), Path(json.__file__).parent / "decoder.py", "many forms"],
                         ids=str)
def test_child_nodes_lists_every_child_node_but_contexts_and_operators(path):
    """The fields `node_fields` passes over never hold a node the prefilter or the slicer looks at."""
    from pmap_migrate.prefilter import child_nodes

    source = MANY_FORMS if path == "many forms" else path.read_text(encoding="utf-8")
    leaves = (ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)
    seen = 0
    for node in ast.walk(ast.parse(source)):
        assert child_nodes(node) == [c for c in ast.iter_child_nodes(node) if not isinstance(c, leaves)]
        seen += 1
    assert seen > 150


# Python 3.12's type parameters (PEP 695): libcst parses them on any Python; an older `ast` does
# not, and the names test then reads the module without them (codemod/prefilter.py,
# `newer_grammar_tree`). The verdicts are the same on every Python.
GENERIC_CLEAN = (
    "import jax\n"
    "def register[T: Callable[..., Any]](rule: T) -> T:\n"
    "    return jax.jit(rule)\n"
    "class Box[T, *Ts, **P](Base):\n"
    "    def get[\n"
    "        U: (int, str),\n"
    "    ](self) -> U:\n"
    "        return jax.tree_util.tree_map(abs, self.x)\n"
    "if True:\n"
    "    type Pair[K] = tuple[K, K]\n"
    "    type Alias = int\n"
    "    check_rep = 'a word of the keywords, not passed'\n"
)


@pytest.mark.parametrize("code, admitted, found", [
    (GENERIC_CLEAN, False, False),
    (GENERIC_CLEAN + "y = jax.tree_map(abs, [1])\n", True, True),
    (GENERIC_CLEAN + "f = jax.shard_map(g, mesh=m, in_specs=P(), out_specs=P(), check_rep=False)\n", True, True),
    # a name's words inside the parameters taken out: unsure, so admitted (libcst reports it)
    ("import jax\ndef f[T: jax.tree_map](x: T) -> T:\n    return x\n", True, True),
    # not Python of any version, naming a legacy name: admitted, and libcst reports the syntax error
    (GENERIC_CLEAN + "def broken(:\n    return jax.tree_map\n", True, False),
])
def test_type_parameters_of_python_3_12_are_read_through(code, admitted, found):
    data = code.encode()
    assert GATE.needs_parse(data) == admitted
    result = lint_bytes(data, "m.py", RULES)
    assert bool(result.diagnostics) == found
    assert (result.error is not None) == ("broken(:" in code)


def test_a_check_of_a_generic_module_without_legacy_names_does_not_import_libcst(tmp_path):
    (tmp_path / "generic.py").write_text(GENERIC_CLEAN)
    out, last = _run_in_a_fresh_process(tmp_path, ["check", "--no-cache", "--jobs", "1", "generic.py"], ("libcst",))
    assert last == ["exit 0", "[]"], out
    (tmp_path / "generic.py").write_text(GENERIC_CLEAN + "y = jax.tree_map(abs, [1])\n")
    out, last = _run_in_a_fresh_process(tmp_path, ["check", "--no-cache", "--jobs", "1", "generic.py"], ("libcst",))
    assert "PM404" in out and last == ["exit 1", "['libcst']"], out


def test_without_type_parameters():
    from pmap_migrate.prefilter import without_type_parameters

    text, removed = without_type_parameters(GENERIC_CLEAN)
    ast.parse(text)
    assert "[T: Callable[..., Any]]" in removed and "U: (int, str)" in removed and "[K]" in removed
    assert "    Pair = tuple[K, K]\n" in text and "    Alias = int\n" in text and "def get(self) -> U:" in text
    assert without_type_parameters("type = 3\nprint(type)\n") is None  # `type` the name
    assert without_type_parameters("def f(x):\n    return x[0]\n") is None
