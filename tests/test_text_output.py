"""The text report without colours (a pipe, a file, NO_COLOR) is written directly, not through rich's
per-line rendering: it must be the very characters rich prints."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from codemod.diagnostics import Applicability, Diagnostic, FixInfo
from codemod.engine import lint_bytes
from codemod.reporting.text import render_diagnostics
from codemod.session import read_source_line
from rules import all_rules

ROOT = Path(__file__).resolve().parents[1]


def _render(diagnostics, source_line, *, through_rich: bool, show_source: bool = True) -> str:
    out = io.StringIO()
    # A recording console takes rich's own path; both print without colours.
    console = Console(file=out, color_system=None, highlight=False, soft_wrap=True, record=through_rich, width=80)
    render_diagnostics(console, diagnostics, source_line, show_source=show_source)
    return out.getvalue()


def test_plain_output_is_what_rich_prints_for_every_fixture_finding():
    cache: dict = {}
    diagnostics = []
    for path in sorted((ROOT / "fixtures" / "lint").glob("*.py")) + sorted((ROOT / "fixtures" / "fix").glob("*.py")):
        shown = str(path)
        diagnostics += lint_bytes(path.read_bytes(), shown, all_rules()).diagnostics
    assert len(diagnostics) > 50

    def source_line(path, line, cell=None):
        return read_source_line(path, line, cache)

    for show_source in (True, False):
        fast = _render(diagnostics, source_line, through_rich=False, show_source=show_source)
        slow = _render(diagnostics, source_line, through_rich=True, show_source=show_source)
        assert fast == slow


def test_odd_lines_tabs_wide_characters_cells_and_markup_like_text():
    lines = {1: "\tx = jax.pmap(f)  # [bold]not markup[/bold]", 2: "    y = '日本語' + jax.pmap(g)(x)[0]",
             3: "z = 1\r\n", 4: "\x0c    w = jax.pmap(h)  \x07bell"}
    diagnostics = [
        Diagnostic("PM101", "pmap-call", "message with [red]brackets[/red]", "a.py", 1, 6, 1, 14,
                   FixInfo(Applicability.SAFE, "s")),
        Diagnostic("PM201", "sharded-int-index", "m", "b.ipynb", 2, 20, 2, 40, None, cell=3),
        Diagnostic("PM404", "removed", "m", "c.py", 3, 1, 5, 2, FixInfo(Applicability.UNSAFE, "u")),
        Diagnostic("PM000", "syntax-error", "m", "d.py", 9, 1, 9, 1),  # no such line
        Diagnostic("PM101", "pmap-call", "m", "e.py", 4, 10, 4, 18),  # control characters
        Diagnostic("PM000", "syntax-error", "bad \x0b byte", "f.py", 9, 1, 9, 1),  # in a header without a line
    ]

    def source_line(path, line, cell=None):
        return lines.get(line) if line != 9 else None

    assert _render(diagnostics, source_line, through_rich=False) == _render(diagnostics, source_line, through_rich=True)
