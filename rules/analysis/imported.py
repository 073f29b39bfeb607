"""An alias of pmap imported from another module of the project, as the importer can spell it.

``constants.pmap(f)``, where ``constants.py`` holds ``pmap = functools.partial(jax.pmap,
axis_name=PMAP_AXIS_NAME)``, means ``jax.pmap(f, axis_name=constants.PMAP_AXIS_NAME)`` in the
importer: the options the alias binds, with the alias module's names read through the importer's
own binding of that module (``constants.``), or, where the importer imports the alias by name
(``from .constants import pmap as p``), imported the same way (``from .constants import
PMAP_AXIS_NAME``). Literal options need neither. Anything else (an option that reads an import of
the alias module, a name bound more than once, an alias reached through a re-export whose module
the importer does not name) cannot be said in the importer: the use keeps the alias, and says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from pmap_migrate.rules.analysis.facts import AliasFact, absolute_name


@dataclass(frozen=True)
class ImportedAlias:
    """How one use of an imported alias reads in the importer."""

    module: str  # the alias module, absolute (the index's name)
    name: str  # the alias's name in its module
    args: tuple[cst.Arg, ...] = ()  # its options, spelled for the importer (nodes of their own)
    problem: str = ""  # why the options cannot be spelled in the importer ("": they can)
    # ``from <spelled> import <name>`` imports the importer needs: (module as spelled without its
    # dots, number of dots, name); and the importer's own import of the alias by name, when it
    # uses it that way, from its module or a re-export: (module, dots, name imported, local name).
    needs: tuple[tuple[str, int, str], ...] = ()
    by_name: tuple[str, int, str, str] | None = None


def imported_alias(fact: AliasFact, expr: cst.Name | cst.Attribute, qualified: str, importer: str,
                   package: bool, bound: frozenset[str]) -> ImportedAlias:
    """``expr`` (the importer's spelling of the alias, whose qualified name is ``qualified``) as an
    ``ImportedAlias``. ``importer``/``package``: the importing module's name; ``bound``: the names
    the importer binds at module level (a name to import must not be one of them)."""
    spelled_module, _, _ = qualified.rpartition(".")
    names_module = absolute_name(spelled_module, importer, package) == fact.module if spelled_module else False
    by_name = None
    if isinstance(expr, cst.Name) and spelled_module:  # imported by name (from its module, or a re-export)
        dots = len(spelled_module) - len(spelled_module.lstrip("."))
        by_name = (spelled_module[dots:], dots, qualified.rpartition(".")[2], expr.value)
    unstable = [n for n in fact.names if n not in fact.stable]
    if unstable:
        return ImportedAlias(fact.module, fact.name, problem=f"the alias's options read `{unstable[0]}`, which is "
                             f"not a module-level constant of `{fact.module}`", by_name=by_name)
    try:
        call = cst.parse_expression(f"f({fact.options})") if fact.options else None
    except cst.ParserSyntaxError:
        return ImportedAlias(fact.module, fact.name, problem="the alias's options cannot be read here",
                             by_name=by_name)
    args = tuple(call.args) if isinstance(call, cst.Call) else ()
    if not fact.names:
        return ImportedAlias(fact.module, fact.name, args, by_name=by_name)
    if not names_module:
        return ImportedAlias(fact.module, fact.name, problem=f"the alias comes through a re-export: its options "
                             f"read `{fact.names[0]}` of `{fact.module}`, which this module does not import",
                             by_name=by_name)
    if isinstance(expr, cst.Attribute):
        prefix = expr.value
        args = tuple(a.visit(_Qualify(frozenset(fact.names), prefix)) for a in args)
        return ImportedAlias(fact.module, fact.name, args, by_name=by_name)
    taken = [n for n in fact.names if n in bound]
    if taken:
        return ImportedAlias(fact.module, fact.name, problem=f"the alias's options read `{taken[0]}` of "
                             f"`{fact.module}`, a name this module binds to something else", by_name=by_name)
    module, dots = by_name[0], by_name[1]
    return ImportedAlias(fact.module, fact.name, args, needs=tuple((module, dots, n) for n in fact.names),
                         by_name=by_name)


class _Qualify(cst.CSTTransformer):
    """``NAME`` -> ``<prefix>.NAME`` for the alias module's names (never a keyword or an attribute)."""

    def __init__(self, names: frozenset[str], prefix: cst.BaseExpression) -> None:
        super().__init__()
        self.names = names
        self.prefix = prefix

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if original.value not in self.names:
            return updated
        return cst.Attribute(self.prefix.deep_clone(), cst.Name(original.value), lpar=original.lpar,
                             rpar=original.rpar)
