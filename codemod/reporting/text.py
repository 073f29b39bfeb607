"""Human output: ruff-like ``path:line:col: CODE message`` lines with the source line and a caret."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.text import Text

from codemod.diagnostics import Applicability, Diagnostic


def render_diagnostics(console: Console, diagnostics: Sequence[Diagnostic],
                       source_line: Callable[..., str | None], *, show_source: bool = True) -> None:
    """``source_line(path, line)``, or ``source_line(path, line, cell)`` for a notebook finding."""
    if console.color_system is None and not console.record:
        # No colours (a pipe, a file, NO_COLOR): the same characters rich would print, written at
        # once; rich's per-line rendering costs more than the whole rest of a warm run. A line
        # holding a tab goes through rich, which expands tabs by the cell width of what precedes.
        chunks: list[str] = []
        for d in diagnostics:
            plain = _plain(d, source_line, show_source)
            if plain is None:
                console.file.write("".join(chunks))
                chunks.clear()
                _render_rich(console, [d], source_line, show_source)
            else:
                chunks.append(plain)
        console.file.write("".join(chunks))
        console.file.flush()
        return
    _render_rich(console, diagnostics, source_line, show_source)


def _render_rich(console: Console, diagnostics: Sequence[Diagnostic], source_line: Callable[..., str | None],
                 show_source: bool) -> None:
    for d in diagnostics:
        header = Text()
        header.append(d.path, style="bold")
        if d.cell is not None:
            header.append(f":cell {d.cell}", style="cyan")
        header.append(f":{d.line}:{d.column}: ", style="cyan")
        header.append(d.code, style="bold red")
        header.append(" ")
        header.append(d.message)
        if d.fix is not None:
            header.append(" [*]" if d.fix.applicability is Applicability.SAFE else " [unsafe fix]", style="dim")
        console.print(header, soft_wrap=True)
        line = None
        if show_source:
            line = source_line(d.path, d.line) if d.cell is None else source_line(d.path, d.line, d.cell)
        if line is None:
            continue
        text = line.rstrip("\r\n")
        gutter = f"{d.line} | "
        console.print(Text(gutter, style="blue") + Text(text), soft_wrap=True, highlight=False)
        width = (d.end_column - d.column) if d.end_line == d.line else max(1, len(text) - d.column + 1)
        caret = Text(" " * (len(gutter) - 2) + "| ", style="blue")
        # Keep tabs in the padding so that the caret lines up however the terminal renders them.
        padding = "".join("\t" if ch == "\t" else " " for ch in text[: d.column - 1])
        caret.append(padding + "^" * max(1, width), style="bold red")
        console.print(caret, soft_wrap=True)
        console.print()


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _plain(d: Diagnostic, source_line: Callable[..., str | None], show_source: bool) -> str | None:
    """One finding as ``render_diagnostics`` prints it without colours (None: it holds a tab or
    another control character, which rich expands or strips)."""
    header = d.path + (f":cell {d.cell}" if d.cell is not None else "") + f":{d.line}:{d.column}: {d.code} {d.message}"
    if d.fix is not None:
        header += " [*]" if d.fix.applicability is Applicability.SAFE else " [unsafe fix]"
    line = None
    if show_source:
        line = source_line(d.path, d.line) if d.cell is None else source_line(d.path, d.line, d.cell)
    if line is None:
        return header + "\n"
    text = line.rstrip("\r\n")
    if _CONTROL.search(text) or _CONTROL.search(header):
        return None
    gutter = f"{d.line} | "
    width = (d.end_column - d.column) if d.end_line == d.line else max(1, len(text) - d.column + 1)
    caret = " " * (len(gutter) - 2) + "| " + " " * (d.column - 1) + "^" * max(1, width)
    return f"{header}\n{gutter}{text}\n{caret}\n\n"


def render_summary(console: Console, diagnostics: Sequence[Diagnostic], *, errors: int, files: int,
                   fix_hint: bool = True) -> None:
    findings = len(diagnostics)
    if findings == 0 and errors == 0:
        console.print(Text(f"All checks passed! ({files} file{'s' if files != 1 else ''} checked)", style="green"))
        return
    parts = []
    if findings:
        n_files = len({d.path for d in diagnostics})
        parts.append(f"Found {findings} legacy pattern{'s' if findings != 1 else ''} in "
                     f"{n_files} file{'s' if n_files != 1 else ''}")
    if errors:
        parts.append(f"{errors} file{'s' if errors != 1 else ''} could not be checked")
    console.print(Text("; ".join(parts) + ".", style="bold"))
    safe = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for d in diagnostics if d.fix is not None and d.fix.applicability is Applicability.UNSAFE)
    if fix_hint and safe:
        console.print(f"[*] {safe} fixable with `pmap-migrate fix`.", markup=False)
    if fix_hint and unsafe:
        console.print(f"{unsafe} more fixable with `pmap-migrate fix --unsafe-fixes`.", markup=False)


def render_statistics(console: Console, diagnostics: Sequence[Diagnostic]) -> None:
    counts = Counter((d.code, d.name) for d in diagnostics)
    fixable = {d.code for d in diagnostics if d.fix is not None}
    width = max((len(str(n)) for n in counts.values()), default=1)
    for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        mark = "[*] " if code in fixable else ""
        console.print(f"{count:>{width}}  {code}  {mark}{name}", markup=False, highlight=False)
