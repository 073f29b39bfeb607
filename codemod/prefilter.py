"""Which files need the (slow) libcst engine at all: a text test, then a cheap `ast` test.

Each rule states what must occur in a file for it to possibly fire:

- ``TRIGGERS``: substrings, one of which must occur in the bytes (``pmap`` for the pmap rules);
- ``NAMES``: qualified names (``jax.tree_map``, ``flax.jax_utils.replicate``, a removed module such
  as ``jax.experimental.maps``), one of which the file must refer to;
- ``KEYWORDS`` with ``KEYWORD_NAMES``: keyword arguments reported on calls of some functions
  (``check_rep=`` on ``jax.shard_map``): some call passes one, and the file refers to one of the
  names (a call is reported only where its function resolves to one).

A rule can only report a ``NAMES`` entry at a reference that resolves to it, through the file's
own imports (``import jax as J``; ``from jax import tree_map as tm``; ``from jax.experimental import
maps``; a module-local alias ``dpr = jax.device_put_replicated``). So every component of such a
name is spelled somewhere in the file (in an import or an attribute), which is tested first on the
bytes; only then does Python's own parser (``ast``, many times faster than libcst) list the names
the file refers to, by the same import semantics, over-approximated: every binding of a name in
any scope counts everywhere, star imports make every name a candidate (and the keyword arguments
it passes). A file the test rejects cannot give a finding; one it accepts goes to libcst, which decides.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import warnings
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pmap_migrate.rules.base import Rule
    from pmap_migrate.rules.knowledge.gates import Declared


# Between the parts of a dotted name: blanks, line continuations, comments (inside brackets).
_GAP = rb"(?:\s|\\|#[^\n]*\n)*"  # a comment runs to its line's end: one way to match, no backtracking blow-up
_BLANKS = rb"[\s\\]"
_STAR = re.compile(rb"import" + _BLANKS + rb"*\*")
# The runs of ASCII word characters (``\w`` of a bytes pattern): every identifier in Python source
# is one, or (with letters beyond ASCII) holds the ASCII runs that are the only way a name's
# component can be spelled in it. Every other byte becomes a space, and ``split()`` lists the runs
# (half the time of ``re.findall(rb"\w+")``, same words).
_NOT_WORD_TO_SPACE = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else 32 for c in range(256))


@dataclass(frozen=True)
class NameText:
    """How a reference to one qualified name ``a.b.c`` shows in the text, as libcst resolves names
    (through imports and attribute chains): ``b.c`` as an attribute chain (or a dotted import);
    ``c`` imported ``from a.b import ...`` (continued lines and brackets included); or ``b``
    imported under another name (``import a.b as x``, ``from a import b as x``) and some ``.c``.
    The chain ``b.c`` refers to ``a.b.c`` only where ``b`` is bound to ``a.b``, so ``a.b`` shows
    too (recursively; ``b.c`` alone is also how ``from a._private import b`` then ``b.c`` reads).
    A star import is tested apart. The regular expressions start with a literal: fast to search."""

    name: str
    # Every component (once), the last one first.
    parts: tuple[bytes, ...]

    @classmethod
    def of(cls, name: str) -> NameText:
        return cls(name, tuple(dict.fromkeys(part.encode() for part in reversed(name.split(".")))))

    @cached_property
    def patterns(self) -> tuple[tuple[re.Pattern[bytes], ...], re.Pattern[bytes] | None, re.Pattern[bytes] | None]:
        """``(strong, alias, attribute)``: compiled on first use (a hundred names' expressions take
        a tenth of a second, which a run whose files all fail the cheaper tests never needs)."""
        components = [re.escape(part).encode() for part in self.name.split(".")]
        last = components[-1]
        if len(components) == 1:
            return (re.compile(last + rb"\b"),), None, None
        prev = components[-2]
        module = (_BLANKS + rb"*\." + _BLANKS + rb"*").join(components[:-1])
        chain = re.compile(prev + _GAP + rb"\." + _GAP + last + rb"\b")
        imported = re.compile(
            rb"from" + _BLANKS + rb"+" + module + _BLANKS + rb"+import(?:"
            + rb"\b(?:[^\n;]*\\\r?\n)*[^\n;]*\b" + last + rb"\b"  # on (continued) lines
            + rb"|" + _BLANKS + rb"*\((?:[^)#]|#[^\n]*\n)*?\b" + last + rb"\b)")  # in brackets
        alias = re.compile(prev + _BLANKS + rb"+as" + _BLANKS + rb"+\w")
        attribute = re.compile(rb"\." + _GAP + last + rb"\b")
        return (chain, imported), alias, attribute

    @cached_property
    def prefix(self) -> NameText | None:
        """``a.b`` of ``a.b.c`` (None for a name of one or two components: its root is a module's
        name, which some import binds wherever a chain refers to it)."""
        head = self.name.rpartition(".")[0]
        return NameText.of(head) if "." in head else None

    def shown(self, data: bytes, memo: dict[str, bool] | None = None) -> bool:
        """Whether the text shows the name in one of these forms (``memo``: the verdicts on the
        same text so far, names share prefixes)."""
        if memo is not None and self.name in memo:
            return memo[self.name]
        strong, alias, attribute = self.patterns
        verdict = (len(strong) > 1 and strong[1].search(data) is not None) or (
            alias is not None and alias.search(data) is not None and attribute.search(data) is not None) or (
            strong[0].search(data) is not None and (self.prefix is None or self.prefix.shown(data, memo)))
        if memo is not None:
            memo[self.name] = verdict
        return verdict


@dataclass(frozen=True)
class Gate:
    """The prefilter of a set of rules."""

    triggers: tuple[bytes, ...] | None  # None: some rule fires on anything, every file is parsed
    names: frozenset[str]
    # For each name, the components that must all occur in a file that refers to it.
    spellings: tuple[tuple[bytes, ...], ...]
    # Names whose uses matter module-wide (kept when a module is sliced, codemod/slices.py).
    context: frozenset[str] = frozenset()
    texts: tuple[NameText, ...] = ()
    words: frozenset[bytes] = frozenset()  # the components of every name, and the keywords
    firsts: tuple[bytes, ...] = ()  # their first components (``jax``, ``flax``)
    # Keyword arguments some rule reports on calls of some functions, each with the names of which
    # the module must refer to one (rules/base.py: ``KEYWORDS``, ``KEYWORD_NAMES``).
    keywords: tuple[tuple[str, frozenset[str]], ...] = ()
    # For each name that matters only with a keyword (in ``texts``, not in ``names``), its keywords.
    keyword_texts: tuple[tuple[str, frozenset[bytes]], ...] = ()

    @classmethod
    def of(cls, rules: Sequence[type[Rule] | Declared]) -> "Gate":
        triggers: set[bytes] = set()
        names: set[str] = set()
        context: set[str] = set()
        keywords: dict[str, set[str]] = {}
        unconditional = False
        for rule in rules:
            context.update(getattr(rule, "CONTEXT_NAMES", ()))
            rule_names = getattr(rule, "NAMES", frozenset())
            rule_keywords = getattr(rule, "KEYWORDS", frozenset())
            if not rule.TRIGGERS and not rule_names and not rule_keywords:
                unconditional = True
            triggers.update(t.encode() for t in rule.TRIGGERS)
            names.update(rule_names)
            for keyword in rule_keywords:
                keywords.setdefault(keyword, set()).update(rule.KEYWORD_NAMES)
        by_name: dict[str, set[bytes]] = {}
        for keyword, keyword_names in keywords.items():
            for name in keyword_names - names:
                by_name.setdefault(name, set()).add(keyword.encode())
        texts = tuple(NameText.of(name) for name in sorted(names | set(by_name)))
        return cls(None if unconditional else tuple(sorted(triggers)), frozenset(names),
                   tuple(sorted({text.parts for text in texts})), frozenset(context), texts,
                   frozenset(part for text in texts for part in text.parts) | {k.encode() for k in keywords},
                   tuple(sorted({text.name.split(".")[0].encode() for text in texts})),
                   tuple(sorted((k, frozenset(v)) for k, v in keywords.items())),
                   tuple(sorted((name, frozenset(v)) for name, v in by_name.items())))

    def needs_parse(self, data: bytes, notebook: bool = False) -> bool:
        """Whether any rule could fire on a file with these contents (True when unsure)."""
        return self.text_match(data) or self.refers_to_names(data, notebook)

    def text_match(self, data: bytes) -> bool:
        """The cheap half: a trigger occurs (or some rule runs on every file)."""
        return self.triggers is None or any(t in data for t in self.triggers)

    def mentions(self, data: bytes) -> bool:
        """A trigger, or the last component of some name, occurs: what code that does not parse
        (a broken notebook cell) must show to possibly hold a legacy pattern."""
        return (self.text_match(data) or any(parts[0] in data for parts in self.spellings)
                or any(pattern.search(data) is not None for pattern in self._keyword_passed))

    @cached_property
    def _keywords_of_name(self) -> dict[str, frozenset[bytes]]:
        return dict(self.keyword_texts)

    @cached_property
    def _keyword_passed(self) -> tuple[re.Pattern[bytes], ...]:
        """How a call passing one of ``keywords`` shows in the text: ``check_rep=``."""
        return tuple(re.compile(rb"\b" + re.escape(keyword.encode()) + rb"[ \t]*=") for keyword, _ in self.keywords)

    def spells_names(self, data: bytes) -> bool:
        """Some name is spelled in Python source as a reference to it would be (the test before any
        parse): each of its components is a word of the source (a reference resolves through
        imports and attributes, which spell every component as an identifier), and the text shows
        it in one of the forms of ``NameText`` or holds a star import. One pass lists the words
        (searching the bytes once per component cost three times as much). Before that, a name's
        first component must occur in the bytes at all (most files that do not use jax are out)."""
        if self.firsts and not any(first in data for first in self.firsts):
            return False
        words = self.words.intersection(data.translate(_NOT_WORD_TO_SPACE).split())
        if not words:
            return False
        spelled = [text for text in self.texts if words.issuperset(text.parts)]
        if self.keyword_texts and spelled:  # a name that matters with a keyword only: and the keyword
            with_keyword = self._keywords_of_name
            spelled = [text for text in spelled if text.name not in with_keyword
                       or not words.isdisjoint(with_keyword[text.name])]
        if not spelled:
            return False
        if _STAR.search(data) is not None:
            return True
        memo: dict[str, bool] = {}
        return any(text.shown(data, memo) for text in spelled)

    def tree_refers_to_names(self, tree: ast.AST, scanned: Scan | None = None) -> bool:
        """Whether the module (its ``tree``, or what ``scan_names`` found in it) refers to one of the
        names, or passes a keyword of ``keywords`` and refers to one of that keyword's names."""
        _, referenced, keywords = scan_names(tree) if scanned is None else scanned
        if not self.names.isdisjoint(referenced):
            return True
        return any(keyword in keywords and not names.isdisjoint(referenced) for keyword, names in self.keywords)

    def refers_to_names(self, data: bytes, notebook: bool = False) -> bool:
        """The `ast` half: the file refers to one of the names (True when it does not parse).
        A notebook's code is its code cells (a notebook's JSON may well parse as Python)."""
        if not self.names and not self.keywords:
            return False
        if notebook:
            # The JSON escapes the code (`"\\njax.tree_map"`): its words are not the code's. Its
            # code is read first (outputs and images make a notebook large: reading the JSON costs
            # a tenth of searching it for each name's components).
            if self.firsts and not any(first in data for first in self.firsts):
                return False
            code = _notebook_code(data)
            if code is None:  # not a readable notebook: unsure if some name's components occur
                return any(all(part in data for part in parts) for parts in self.spellings)
            data = code
        if not self.spells_names(data):
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escape sequences and the like
                tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = self.newer_grammar_tree(data)
            if tree is None:
                return True  # libcst decides (and reports what does not parse)
        return self.tree_refers_to_names(tree)

    def newer_grammar_tree(self, data: bytes) -> ast.Module | None:
        """For the names test only, when this Python's `ast` rejects ``data``: the tree of ``data``
        without Python 3.12's type parameters (``def f[T: Bound](x)``, ``class C[T]``, ``type A[T]
        = ...``), which libcst parses on any Python; None when that does not parse either, or when
        the parameters taken out spell one of the words of the names or keywords (they might refer
        to one). Its lines and columns are not the file's: nothing but the names test reads it."""
        if sys.version_info >= (3, 12):
            return None
        from pmap_migrate.sourcetext import python_text  # only for modules this Python's `ast` rejects

        try:
            text = python_text(data)
        except (SyntaxError, LookupError, UnicodeError):
            return None
        taken = without_type_parameters(text)
        if taken is None:
            return None
        text, removed = taken
        if not self.words.isdisjoint(removed.encode("utf-8", "surrogatepass").translate(_NOT_WORD_TO_SPACE).split()):
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


