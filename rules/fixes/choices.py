"""What decides which fixes a run applies: each fix's applicability, and the rules' options.

No libcst here: a run answered from the cache (and its reports) imports this.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Applicability(str, Enum):
    """How safe a fix is: which run applies it."""

    SAFE = "safe"  # applied by `fix`
    UNSAFE = "unsafe"  # applied by `fix --unsafe-fixes`


@dataclass(frozen=True)
class RuleOptions:
    """Choices that change which fix a rule offers, never what it finds."""

    # PM101: offer the idiomatic rewrite (unsafe) where a whole data-parallel loop is visible
    idiomatic: bool = False
    # Every rule: offer the fallback to `runtime_shim` where no plain rewrite exists (false: such a
    # site has no fix, and its finding says why; `shim = false` in the config, `--no-shim`)
    shim: bool = True
    # PM101, set by `fix` for a module whose public pmap aliases other modules import: per alias,
    # why it is kept for them ("": every importer in the project is rewritten in this run, and
    # the alias goes). An alias not named here is kept for importers, on `runtime_shim.pmap`.
    alias_importers: tuple[tuple[str, str], ...] = ()
    # Set by `fix` for a module whose pmapped functions multi-process programs of the project call
    # (their files): the module runs in those programs, and its pmaps are written for every process
    # (PM501's global-mesh rewrite) as in a module that uses the multi-process API itself.
    multi_process_callers: tuple[str, ...] = ()
