"""What of a module the (slow) libcst analysis needs to see for `check`: its relevant slice.

libcst's cost grows with every line it analyses (parse, scopes, our visits), yet in most files
the legacy patterns sit in a few functions. Python's own parser (`ast`, many times faster) splits a
module into units: every module-level statement, and every member of a module-level class. A unit
is kept when it may matter to a rule:

- its text holds one of the rules' trigger substrings (``pmap``), or it refers to one of the
  rules' qualified names (``jax.tree_map``, ...) or to a name a rule consults module-wide
  (``jax.process_index``: PM501), through the module's imports (over-approximated as in the
  prefilter), or it passes a keyword argument a rule reports (``check_rep=``);
- it is an import, or an ``if __name__ == "__main__":`` block;
- it binds a module-level name (or an attribute name) that a kept unit uses, or uses one that a
  kept unit binds: a pmapped function's definition, the call sites of a pmap built at module
  level, ``self.step = jax.pmap(...)`` and its uses in other methods; to a fixpoint. Imports bind
  nothing that counts here, except an import whose text holds a trigger: the readers of what it
  binds are kept (``from pkg._pmap_compat import _shard_mapped``, then ``_shard_mapped(f, "i")``
  in a function whose text spells no trigger).

Every other unit's lines are blanked (``relevant_source``: emptied, line endings kept, so that line
and column numbers of what remains are those of the file); a class left without members gets a
``pass``. The analysis parses the slice without the blanked lines (``relevant_slice``: libcst makes
several objects of every line, blank or not, and walks them all) and places its findings on the
file's lines (a kept line's column numbers are the file's). `benchmarks/slice_identity.py` and
tests/test_slices.py compare it with the analysis of whole files.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain

from pmap_migrate.prefilter import Gate, Scan, child_nodes, dotted, prefixes, scan_names
from pmap_migrate.sourcetext import python_text

# Below this many lines a file is analysed whole: slicing would save little.
MIN_LINES = 60

# Whatever `ast` accepts, libcst 1.9 parses too up to Python 3.12's grammar, so a file `ast` accepts
# cannot hold a syntax error that only the blanked units would show. Later grammars (3.14's template
# strings, `except A, B:`) may outrun libcst: there the whole file is parsed by libcst as well.
AST_WITHIN_LIBCST = sys.version_info < (3, 13)

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


@dataclass
class Parsed:
    """A module's text (decoded as Python decodes source) and its `ast`."""

    text: str
    tree: ast.Module

    @cached_property
    def names(self) -> Scan:
        """The module's name bindings, referenced names and keyword arguments
        (codemod/prefilter.py), computed once."""
        return scan_names(self.tree)


