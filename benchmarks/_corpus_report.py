"""The plain-text report of `corpus_check.py`, `corpus_fix.py` and `fix_quality.py`: a table of counts
and titled lists.

Imported as `_corpus_report` by those scripts, which run as `python benchmarks/<script>.py ...` (so
this directory is the first entry of `sys.path`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


def print_table(rows: Iterable[tuple[str, Any]]) -> None:
    """A blank line, then one `key  value` line per row, the values aligned."""
    rows = list(rows)
    width = max(len(key) for key, _ in rows)
    print()
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def print_list(title: str, items: Sequence, line: Callable[[Any], str]) -> None:
    """Nothing when ``items`` is empty; else a blank line, ``title`` (``{n}`` in it becomes the number
    of items) followed by a colon, then ``line(item)`` for each item."""
    if not items:
        return
    print(f"\n{title.format(n=len(items))}:")
    for item in items:
        print(line(item))
