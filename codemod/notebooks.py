"""Jupyter notebooks: checked and fixed through their code cells; every byte of the file outside
the ``source`` values of rewritten cells is left as it was (outputs, metadata, formatting).

The code cells are joined into one Python module — an import in one cell serves the next, as in
the kernel — with a marker statement before every cell after the first, so that the fixed module
can be cut back into cells and a finding's line mapped to ``cell N, line L``. A marker is a
statement, so that code a fix inserts before a cell's first statement stays in that cell; within
the notebook's leading run of import cells it is an import (of a module that does not exist), so
that those cells stay one import block and the imports fixes add join it after its last import
(no second ``import jax`` when the first code cell holds only magics). IPython syntax (line
magics ``%time``, shell lines ``!pip``, help ``x?``, ``files = !ls``) is replaced by placeholders
(a comment at top level, a statement in a block), one line for one line so that line numbers stay
right, and restored after fixing. A
cell under a cell magic whose body is not Python (``%%bash``) is passed over, and so is a cell
Python cannot parse (reported as PM000 if it could hold a legacy pattern).

Cells are numbered from 1 over all cells of the notebook, markdown included: ``cell 3`` is
``cells[2]`` in the file.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from json.decoder import scanstring
from typing import TYPE_CHECKING

from pmap_migrate.diagnostics import Diagnostic, FileError, FileResult
from pmap_migrate.sourcetext import cell_sources

if TYPE_CHECKING:  # annotations only: reading a notebook's cells must not load libcst
    from pmap_migrate.rules.base import Rule
    from pmap_migrate.rules.fixes.choices import RuleOptions

NOTEBOOK_SUFFIX = ".ipynb"

# Cell magics whose body is Python: the magic line is masked, the body checked.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3", "writefile"})
# `%%writefile` writes its body to a file: usually a Python module in jax notebooks, so it is checked
# like one (its first line is masked).

_CELL = "__pmap_migrate_cell_{}__"
_MAGIC = "__pmap_migrate_magic_{}__"
_CELL_LINE = re.compile(r"^(?:import )?__pmap_migrate_cell_(\d+)__\r?\n", re.M)
_MAGIC_LINE = re.compile(r"^[ \t]*#?__pmap_migrate_magic_(\d+)__(?=\r?$)", re.M)
_HELP = re.compile(r"[\w.]+(?:\(\))?\?{1,2}")  # `jax.pmap?`, `obj??`
_ASSIGNED_MAGIC = re.compile(r"[\w.,()\[\] \t*]+=[ \t]*[%!]")  # `files = !ls`, `t = %timeit -o f()`
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def is_notebook(path) -> bool:
    return str(path).lower().endswith(NOTEBOOK_SUFFIX)


class NotebookError(Exception):
    def __init__(self, error: FileError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class CodeCell:
    index: int  # 1-based over all cells
    source: str
    span: tuple[int, int]  # the `source` value within the file's text
    as_list: bool  # the source is stored as a list of lines (nbformat's way) rather than one string
    masked: str | None  # the cell as Python; None: passed over (a non-Python cell magic)
    magics: dict[int, str] = field(default_factory=dict)  # placeholder number -> original line
    problem: FileError | None = None  # the cell does not parse: left out of the module
    imports_only: bool = False  # every statement is an import (or there is none)
    starts_with_import: bool = False

    @property
    def included(self) -> bool:
        return self.masked is not None and self.problem is None


@dataclass
class Notebook:
    path: str
    text: str  # the file's text, after a byte order mark if any
    bom: str
    cells: list[CodeCell]
    ensure_ascii: bool  # the file escapes non-ASCII characters (json.dumps' default; nbformat does not)
    indent_unit: str | None  # one level of the file's JSON indentation; None: compact JSON
    tree: object = None  # the libcst module of the last settle(), so that it is parsed once

    @property
    def included(self) -> list[CodeCell]:
        return [c for c in self.cells if c.included]

    def module(self) -> str:
        """The included cells as one module, a marker line before each cell after the first."""
        included = self.included
        # Markers are imports up to the last cell that starts with an import while every cell before
        # it holds only imports: the leading import block then ends on a real import, after which
        # AddImportsVisitor puts new imports (never after a marker, at the top of the next cell).
        last = 0
        for number, cell in enumerate(included):
            if number and cell.starts_with_import:
                last = number
            if not cell.imports_only:
                break
        parts = []
        for number, cell in enumerate(included):
            if number:
                parts.append(("import " if number <= last else "") + _CELL.format(cell.index) + "\n")
            parts.append(cell.masked if cell.masked.endswith("\n") else cell.masked + "\n")
        return "".join(parts)

    def settle(self) -> str:
        """The module, after leaving out every cell that libcst cannot parse (Python's own parser
        already judged each cell; this catches the rare disagreement)."""
        from pmap_migrate.engine import parse

        while True:
            python = self.module()
            if not self.included:
                return python
            parsed = parse(python, self.path)
            if not isinstance(parsed, FileError):
                self.tree = parsed
                return python
            locate = self.locator(python)
            cell_index, line = locate(parsed.line) if locate else (self.included[-1].index, 1)
            cell = next(c for c in self.included if c.index == cell_index)
            cell.problem = replace(parsed, line=line)

    def sliced(self, rules: Sequence[type[Rule]]):
        """``(module, python, slice)``: the relevant slice of the module (codemod/slices.py) parsed by
        libcst, the module's text and the slice; None when the module is to be analysed whole
        (settle() then parses it). Only where libcst parses whatever Python's parser accepts, as it
        accepted each included cell: no cell can then need leaving out, which settle() checks."""
        from pmap_migrate.engine import sliced_module
        from pmap_migrate.slices import AST_WITHIN_LIBCST, parse_python

        if not self.included or not AST_WITHIN_LIBCST:
            return None
        python = self.module()
        try:
            data = python.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escaped in the JSON
            return None
        parsed = parse_python(data)
        if parsed is None or parsed.text != python:  # a coding cookie in the first cell, say
            return None
        sliced = sliced_module(data, self.path, rules, parsed)
        return None if sliced is None else (sliced[0], python, sliced[2])

    def locator(self, python: str) -> Callable[[int], tuple[int, int]] | None:
        """Maps a line of ``python`` (this notebook's module, possibly fixed) to ``(cell, line)``;
        None when the cell markers are not all there, in order."""
        included = self.included
        if not included:
            return None
        starts, cells = [1], [included[0].index]
        for match in _CELL_LINE.finditer(python):
            starts.append(python.count("\n", 0, match.start()) + 2)
            cells.append(int(match.group(1)))
        if cells != [c.index for c in included]:
            return None

        def locate(line: int) -> tuple[int, int]:
            at = max(0, bisect.bisect_right(starts, line) - 1)
            return cells[at], max(1, line - starts[at] + 1)

        return locate

    def split(self, python: str) -> dict[int, str] | None:
        """The new source of each included cell, IPython lines restored; None if the module lost a
        marker or moved one (a fix that crossed a cell boundary)."""
        included = self.included
        pieces = _CELL_LINE.split(python)
        if [int(i) for i in pieces[1::2]] != [c.index for c in included[1:]]:
            return None
        sources: dict[int, str] = {}
        for cell, text in zip(included, pieces[0::2]):
            seen: list[int] = []

            def restore(match: re.Match, cell: CodeCell = cell, seen: list[int] = seen) -> str:
                number = int(match.group(1))
                seen.append(number)
                return cell.magics.get(number, match.group(0))

            text = _MAGIC_LINE.sub(restore, text)
            if sorted(seen) != sorted(cell.magics):
                return None
            if not cell.masked.endswith("\n"):  # the cell had no final newline: the module's (and blank
                text = text.rstrip("\r\n")      # lines new imports put before the next cell) are not its
            if not cell.masked and text.startswith("\n"):  # an empty cell stood for one blank line
                text = text[1:]
            sources[cell.index] = text
        return sources

    def rebuild(self, python: str) -> bytes | None:
        """The notebook's bytes with the cells of ``python`` written back; None if that cannot be done
        faithfully (then nothing is written)."""
        sources = self.split(python)
        if sources is None:
            return None
        edits = [(cell.span, self._encode(cell, sources[cell.index]))
                 for cell in self.included if sources[cell.index] != cell.source]
        text = self.text
        for (start, end), value in sorted(edits, reverse=True):
            text = text[:start] + value + text[end:]
        # Check the splice: the result must be the original document with exactly these sources.
        expected = json.loads(self.text)
        for (start, _), value in edits:
            cell = next(c for c in self.cells if c.span[0] == start)
            expected["cells"][cell.index - 1]["source"] = json.loads(value)
        try:
            if json.loads(text) != expected:
                return None
        except ValueError:
            return None
        return (self.bom + text).encode("utf-8")

    def _encode(self, cell: CodeCell, source: str) -> str:
        def dump(value: str) -> str:
            return json.dumps(value, ensure_ascii=self.ensure_ascii)

        if not cell.as_list:
            return dump(source)
        lines = source.splitlines(keepends=True)  # as nbformat splits
        if not lines:
            return "[]"
        opening, separator, closing = self._list_style(cell)
        return "[" + opening + separator.join(dump(line) for line in lines) + closing + "]"

    def _list_style(self, cell: CodeCell) -> tuple[str, str, str]:
        """Whitespace after ``[``, between items (with the comma) and before ``]``, as the file has it."""
        start, end = cell.span
        raw = self.text[start:end]
        items = []
        position = _skip(raw, 1)
        while position < len(raw) and raw[position] == '"':
            _, after = scanstring(raw, position + 1)
            items.append((position, after))
            position = _skip(raw, after)
            if raw[position] == ",":
                position = _skip(raw, position + 1)
        if items:
            opening = raw[1:items[0][0]]
            closing = raw[items[-1][1]:-1]
            if len(items) > 1:
                separator = raw[items[0][1]:items[1][0]]
            else:
                separator = "," + opening if opening.startswith("\n") else ", "
            return opening, separator, closing
        if self.indent_unit is None:
            return "", ", ", ""
        line_start = self.text.rfind("\n", 0, start) + 1
        line_indent = re.match(r"[ \t]*", self.text[line_start:start]).group(0)
        opening = "\n" + line_indent + self.indent_unit
        return opening, "," + opening, "\n" + line_indent

    def place(self, diagnostic: Diagnostic, locate: Callable[[int], tuple[int, int]] | None) -> Diagnostic:
        """A diagnostic of the module, located in its cell."""
        if locate is None:
            return replace(diagnostic, cell=self.included[0].index if self.included else 1)
        cell, line = locate(diagnostic.line)
        end_cell, end_line = locate(diagnostic.end_line)
        if end_cell != cell:
            end_line = line
        return replace(diagnostic, cell=cell, line=line, end_line=end_line)

    def cell_errors(self, gate) -> list[Diagnostic]:
        """PM000 for each cell that does not parse and could hold a legacy pattern (the notebook
        counterpart of the prefilter: a broken cell that mentions no legacy name, such as `pmap`,
        is not reported)."""
        found = []
        for cell in self.cells:
            if cell.problem is None:
                continue
            if gate is not None and not gate.mentions(cell.source.encode("utf-8", "surrogatepass")):
                continue
            found.append(replace(cell.problem.as_diagnostic(), cell=cell.index))
        return found


def load(data: bytes, path: str) -> Notebook:
    """Parse a notebook file; raises NotebookError for a file that is not a readable notebook."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NotebookError(FileError(path, "PM001", f"cannot decode notebook (not UTF-8): {error}")) from None
    bom = ""
    if text.startswith("\ufeff"):
        bom, text = "\ufeff", text[1:]
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(FileError(path, "PM000", f"invalid notebook JSON: {error.msg}",
                                      error.lineno, error.colno)) from None
    except RecursionError:
        raise NotebookError(FileError(path, "PM000", "invalid notebook JSON: too deeply nested")) from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError(FileError(path, "PM001", "not a Jupyter notebook in nbformat 4 (no top-level `cells` list)"))
    try:
        spans = _source_spans(text)
    except (ValueError, IndexError, KeyError) as error:  # json.loads accepted it, so this is our bug
        raise NotebookError(FileError(path, "PM002", f"internal error: cannot locate the notebook's cells: {error}")) from None
    indent = re.match(r"\{\r?\n([ \t]+)", text)
    notebook = Notebook(path, text, bom, [], ensure_ascii=_escapes_non_ascii(text),
                        indent_unit=indent.group(1) if indent else None)
    if not _is_python(document):
        return notebook
    counter = iter(range(1 << 62))
    for index, (cell, span) in enumerate(zip(document["cells"], spans), 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or span is None:
            continue
        value = cell.get("source")
        if isinstance(value, list) and all(isinstance(line, str) for line in value):
            source, as_list = "".join(value), True
        elif isinstance(value, str):
            source, as_list = value, False
        else:
            continue
        masked, magics = mask(source, counter)
        code_cell = CodeCell(index, source, span, as_list, masked, magics)
        if masked is not None:
            tree = _parse(masked)
            if isinstance(tree, SyntaxError):
                code_cell.problem = FileError(path, "PM000", f"SyntaxError: {tree.msg}",
                                              max(tree.lineno or 1, 1), max(tree.offset or 1, 1))
            else:
                kinds = [isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body]
                code_cell.imports_only = all(kinds)
                code_cell.starts_with_import = bool(kinds) and kinds[0]
        notebook.cells.append(code_cell)
    return notebook


def _is_python(document: dict) -> bool:
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return True
    for holder, key in (("kernelspec", "language"), ("language_info", "name")):
        table = metadata.get(holder)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            return table[key].lower().startswith("python")
    return True


def _escapes_non_ascii(text: str) -> bool:
    if not text.isascii():
        return False
    return re.search(r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})", text) is not None


def _parse(source: str) -> ast.Module | SyntaxError:
    """Python's own verdict on a cell (its parser is the reference, and fast)."""
    flags = ast.PyCF_ONLY_AST | getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)  # notebooks may `await` at top level
    try:
        return compile(source, "<cell>", "exec", flags=flags, dont_inherit=True)
    except SyntaxError as error:
        return error
    except (ValueError, RecursionError, MemoryError) as error:  # null bytes, absurd nesting
        return SyntaxError(str(error) or type(error).__name__)