def parse_python(data: bytes) -> Parsed | None:
    """``data`` decoded and parsed with `ast`; None when either fails (libcst then reports why)."""
    try:
        text = python_text(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            tree = ast.parse(text)
    except (SyntaxError, ValueError, LookupError, UnicodeError, RecursionError, MemoryError):
        return None
    return Parsed(text, tree)


_MAIN = re.compile(r"__name__|__main__")
_EMPTY = re.compile(r"[ \t\f]*(?:#|[\r\n]|\Z)")  # a blank or comment-only line


@dataclass(eq=False)
class _Unit:
    node: ast.stmt
    first: int  # 1-based line, decorators included
    last: int
    loads: set[str] = field(default_factory=set)  # names and attribute names read
    head_loads: set[str] = field(default_factory=set)  # those read outside function bodies
    binds: set[str] = field(default_factory=set)  # module-level names and attribute names bound
    chains: list[tuple[str, list[str]]] = field(default_factory=list)
    imported: list[str] = field(default_factory=list)  # what its import statements name (`from a import *`: a.*)
    strings: list[tuple[int, int]] = field(default_factory=list)  # (first, last) line of each multi-line string
    member_of: int | None = None  # a class member: the index of its class's unit


def _span(node: ast.stmt) -> tuple[int, int]:
    first = node.lineno
    for decorator in getattr(node, "decorator_list", ()):
        first = min(first, decorator.lineno)
    return first, node.end_lineno or node.lineno


def _scan(unit: _Unit) -> None:
    """What a unit reads, binds and which attribute chains it holds. A module-level statement binds
    module names; a class member binds an attribute of the class (``self.step``); an attribute
    assignment anywhere (``self.step = ...``) binds that attribute name. Reads are the names read
    but not bound by a function around them (those are local variables, not module names), and
    every attribute name read."""
    node = unit.node
    if isinstance(node, ast.ClassDef):  # its header; the members are units of their own
        unit.binds.add(node.name)
        for part in (*node.decorator_list, *node.bases, *node.keywords):
            _free_reads(part, unit)
    else:
        _free_reads(node, unit)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_STRINGS = (ast.Constant, ast.JoinedStr)  # a multi-line one's lines are its value, blank or `#` alike


def _free_reads(node: ast.AST, unit: _Unit) -> None:
    """Collect what the unit binds in its own scope (``binds``, with attribute names stored anywhere),
    its free reads (``loads``: names no function around them binds, and attribute names), those
    outside any function body (``head_loads``: decorators, defaults, a statement's own expressions),
    its attribute chains and what its import statements name. One walk: each function, lambda and
    comprehension is a scope with the names it binds and reads; a read is free when no enclosing
    scope binds it (a class body binds nothing here: reads stay free, the safe side)."""
    parents: list[int] = [-1]
    binds: list[set[str]] = [set()]
    declared: list[set[str]] = [set()]
    reads: list[set[str]] = [set()]
    classes: set[int] = set()
    stack: list[tuple[ast.AST, int]] = [(node, 0)]

    def new_scope(parent: int, bound: set[str]) -> int:
        parents.append(parent)
        binds.append(bound)
        declared.append(set())
        reads.append(set())
        return len(parents) - 1

    while stack:
        current, scope = stack.pop()
        if isinstance(current, ast.Name):
            if isinstance(current.ctx, ast.Load):
                unit.chains.append((current.id, []))
                reads[scope].add(current.id)
            else:
                binds[scope].add(current.id)
            continue
        if isinstance(current, ast.Attribute):
            if isinstance(current.ctx, ast.Load):
                unit.loads.add(current.attr)
                if scope == 0:
                    unit.head_loads.add(current.attr)
                chain = dotted(current)
                if chain is not None:
                    unit.chains.append(chain)
            else:
                unit.binds.add(current.attr)
            stack.append((current.value, scope))
            continue
        if isinstance(current, _FUNCTIONS):
            if not isinstance(current, ast.Lambda):
                binds[scope].add(current.name)
            arguments = current.args
            every = (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg,
                     arguments.kwarg)
            # Decorators, defaults and annotations run in the enclosing scope; the body in its own.
            outside: list[ast.AST] = [*getattr(current, "decorator_list", ()), *arguments.defaults,
                                      *(d for d in arguments.kw_defaults if d is not None),
                                      *(a.annotation for a in every if a is not None and a.annotation is not None),
                                      *([current.returns] if getattr(current, "returns", None) is not None else []),
                                      *getattr(current, "type_params", ())]
            stack.extend((child, scope) for child in outside)
            inner = new_scope(scope, {a.arg for a in every if a is not None})
            body = current.body if isinstance(current.body, list) else [current.body]
            stack.extend((child, inner) for child in body)
            continue
        if isinstance(current, ast.ClassDef) and current is not node:
            binds[scope].add(current.name)
            stack.extend((child, scope) for child in (*current.decorator_list, *current.bases, *current.keywords))
            inner = new_scope(scope, set())  # a class body: what it binds is no variable of the functions inside
            classes.add(inner)
            stack.extend((child, inner) for child in current.body)
            continue
        if isinstance(current, _COMPREHENSIONS):
            inner = new_scope(scope, set())
            stack.extend((child, inner) for child in child_nodes(current))
            continue
        if isinstance(current, (ast.Global, ast.Nonlocal)):
            if isinstance(current, ast.Global):
                declared[scope].update(current.names)
            if scope == 0:
                binds[0].update(current.names)
        elif isinstance(current, ast.alias):
            binds[scope].add((current.asname or current.name).split(".")[0])
        elif isinstance(current, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and current.name:
            binds[scope].add(current.name)
        elif isinstance(current, ast.Import):
            unit.imported.extend(alias.name for alias in current.names)
        elif isinstance(current, ast.ImportFrom) and current.module and not current.level:
            unit.imported.extend(f"{current.module}.{alias.name}" for alias in current.names)
        elif isinstance(current, _STRINGS) and current.end_lineno != current.lineno:
            unit.strings.append((current.lineno, current.end_lineno))
        stack.extend((child, scope) for child in child_nodes(current))
    unit.binds |= binds[0]
    unit.loads |= reads[0]
    unit.head_loads |= reads[0]
    for scope in range(1, len(parents)):
        unit.binds |= binds[scope] & declared[scope]  # `global step` then `step = ...`: a module name
        for name in reads[scope]:
            enclosing = scope
            while enclosing > 0:
                if name in binds[enclosing] and name not in declared[enclosing] and enclosing not in classes:
                    break
                enclosing = parents[enclosing]
            else:
                unit.loads.add(name)


def _units(tree: ast.Module) -> list[_Unit]:
    units: list[_Unit] = []
    for statement in tree.body:
        unit = _Unit(statement, *_span(statement))
        _scan(unit)
        units.append(unit)
        if isinstance(statement, ast.ClassDef) and statement.body:
            owner = len(units) - 1
            for member in statement.body:
                inner = _Unit(member, *_span(member), member_of=owner)
                _scan(inner)
                units.append(inner)
    return units


@dataclass(frozen=True)
class Slice:
    """The lines of a module its relevant units are on, the others left out (libcst makes several
    objects of every line it parses, blank or not), and where each line is in the module."""

    text: str
    lines: tuple[int, ...]  # the module's (1-based) number of each line of ``text``
    total: int  # the module's number of lines
    # The line of ``text`` where each of its module-level statements starts (its first decorator,
    # or its first token), as `ast` sees them: codemod/positions.py, ``statement_positions``.
    starts: tuple[int, ...] = ()

    def line_in_file(self, line: int) -> int:
        """The module's line of ``text``'s line ``line`` (past the last one: past the module's)."""
        return self.lines[line - 1] if line <= len(self.lines) else self.total + line - len(self.lines)


def relevant_source(text: str, tree: ast.Module, gate: Gate, scanned: Scan | None = None) -> str | None:
    """``text`` with the units no rule can need blanked (emptied, line endings kept); None when
    nothing would be blanked (or the module is too small to bother)."""
    blanked = _blanked_lines(text, tree, gate, scanned)
    return None if blanked is None else "".join(blanked[0])


def relevant_slice(text: str, tree: ast.Module, gate: Gate, scanned: Scan | None = None) -> Slice | None:
    """``relevant_source`` without the blanked lines: what the analysis parses."""
    blanked = _blanked_lines(text, tree, gate, scanned)
    if blanked is None:
        return None
    out, dropped = blanked
    kept = [n for n in range(1, len(out) + 1) if n not in dropped]
    line_of = {n: k for k, n in enumerate(kept, 1)}
    firsts = (_span(statement)[0] for statement in tree.body)
    starts = tuple(line_of[n] for n in firsts if n in line_of)
    return Slice("".join(out[n - 1] for n in kept), tuple(kept), len(out), starts)


def _blanked_lines(text: str, tree: ast.Module, gate: Gate,
                   scanned: Scan | None) -> tuple[list[str], set[int]] | None:
    """The module's lines with the units no rule can need blanked, and the numbers of those blanked
    lines (a ``pass`` written in for a class left without members is not one). ``scanned``: what
    ``scan_names`` found in ``tree`` (computed here when None)."""
    if gate.triggers is None:
        return None  # some rule looks at every statement
    lines = _LINE.findall(text)  # Python's line breaks only (not form feeds and the like)
    if len(lines) < MIN_LINES:
        return None
    units = _units(tree)
    if not units:
        return None
    names = gate.names | gate.context
    bindings, _, keywords = scan_names(tree) if scanned is None else scanned
    triggers = tuple(t.decode() for t in gate.triggers)
    # The lines where a keyword some rule reports is passed (a unit holding one is kept).
    keyword_lines = sorted({line for keyword, _ in gate.keywords for line in keywords.get(keyword, ())})

    def refers(unit: _Unit) -> bool:
        resolved = (".".join([base, *attrs]) for root, attrs in unit.chains for base in bindings.get(root, ()))
        return any(prefix in names for full in chain(unit.imported, resolved) for prefix in prefixes(full))

    kept: list[bool] = []
    carriers: set[int] = set()  # imports whose text holds a trigger: what they bind matters
    for i, unit in enumerate(units):
        node = unit.node
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep = True
            if any(t in "".join(lines[unit.first - 1:unit.last]) for t in triggers):
                carriers.add(i)
        else:
            last = unit.last
            if isinstance(node, ast.ClassDef) and node.body:  # the header: members judge themselves
                last = max(unit.first, _span(node.body[0])[0] - 1)
            body = "".join(lines[unit.first - 1:last])
            keep = (any(t in body for t in triggers) or refers(unit)
                    or any(unit.first <= line <= last for line in keyword_lines))
            if not keep and unit.member_of is None and isinstance(node, ast.If) and _MAIN.search(body):
                keep = True
        kept.append(keep)

    # Forward, to a fixpoint: units reading what kept units bind (the uses of a pmap built at module
    # level, of its outputs stored in module names or attributes). Backward, to a fixpoint: units
    # binding what those read (the pmapped function's definition, where an input came from:
    # `z = prep(x)`, then `prep`); a definition pulled in this way passes on only what it reads
    # outside function bodies (decorators, defaults, assigned values), not the helpers its body
    # calls. Imports are kept anyway and carry no data flow, except one whose text holds a trigger:
    # the names it binds are what a rule looks for (`from pkg._pmap_compat import _shard_mapped`,
    # the faithful rewrite's helper, whose outputs PM201/PM202 follow), so their readers are kept.
    forward = [i for i, keep in enumerate(kept) if keep]
    bound: set[str] = set()
    while forward:
        for i in forward:
            if i in carriers or not isinstance(units[i].node, (ast.Import, ast.ImportFrom)):
                bound |= units[i].binds
        forward = [i for i, unit in enumerate(units) if not kept[i] and not unit.loads.isdisjoint(bound)]
        for i in forward:
            kept[i] = True
    read: set[str] = set()
    backward = [i for i, keep in enumerate(kept) if keep]
    first = True
    while backward:
        for i in backward:
            if not isinstance(units[i].node, (ast.Import, ast.ImportFrom)):
                read |= units[i].loads if first else units[i].head_loads
        first = False
        backward = [i for i, unit in enumerate(units) if not kept[i] and not unit.binds.isdisjoint(read)]
        for i in backward:
            kept[i] = True
    # A kept member keeps its class (header and all), a class kept as a whole keeps its members.
    for i, unit in enumerate(units):
        if unit.member_of is not None and kept[i]:
            kept[unit.member_of] = True

    return _blank(lines, units, kept)


def _blank(lines: list[str], units: list[_Unit], kept: list[bool]) -> tuple[list[str], set[int]] | None:
    keep_line = [False] * (len(lines) + 2)
    drop_line = [False] * (len(lines) + 2)
    classes_with_members: dict[int, list[int]] = {}
    for i, unit in enumerate(units):
        if unit.member_of is not None:
            classes_with_members.setdefault(unit.member_of, []).append(i)
    for i, unit in enumerate(units):
        if unit.member_of is None and i in classes_with_members and kept[i]:
            # The class's own lines (header, and anything between members) stay; members decide.
            members = classes_with_members[i]
            span = range(unit.first, unit.last + 1)
            member_lines = {n for m in members for n in range(units[m].first, units[m].last + 1)}
            for n in span:
                if n not in member_lines:
                    keep_line[n] = True
            continue
        target = keep_line if kept[i] else drop_line
        for n in range(unit.first, unit.last + 1):
            target[n] = True
    in_string = [False] * (len(lines) + 2)
    for unit in units:
        for first, last in unit.strings:
            in_string[first + 1:last + 1] = [True] * (last - first)
    # Blank and comment-only lines (outside strings) go too: libcst makes an `EmptyLine` and its
    # parts of each, and no rule reads them (`noqa` comments are read from the file's text).
    dropped = [n for n in range(1, len(lines) + 1)
               if drop_line[n] and not keep_line[n] or not in_string[n] and _EMPTY.match(lines[n - 1])]
    if not dropped:
        return None
    out = list(lines)
    for n in dropped:
        line = out[n - 1]
        out[n - 1] = line[len(line.rstrip("\r\n")):]
    emptied = set(dropped)
    # A kept class whose members were all dropped needs a statement.
    for i, members in classes_with_members.items():
        if kept[i] and not any(kept[m] for m in members):
            first = units[members[0]]
            original = lines[first.first - 1]
            indent = original[:len(original) - len(original.lstrip(" \t"))]
            if drop_line[first.first] and not keep_line[first.first]:
                out[first.first - 1] = indent + "pass" + out[first.first - 1]
                emptied.discard(first.first)
            else:
                return None  # members share a line with the header: leave the file whole
    return out, emptied


def nonblank_lines(text: str) -> int:
    return sum(1 for line in _LINE.findall(text) if line.strip())


def kept_fraction(text: str, sliced: str | None) -> float:
    """The share of the module's non-blank lines that its slice keeps."""
    if sliced is None:
        return 1.0
    total = nonblank_lines(text)
    return nonblank_lines(sliced) / total if total else 1.0


