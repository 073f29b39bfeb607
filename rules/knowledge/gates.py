"""What the prefilter (codemod/prefilter.py) reads of each rule, kept apart from the rules.

A rule module imports libcst, whose import alone costs a tenth of a second. `check` on files the
prefilter rules out (a pre-commit run on a commit that does not touch JAX code) needs only these
declarations: it builds its gate from them and never imports a rule or libcst. Each rule class
takes its ``TRIGGERS`` and ``NAMES`` from here (rules/base.py explains them); tests check that
every rule has an entry and that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from pmap_migrate.rules.knowledge import tables

# Names (or modules) whose use anywhere in a module makes it a multi-process program (PM501): the
# slicer keeps every part of a large module that uses them, for every rule (``Rule.CONTEXT_NAMES``).
MULTI_PROCESS_CONTEXT = tables.MULTI_PROCESS | frozenset(p.rstrip(".") for p in tables.MULTI_PROCESS_PREFIXES)
# ... and whose use makes the module's pmaps keep `jax.pmap` (a test fake patches it): the rules that
# fix pmaps or their outputs keep the parts that use them too.
PMAP_CONTEXT = MULTI_PROCESS_CONTEXT | tables.PMAP_FAKES | tables.PATCHERS | tables.ATTRIBUTE_PATCHERS


@dataclass(frozen=True)
class Declared:
    """A rule's prefilter inputs, under the names of the rule's own class attributes."""

    TRIGGERS: tuple[str, ...]
    NAMES: frozenset[str] = frozenset()
    CONTEXT_NAMES: frozenset[str] = MULTI_PROCESS_CONTEXT
    KEYWORDS: frozenset[str] = frozenset()
    KEYWORD_NAMES: frozenset[str] = frozenset()


PM101 = Declared((), tables.PMAP, PMAP_CONTEXT)
PM102 = Declared((), tables.PMAP)
PM103 = Declared((), tables.PMAP, PMAP_CONTEXT)
PM104 = Declared(("global_arg_shapes", "pmap_shmap_merge", "PMAP_SHMAP_MERGE"))
PM201 = Declared(tables.REWRITTEN_PMAP, tables.PMAP | tables.DEVICE_PUT_SHARDED | tables.DEVICE_PUT_REPLICATED | tables.FLAX_REPLICATE,
                 PMAP_CONTEXT)
PM202 = Declared(tables.REWRITTEN_PMAP, tables.PMAP | tables.DEVICE_PUT_SHARDED | tables.DEVICE_PUT_REPLICATED
                 | tables.FLAX_REPLICATE | tables.FLAX_UNREPLICATE, PMAP_CONTEXT)
PM301 = Declared((), tables.DEVICE_PUT_REPLICATED)
PM302 = Declared((), tables.DEVICE_PUT_SHARDED)
PM303 = Declared((), frozenset(tables.FLAX_PMAP_HELPERS))
PM304 = Declared((), tables.PMAP)
# The removed keywords are reported on calls of any shard_map (PM401) or jit (PM403): where a
# keyword argument of that name is passed and the module refers to one of those functions.
PM401 = Declared((), tables.EXPERIMENTAL_SHARD_MAP | frozenset({tables.EXPERIMENTAL_SHARD_MAP_MODULE}),
                 KEYWORDS=frozenset(tables.SHARD_MAP_KEYWORD_CHANGES), KEYWORD_NAMES=tables.SHARD_MAP)
PM402 = Declared((), frozenset({tables.EXPERIMENTAL_MAPS_MODULE}))
PM403 = Declared((), tables.PJIT, KEYWORDS=frozenset(tables.REMOVED_PJIT_KEYWORDS), KEYWORD_NAMES=tables.JIT)
PM404 = Declared((), frozenset(tables.REMOVED_BY_NAME))
PM501 = Declared((), tables.PMAP, PMAP_CONTEXT)

BY_CODE: dict[str, Declared] = {code: value for code, value in globals().items()
                                if isinstance(value, Declared) and code.startswith("PM")}