def mask(source: str, counter) -> tuple[str | None, dict[int, str]]:
    """``source`` with its IPython lines replaced by placeholder statements (same line count), and
    the lines replaced; ``(None, {})`` for a cell whose cell magic has a non-Python body."""
    lines = source.splitlines(keepends=True)
    magics: dict[int, str] = {}
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = re.match(r"%%\s*([\w-]*)", lines[first].lstrip()).group(1)
        if name not in PYTHON_CELL_MAGICS:
            return None, {}
    out = []
    state = _Scan()  # where the previous line left off: magics only start a logical line
    continued: str | None = None  # indentation of a magic continued with a backslash
    for number, line in enumerate(lines):
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        stripped = body.lstrip()
        indent = body[: len(body) - len(stripped)]
        magic = continued is not None or (
            state.at_statement_start and (stripped.startswith(("%", "!", "?")) or _HELP.fullmatch(stripped.rstrip())
                                          or _ASSIGNED_MAGIC.match(stripped) is not None)
        ) or (number == first and stripped.startswith("%%"))
        if magic:
            placeholder = next(counter)
            magics[placeholder] = body
            at = continued if continued is not None else indent
            # A comment at top level (so `%matplotlib inline` does not end the import block that
            # new imports join), a statement in a block (which a comment could leave empty).
            out.append(at + ("" if at else "#") + _MAGIC.format(placeholder) + ending)
            continued = (continued if continued is not None else indent) if body.endswith("\\") else None
            continue
        state.feed(body)
        out.append(line)
    return "".join(out), magics


