"""The code's own imports keep the layout's promises (issue: one layout a newcomer can live in).

Read from the sources with ``ast`` (every import statement, at module level or inside a function):

- installed names: the linter is the package ``pmap_migrate`` (the folder ``codemod/``) with
  ``pmap_migrate.rules`` (``rules/``); the shim is ``runtime_shim``. No module imports the folders'
  own names (``codemod``, ``rules``), which other distributions own on the package index;
- one direction: knowledge <- analysis <- fixes <- rules (``base`` and the rule modules) <- the
  registry (``pmap_migrate.rules``) <- the engine (the rest of ``pmap_migrate``); rule modules do not
  import each other; the shim imports nothing of the linter, and the linter nothing of the shim but
  its table of removed jax names (``runtime_shim.removed_api``, PM404's), which imports nothing;
- no import cycle among the project's modules;
- no private name (``_x``) is imported from another module, and none defined in one subpackage is
  read (``obj._x``) in another.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> the package it is installed as (pyproject.toml's package-dir)
FOLDERS = {"codemod": "pmap_migrate", "rules": "pmap_migrate.rules", "runtime_shim": "runtime_shim"}
RULES = "pmap_migrate.rules"
# The one module of the shim the linter reads: the removed jax names PM404 reports and
# runtime_shim.install() puts back. Plain data: it imports nothing of the project, nor jax.
SHARED_TABLE = "runtime_shim.removed_api"
# The rules' support subpackages, lowest first: each may import only those before it.
SUPPORT = ("knowledge", "analysis", "fixes")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the module imported (the deepest project module the statement names)
    names: tuple[str, ...]  # the names imported from it (``from m import a, b``), else ()
    line: int


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder).with_suffix("")
            if any(part in ("build", "__pycache__") or part.endswith(".egg-info") for part in relative.parts):
                continue
            parts = [p for p in relative.parts if p != "__init__"]
            name = ".".join([package, *parts]) if parts else package
            if folder == "codemod" and parts[:1] == ["rules"]:
                continue
            found[name] = path
    return found


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str) -> list[Import]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(module, alias.name, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if _is_package(module) else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    found.append(Import(module, submodule, (), node.lineno))
                else:
                    found.append(Import(module, source, (alias.name,), node.lineno))
    return found


def _project_module(name: str) -> str | None:
    """The deepest project module ``name`` is or is inside of."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


IMPORTS = [imp for module in MODULES for imp in _imports(module)]
EDGES = [(imp, target) for imp in IMPORTS if (target := _project_module(imp.target)) and target != imp.source]


def layer(module: str) -> tuple[str, int]:
    """(group, rank): a module may import only modules of a lower rank in its group, or of its own
    rank where the rank allows it (support subpackages import themselves; rule modules do not)."""
    if module.startswith("runtime_shim"):
        return "shim", 0
    if module.startswith(RULES + "."):
        sub = module[len(RULES) + 1:].split(".")[0]
        if sub in SUPPORT:
            return "linter", SUPPORT.index(sub)
        return "linter", len(SUPPORT)  # base and the rule modules
    if module == RULES:
        return "linter", len(SUPPORT) + 1  # the registry
    return "linter", len(SUPPORT) + 2  # the engine


def test_the_folders_are_installed_under_the_projects_own_names():
    assert {"pmap_migrate", RULES, "runtime_shim"} <= set(MODULES)
    assert not any(m.split(".")[0] in ("codemod", "rules") for m in MODULES)
    wrong = [f"{imp.source}:{imp.line} imports {imp.target}" for imp in IMPORTS
             if imp.target.split(".")[0] in ("codemod", "rules")]
    assert not wrong, "the folders' own names are other distributions' on the package index:\n" + "\n".join(wrong)


def test_imports_go_one_way():
    wrong = []
    for imp, target in EDGES:
        (group, rank), (their_group, their_rank) = layer(imp.source), layer(target)
        if group != their_group:
            if group == "linter" and target == SHARED_TABLE:
                continue  # the shared table of removed names, below every layer of the linter
            wrong.append(f"{imp.source}:{imp.line} imports {target} (the shim and the linter are apart)")
        elif their_rank > rank:
            wrong.append(f"{imp.source}:{imp.line} imports {target}, a layer above it")
        elif their_rank == rank == len(SUPPORT) and target != f"{RULES}.base":
            wrong.append(f"{imp.source}:{imp.line} imports the rule module {target}")
        elif their_rank == rank and group == "linter" and rank < len(SUPPORT):
            pass  # within a support subpackage
    assert not wrong, "\n".join(wrong)


