"""Human output: ruff-like ``path:line:col: CODE message`` lines with the source line and a caret."""

from __future__ import annotations

import builtins
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from pmap_migrate.counts import Counts, plural
from pmap_migrate.diagnostics import Applicability, Diagnostic

if TYPE_CHECKING:  # rich loads only when something is printed through it
    from rich.console import Console


class Plain:
    """Output to a stream that rich would print to without colours: the very characters rich would
    print, written at once (rich's per-line rendering costs more than the whole rest of a warm run,
    and importing it a good part of what remains). What only rich prints right (a tab or another
    control character, which it expands or strips) goes through a rich console made when needed."""

    def __init__(self, file: TextIO, console: Console | None = None) -> None:
        self.file = file
        self._console = console

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.file, highlight=False, soft_wrap=True)
        return self._console


def plain_output(file: TextIO) -> Plain | None:
    """A `Plain` writer for ``file`` when rich would certainly print to it without colours: not a
    terminal, and none of what makes rich treat it as one (``FORCE_COLOR``, ``TTY_COMPATIBLE``) or
    colour it anyway (Jupyter); None: rich is to decide."""
    if os.environ.get("FORCE_COLOR") is not None or os.environ.get("TTY_COMPATIBLE", "") not in ("", "0"):
        return None
    if hasattr(builtins, "get_ipython"):  # IPython or Jupyter in this process
        return None
    try:
        if file.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return Plain(file)


def _plain_writer(out: Console | Plain) -> Plain | None:
    if isinstance(out, Plain):
        return out
    if out.color_system is None and not out.record:
        return Plain(out.file, out)
    return None


def render_diagnostics(out: Console | Plain, diagnostics: Sequence[Diagnostic],
                       source_line: Callable[..., str | None], *, show_source: bool = True) -> None:
    """``source_line(path, line)``, or ``source_line(path, line, cell)`` for a notebook finding."""
    layouts = (_layout(d, source_line, show_source) for d in diagnostics)
    plain = _plain_writer(out)
    if plain is not None:
        chunks: list[str] = []
        for layout in layouts:
            text = _plain(layout)
            if text is None:
                plain.file.write("".join(chunks))
                chunks.clear()
                _print(plain.console, layout)
            else:
                chunks.append(text)
        plain.file.write("".join(chunks))
        plain.file.flush()
        return
    for layout in layouts:
        _print(out, layout)


@dataclass(frozen=True)
class _Layout:
    """One finding as printed: the header's (text, style) pieces and, with the source line, the
    gutter, the line and the caret line's blue prefix and red marks."""

    header: tuple[tuple[str, str | None], ...]
    source: tuple[str, str, str, str] | None


def _layout(d: Diagnostic, source_line: Callable[..., str | None], show_source: bool) -> _Layout:
    header = [(d.path, "bold")]
    if d.cell is not None:
        header.append((f":cell {d.cell}", "cyan"))
    header += [(f":{d.line}:{d.column}: ", "cyan"), (d.code, "bold red"), (" ", None), (d.message, None)]
    if d.fix is not None:
        header.append((" [*]" if d.fix.applicability is Applicability.SAFE else " [unsafe fix]", "dim"))
    line = None
    if show_source:
        line = source_line(d.path, d.line) if d.cell is None else source_line(d.path, d.line, d.cell)
    if line is None:
        return _Layout(tuple(header), None)
    text = line.rstrip("\r\n")
    gutter = f"{d.line} | "
    width = (d.end_column - d.column) if d.end_line == d.line else max(1, len(text) - d.column + 1)
    # Keep tabs in the padding so that the caret lines up however the terminal renders them.
    before = text[: d.column - 1]
    padding = _NOT_TAB.sub(" ", before) if "\t" in before else " " * len(before)
    return _Layout(tuple(header), (gutter, text, " " * (len(gutter) - 2) + "| ", padding + "^" * max(1, width)))


def _print(console: Console, layout: _Layout) -> None:
    from rich.text import Text

    header = Text()
    for piece, style in layout.header:
        header.append(piece, style=style)
    console.print(header, soft_wrap=True)
    if layout.source is None:
        return
    gutter, text, prefix, marks = layout.source
    console.print(Text(gutter, style="blue") + Text(text), soft_wrap=True, highlight=False)
    caret = Text(prefix, style="blue")
    caret.append(marks, style="bold red")
    console.print(caret, soft_wrap=True)
    console.print()


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_TAB = re.compile(r"[^\t]")


def _plain(layout: _Layout) -> str | None:
    """``_print``'s characters without colours (None: a tab or another control character, which
    rich expands or strips)."""
    header = "".join(piece for piece, _ in layout.header)
    if _CONTROL.search(header):
        return None
    if layout.source is None:
        return header + "\n"
    gutter, text, prefix, marks = layout.source
    if _CONTROL.search(text) or _CONTROL.search(marks):
        return None
    return f"{header}\n{gutter}{text}\n{prefix}{marks}\n\n"


def summary_lines(counts: Counts, *, files: int, fix_hint: bool = True,
                  not_checked: str = "could not be checked") -> list[tuple[str, str | None]]:
    """The closing lines of `check` (and of what `fix` leaves) as (text, style), from the counts
    every summary shares (codemod/counts.py); ``files``: how many files the run looked at."""
    if counts.patterns == 0 and counts.unchecked == 0:
        return [(f"All checks passed! ({plural(files, 'file')} checked)", "green")]
    lines: list[tuple[str, str | None]] = [(counts.found(not_checked), "bold")]
    if fix_hint and counts.safe:
        lines.append((f"[*] {counts.safe} fixable with `pmap-migrate fix`.", None))
    if fix_hint and counts.unsafe:
        lines.append((f"{counts.unsafe} more fixable with `pmap-migrate fix --unsafe-fixes`.", None))
    if fix_hint and counts.held:
        them = "them" if counts.held != 1 else "it"
        lines.append((f"{plural(counts.held, 'fix', 'fixes')} skipped in review: `pmap-migrate fix` leaves {them} "
                      f"alone (`fix --review-skipped` applies {them}).", None))
    return lines


def render_lines(out: Console | Plain, lines: Sequence[tuple[str, str | None]]) -> None:
    """Lines of text without control characters, each in its style."""
    plain = _plain_writer(out)
    if plain is not None:
        plain.file.write("".join(f"{line}\n" for line, _ in lines))
        plain.file.flush()
        return
    from rich.text import Text

    for line, style in lines:
        out.print(Text(line, style=style or ""))


def render_summary(out: Console | Plain, counts: Counts, *, files: int, fix_hint: bool = True,
                   not_checked: str = "could not be checked") -> None:
    render_lines(out, summary_lines(counts, files=files, fix_hint=fix_hint, not_checked=not_checked))


def render_statistics(out: Console | Plain, diagnostics: Sequence[Diagnostic]) -> None:
    console = out.console if isinstance(out, Plain) else out
    counts = Counter((d.code, d.name) for d in diagnostics)
    fixable = {d.code for d in diagnostics if d.fix is not None}
    width = max((len(str(n)) for n in counts.values()), default=1)
    for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        mark = "[*] " if code in fixable else ""
        console.print(f"{count:>{width}}  {code}  {mark}{name}", markup=False, highlight=False)
