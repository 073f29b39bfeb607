"""The text report without colours (a pipe, a file, NO_COLOR) is written directly, not through rich's
per-line rendering: it must be the very characters rich prints."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from pmap_migrate.diagnostics import Applicability, Diagnostic, FixInfo
from pmap_migrate.engine import lint_bytes
from pmap_migrate.reporting.text import render_diagnostics
from pmap_migrate.rules import all_rules
from pmap_migrate.session import read_lines

ROOT = Path(__file__).resolve().parents[1]


def read_source_line(path: str, line: int, cache: dict) -> str | None:
    """Line ``line`` of the file ``path``, as the CLI shows it after reading the file."""
    if path not in cache:
        cache[path] = read_lines(path).get(None)
    lines = cache[path]
    return lines[line - 1] if lines is not None and 1 <= line <= len(lines) else None


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


def test_plain_writer_prints_what_rich_prints():
    """A `Plain` writer (no rich import) against rich's own output: findings, summaries, statistics."""
    from pmap_migrate.counts import Counts
    from pmap_migrate.diagnostics import FileError
    from pmap_migrate.reporting.text import Plain, render_statistics, render_summary

    cache: dict = {}
    diagnostics = []
    for path in sorted((ROOT / "fixtures" / "lint").glob("*.py"))[:20]:
        diagnostics += lint_bytes(path.read_bytes(), str(path), all_rules()).diagnostics
    odd = Diagnostic("PM101", "pmap-call", "a\ttab", "t.py", 1, 1, 1, 2)  # through rich, inside the plain writer
    errors = [FileError("x.py", "PM000", "invalid syntax").as_diagnostic(), FileError("y.py", "PM001", "gone").as_diagnostic()]
    assert len(diagnostics) > 10

    def source_line(path, line, cell=None):
        return read_source_line(path, line, cache) if path != "t.py" else "\tx"

    def both(render) -> tuple[str, str]:
        fast, slow = io.StringIO(), io.StringIO()
        render(Plain(fast))
        render(Console(file=slow, color_system=None, highlight=False, soft_wrap=True, record=True, width=80))
        return fast.getvalue(), slow.getvalue()

    cases = [
        lambda out: render_diagnostics(out, [*diagnostics, odd], source_line),
        lambda out: render_summary(out, Counts.of(diagnostics + errors), files=9),
        lambda out: render_summary(out, Counts.of(diagnostics[:1]), files=1, fix_hint=False),
        lambda out: render_summary(out, Counts.of(errors[:1]), files=3),
        lambda out: render_summary(out, Counts(), files=1),
        lambda out: render_statistics(out, diagnostics),
    ]
    for render in cases:
        fast, slow = both(render)
        assert fast == slow and fast


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("environment", [{}, {"FORCE_COLOR": ""}, {"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "0"},
                                         {"TTY_COMPATIBLE": "1"}, {"NO_COLOR": "1"}, {"TERM": "dumb"}])
@pytest.mark.parametrize("stream", [io.StringIO, _Terminal])
def test_plain_output_only_where_rich_would_print_no_colours(monkeypatch, environment, stream):
    from pmap_migrate.reporting.text import plain_output

    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    file = stream()
    if plain_output(file) is not None:
        assert Console(file=file).color_system is None
    if stream is io.StringIO and not environment:
        assert plain_output(file) is not None  # the common case: a pipe or a file


def test_check_into_a_pipe_does_not_import_rich(tmp_path):
    (tmp_path / "legacy.py").write_text("import jax\n\nstep = jax.pmap(lambda x: x * 2)\n")
    program = ("import sys\nfrom pmap_migrate.cli import main\nsys.argv = ['pmap-migrate', 'check', '.']\n"
               "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write(str(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')))\n")
    environment = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    for _ in range(2):  # cold, then answered by the cache
        done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                              env=environment)
        assert "legacy.py:3:8: PM101" in done.stdout and "1 | import jax" not in done.stdout
        assert "3 | step = jax.pmap(lambda x: x * 2)" in done.stdout
        assert done.stderr.strip().splitlines()[-1] == "[]"