# Where PEP 695's syntax may start: a type parameter list after a def's or class's name, and a
# `type` statement. Matched on the text: a match inside a string or comment only changes text that
# holds no reference (and whatever the edits take out is tested for the names' words).
_GENERIC_DEF = re.compile(r"\b(?:def|class)[ \t]+\w+[ \t]*(?=\[)")
_TYPE_STATEMENT = re.compile(r"^([ \t]*)type[ \t]+(\w+)(?=[ \t]*([=\[]))", re.MULTILINE)


def without_type_parameters(text: str) -> tuple[str, str] | None:
    """``text`` without PEP 695's syntax (Python 3.12), for an older `ast`: the type parameter list
    of each ``def``/``class`` taken out, and each ``type X[...] = value`` statement written as ``X =
    value``; and the text taken out (type parameters with their bounds and defaults). None when
    there is none of it, or a bracket is not closed."""
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement)
    for match in _GENERIC_DEF.finditer(text):
        end = _closing(text, match.end())
        if end is None:
            return None
        edits.append((match.end(), end, ""))
    for match in _TYPE_STATEMENT.finditer(text):
        edits.append((match.start(), match.end(), match.group(1) + match.group(2)))  # `type X` -> `X`
        if match.group(3) == "[":
            bracket = text.index("[", match.end())
            end = _closing(text, bracket)
            if end is None:
                return None
            edits.append((bracket, end, ""))
    if not edits:
        return None
    edits.sort()
    removed: list[str] = []
    pieces: list[str] = []
    last = 0
    for start, end, replacement in edits:
        if start < last:
            return None  # overlapping matches: not the syntax looked for
        pieces += [text[last:start], replacement]
        if not replacement:
            removed.append(text[start:end])
        last = end
    pieces.append(text[last:])
    return "".join(pieces), " ".join(removed)


