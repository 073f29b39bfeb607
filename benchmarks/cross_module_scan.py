"""Uses of pmap aliases and pmapped functions across modules: a reference count, and what `check` finds.

    python benchmarks/cross_module_scan.py TREE [--list] [--compare] [--json FILE]

An independent scan with Python's `ast` (none of pmap-migrate's code): every directory directly
under TREE is one repository. In each, the module-level names that are aliases of `jax.pmap`
(``pmap = jax.pmap``, ``functools.partial(jax.pmap, ...)``) or pmapped functions (``@jax.pmap``,
``@partial(jax.pmap, ...)``, ``f = jax.pmap(g)``, or applications of such an alias) are collected.
A module is known by every dotted suffix of its path in the repository (``a/b/c.py``: ``a.b.c``,
``b.c``, ``c``), so that absolute imports match however the repository sets up its path. Then
every Python file and notebook code cell of the repository is read for imports of those names or of
their modules (absolute, relative, ``import a.b as c``, ``from . import x``, re-exports through a
package's ``__init__.py`` one level deep), and their uses are counted:

- alias uses: calls ``alias(f)`` / ``module.alias(f)`` and decorators ``@alias`` / ``@module.alias``
  (``@partial(module.alias, ...)`` too) in a module other than the alias's own;
- calls of imported pmapped functions: ``step(x)``, ``module.step(x)``.

With ``--compare`` the tree is also analysed with pmap-migrate's semantic model and the project
index (each file as `check` would, each repository a project), and the sites it resolves
(alias applications whose alias another module defines; calls of functions another module pmaps)
are compared with the scan's, by (file, line): found, missed, and found beyond the scan.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

PMAP = {"jax.pmap", "jax.api.pmap"}
PARTIAL = {"functools.partial"}
SKIP = {".git", "__pycache__", ".venv", "node_modules", ".pmap_migrate_cache"}


def python_sources(path: Path) -> list[tuple[int, str]]:
    """(first line offset, source) of a .py file, or of each code cell of a notebook."""
    try:
        if path.suffix == ".ipynb":
            notebook = json.loads(path.read_text(encoding="utf-8"))
            cells = []
            for cell in notebook.get("cells", []):
                if cell.get("cell_type") == "code":
                    source = cell.get("source", "")
                    source = "".join(source) if isinstance(source, list) else source
                    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
                    cells.append((0, "\n".join(lines)))
            return cells
        return [(0, path.read_text(encoding="utf-8", errors="replace"))]
    except (OSError, ValueError):
        return []


def parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


def dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file()
                            and not SKIP & set(p.relative_to(root).parts))
        self.names: dict[Path, list[str]] = {}  # file -> dotted names it is known by
        self.by_name: dict[str, list[Path]] = defaultdict(list)
        for path in self.files:
            if path.suffix != ".py":
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names = [".".join(parts[i:]) for i in range(len(parts))] if parts else []
            self.names[path] = names
            for name in names:
                self.by_name[name].append(path)
        self.aliases: dict[Path, set[str]] = {}
        self.pmapped: dict[Path, set[str]] = {}
        self.reexports: dict[Path, dict[str, tuple[str, str]]] = {}  # __init__: local -> (module, name)

    # -- definitions
    def definitions(self) -> None:
        for path in self.names:
            sources = python_sources(path)
            tree = parse(sources[0][1]) if sources and "pmap" in sources[0][1] else None
            if tree is None:
                continue
            imports = top_imports(tree)
            aliases: set[str] = set()
            pmapped: set[str] = set()

            def is_pmap(node: ast.AST, aliases=aliases, imports=imports) -> bool:
                if isinstance(node, ast.Name) and node.id in aliases:
                    return True
                name = dotted(node)
                if name is None:
                    return False
                head, _, rest = name.partition(".")
                full = imports.get(head, head) + ("." + rest if rest else "")
                return full in PMAP

            def is_partial_pmap(node: ast.AST, imports=imports, is_pmap=is_pmap) -> bool:
                if not isinstance(node, ast.Call) or not node.args:
                    return False
                name = dotted(node.func)
                if name is None:
                    return False
                head, _, rest = name.partition(".")
                full = imports.get(head, head) + ("." + rest if rest else "")
                return full in PARTIAL and is_pmap(node.args[0])

            for statement in tree.body:
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                        and isinstance(statement.targets[0], ast.Name):
                    target, value = statement.targets[0].id, statement.value
                    if is_pmap(value) or is_partial_pmap(value):
                        aliases.add(target)
                    elif isinstance(value, ast.Call) and value.args \
                            and (is_pmap(value.func) or is_partial_pmap(value.func)):
                        pmapped.add(target)
                elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and any(is_pmap(d) or is_partial_pmap(d) for d in statement.decorator_list):
                    pmapped.add(statement.name)
            if aliases:
                self.aliases[path] = aliases
            if pmapped:
                self.pmapped[path] = pmapped
        for path in self.names:
            if path.name != "__init__.py":
                continue
            sources = python_sources(path)
            tree = parse(sources[0][1]) if sources else None
            if tree is None:
                continue
            found = {}
            for statement in tree.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    module = self.absolute(path, statement.level, statement.module)
                    for alias in statement.names:
                        found[alias.asname or alias.name] = (module, alias.name)
            if found:
                self.reexports[path] = found

    def absolute(self, path: Path, level: int, module: str | None) -> str:
        if not level:
            return module or ""
        parts = list(path.relative_to(self.root).parent.parts)
        parts = parts[:len(parts) - (level - 1)] if level > 1 else parts
        return ".".join([*parts, *([module] if module else [])])

    def modules(self, name: str, near: Path) -> list[Path]:
        """Files known as ``name``; the one nearest to ``near`` first."""
        found = self.by_name.get(name, [])
        return sorted(found, key=lambda p: -len(os.path.commonpath([str(p), str(near)])))

    def kind(self, module: str, name: str, near: Path, depth: int = 0) -> str | None:
        """'alias' / 'pmapped' when ``module``'s ``name`` is one (re-exports followed)."""
        for path in self.modules(module, near)[:1]:
            if name in self.aliases.get(path, ()):
                return "alias"
            if name in self.pmapped.get(path, ()):
                return "pmapped"
            target = self.reexports.get(path, {}).get(name)
            if target is not None and depth < 3:
                return self.kind(target[0], target[1], path, depth + 1)
        return None

    # -- uses
    def uses(self) -> list[tuple[str, str, int, str]]:
        """(kind, file, line, spelling) of every use in a module other than the definition's."""
        found = []
        for path in self.files:
            for offset, source in python_sources(path):
                tree = parse(source)
                if tree is None:
                    continue
                found.extend(self._uses_in(path, tree, offset))
        return found

    def _uses_in(self, path: Path, tree: ast.Module, offset: int):
        names: dict[str, str] = {}  # local name -> kind (an imported alias / pmapped function)
        modules: dict[str, str] = {}  # local name -> dotted module (an imported project module)
        for statement in ast.walk(tree):
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    if self.by_name.get(alias.name):
                        modules[alias.asname or alias.name] = alias.name
            elif isinstance(statement, ast.ImportFrom):
                module = self.absolute(path, statement.level, statement.module) if path.suffix == ".py" \
                    else (statement.module or "")
                for alias in statement.names:
                    local = alias.asname or alias.name
                    kind = self.kind(module, alias.name, path)
                    if kind is not None and path not in self.modules(module, path)[:1]:
                        names[local] = kind
                    elif self.by_name.get(f"{module}.{alias.name}" if module else alias.name):
                        modules[local] = f"{module}.{alias.name}" if module else alias.name
        if not names and not modules:
            return []
        found = []

        def classify(func: ast.AST) -> str | None:
            if isinstance(func, ast.Name):
                return names.get(func.id)
            name = dotted(func)
            if name is None or "." not in name:
                return None
            head, attribute = name.rsplit(".", 1)
            first, _, rest = head.partition(".")
            if first not in modules:
                return None
            module = modules[first] + ("." + rest if rest else "")
            if path in self.modules(module, path)[:1]:
                return None
            return self.kind(module, attribute, path)

        shown = str(path.relative_to(self.root))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                kind = classify(node.func)
                if (kind == "alias" and node.args) or kind == "pmapped":
                    found.append((kind, shown, node.lineno + offset, ast.unparse(node.func)))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    target = decorator.args[0] if isinstance(decorator, ast.Call) and decorator.args \
                        and dotted(decorator.func) in ("partial", "functools.partial") else decorator
                    if classify(target) == "alias":
                        found.append(("alias", str(path.relative_to(self.root)), decorator.lineno + offset,
                                      ast.unparse(target)))
        return found


