"""`# noqa` comments and guards: why a finding does not count even though the code matches."""

from __future__ import annotations

import io
import re
import tokenize

import libcst as cst

from pmap_migrate.rules.analysis.model import SemanticModel
from pmap_migrate.rules.knowledge import tables

_CODES = r"[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*"
_LINE_NOQA = re.compile(rf"#\s*noqa(?::\s*(?P<codes>{_CODES}))?", re.IGNORECASE)
_FILE_NOQA = re.compile(rf"#\s*pmap-migrate\s*:\s*noqa(?::\s*(?P<codes>{_CODES}))?", re.IGNORECASE)

ALL = frozenset({"*"})


class Suppressions:
    """Which codes are silenced on which line, and for the whole file."""

    def __init__(self, source: str) -> None:
        self.by_line: dict[int, frozenset[str]] = {}
        self.file: frozenset[str] = frozenset()
        if "noqa" not in source and "NOQA" not in source:
            return
        for line, comment, own_line in _comments(source):
            file_match = _FILE_NOQA.search(comment)
            if file_match:
                if own_line:
                    self.file |= _codes(file_match.group("codes"))
                continue
            match = _LINE_NOQA.search(comment)
            if match:
                self.by_line[line] = self.by_line.get(line, frozenset()) | _codes(match.group("codes"))

    def suppresses(self, code: str, line: int) -> bool:
        if "*" in self.file or code in self.file:
            return True
        codes = self.by_line.get(line)
        return codes is not None and ("*" in codes or code in codes)


def _codes(text: str | None) -> frozenset[str]:
    if not text:
        return ALL
    return frozenset(c.upper() for c in re.split(r"[\s,]+", text.strip()) if c)


def _comments(source: str):
    """(line, comment text, whether the comment is alone on its line) for every comment."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # libcst parsed it, so this only happens on tokenizer disagreements: fall back to text.
        for number, text in enumerate(source.splitlines(), 1):
            index = text.find("#")
            if index >= 0:
                yield number, text[index:], not text[:index].strip()
        return
    for token in tokens:
        if token.type == tokenize.COMMENT:
            row, col = token.start
            yield row, token.string, not token.line[:col].strip()


_GUARD_EXCEPTIONS = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError"})
_JAX_PACKAGES = frozenset({"jax", "jaxlib"})


def is_guarded(model: SemanticModel, node: cst.CSTNode) -> bool:
    """True inside code written for both APIs: under ``if hasattr(jax, ...)`` / a jax version test
    (``jax.__version__``, or a call naming the package: ``version("jax")``),
    or in a ``try`` that catches AttributeError/ImportError (NPY201's rule, applied to jax).

    A test of names alone (``hasattr(jax, "Array")``, ``getattr(jax.sharding, "X", None)``, with
    ``and``) protects, in the branch where they exist, only uses of those names: the rest of that
    branch runs on every jax that has them, the current one included. Its other branch is the
    fallback for a jax without them, and is protected whole."""
    child = node
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test and _probes_jax(model, ancestor.test):
            names = _tested_names(model, ancestor.test) if child is ancestor.body else None
            if names is None or _uses_any(model, node, names):
                return True
        if isinstance(ancestor, cst.Try) and _catches_api_errors(ancestor):
            return True
        child = ancestor
    return False


def _tested_names(model: SemanticModel, test: cst.BaseExpression) -> frozenset[str] | None:
    """The jax names a test made of ``hasattr``/``getattr`` probes joined by ``and`` asks for (all of
    them exist where it holds); None for any other test (a version test, ``not``, ``or``)."""
    parts: list[cst.BaseExpression] = []
    stack = [test]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.BooleanOperation) and isinstance(current.operator, cst.And):
            stack += [current.left, current.right]
        else:
            parts.append(current)
    names: set[str] = set()
    for part in parts:
        if not _probes_jax(model, part):
            continue  # a condition of the program's own: it narrows nothing
        probed = _probed_name(model, part)
        if probed is None:
            return None
        names.add(probed)
    return frozenset(names) if names else None


def _probed_name(model: SemanticModel, part: cst.BaseExpression) -> str | None:
    """``jax.sharding.X`` for ``hasattr(jax.sharding, "X")`` or ``getattr(jax.sharding, "X", d)``."""
    if not (isinstance(part, cst.Call) and isinstance(part.func, cst.Name)
            and part.func.value in ("hasattr", "getattr") and len(part.args) >= 2):
        return None
    owner, attribute = part.args[0].value, part.args[1].value
    if not isinstance(attribute, cst.SimpleString) or not isinstance(attribute.evaluated_value, str):
        return None
    modules = [q for q in model.qualified_names(owner) if q == "jax" or q.startswith("jax.")]
    return f"{modules[0]}.{attribute.evaluated_value}" if len(modules) == 1 else None


def _uses_any(model: SemanticModel, node: cst.CSTNode, names: frozenset[str]) -> bool:
    """``node`` (or a name or attribute in it) refers to one of ``names`` or to something inside one."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Name, cst.Attribute)):
            for qualified in model.qualified_names(current):
                if any(qualified == name or qualified.startswith(name + ".") for name in names):
                    return True
        stack.extend(current.children)
    return False


def _probes_jax(model: SemanticModel, test: cst.BaseExpression, depth: int = 0) -> bool:
    probe = _ProbeFinder(model, depth)
    test.visit(probe)
    return probe.found


# How many names deep a test is followed to its value (`v = jax.__version_info__`, `if v >= ...`).
_NAME_DEPTH = 3


class _ProbeFinder(cst.CSTVisitor):
    def __init__(self, model: SemanticModel, depth: int = 0) -> None:
        self.model = model
        self.depth = depth
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if isinstance(node.func, cst.Name) and node.func.value in ("hasattr", "getattr") and node.args:
            if any(q == "jax" or q.startswith("jax.") for q in self.model.qualified_names(node.args[0].value)):
                self.found = True
        # The installed jax's version asked by package name: `importlib.metadata.version("jax")`,
        # a project's own `module_version("jax") < (0, 8, 2)`, or of the module: `module_version(jax)`.
        if any(isinstance(a.value, cst.SimpleString) and a.value.evaluated_value in _JAX_PACKAGES
               or isinstance(a.value, cst.Name) and not _JAX_PACKAGES.isdisjoint(self.model.qualified_names(a.value))
               for a in node.args):
            self.found = True
        return not self.found

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if node.attr.value in ("__version__", "__version_info__", "__version_info"):
            if any(q.startswith("jax") for q in self.model.qualified_names(node)):
                self.found = True
        return not self.found

    def visit_Name(self, node: cst.Name) -> None:
        if self.found:
            return
        if any(q in tables.JAX_VERSION_NAMES for q in self.model.qualified_names(node)):
            self.found = True
        elif self.depth < _NAME_DEPTH:
            # A name every assignment of which holds a jax version test (`jax_version = (jax.__version_info__
            # if ... else ...)`): testing the name tests jax's version.
            values = [self.model.assigned_value(getattr(assignment, "node", None))  # builtins have none
                      for assignment in self.model.assignments_of(node)]
            self.found = bool(values) and all(
                value is not None and _probes_jax(self.model, value, self.depth + 1) for value in values)


def _catches_api_errors(node: cst.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            continue
        types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
        for element in types:
            value = element.value if isinstance(element, cst.Element) else element
            if isinstance(value, cst.Name) and value.value in _GUARD_EXCEPTIONS:
                return True
    return False
