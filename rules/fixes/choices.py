"""Rule options (no libcst here: a run answered from the cache imports this)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleOptions:
    """Choices that change which fix a rule offers, never what it finds."""

    # PM101: offer the idiomatic rewrite (unsafe) where a whole data-parallel loop is visible
    idiomatic: bool = False