def top_imports(tree: ast.Module) -> dict[str, str]:
    imports = {}
    for statement in tree.body:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                top = alias.name.split(".")[0]
                imports[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
            for alias in statement.names:
                imports[alias.asname or alias.name] = f"{statement.module}.{alias.name}"
    return imports


def tool_sites(tree: Path) -> set[tuple[str, str, int]]:
    """(kind, file, line) of the sites pmap-migrate's model resolves through the project index."""
    from libcst.metadata import MetadataWrapper

    from pmap_migrate import libcst_patches
    from pmap_migrate.libcst_patches import parse_module
    from pmap_migrate.notebooks import is_notebook, load
    from pmap_migrate.positions import positions
    from pmap_migrate.crossmodule import imports_exports, project_exports
    from pmap_migrate.rules.analysis.model import SemanticModel
    from pmap_migrate.runner import _importable, _project_view

    libcst_patches.install()
    found = set()
    projects = {}  # each repository is a project: its root, and what its modules export
    for path in sorted(p for p in tree.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file()
                       and not SKIP & set(p.relative_to(tree).parts)):
        repository = tree / path.relative_to(tree).parts[0]
        if repository not in projects:
            projects[repository] = (str(repository), frozenset(), _importable(project_exports(str(repository))[0]))
        project = projects[repository]
        data = path.read_bytes()
        if b"pmap" not in data and not imports_exports(data, project[2]):
            continue  # as `check` does: a file without pmap asks the index when it names an export
        view = _project_view(str(path), str(path), project)
        try:
            if is_notebook(str(path)):
                notebook = load(data, str(path))
                notebook.settle()
                module = notebook.tree
                if module is None:
                    continue
            else:
                tree_ast = parse(data.decode("utf-8", "replace"))
                if tree_ast is None or not view.refers_to_exports(tree_ast):
                    continue  # as `check` does: the index is asked only by importers of what it knows
                module = parse_module(data)
            model = SemanticModel(MetadataWrapper(module, unsafe_skip_copy=True), view)
        except Exception as error:  # noqa: BLE001 - files the tool cannot read count as found nowhere
            print(f"    not analysed: {path}: {type(error).__name__}", file=sys.stderr)
            continue
        nodes = []
        for node, site in model.sites.items():
            if site.callee.origin is not None:
                nodes.append(("alias", node))
        for call, site in model.pmap_calls().items():
            if site.origin is not None:
                nodes.append(("pmapped", call))
        if not nodes:
            continue
        where = positions(module, [n for _, n in nodes])
        repo_relative = path.relative_to(tree)
        shown = str(Path(*repo_relative.parts[1:]))
        for kind, node in nodes:
            line = where[node].start.line
            if is_notebook(str(path)):
                line = -1  # cells: compared by file only
            found.add((repo_relative.parts[0], kind, shown, line))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", type=Path)
    parser.add_argument("--list", action="store_true", help="print every use found")
    parser.add_argument("--compare", action="store_true", help="compare with pmap-migrate's project index")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tree = args.tree.resolve()
    uses = []
    for repo_root in sorted(p for p in tree.iterdir() if p.is_dir()):
        repo = Repo(repo_root)
        repo.definitions()
        for kind, file, line, spelling in repo.uses():
            uses.append((repo_root.name, kind, file, line, spelling))
    counts = Counter((repo, kind) for repo, kind, *_ in uses)
    print("reference (ast scan): uses in a module other than the definition's")
    for repo in sorted({r for r, _ in counts}):
        print(f"  {repo:24} aliases {counts[(repo, 'alias')]:4}   pmapped-function calls {counts[(repo, 'pmapped')]:4}")
    total = Counter(kind for _, kind, *_ in uses)
    print(f"  {'total':24} aliases {total['alias']:4}   pmapped-function calls {total['pmapped']:4}")
    if args.list:
        for use in uses:
            print("   ", *use)
    report = {"reference": [list(u) for u in uses]}
    if args.compare:
        found = tool_sites(tree)
        reference = {(r, k, f, -1 if f.endswith(".ipynb") else line) for r, k, f, line, _ in uses}
        for kind in ("alias", "pmapped"):
            ref = {x for x in reference if x[1] == kind}
            got = {x for x in found if x[1] == kind}
            print(f"pmap-migrate, {kind}: found {len(ref & got)} of {len(ref)}; missed {len(ref - got)}; "
                  f"beyond the scan {len(got - ref)}")
            for missed in sorted(ref - got):
                print("    missed:", *missed)
            for extra in sorted(got - ref):
                print("    beyond:", *extra)
        report["found"] = sorted(list(x) for x in found)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