def _closing(text: str, start: int) -> int | None:
    """Just past the bracket that closes the one at ``start`` (brackets of any kind counted)."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


@lru_cache(maxsize=16)
def gate_of(rules: tuple[type[Rule], ...]) -> Gate:
    """``Gate.of(rules)``, made once per set of rules."""
    return Gate.of(rules)


@lru_cache(maxsize=16)
def gate_of_codes(codes: tuple[str, ...]) -> Gate:
    """The gate of the registered rules ``codes``, from their declarations (rules/knowledge/gates.py): no
    rule, and so not libcst, is imported (unless a rule has no declaration there: its class is read)."""
    from pmap_migrate.rules.knowledge.gates import BY_CODE

    if any(code not in BY_CODE for code in codes):
        from pmap_migrate.rules import rules_by_code

        return Gate.of(tuple(BY_CODE.get(code) or rules_by_code()[code] for code in codes))
    return Gate.of(tuple(BY_CODE[code] for code in codes))


def _notebook_code(data: bytes) -> bytes | None:
    """The code cells of a notebook, one after the other (None: not a readable notebook). IPython
    syntax (magics, shell lines) makes the parse fail, which counts as "unsure"."""
    try:
        cells = json.loads(data).get("cells", [])
        sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                   for c in cells if c.get("cell_type") == "code"]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return "\n".join(sources).encode("utf-8", "surrogatepass")


def dotted(node: ast.expr) -> tuple[str, list[str]] | None:
    """``a.b.c`` as (``a``, [``b``, ``c``]); None for anything that is not a name's attribute chain."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, attrs[::-1]
    return None


