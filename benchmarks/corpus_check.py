"""Prove `pmap-migrate check` on real code: every `jax.pmap` reference an independent scan finds
must be reported, and nothing may crash.

    python benchmarks/corpus_check.py DIR [DIR ...] [--pmap-migrate EXE] [--jobs N] [--json FILE]

The independent scan uses only Python's ``ast`` (not libcst, not this package). It resolves names
through the imports of each scope (``import jax``, ``import jax as J``, ``import jax.api``,
``from jax import pmap as p``, ``from jax._src import api``, ...) and records every read of
``jax.pmap`` / ``jax.api.pmap`` / ``jax._src.api.pmap``: attribute chains and imported names used
outside their import. Reads of module-local aliases (``p = jax.pmap``, ``pi = partial(jax.pmap,
...)``) are recorded apart: they explain findings that have no direct reference. Notebooks
(``.ipynb``) are scanned through their code cells joined into one module (IPython syntax masked
line for line; the statement of ``%time``/``%timeit``/``%prun`` is kept, since it runs), and
matched to findings by cell and line.

Then ``pmap-migrate check --output-format json --no-cache --select PM101,PM103`` runs as a
subprocess over the same directories, with ``--config`` naming an empty ``[tool.pmap-migrate]``
table so the repositories' own configuration cannot interfere (a directory named on the command
line is always checked). A reference is matched by a finding in the same file whose
[line, end_line] contains its line. References the linter legitimately leaves out — under
``if hasattr(jax, ...)`` / a jax version test, in a ``try`` catching AttributeError/ImportError,
on a ``# noqa`` line, or inside a directory the discovery always skips — are classified by the
same independent scan and listed, not counted as misses.

Finally a run with every rule reports counts per rule and internal errors (PM002).
Exit status: 0 when nothing is missed and nothing crashed, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

# run as a script, so benchmarks/ is sys.path[0]
from _corpus_report import print_list, print_table

PMAP_NAMES = frozenset({"jax.pmap", "jax.api.pmap", "jax._src.api.pmap"})
PARTIAL_NAMES = frozenset({"functools.partial"})
GUARD_EXCEPTIONS = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError"})
VERSION_ATTRS = frozenset({"__version__", "__version_info__", "__version_info"})
# Directory names the linter's discovery skips below a named directory (README, "Configuration").
ALWAYS_SKIPPED = frozenset({
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".mypy_cache", ".nox", ".pants.d",
    ".pytype", ".ruff_cache", ".pmap_migrate_cache", ".svn", ".tox", ".venv", "__pypackages__",
    "_build", "buck-out", "build", "dist", "node_modules", "site-packages", "venv", "__pycache__",
    ".ipynb_checkpoints",
})
# The linter on PATH, else the one installed next to this interpreter.
DEFAULT_EXE = shutil.which("pmap-migrate") or str(Path(sys.executable).with_name("pmap-migrate"))
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
FILE_NOQA = re.compile(r"#\s*pmap-migrate\s*:\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?",
                       re.IGNORECASE)


# --------------------------------------------------------------------------- independent scan
@dataclass
class Reference:
    path: str
    line: int
    col: int
    spelling: str  # source text of the reference (`jax.pmap`, `p`, `J.api.pmap`)
    qualified: str  # what it resolves to (`jax.pmap`) or `alias of jax.pmap`
    kind: str  # "direct" | "alias" | "store"
    guard: str | None = None  # why the linter may legitimately leave it out
    source: str = ""
    cell: int | None = None  # notebooks: 1-based cell index (markdown cells counted); line is within it


@dataclass
class FileScan:
    path: str
    ok: bool = True
    error: str | None = None
    refs: list[Reference] = field(default_factory=list)
    unresolved: list[Reference] = field(default_factory=list)  # `jax.pmap` text with `jax` unbound
    skipped_cells: list[str] = field(default_factory=list)  # notebook cells ast.parse rejects


_OTHER = ("other", None)


class _Scope:
    def __init__(self, node: ast.AST, kind: str, parent: "_Scope | None") -> None:
        self.node = node
        self.kind = kind  # module | function | class | comprehension
        self.parent = parent
        # name -> list of ("import", qualified) | ("assign", value-node) | ("other", None)
        self.bindings: dict[str, list[tuple[str, object]]] = defaultdict(list)
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()

    def bind(self, name: str, value: tuple[str, object]) -> None:
        self.bindings[name].append(value)


class _Binder(ast.NodeVisitor):
    """Builds scopes and their bindings; remembers the scope of every Name/Attribute read."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = _Scope(tree, "module", None)
        self.scope = self.module
        self.scope_of: dict[int, _Scope] = {}  # id(node) -> scope where the node is evaluated

    def _visit_in(self, scope: _Scope, nodes) -> None:
        saved, self.scope = self.scope, scope
        for node in nodes:
            if node is not None:
                self.visit(node)
        self.scope = saved

    # scopes -------------------------------------------------------------------------------
    def _function(self, node) -> None:
        if not isinstance(node, ast.Lambda):
            self.scope.bind(node.name, _OTHER)
            for decorator in node.decorator_list:
                self.visit(decorator)
            if node.returns is not None:
                self.visit(node.returns)
        args = node.args
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default)
        inner = _Scope(node, "function", self.scope)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                inner.bind(arg.arg, _OTHER)
                if arg.annotation is not None:
                    self.visit(arg.annotation)
        body = [node.body] if isinstance(node, ast.Lambda) else node.body
        self._visit_in(inner, body)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.bind(node.name, _OTHER)
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._visit_in(_Scope(node, "class", self.scope), node.body)

    def _comprehension(self, node) -> None:
        # The first iterable is evaluated in the enclosing scope.
        self.visit(node.generators[0].iter)
        inner = _Scope(node, "comprehension", self.scope)
        saved, self.scope = self.scope, inner
        for index, generator in enumerate(node.generators):
            self.visit(generator.target)
            if index:
                self.visit(generator.iter)
            for condition in generator.ifs:
                self.visit(condition)
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                self.visit(getattr(node, part))
        self.scope = saved

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    # bindings -----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.scope.bind(alias.asname, ("import", alias.name))
            else:
                head = alias.name.split(".", 1)[0]
                self.scope.bind(head, ("import", head))
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module if not node.level else None
        for alias in node.names:
            if alias.name == "*":
                if module == "jax":  # `from jax import *` binds pmap
                    self.scope.bind("pmap", ("import", "jax.pmap"))
                continue
            local = alias.asname or alias.name
            self.scope.bind(local, ("import", f"{module}.{alias.name}") if module else _OTHER)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.nonlocals.update(node.names)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                self._bind_target(target.id, ("assign", (node.value, self.scope)))
                self.scope_of[id(target)] = self.scope
            else:
                self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        if isinstance(node.target, ast.Name) and node.value is not None:
            self._bind_target(node.target.id, ("assign", (node.value, self.scope)))
            self.scope_of[id(node.target)] = self.scope
        else:
            self.visit(node.target)

    def _bind_target(self, name: str, value) -> None:
        scope = self.scope
        if name in scope.globals:
            scope = self.module
        scope.bind(name, value)

    def visit_Name(self, node: ast.Name) -> None:
        self.scope_of[id(node)] = self.scope
        if not isinstance(node.ctx, ast.Load):
            self._bind_target(node.id, _OTHER)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        scope = self.scope
        while scope.kind == "comprehension" and scope.parent is not None:
            scope = scope.parent  # walrus in a comprehension binds in the enclosing scope
        scope.bind(node.target.id, _OTHER)
        self.scope_of[id(node.target)] = scope

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind_target(node.name, _OTHER)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.scope_of[id(node)] = self.scope
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        pass

    def _bind_pattern_names(self, node: ast.AST) -> None:
        for name in ("name", "rest"):
            value = getattr(node, name, None)
            if isinstance(value, str):
                self._bind_target(value, _OTHER)

    def visit_MatchAs(self, node) -> None:
        self._bind_pattern_names(node)
        self.generic_visit(node)

    def visit_MatchStar(self, node) -> None:
        self._bind_pattern_names(node)

    def visit_MatchMapping(self, node) -> None:
        self._bind_pattern_names(node)
        self.generic_visit(node)