@dataclass
class _Scan:
    """Approximate tokenizer state between lines: inside a triple-quoted string, inside brackets,
    or after a backslash continuation (IPython syntax only starts a logical line)."""

    string: str | None = None
    depth: int = 0
    backslash: bool = False

    @property
    def at_statement_start(self) -> bool:
        return self.string is None and self.depth == 0 and not self.backslash

    def feed(self, line: str) -> None:
        position = 0
        self.backslash = False
        while position < len(line):
            if self.string is not None:
                end = line.find(self.string, position)
                if end < 0:
                    return
                position, self.string = end + 3, None
                continue
            char = line[position]
            if char == "#":
                return
            if line.startswith(('"""', "'''"), position):
                self.string = line[position:position + 3]
                position += 3
                continue
            if char in "\"'":
                position += 1
                while position < len(line) and line[position] != char:
                    position += 2 if line[position] == "\\" else 1
            elif char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            position += 1
        self.backslash = line.endswith("\\")


def _skip(text: str, position: int) -> int:
    return _WS.match(text, position).end()


def _members(text: str, position: int) -> tuple[dict[str, tuple[int, int]], int]:
    """Spans of the values of the JSON object starting at ``position``, and where it ends."""
    if text[position] != "{":
        raise ValueError(f"expected an object at offset {position}")
    spans: dict[str, tuple[int, int]] = {}
    position = _skip(text, position + 1)
    if text[position] == "}":
        return spans, position + 1
    while True:
        if text[position] != '"':
            raise ValueError(f"expected a key at offset {position}")
        key, position = scanstring(text, position + 1)
        position = _skip(text, position)
        if text[position] != ":":
            raise ValueError(f"expected ':' at offset {position}")
        start = _skip(text, position + 1)
        _, end = _DECODER.raw_decode(text, start)
        spans[key] = (start, end)
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)
        elif text[position] == "}":
            return spans, position + 1
        else:
            raise ValueError(f"expected ',' or '}}' at offset {position}")


