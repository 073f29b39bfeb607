"""pmap-migrate's knowledge: one module per rule (``pm101_pmap_call.py``) and the JAX API tables.

Rules are discovered from the module names; codes are checked for uniqueness at load time.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pmap_migrate.rules.base imports libcst: a run answered from the cache never loads it
    from pmap_migrate.rules.base import Rule

_RULE_MODULE = re.compile(r"^pm\d{3}_[a-z0-9_]+$")


@lru_cache(maxsize=1)
def all_codes() -> tuple[str, ...]:
    """Every rule code, read from the module names (``pm101_pmap_call`` -> ``PM101``) without
    importing a rule; `all_rules` checks that each module's rule has its module's code."""
    return tuple(sorted(info.name[:5].upper() for info in pkgutil.iter_modules(__path__)
                        if _RULE_MODULE.match(info.name)))


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    from pmap_migrate.rules.base import Rule

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        if not _RULE_MODULE.match(info.name):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.__module__ == module.__name__:
                if value.CODE in found:
                    raise RuntimeError(f"duplicate rule code {value.CODE}: {found[value.CODE].__name__} and {value.__name__}")
                if not info.name.startswith(value.CODE.lower() + "_"):
                    raise RuntimeError(f"rule {value.CODE} lives in {info.name}.py; its module must start with {value.CODE.lower()}_")
                found[value.CODE] = value
    return tuple(found[code] for code in sorted(found))


def rules_by_code() -> dict[str, type[Rule]]:
    return {rule.CODE: rule for rule in all_rules()}


def select_codes(select: list[str] | None, ignore: list[str] | None) -> tuple[str, ...]:
    """Codes enabled by ``select``/``ignore`` (codes or prefixes such as ``PM1``); the most specific
    prefix wins, so ``--select PM1 --ignore PM102`` keeps PM101 and drops PM102."""
    chosen = []
    for code in all_codes():
        sel = _longest_prefix(code, select if select else ["PM"])
        ign = _longest_prefix(code, ignore or [])
        if sel >= 0 and sel > ign:
            chosen.append(code)
    return tuple(chosen)


def select_rules(select: list[str] | None, ignore: list[str] | None) -> tuple[type[Rule], ...]:
    """The rule classes of `select_codes`."""
    table = rules_by_code()
    return tuple(table[code] for code in select_codes(select, ignore))


def _longest_prefix(code: str, prefixes: list[str]) -> int:
    best = -1
    for prefix in prefixes:
        prefix = prefix.strip().upper()
        if prefix in ("ALL",):
            prefix = ""
        if code.startswith(prefix):
            best = max(best, len(prefix))
    return best


def unknown_selectors(selectors: list[str]) -> list[str]:
    codes = all_codes()
    return [s for s in selectors if s.strip().upper() != "ALL" and not any(c.startswith(s.strip().upper()) for c in codes)]