class _Resolver:
    def __init__(self, binder: _Binder) -> None:
        self.binder = binder
        self._busy: set[tuple[int, str]] = set()

    def lookup(self, name: str, scope: _Scope) -> list[tuple[str, object]] | None:
        """The bindings a read of ``name`` in ``scope`` may see (None: unbound/builtin)."""
        if name in scope.globals:
            return self.binder.module.bindings.get(name)
        current, first = scope, True
        while current is not None:
            if current.kind == "class" and not first:
                current = current.parent  # class bodies are invisible to nested scopes
                continue
            if name in current.bindings:
                return current.bindings[name]
            current, first = current.parent, False
        return None

    def value_kinds(self, name: str, scope: _Scope) -> tuple[set[str], set[str]]:
        """(qualified module/object names imported under ``name``, pmap aliases it may hold)."""
        imports: set[str] = set()
        aliases: set[str] = set()
        key = (id(scope), name)
        if key in self._busy:
            return imports, aliases
        self._busy.add(key)
        try:
            for kind, value in self.lookup(name, scope) or ():
                if kind == "import":
                    imports.add(value)
                elif kind == "assign":
                    alias = self.alias_value(*value)
                    if alias:
                        aliases.add(alias)
        finally:
            self._busy.discard(key)
        return imports, aliases

    def qualified(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.Name):
            scope = self.binder.scope_of.get(id(node))
            return self.value_kinds(node.id, scope)[0] if scope is not None else set()
        if isinstance(node, ast.Attribute):
            return {f"{q}.{node.attr}" for q in self.qualified(node.value)}
        return set()

    def alias_value(self, value: ast.AST, scope: _Scope) -> str | None:
        """`jax.pmap` for `p = jax.pmap` / `q = p`; `partial(jax.pmap)` for `partial(jax.pmap, ...)`."""
        if isinstance(value, (ast.Name, ast.Attribute)):
            if self.qualified(value) & PMAP_NAMES:
                return "jax.pmap"
            if isinstance(value, ast.Name):
                found = self.value_kinds(value.id, self.binder.scope_of.get(id(value), scope))[1]
                return next(iter(sorted(found)), None)
        if isinstance(value, ast.Call) and value.args and self.qualified(value.func) & PARTIAL_NAMES:
            inner = self.alias_value(value.args[0], scope)
            if inner:
                return f"partial({inner})"
        return None