def prefixes(name: str) -> Iterable[str]:
    """``a``, ``a.b``, ``a.b.c`` for ``a.b.c``."""
    parts = name.split(".")
    return (".".join(parts[:i]) for i in range(1, len(parts) + 1))


_NODE_FIELDS: dict[type, tuple[str, ...]] = {}

# The fields of node classes that never hold a node (identifiers, numbers, constants, comments), and
# the operators (``BinOp.op``, ``Compare.ops``: leaves nothing here looks at). Any other field is read.
_LEAF_FIELDS = {
    "FunctionDef": ("name", "type_comment"), "AsyncFunctionDef": ("name", "type_comment"), "ClassDef": ("name",),
    "ImportFrom": ("module", "level"), "alias": ("name", "asname"), "Global": ("names",), "Nonlocal": ("names",),
    "Attribute": ("attr",), "Name": ("id",), "Constant": ("value", "kind"), "arg": ("arg", "type_comment"),
    "keyword": ("arg",), "ExceptHandler": ("name",), "FormattedValue": ("conversion",),
    "comprehension": ("is_async",), "AnnAssign": ("simple",), "Assign": ("type_comment",),
    "For": ("type_comment",), "AsyncFor": ("type_comment",), "With": ("type_comment",),
    "AsyncWith": ("type_comment",), "BinOp": ("op",), "UnaryOp": ("op",), "BoolOp": ("op",), "AugAssign": ("op",),
    "Compare": ("ops",),
}