def test_the_linter_reads_only_the_shims_table_and_the_table_imports_nothing():
    readers = {imp.source for imp, target in EDGES if target.startswith("runtime_shim")
               and layer(imp.source)[0] == "linter"}
    assert {target for imp, target in EDGES if imp.source in readers and target.startswith("runtime_shim")} \
        == {SHARED_TABLE}
    assert readers == {f"{RULES}.knowledge.tables"}
    own = {imp.target.split(".")[0] for imp in IMPORTS if imp.source == SHARED_TABLE}
    assert own <= {"__future__", "dataclasses"}, own


def test_reading_the_shared_table_imports_no_jax():
    """The linter imports `runtime_shim.removed_api`, and so the shim's package: that loads its
    names lazily, and jax only with the first of them."""
    import subprocess
    import sys

    program = ("import sys\nimport pmap_migrate.rules.knowledge.tables\nimport runtime_shim\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'libcst')))\n"
               "from runtime_shim import pmap\nprint('jax' in sys.modules, callable(pmap))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.splitlines() == ["[]", "True True"], done.stdout + done.stderr


def test_knowledge_needs_no_libcst():
    """The prefilter reads the knowledge tables on runs that never load libcst."""
    wrong = [f"{imp.source}:{imp.line}" for imp in IMPORTS
             if imp.source.startswith(f"{RULES}.knowledge") and imp.target.split(".")[0] == "libcst"]
    assert not wrong


def test_no_import_cycle():
    graph: dict[str, set[str]] = defaultdict(set)
    for imp, target in EDGES:
        graph[imp.source].add(target)
    # Tarjan's strongly connected components: a component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(MODULES):
        if node not in index:
            connect(node)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _subpackage(module: str) -> str:
    """The package a module belongs to for privacy: its own package (a package's ``__init__`` is
    its own); the rules' flat modules (base, rule modules, registry) are one."""
    if _is_package(module):
        return module
    return module.rpartition(".")[0]


def _defined_names(module: str) -> set[str]:
    """Every name a module defines anywhere (functions, classes, methods, attributes assigned on
    ``self``, module and class variables)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def test_no_private_name_is_used_outside_its_subpackage():
    by_package: dict[str, set[str]] = defaultdict(set)
    for module in MODULES:
        by_package[_subpackage(module)] |= _defined_names(module)
    wrong = []
    for imp, target in EDGES:
        for name in imp.names:
            # not even within a subpackage: what another module uses is public
            if name.startswith("_") and not name.startswith("__") and not target.startswith("runtime_shim"):
                wrong.append(f"{imp.source}:{imp.line} imports {target}.{name}")
    for module in MODULES:
        if module.startswith("runtime_shim"):
            continue
        own = by_package[_subpackage(module)]
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own:
                continue  # a private name of this subpackage (on another of its objects)
            defined_elsewhere = [p for p, names in by_package.items() if node.attr in names]
            if defined_elsewhere:
                wrong.append(f"{module}:{node.lineno} reads `.{node.attr}` of {', '.join(sorted(defined_elsewhere))}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", sorted(m for m in MODULES if m.startswith(RULES + ".") and _is_package(m)))
def test_each_support_subpackage_says_what_it_holds(package):
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 20, f"{package} needs a one-paragraph docstring"


def test_the_rules_folder_holds_rules_and_named_subpackages():
    folder = ROOT / "rules"
    flat = sorted(p.stem for p in folder.glob("*.py"))
    assert [m for m in flat if not m.startswith("pm")] == ["__init__", "base"], flat
    subpackages = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").exists())
    assert subpackages == sorted(SUPPORT)


def test_support_modules_are_short():
    long = {}
    for module, path in MODULES.items():
        if module.startswith(RULES + ".") and module[len(RULES) + 1:].split(".")[0] in SUPPORT:
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > 600:
                long[module] = lines
    assert not long, long
