"""What the analysis finds: transform sites (a pmap or jit applied to a function) and the tags of
the values it follows."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import BaseAssignment

from pmap_migrate.rules.analysis.imported import ImportedAlias

PMAP = "pmap"


JIT = "jit"


# Value tags (what a name or call may hold).
PMAP_OUTPUT = "pmap-output"  # output of a pmap whose leading axis is the device axis (out_axes=0)


# Output of a pmap with out_axes=None (or another axis): no leading device axis, so `out[0]` is
# ordinary indexing. Kept apart from PMAP_OUTPUT so device-axis rules do not fire on it.
PMAP_OUTPUT_UNSTACKED = "pmap-output-unstacked"


REPLICATED = "replicated-stack"  # device_put_replicated / flax replicate


SHARDED_STACK = "sharded-stack"  # device_put_sharded: one slice per device, stacked


COMMITTED = "committed"  # device_put(x, device_or_sharding)


JIT_OUTPUT = "jit-output"


# Values with a leading axis laid out one slice per device: indexing that axis is a gather.
DEVICE_STACKED = frozenset({PMAP_OUTPUT, REPLICATED, SHARDED_STACK})


# pmap's signature: pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, ...)
PMAP_POSITIONAL = ("fun", "axis_name")


FunctionLike = cst.FunctionDef | cst.Lambda


@dataclass(frozen=True)
class Callee:
    """An expression that, when called with a function, applies a transform (pmap or jit)."""

    transform: str
    bound_args: tuple[cst.Arg, ...] = ()  # arguments fixed by functools.partial
    via: tuple[str, ...] = ()  # alias names followed to get here
    ambiguous: bool = False  # an alias that is also bound to something else
    origin: str | None = None  # the module of the project that defines the alias (the project index)
    imported: ImportedAlias | None = None  # that alias as this module spells it (with ``origin``)


@dataclass
class TransformSite:
    """One application of pmap (or jit) to a function: a call or a decorator."""

    transform: str
    node: cst.Call | cst.Decorator
    callee: Callee
    args: tuple[cst.Arg, ...]  # every argument after the transform: partial's, then the call's
    decorated: cst.FunctionDef | None = None
    bound_names: list[BaseAssignment] = field(default_factory=list)
    bound_attribute: tuple[cst.ClassDef, str] | None = None
    # A function pmapped in another module of the project (the project index): ``node`` is then not
    # in this module (it spells the pmap the other module applies), ``origin`` names that module
    # and ``tuple_output`` says whether the function returns a tuple or list display.
    origin: str | None = None
    tuple_output: bool = False
    # (a jit site) the faithful rewrite of a pmap that another module defines: its outputs are stacks
    rows: bool = False
    # (a site of another module) written for every process's devices (PM501's global-mesh form), or
    # a pmap whose module's own fix writes it so (that module uses the multi-process API)
    processes: bool = False

    @property
    def is_decorator(self) -> bool:
        return isinstance(self.node, cst.Decorator)

    def positional(self) -> list[cst.BaseExpression]:
        return [a.value for a in self.args if a.keyword is None and not a.star]

    @property
    def fun(self) -> cst.BaseExpression | None:
        """The mapped function's expression (call form only)."""
        if self.is_decorator:
            return None
        pos = self.positional()
        return pos[0] if pos else None

    def option(self, name: str) -> cst.BaseExpression | None:
        for arg in self.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg.value
        if name in PMAP_POSITIONAL:
            index = PMAP_POSITIONAL.index(name) - (1 if self.is_decorator else 0)
            pos = self.positional()
            if 0 <= index < len(pos) and not (self.is_decorator and index == 0 and name == "fun"):
                return pos[index]
        return None

    def keyword_arg(self, name: str) -> cst.Arg | None:
        for arg in self.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    @property
    def dynamic_options(self) -> bool:
        return any(a.star for a in self.args)