def node_fields(cls: type) -> tuple[str, ...]:
    """The fields of an `ast` class that may hold child nodes, in order, without the expression
    contexts (``Load``, ``Store``, ``Del``: nothing here looks at them, and every name has one) and
    the fields ``_LEAF_FIELDS`` lists for the class. Remembered in ``_NODE_FIELDS``, where the walks
    look first (one dictionary look-up per node)."""
    leaves = _LEAF_FIELDS.get(cls.__name__, ())
    fields = _NODE_FIELDS[cls] = tuple(name for name in cls._fields if name != "ctx" and name not in leaves)
    return fields


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` as a list, in the same order, without expression contexts and
    operators (``node_fields``): a third of the cost of the generator pair it replaces."""
    cls = node.__class__
    fields = _NODE_FIELDS.get(cls)
    if fields is None:
        fields = node_fields(cls)
    children: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            children.append(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, ast.AST):
                    children.append(item)
    return children


def referenced_names(tree: ast.AST) -> set[str]:
    """Every qualified name (with its prefixes) that some import, attribute chain or name of the
    module may refer to."""
    return scan_names(tree)[1]


def name_bindings(tree: ast.AST) -> dict[str, set[str]]:
    """For each local name, the qualified names it may be bound to anywhere in the module (imports,
    module-local aliases, star imports), over-approximated as in ``referenced_names``."""
    return scan_names(tree)[0]


# What ``scan_names`` finds in a module: ``name_bindings``, ``referenced_names``, and the keyword
# arguments passed anywhere, each with the lines it is passed on.
Scan = tuple[dict[str, set[str]], set[str], dict[str, list[int]]]


def scan_names(tree: ast.AST) -> Scan:
    """``name_bindings``, ``referenced_names`` and the keyword arguments of a module, from one walk."""
    found: set[str] = set()
    keywords: dict[str, list[int]] = {}
    bindings, chains = _bindings_and_chains(tree, found, keywords)
    for root, attrs in chains:
        for base in bindings.get(root, ()):
            found.update(prefixes(".".join([base, *attrs])))
    return bindings, found, keywords


def _bindings_and_chains(tree: ast.AST, found: set[str], keywords: dict[str, list[int]]
                         ) -> tuple[dict[str, set[str]], list[tuple[str, list[str]]]]:
    """The module's bindings of local names to qualified names, and every name/attribute chain it
    holds; the imported names themselves (with prefixes) are added to ``found``, the keyword
    arguments to ``keywords`` (with their lines)."""
    bindings: dict[str, set[str]] = {}
    star_modules: list[str] = []
    chains: list[tuple[str, list[str]]] = []
    aliases: list[tuple[str, tuple[str, list[str]]]] = []

    def bind(local: str, qualified: str) -> None:
        bindings.setdefault(local, set()).add(qualified)

    # Breadth-first, as `ast.walk` (children listed inline: a call and a generator step per node were a
    # third of this walk). An attribute chain ``a.b.c`` is read whole at its outermost node: its inner
    # nodes (``a.b``, ``a``) hold nothing else, and what they would add (``a.b``'s qualified names
    # and the root ``a``) is implied by the whole chain, so the walk does not go down into them.
    todo = deque([tree])
    popleft, append = todo.popleft, todo.append
    Name, Attribute, keyword = ast.Name, ast.Attribute, ast.keyword
    while todo:
        node = popleft()
        cls = node.__class__
        if cls is Name:  # no child nodes
            chains.append((node.id, []))
            continue
        if cls is Attribute:  # its only child node is its value
            value = node.value
            if value.__class__ is Name:
                chains.append((value.id, [node.attr]))
                continue
            if value.__class__ is Attribute:
                chain = dotted(node)
                if chain is not None:
                    chains.append(chain)
                    continue
            append(value)
            continue
        fields = _NODE_FIELDS.get(cls)
        if fields is None:
            fields = node_fields(cls)
        for field in fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        append(item)
            elif isinstance(value, ast.AST):
                append(value)
        if cls is keyword:
            if node.arg is not None:
                keywords.setdefault(node.arg, []).append(node.lineno)
            continue
        if cls is ast.Import:
            for alias in node.names:
                found.update(prefixes(alias.name))
                if alias.asname:
                    bind(alias.asname, alias.name)
                else:
                    top = alias.name.split(".")[0]
                    bind(top, top)
        elif cls is ast.ImportFrom:
            module = "." * node.level + (node.module or "")
            if node.module:
                found.update(prefixes(module))  # `from removed.module import *` is itself reported
            for alias in node.names:
                if alias.name == "*":
                    star_modules.append(module)
                    continue
                qualified = f"{module}.{alias.name}" if module and not module.endswith(".") else module + alias.name
                found.update(prefixes(qualified))
                bind(alias.asname or alias.name, qualified)
        elif (cls is ast.Assign or cls is ast.AnnAssign or cls is ast.NamedExpr) and node.value is not None:
            targets = node.targets if cls is ast.Assign else [node.target]
            source = dotted(node.value)
            if source is not None:
                aliases.extend((t.id, source) for t in targets if isinstance(t, ast.Name))

    for module in star_modules:  # `from m import *`: any name may be one of m's
        for root, _ in chains:
            bind(root, f"{module}.{root}")

    def resolve(root: str, attrs: list[str]) -> set[str]:
        return {".".join([base, *attrs]) for base in bindings.get(root, ())}

    # Module-local aliases (`maps = jax.experimental.maps`, `tm = jax.tree_map`), aliases of aliases.
    for _ in range(3):
        changed = False
        for target, (root, attrs) in aliases:
            for qualified in resolve(root, attrs):
                if qualified not in bindings.get(target, ()):
                    bind(target, qualified)
                    changed = True
        if not changed:
            break
    return bindings, chains