def _source_spans(text: str) -> list[tuple[int, int] | None]:
    """For each element of the top-level ``cells`` list, the span of its ``source`` value."""
    top, _ = _members(text, _skip(text, 0))
    position, _ = top["cells"]
    if text[position] != "[":
        raise ValueError("`cells` is not a list")
    spans: list[tuple[int, int] | None] = []
    position = _skip(text, position + 1)
    if text[position] == "]":
        return spans
    while True:
        if text[position] == "{":
            members, end = _members(text, position)
            spans.append(members.get("source"))
        else:
            _, end = _DECODER.raw_decode(text, position)
            spans.append(None)
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)
        elif text[position] == "]":
            return spans
        else:
            raise ValueError(f"expected ',' or ']' at offset {position}")


# ---------------------------------------------------------------------------------------------
# Checking and fixing


def lint_notebook(data: bytes, path: str, rules: Sequence[type[Rule]], options: RuleOptions | None = None,
                  project=None) -> FileResult:
    """Check one notebook's contents (an importer of the ``project`` index's modules). Never raises."""
    from pmap_migrate.engine import lint_module
    from pmap_migrate.prefilter import gate_of

    result = FileResult(path, parsed=True)
    try:
        notebook = load(data, path)
        found: list[Diagnostic] = []
        sliced = notebook.sliced(rules)
        if sliced is not None:  # as a large module is: through its relevant slice
            module, python, cut = sliced
            found = lint_module(module, path, rules, options, python, cut, project=project)
        else:
            python = notebook.settle()
            if notebook.included:
                found = lint_module(notebook.tree, path, rules, options, project=project)
        locate = notebook.locator(python)
        found = [notebook.place(d, locate) for d in found]
        result.diagnostics = sorted(found + notebook.cell_errors(gate_of(tuple(rules))), key=Diagnostic.sort_key)
    except NotebookError as error:
        result.error = error.error
    except RecursionError:
        result.error = FileError(path, "PM002", "internal error: code nested too deeply to analyse")
    except Exception as error:  # a rule bug must not end the run or show a traceback
        result.error = FileError(path, "PM002", f"internal error: {type(error).__name__}: {error}")
    return result