def _enclosing(parents: dict[int, ast.AST], node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(child, ancestor) pairs from ``node`` up to the module."""
    child = node
    parent = parents.get(id(node))
    while parent is not None:
        yield child, parent
        child, parent = parent, parents.get(id(parent))


def _probes_jax(resolver: _Resolver, test: ast.AST) -> bool:
    for node in ast.walk(test):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr") and node.args):
            if any(q == "jax" or q.startswith("jax.") for q in resolver.qualified(node.args[0])):
                return True
        if isinstance(node, ast.Attribute) and node.attr in VERSION_ATTRS:
            if any(q.startswith("jax") for q in resolver.qualified(node)):
                return True
        if isinstance(node, ast.Name) and any(
                q.startswith("jax") and q.rsplit(".", 1)[-1] in VERSION_ATTRS | {"_version"}
                for q in resolver.qualified(node)):
            return True
    return False


def _catches_api_errors(node: ast.Try) -> bool:
    for handler in node.handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(t, ast.Name) and t.id in GUARD_EXCEPTIONS for t in types):
            return True
    return False


def _noqa_lines(text: str) -> tuple[dict[int, frozenset[str]], frozenset[str]]:
    by_line: dict[int, frozenset[str]] = {}
    whole: frozenset[str] = frozenset()
    if "noqa" not in text.lower():
        return by_line, whole

    def codes(group):
        return frozenset({"*"}) if not group else frozenset(c.upper() for c in re.split(r"[\s,]+", group.strip()) if c)
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.COMMENT:
                continue
            row, col = token.start
            file_match = FILE_NOQA.search(token.string)
            if file_match:
                if not token.line[:col].strip():
                    whole |= codes(file_match.group("codes"))
                continue
            match = NOQA.search(token.string)
            if match:
                by_line[row] = by_line.get(row, frozenset()) | codes(match.group("codes"))
    except (tokenize.TokenError, SyntaxError):
        pass
    return by_line, whole


def _guard(resolver: _Resolver, parents, node: ast.AST, noqa, lines: list[str]) -> str | None:
    by_line, whole = noqa
    suppressing = {"*", "PM101", "PM103"}
    if whole & suppressing:
        return "file noqa"
    # The finding's line is the start of the reported node: the reference itself, or the call or
    # decorator applying it; accept a noqa on any line from the decorator/statement start on.
    start = node.lineno
    for child, ancestor in _enclosing(parents, node):
        if child in getattr(ancestor, "decorator_list", ()):
            start = child.lineno
            break
        if isinstance(ancestor, ast.stmt):
            start = ancestor.lineno
            break
    for line in range(start, node.lineno + 1):
        if by_line.get(line, frozenset()) & suppressing:
            return f"noqa (line {line})"
    for child, ancestor in _enclosing(parents, node):
        if isinstance(ancestor, (ast.If, ast.IfExp)) and child is not ancestor.test and _probes_jax(resolver, ancestor.test):
            return f"if-probe (line {ancestor.lineno}: {lines[ancestor.lineno - 1].strip()[:60]})"
        if isinstance(ancestor, ast.Try) and _catches_api_errors(ancestor):
            return f"try/except API error (line {ancestor.lineno})"
    return None


def _skipped_by_discovery(path: str, roots: list[str]) -> bool:
    for root in roots:
        root = os.path.realpath(root)
        if path.startswith(root + os.sep):
            parts = os.path.relpath(os.path.dirname(path), root).split(os.sep)
            return any(part in ALWAYS_SKIPPED for part in parts if part != ".")
    return False


# Cell magics whose body is Python; line magics whose argument is a Python statement.
_PY_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3", "writefile"})
_PY_LINE_MAGICS = frozenset({"time", "timeit", "prun"})
_MAGIC_OPTION = re.compile(r"^(?:-[A-Za-z](?:\s+\S+)?\s+)*")
_IPY_HELP = re.compile(r"^[\w.]+(?:\(\))?\?{1,2}$")
_IPY_ASSIGNED = re.compile(r"^[\w.,()\[\] \t*]+=[ \t]*[%!]")


def _mask_ipython(line: str) -> tuple[str, int]:
    """One line of a code cell as plain Python, same line count, and the columns dropped before the
    code: `%time stmt` -> `stmt`; other magics, shell escapes and help lookups -> `pass`."""
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    if stripped.startswith("%") and not stripped.startswith("%%"):
        name, _, rest = stripped[1:].partition(" ")
        if name in _PY_LINE_MAGICS:
            code = _MAGIC_OPTION.sub("", rest.lstrip()).rstrip()
            try:
                ast.parse(code)
                # `code` is a suffix of the line: the dropped columns are the magic and its options.
                return indent + code, len(line.rstrip()) - len(code) - len(indent)
            except SyntaxError:
                pass
        return indent + "pass", 0
    if stripped.startswith("!") or _IPY_HELP.match(stripped.rstrip()) or _IPY_ASSIGNED.match(stripped):
        return indent + "pass", 0
    return line, 0


def notebook_module(data: bytes, skipped: list[str]) -> tuple[str, list[tuple[int, int, int]]]:
    """The code cells of a notebook joined into one module (imports of one cell serve the next),
    and for each line of it the (cell, line in cell, columns masked before the code) it came from. Cells ast rejects are left out."""
    notebook = json.loads(data)
    cells = notebook.get("cells")
    if cells is None:  # nbformat 3
        cells = [c for w in notebook.get("worksheets", []) for c in w.get("cells", [])]
    out: list[str] = []
    where: list[tuple[int, int, int]] = []
    for number, cell in enumerate(cells, 1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))
        text = "".join(source) if isinstance(source, list) else source
        lines = text.splitlines()
        if lines and lines[0].lstrip().startswith("%%"):
            magic = lines[0].lstrip()[2:].split(" ", 1)[0].strip()
            if magic not in _PY_CELL_MAGICS:
                continue
            lines[0] = "pass"
        masked = [_mask_ipython(line) for line in lines]
        lines = [line for line, _ in masked]
        try:
            ast.parse("\n".join(lines))
        except (SyntaxError, ValueError) as error:
            skipped.append(f"cell {number}: {type(error).__name__}: {error}")
            continue
        out.extend(lines)
        where.extend((number, index, shift) for index, (_, shift) in enumerate(masked, 1))
    return "\n".join(out) + "\n", where


def scan_file(path: str) -> FileScan:
    result = FileScan(path)
    where: list[tuple[int, int, int]] | None = None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if path.endswith(".ipynb"):
            if b"pmap" not in data:
                return result
            text, where = notebook_module(data, result.skipped_cells)
            tree = ast.parse(text, filename=path)
        else:
            tree = ast.parse(data, filename=path)
            text = data.decode("utf-8", errors="replace")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        result.ok, result.error = False, f"{type(error).__name__}: {error}"
        return result
    except OSError as error:
        result.ok, result.error = False, f"unreadable: {error}"
        return result
    if "pmap" not in text:
        return result
    lines = text.splitlines()
    binder = _Binder(tree)
    binder.visit(tree)
    resolver = _Resolver(binder)
    noqa = _noqa_lines(text)
    parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}

    def add(node: ast.AST, qualified: str, kind: str, into: list[Reference]) -> None:
        segment = ast.get_source_segment(text, node) or ""
        cell, line, shift = (None, node.lineno, 0) if where is None else where[node.lineno - 1]
        into.append(Reference(
            path, line, node.col_offset + 1 + shift, " ".join(segment.split()), qualified, kind,
            _guard(resolver, parents, node, noqa, lines), lines[node.lineno - 1].strip() if node.lineno <= len(lines) else "",
            cell,
        ))

    for node in ast.walk(tree):
        if id(node) not in binder.scope_of:
            continue
        if isinstance(node, ast.Attribute):
            hits = resolver.qualified(node) & PMAP_NAMES
            if hits:
                kind = "direct" if isinstance(node.ctx, ast.Load) else "store"
                add(node, sorted(hits)[0], kind, result.refs)
            elif node.attr == "pmap" and isinstance(node.value, ast.Name) and node.value.id in ("jax", "jax_api", "api"):
                add(node, "unbound", "unresolved", result.unresolved)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            imports, aliases = resolver.value_kinds(node.id, binder.scope_of[id(node)])
            hits = imports & PMAP_NAMES
            if hits:
                add(node, sorted(hits)[0], "direct", result.refs)
            elif aliases:
                add(node, f"alias of {sorted(aliases)[0]}", "alias", result.refs)
    result.refs.sort(key=lambda r: (r.line, r.col))
    return result


def iter_python_files(roots: list[str]) -> Iterator[str]:
    for root in roots:
        if os.path.isfile(root):
            yield os.path.realpath(root)
            continue
        for directory, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(directory, d)))
            for name in sorted(files):
                if name.endswith((".py", ".ipynb")):
                    yield os.path.realpath(os.path.join(directory, name))


# --------------------------------------------------------------------------- linter runs
@dataclass
class CheckRun:
    command: list[str]
    seconds: float
    cpu_seconds: float
    returncode: int
    diagnostics: list[dict]
    stderr: str
    error: str | None = None


def run_check(exe: str, roots: list[str], config: str, select: str | None, jobs: int | None) -> CheckRun:
    command = [exe, "check", *[os.path.realpath(r) for r in roots], "--output-format", "json", "--no-cache",
               "--config", config, "--quiet"]
    if select:
        command += ["--select", select]
    if jobs:
        command += ["--jobs", str(jobs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(config))
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    error = None
    try:
        diagnostics = json.loads(proc.stdout) if proc.stdout.strip() else []
    except json.JSONDecodeError as exc:
        diagnostics, error = [], f"stdout is not JSON ({exc}): {proc.stdout[:300]!r}"
    if proc.returncode not in (0, 1) and error is None:
        error = f"exit code {proc.returncode}"
    if "Traceback" in proc.stderr:
        error = (error + "; " if error else "") + "traceback on stderr"
    cwd = os.path.dirname(config)
    for d in diagnostics:
        d["abspath"] = os.path.realpath(os.path.join(cwd, d["path"]))
    return CheckRun(command, seconds, cpu, proc.returncode, diagnostics, proc.stderr, error)


# --------------------------------------------------------------------------- report
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", help="directories (or files) to check")
    parser.add_argument("--pmap-migrate", default=os.environ.get("PMAP_MIGRATE", DEFAULT_EXE),
                        help=f"the linter executable (default {DEFAULT_EXE})")
    parser.add_argument("--jobs", type=int, default=None, help="passed to `check --jobs`")
    parser.add_argument("--no-full", action="store_true", help="skip the all-rules run")
    parser.add_argument("--json", dest="json_out", help="write every reference and finding to this file")
    parser.add_argument("--show-guarded", action="store_true", help="list guarded/suppressed references")
    args = parser.parse_args(argv)
    for root in args.roots:
        if not os.path.exists(root):
            parser.error(f"no such path: {root}")

    wall = time.perf_counter()
    files = list(iter_python_files(args.roots))
    start = time.perf_counter()
    with ProcessPoolExecutor() as pool:
        scans = list(pool.map(scan_file, files, chunksize=32))
    scan_seconds = time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="corpus-check-") as tmp:
        config = os.path.join(tmp, "pyproject.toml")
        with open(config, "w") as handle:
            handle.write("[tool.pmap-migrate]\n")
        targeted = run_check(args.pmap_migrate, args.roots, config, "PM101,PM103", args.jobs)
        full = None if args.no_full else run_check(args.pmap_migrate, args.roots, config, None, args.jobs)

    unparsable = [s for s in scans if not s.ok]
    parsed = {s.path for s in scans if s.ok}
    refs = [r for s in scans for r in s.refs]
    direct = [r for r in refs if r.kind == "direct"]
    aliases = [r for r in refs if r.kind == "alias"]
    stores = [r for r in refs if r.kind == "store"]
    unresolved = [r for s in scans for r in s.unresolved]

    findings = [d for d in targeted.diagnostics if d["code"] in ("PM101", "PM103")]
    errors = [d for d in targeted.diagnostics if d["code"] in ("PM000", "PM001", "PM002")]
    by_file: dict[str, list[dict]] = defaultdict(list)
    for d in findings:
        by_file[d["abspath"]].append(d)

    def covering(ref: Reference) -> list[dict]:
        return [d for d in by_file.get(ref.path, ())
                if d.get("cell") == ref.cell and d["line"] <= ref.line <= d["end_line"]]

    matched, exact, missed, guarded_silent, guarded_reported, skipped = [], 0, [], [], [], []
    used: set[int] = set()
    for ref in direct:
        hits = covering(ref)
        for d in hits:
            used.add(id(d))
        if hits:
            matched.append(ref)
            exact += any(d["line"] == ref.line for d in hits)
            if ref.guard:
                guarded_reported.append(ref)
        elif ref.guard:
            guarded_silent.append(ref)
        elif _skipped_by_discovery(ref.path, args.roots):
            skipped.append(ref)
        else:
            missed.append(ref)
    alias_matched = []
    alias_missed = []
    for ref in aliases:
        hits = covering(ref)
        for d in hits:
            used.add(id(d))
        (alias_matched if hits else alias_missed).append(ref)
    stores_reported = 0
    for ref in stores:
        hits = covering(ref)
        for d in hits:
            used.add(id(d))
        stores_reported += bool(hits)
    unexplained = [d for d in findings if id(d) not in used]
    crashes = [d for d in targeted.diagnostics if d["code"] == "PM002"]
    full_crashes = [d for d in full.diagnostics if d["code"] == "PM002"] if full else []
    # Files ast accepts but the linter could not parse: every reference in them is lost.
    skipped_cell_keys = {(s.path, int(c.split(":", 1)[0].split()[1])) for s in scans for c in s.skipped_cells}
    syntax_in_parsed = [d for d in errors if d["code"] in ("PM000", "PM001") and d["abspath"] in parsed
                        and (d["abspath"], d.get("cell")) not in skipped_cell_keys]

    def rel(path: str) -> str:
        for root in args.roots:
            base = os.path.dirname(os.path.realpath(root))
            if path.startswith(base + os.sep):
                return os.path.relpath(path, base)
        return path

    def show(ref: Reference) -> str:
        cell = f"cell {ref.cell}:" if ref.cell is not None else ""
        return f"  {rel(ref.path)}:{cell}{ref.line}:{ref.col}  [{ref.spelling}]  {ref.source}"

    def show_d(d: dict) -> str:
        cell = f"cell {d['cell']}:" if d.get("cell") is not None else ""
        return (f"  {rel(d['abspath'])}:{cell}{d['line']}:{d['column']}-{d['end_line']}:{d['end_column']}  "
                f"{d['code']}  {d['message']}")

    files_with = {r.path for r in direct}
    print(f"corpus: {', '.join(args.roots)}")
    print(f"command: {' '.join(targeted.command)}")
    rows = [
        ("python files (.py + .ipynb)", f"{len(files)} ({sum(f.endswith('.ipynb') for f in files)} notebooks)"),
        ("  parsed by ast (Python %d.%d)" % sys.version_info[:2], len(parsed)),
        ("  not parsed by ast (skipped)", len(unparsable)),
        ("files with a jax.pmap reference", len(files_with)),
        ("ast references to jax.pmap (reads)", len(direct)),
        ("  guarded/noqa (may go unreported)", sum(1 for r in direct if r.guard)),
        ("  in directories discovery skips", len(skipped)),
        ("reads of local pmap aliases (secondary)", len(aliases)),
        ("stores to jax.pmap (monkeypatching) / reported", f"{len(stores)} / {stores_reported}"),
        ("PM101 findings", sum(1 for d in findings if d["code"] == "PM101")),
        ("PM103 findings", sum(1 for d in findings if d["code"] == "PM103")),
        ("references matched", len(matched)),
        ("  finding starts on the reference's line", exact),
        ("  guarded/noqa but reported anyway", len(guarded_reported)),
        ("references guarded/noqa and not reported", len(guarded_silent)),
        ("references MISSED", len(missed)),
        ("alias reads matched / not matched", f"{len(alias_matched)} / {len(alias_missed)}"),
        ("findings with no ast reference (possible FP)", len(unexplained)),
        ("PM000/PM001 (linter could not parse)", sum(1 for d in errors if d["code"] != "PM002")),
        ("  of which ast parses the file", len(syntax_in_parsed)),
        ("PM002 internal errors (PM101,PM103 run)", len(crashes)),
        ("linter run error", targeted.error or "none"),
        ("ast scan time (s, process pool)", f"{scan_seconds:.2f}"),
        ("check --select PM101,PM103 wall / CPU time (s)", f"{targeted.seconds:.1f} / {targeted.cpu_seconds:.1f}"),
    ]
    if full:
        rows += [("check (all rules) wall / CPU time (s)", f"{full.seconds:.1f} / {full.cpu_seconds:.1f}"),
                 ("PM002 internal errors (all rules)", len(full_crashes)),
                 ("all-rules run error", full.error or "none")]
    print_table(rows)

    print("\nper directory: python files / ast references / matched / guarded / missed / PM101+PM103 findings")
    for root in args.roots:
        base = os.path.realpath(root)

        def inside(path: str) -> bool:
            return path == base or path.startswith(base + os.sep)
        print(f"  {os.path.basename(base):<24} {sum(1 for f in files if inside(f)):>6} "
              f"{sum(1 for r in direct if inside(r.path)):>6} {sum(1 for r in matched if inside(r.path)):>6} "
              f"{sum(1 for r in guarded_silent if inside(r.path)):>6} {sum(1 for r in missed if inside(r.path)):>6} "
              f"{sum(1 for d in findings if inside(d['abspath'])):>6}")

    def show_guarded(ref: Reference) -> str:
        return show(ref) + f"   <- {ref.guard}"

    skipped_cells = [(s.path, c) for s in scans for c in s.skipped_cells]
    print_list("notebook cells ast.parse rejects (left out of the scan, {n})", skipped_cells,
               lambda path_cell: f"  {rel(path_cell[0])}: {path_cell[1]}")
    print_list("files ast.parse rejects ({n})", unparsable, lambda s: f"  {rel(s.path)}: {s.error}")
    print_list("MISSED references ({n})", missed, show)
    print_list("alias reads with no finding ({n})", alias_missed, show)
    print_list("findings with no ast reference in range ({n})", unexplained, show_d)
    if args.show_guarded:
        print_list("guarded/noqa references not reported ({n})", guarded_silent, show_guarded)
    elif guarded_silent:
        reasons = Counter(r.guard.split(" (")[0] for r in guarded_silent)
        print(f"\nguarded/noqa references not reported: {dict(reasons)} (--show-guarded lists them)")
    print_list("guarded/noqa references reported anyway ({n})", guarded_reported, show_guarded)
    print_list("references in directories discovery always skips ({n})", skipped, show)
    print_list("stores to jax.pmap ({n}, not required to be reported)", stores, show)
    print_list("`jax.pmap` spelled with an unbound `jax` ({n}, not counted)", unresolved, show)
    print_list("linter file errors ({n})", errors,
               lambda d: show_d(d) + ("   <- ast parses this file" if d in syntax_in_parsed else ""))
    if targeted.error:
        print(f"\nlinter run error: {targeted.error}\n{targeted.stderr[-3000:]}")
    if full:
        counts = Counter(d["code"] for d in full.diagnostics)
        print("\nall rules: findings per rule")
        for code, count in sorted(counts.items()):
            print(f"  {code}  {count}")
        for d in full_crashes:
            print(show_d(d))
        if full.error:
            print(f"all-rules run error: {full.error}\n{full.stderr[-3000:]}")
    print(f"\ntotal wall time: {time.perf_counter() - wall:.2f}s")

    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump({
                "references": [asdict(r) for r in refs],
                "missed": [asdict(r) for r in missed],
                "unexplained_findings": unexplained,
                "pm101_pm103": targeted.diagnostics,
                "all_rules": full.diagnostics if full else None,
                "unparsable": [asdict(s) for s in unparsable],
            }, handle, indent=1)

    failed = missed or crashes or full_crashes or targeted.error or (full and full.error) or syntax_in_parsed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
