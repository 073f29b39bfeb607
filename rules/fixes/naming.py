"""Fresh names for generated code, shared by every fix builder of one module."""

from __future__ import annotations

from pmap_migrate.rules.analysis.model import SemanticModel


class NameAllocator:
    """Names for generated definitions: none that the module binds in any scope, none given out before
    (by any fix of the module: fixes applied in the same round must not collide)."""

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._taken: set[str] | None = None

    def taken(self) -> set[str]:
        """Every name the module binds, and those given out: the set itself (the multi-process plan
        gives a site's names back when it renders the site again)."""
        if self._taken is None:
            taken: set[str] = set()
            for scope in self.model.scopes():
                taken.update(a.name for a in scope.assignments)
            self._taken = taken
        return self._taken

    def fresh(self, base: str) -> str:
        """``base``, or ``base2``, ``base3`` ...: the first that is free; it is taken from now on."""
        taken = self.taken()
        candidate = base
        counter = 2
        while candidate in taken:
            candidate = f"{base}{counter}"
            counter += 1
        taken.add(candidate)
        return candidate
