"""A file's text as Python reads it, and its lines as findings number them."""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections.abc import Iterable

from pmap_migrate.diagnostics import Diagnostic

NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks of Python's tokenizer (not str.splitlines')


def python_text(data: bytes) -> str:
    """``data`` decoded exactly as Python decodes source (BOM, coding cookie); SyntaxError (a bad
    cookie), LookupError (no such codec) or UnicodeDecodeError when Python could not read it."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def decode(data: bytes) -> str:
    """``data`` decoded as Python decodes source (BOM, coding cookie); undecodable bytes replaced."""
    try:
        return python_text(data)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


def lines_by_cell(data: bytes, notebook: bool) -> dict[int | None, list[str]]:
    """The lines findings are located in: the file's (key None), or a notebook's cells' by number."""
    if notebook:
        return {cell: NEWLINE.split(text) for cell, text in cell_sources(data).items()}
    return {None: NEWLINE.split(decode(data))}


def lines_shown(data: bytes, notebook: bool) -> dict[int | None, list[str]]:
    """Every line a finding can be shown on: ``lines_by_cell``, and for a notebook also its own lines
    (key None), for a finding that is not in a cell (a file that cannot be read as a notebook)."""
    located = lines_by_cell(data, notebook)
    if notebook:
        located[None] = NEWLINE.split(decode(data))
    return located


# The source lines of a file's findings, keyed by (cell or 0, line): what the text output shows
# under each finding, kept with the result so that a run the cache answers reads no file.
SourceLines = dict[tuple[int, int], str]


def finding_lines(data: bytes, notebook: bool, diagnostics: Iterable[Diagnostic]) -> SourceLines:
    located = lines_shown(data, notebook)
    found: SourceLines = {}
    for d in diagnostics:
        lines = located.get(d.cell)
        if lines is not None and 1 <= d.line <= len(lines):
            found[(d.cell or 0, d.line)] = lines[d.line - 1]
    return found


def cell_sources(data: bytes) -> dict[int, str]:
    """Source of every cell (1-based index), or {} for a file that is not a readable notebook."""
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    cells = document.get("cells") if isinstance(document, dict) else None
    sources = {}
    for index, cell in enumerate(cells if isinstance(cells, list) else [], 1):
        value = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(value, list):
            sources[index] = "".join(v for v in value if isinstance(v, str))
        elif isinstance(value, str):
            sources[index] = value
    return sources