def fix_notebook(data: bytes, path: str, rules: Sequence[type[Rule]], *, unsafe: bool = False,
                 options: RuleOptions | None = None, project=None):
    """Fix one notebook's contents (a ``FixOutcome`` whose bytes are the whole notebook); ``options``
    as for a module (the idiomatic rewrite, with ``unsafe``)."""
    from pmap_migrate.fixer import FixOutcome, fix_bytes
    from pmap_migrate.prefilter import gate_of

    outcome = FixOutcome(path, data)
    try:
        notebook = load(data, path)
        python = notebook.settle()
        broken = notebook.cell_errors(gate_of(tuple(rules)))
        if not notebook.included:
            outcome.remaining = broken
            return outcome
        inner = fix_bytes(python.encode("utf-8"), path, rules, unsafe=unsafe, options=options, project=project)
        if inner.error is not None:
            outcome.error = replace(inner.error, line=1, column=1)
            return outcome
        final = inner.fixed.decode("utf-8") if inner.fixed is not None else python
        if inner.fixed is not None:
            rebuilt = notebook.rebuild(final)
            if rebuilt is None:
                codes = ", ".join(sorted({d.code for d in inner.applied}))
                outcome.error = FileError(path, "PM002", f"internal error: the {codes} fix could not be written "
                                          "back into the notebook's cells; notebook left unchanged")
                return outcome
            if rebuilt != data:
                outcome.fixed = rebuilt
        before, after = notebook.locator(python), notebook.locator(final)
        # Fixes of later rounds were found on intermediate code: their cells are approximate.
        outcome.applied = [notebook.place(d, before) for d in inner.applied]
        outcome.remaining = sorted([notebook.place(d, after) for d in inner.remaining] + broken,
                                   key=Diagnostic.sort_key)
        outcome.rounds = inner.rounds
    except NotebookError as error:
        outcome.error = error.error
    except Exception as error:  # a bug here must not end the run or show a traceback
        outcome.error = FileError(path, "PM002", f"internal error: {type(error).__name__}: {error}")
        outcome.fixed = None
    return outcome


# ---------------------------------------------------------------------------------------------
# Showing cells


def notebook_diff(path: str, before: bytes, after: bytes) -> str:
    """A unified diff per changed cell, labelled ``a/nb.ipynb:cell 3`` (the JSON diff helps nobody)."""
    old, new = cell_sources(before), cell_sources(after)
    chunks = []
    for index in sorted(set(old) | set(new)):
        a, b = old.get(index, ""), new.get(index, "")
        if a == b:
            continue
        chunks.extend(difflib.unified_diff(_lines(a), _lines(b), f"a/{path}:cell {index}", f"b/{path}:cell {index}"))
    return "".join(chunks)


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines
