"""The layout of the code a fix wrote: lines within the project's line length, continuation lines
aligned after a rename.

libcst renders generated code on one line per statement. Here, each new line longer than the limit
is wrapped the way black and ruff-format leave code with a magic trailing comma: the statement is
split at the last bracket whose opening line fits (``jax.shard_map(...)(args)`` at
``jax.shard_map(``), one element per line, indented by one unit of the file, each element followed
by a comma where Python allows one, the closing bracket on a line of its own; an element that is
still too long is split the same way. In a file that closes brackets at the end of their last line
(yapf's way, Google's), a call whose parentheses hold only another call, too long for a line of its
own, is split inside that one: ``jax.jit(_shard_mapped(`` stays on the first line, ``))`` after the
last argument. A trailing comment of a line too long goes on its own lines above the statement.
Lines that cannot be split (a long string) stay as they are.

After a rename changed a line's opening (`jax.pmap(` became `runtime_shim.pmap(`), the unchanged
continuation lines that were aligned with its bracket are moved along with it.

Everything works on text, through Python's tokenizer, on the lines a fix wrote only; the caller
checks that the result still compiles.
"""

from __future__ import annotations

import io
import keyword
import re
import textwrap
import tokenize
from dataclasses import dataclass

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(_OPEN.values())
# Trailing comments that tools read where they are: never moved.
_PRAGMA = re.compile(r"#\s*(noqa|type:|pyright:|pylint:|pytype:|pyrefly:|pyre-|mypy:|fmt:|isort:|nosec|pragma)", re.IGNORECASE)
# Of those, the ones ruff's E501 does not count in a line's length (the code before them must fit).
_LENGTH_EXEMPT = re.compile(r"#\s*(noqa|type:|pyright:|pylint:|nosec|isort:)", re.IGNORECASE)
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


@dataclass
class _Atom:
    kind: str  # "open", "close", "comma", "word" (a name or keyword), "other"
    text: str
    start: int
    end: int
    match: int = -1  # the index of the matching bracket


@dataclass
class _Logical:
    first: int  # index of its first physical line (0-based)
    last: int
    tokens: list[tokenize.TokenInfo]


def _logical_lines(text: str) -> list[_Logical] | None:
    out: list[_Logical] = []
    current: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER) and not current:
                continue
            if token.type == tokenize.COMMENT and not current:
                continue
            current.append(token)
            if token.type == tokenize.NEWLINE:
                out.append(_Logical(current[0].start[0] - 1, token.start[0] - 1, current))
                current = []
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return out


def _atoms(tokens: list[tokenize.TokenInfo]) -> list[_Atom] | None:
    """The line's tokens as atoms (an f-string is one), brackets matched; None when a bracket has
    no match on the line."""
    atoms: list[_Atom] = []
    depth = 0
    fstring_start = None
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                          tokenize.ENDMARKER):
            continue
        if _FSTRING_START is not None and token.type == _FSTRING_START:
            if depth == 0:
                fstring_start = token.start[1]
            depth += 1
            continue
        if _FSTRING_END is not None and token.type == _FSTRING_END:
            depth -= 1
            if depth == 0:
                atoms.append(_Atom("string", "", fstring_start, token.end[1]))
            continue
        if depth:
            continue
        text = token.string
        if token.type == tokenize.OP and text in _OPEN:
            kind = "open"
        elif token.type == tokenize.OP and text in _CLOSE:
            kind = "close"
        elif token.type == tokenize.OP and text == ",":
            kind = "comma"
        elif token.type == tokenize.NAME:
            kind = "word"
        elif token.type == tokenize.STRING:
            kind = "string"
        else:
            kind = "other"
        atoms.append(_Atom(kind, text, token.start[1], token.end[1]))
    stack: list[int] = []
    for k, atom in enumerate(atoms):
        if atom.kind == "open":
            stack.append(k)
        elif atom.kind == "close":
            if not stack or _OPEN[atoms[stack[-1]].text] != atom.text:
                return None
            opening = stack.pop()
            atoms[opening].match, atom.match = k, opening
    return None if stack else atoms


class _Wrapper:
    def __init__(self, line: str, atoms: list[_Atom], limit: int, unit: str, hug: bool = False) -> None:
        self.line = line
        self.atoms = atoms
        self.limit = limit
        self.unit = unit
        self.hug = hug  # the closing bracket after the last element, as the file closes them

    def closed(self, lines: list[str], close: int, j: int, indent: str, trailing: str) -> list[str]:
        """``lines`` (a bracket's opening line and contents) and its closing bracket with what
        follows it (atoms close..j): on the last line where the file closes brackets so and it
        fits, else on a line of its own, as black does."""
        rest = self.text(close, j) + trailing
        if self.hug and len(lines[-1]) + len(rest) <= self.limit:
            return lines[:-1] + [lines[-1] + rest]
        return lines + self.render(close, j, indent, trailing)

    def text(self, i: int, j: int) -> str:
        return self.line[self.atoms[i].start:self.atoms[j].end]

    def pairs(self, i: int, j: int) -> list[int]:
        """The opening brackets of the outermost bracket pairs within atoms i..j."""
        found = []
        k = i
        while k <= j:
            atom = self.atoms[k]
            if atom.kind == "open" and atom.match <= j:
                found.append(k)
                k = atom.match + 1
            else:
                k += 1
        return found

    def render(self, i: int, j: int, indent: str, trailing: str = "", inside: bool = False) -> list[str]:
        whole = indent + self.text(i, j) + trailing
        if len(whole) <= self.limit:
            return [whole]
        if inside and i == j and self.atoms[i].kind == "string":
            pieces = split_string(self.text(i, i), self.limit - len(indent), len(trailing))
            if pieces is not None:
                return [indent + piece for piece in pieces[:-1]] + [indent + pieces[-1] + trailing]
        candidates = [o for o in self.pairs(i, j) if self.atoms[o].match > o + 1]
        if not candidates:
            return [whole]
        start = self.atoms[i].start
        fitting = [o for o in candidates if len(indent) + self.atoms[o].end - start <= self.limit]
        if not fitting:
            return [whole]
        chosen = fitting[-1]
        sole = self.sole_call(chosen) if self.hug else None
        if sole is not None and len(indent) + self.atoms[sole].end - start <= self.limit and len(
                indent + self.unit + self.text(chosen + 1, self.atoms[chosen].match - 1)) > self.limit:
            chosen = sole  # the inner call split anyway: `jax.jit(_shard_mapped(` on one line, `))` at the end
        close = self.atoms[chosen].match
        elements, comma = self.elements(chosen)
        lines = [indent + self.line[self.atoms[i].start:self.atoms[chosen].end]]
        inner = indent + self.unit
        if not comma and not self.comma_separated(chosen):
            body = inner + self.text(chosen + 1, close - 1)
            if len(body) <= self.limit:  # no commas: the contents on one line when they fit
                return self.closed(lines + [body], close, j, indent, trailing)
            if chosen + 1 == close - 1:  # one atom: a string, maybe
                return lines + self.render(chosen + 1, chosen + 1, inner, inside=True) + self.render(
                    close, j, indent, trailing)
        body = inner + self.text(chosen + 1, close - 1)
        if len(body) <= self.limit and self.atoms[close - 1].kind != "comma" \
                and not self.line.lstrip().startswith(("from ", "import ")):  # isort: a name per line
            # black's first try: the contents on one line of their own (no magic trailing comma)
            return self.closed(lines + [body], close, j, indent, trailing)
        commas = self.comma_separated(chosen)
        magic = comma and self.atoms[close - 1].kind == "comma"  # the source's own trailing comma
        for n, (a, b) in enumerate(elements):
            last = n == len(elements) - 1
            tail = "," if (commas and not last) or (comma and (not self.hug or magic)) else ""
            lines += self.render(a, b, inner, tail, inside=True)
        if self.hug and not magic:
            return self.closed(lines, close, j, indent, trailing)
        return lines + self.render(close, j, indent, trailing)

    def sole_call(self, opening: int) -> int | None:
        """The opening parenthesis of the call that is all a call's parentheses hold (``f(g(a, b))``:
        ``g``'s), which a file closing brackets on their last line splits inside, as yapf does;
        None: they hold something else."""
        close = self.atoms[opening].match
        if self.atoms[opening].text != "(" or close - opening < 4 or self.atoms[close - 1].kind != "close":
            return None
        inner = self.atoms[close - 1].match
        if self.atoms[inner].text != "(" or opening == 0 or self.atoms[opening - 1].kind != "word":
            return None
        k = opening + 1  # a dotted name: word (. word)*
        if self.atoms[k].kind != "word":
            return None
        while k + 2 < inner and self.atoms[k + 1].text == "." and self.atoms[k + 2].kind == "word":
            k += 2
        return inner if k + 1 == inner else None

    def elements(self, opening: int) -> tuple[list[tuple[int, int]], bool]:
        """The elements between a bracket pair (split at its top-level commas: not those of a
        lambda's parameters, none in a comprehension), and whether the last may take a comma."""
        close = self.atoms[opening].match
        parts: list[tuple[int, int]] = []
        start = opening + 1
        k = start
        lambdas = 0
        comprehension = False
        has_comma = False
        while k < close:
            atom = self.atoms[k]
            if atom.kind == "open":
                k = atom.match + 1
                continue
            if atom.kind == "word" and atom.text == "lambda":
                lambdas += 1
            elif atom.kind == "other" and atom.text == ":" and lambdas:
                lambdas -= 1
            elif atom.kind == "word" and atom.text in ("for", "async") and not lambdas:
                comprehension = True
            elif atom.kind == "comma" and not lambdas:
                has_comma = True
                if k > start:
                    parts.append((start, k - 1))
                start = k + 1
            k += 1
        if start < close:
            parts.append((start, close - 1))
        if comprehension or not parts:
            return [(opening + 1, close - 1)], False
        if has_comma:
            return parts, True
        before = self.atoms[opening - 1] if opening > 0 else None
        if self.atoms[opening].text == "(" and (before is None or before.kind == "other" or (
                before.kind == "word" and keyword.iskeyword(before.text))):
            split = self.operands(opening + 1, close - 1)  # a parenthesized expression
            if split is not None:
                return split, False
        follows_value = before is not None and (
            before.kind == "close" or (before.kind == "word" and not keyword.iskeyword(before.text))
            or before.kind == "string")
        opener = self.atoms[opening].text
        if opener == "(":
            return parts, follows_value  # a call's or a def's parentheses; else a parenthesized expression
        if opener == "[":
            return parts, not follows_value  # a list display; a subscript's one index would become a tuple
        return parts, True


    def comma_separated(self, opening: int) -> bool:
        k = opening + 1
        while k < self.atoms[opening].match:
            atom = self.atoms[k]
            if atom.kind == "comma":
                return True
            k = atom.match + 1 if atom.kind == "open" else k + 1
        return False

    def operands(self, i: int, j: int) -> list[tuple[int, int]] | None:
        """Atoms i..j split before their top-level ``if``/``else`` (a conditional expression), else
        before each ``or``, else each ``and``: black's delimiters, weakest first."""
        for words in (("if", "else"), ("or",), ("and",)):
            cuts = []
            k = i
            lambdas = 0
            while k <= j:
                atom = self.atoms[k]
                if atom.kind == "open":
                    k = atom.match + 1
                    continue
                if atom.kind == "word" and atom.text == "lambda":
                    lambdas += 1
                elif atom.kind == "other" and atom.text == ":" and lambdas:
                    lambdas -= 1
                elif atom.kind == "word" and atom.text in words and k > i and not lambdas:
                    cuts.append(k)
                k += 1
            if cuts:
                bounds = [i, *cuts]
                return [(a, b - 1) for a, b in zip(bounds, bounds[1:])] + [(cuts[-1], j)]
        return None


_STATEMENT_WORDS = ("return", "if", "elif", "while")


def _expression(atoms: list[_Atom]) -> tuple[int, int] | None:
    """The atoms of the expression black puts in invisible parentheses (made visible to split a
    line): the value of an assignment or a ``return``, the condition of an ``if``."""
    top = []
    k = 0
    while k < len(atoms):
        top.append(k)
        k = atoms[k].match + 1 if atoms[k].kind == "open" else k + 1
    start = end = None
    if atoms[0].kind == "word" and atoms[0].text == "from":  # the names of `from m import a, b`
        at = next((k for k in top if atoms[k].kind == "word" and atoms[k].text == "import"), None)
        if at is None or at + 1 >= len(atoms) or any(a.kind == "open" for a in atoms) or atoms[-1].text == "*":
            return None
        return at + 1, len(atoms) - 1
    if atoms[0].kind == "word" and atoms[0].text in _STATEMENT_WORDS and len(atoms) > 1:
        start = 1
        end = len(atoms) - 1
        if atoms[0].text in ("if", "elif", "while"):
            if atoms[-1].text != ":" or len(atoms) < 3:
                return None
            end = len(atoms) - 2
    else:
        equals = [k for k in top if atoms[k].kind == "other" and atoms[k].text in (
            "=", "+=", "-=", "*=", "/=", "//=", "%=", "|=", "&=", "^=", "**=", "@=", ">>=", "<<=")]
        if not equals or equals[-1] + 1 >= len(atoms):
            return None
        start, end = equals[-1] + 1, len(atoms) - 1
    if start > end:
        return None
    if any(atoms[k].kind == "word" and atoms[k].text in ("yield", "lambda", "await") for k in top):
        return None
    return start, end


def split_string(text: str, width: int, reserve: int = 0) -> list[str] | None:
    """A one-line string literal as several literals whose implicit concatenation is the same
    string, each within ``width`` (the last within ``width - reserve``), cut after spaces outside
    an f-string's replacement fields; a piece with no replacement field loses the ``f``. None:
    it cannot be cut (a triple-quoted string, no space to cut at)."""
    prefix = text[: len(text) - len(text.lstrip("rRbBuUfF"))]
    quoted = text[len(prefix):]
    if len(quoted) < 2 or quoted[0] not in "'\"" or quoted[:3] in ('"""', "'''") or quoted[-1] != quoted[0]:
        return None
    quote, body, fstring = quoted[0], quoted[1:-1], "f" in prefix.lower()
    cuts, depth, k = [], 0, 0
    while k < len(body):
        char = body[k]
        if char == "\\":
            k += 2
            continue
        if fstring and char in "{}" and body[k + 1:k + 2] == char and depth == 0:
            k += 2
            continue
        if fstring and char == "{":
            depth += 1
        elif fstring and char == "}":
            depth -= 1
        elif char == " " and depth == 0:
            cuts.append(k + 1)
        k += 1
    room = width - len(prefix) - 2
    pieces, start, last_cut = [], 0, None
    for cut in [*cuts, len(body)]:
        limit = room - (reserve if cut == len(body) else 0)
        if cut - start > limit and last_cut is not None and last_cut > start:
            pieces.append(body[start:last_cut])
            start = last_cut
        last_cut = cut
    pieces.append(body[start:])
    if len(pieces) < 2:
        return None
    out = []
    for piece in pieces:
        own = prefix
        if fstring and not _has_field(piece):
            own = prefix.replace("f", "").replace("F", "")
            piece = piece.replace("{{", "{").replace("}}", "}")
        out.append(f"{own}{quote}{piece}{quote}")
    return out


def _has_field(piece: str) -> bool:
    k = 0
    while k < len(piece):
        if piece[k] in "{}" and piece[k + 1:k + 2] == piece[k]:
            k += 2
            continue
        if piece[k] == "{":
            return True
        k += 1
    return False


def _operators(atoms: list[_Atom], i: int, j: int) -> bool:
    """Whether a line holds a comma, a boolean operator or a conditional expression outside
    brackets: black then splits at the parentheses it makes visible around the expression."""
    k = i
    while k <= j:
        if atoms[k].kind == "open":
            k = atoms[k].match + 1
            continue
        if (atoms[k].kind == "word" and atoms[k].text in ("and", "or", "else") and k > i) or atoms[k].kind == "comma":
            return True
        k += 1
    return False


def _comment(tokens: list[tokenize.TokenInfo]) -> tokenize.TokenInfo | None:
    for token in reversed(tokens):
        if token.type == tokenize.COMMENT:
            return token
        if token.type not in (tokenize.NEWLINE, tokenize.NL):
            return None
    return None


def _comment_lines(comment: str, indent: str, limit: int) -> list[str]:
    body = comment.lstrip("#").strip()
    width = max(limit - len(indent) - 2, 20)
    return [f"{indent}# {part}" for part in textwrap.wrap(body, width, break_long_words=False,
                                                         break_on_hyphens=False)] or [f"{indent}#"]


def _wrapped(code: str, atoms: list[_Atom], limit: int, unit: str, hug: bool, indent: str) -> list[str]:
    """The lines of ``code`` within ``limit`` (wrap_line's split, its value parenthesized where that
    splits it better)."""
    lines = _Wrapper(code, atoms, limit, unit, hug).render(0, len(atoms) - 1, indent) if len(code) > limit else [code]
    region = _expression(atoms)
    if region is not None and (len(lines[0]) > limit or (len(code) > limit and _operators(atoms, *region))):
        first, last = atoms[region[0]].start, atoms[region[1]].end
        wrapped = f"{code[:first]}({code[first:last]}){code[last:]}"
        tokens = _tokens(wrapped) if wrapped is not None else None
        atoms = _atoms(tokens) if tokens else None
        if atoms:
            split = _Wrapper(wrapped, atoms, limit, unit, hug).render(0, len(atoms) - 1, indent)
            if all(len(piece) <= limit for piece in split) or len(lines[0]) > limit:
                lines = split if max(map(len, split)) < max(map(len, lines)) else lines
    return lines


def wrap_line(line: str, tokens: list[tokenize.TokenInfo], limit: int, unit: str, hug: bool = False
              ) -> list[str] | None:
    """The lines ``line`` (one physical line holding one logical line, no line end) becomes within
    ``limit``; None: it fits, or it cannot be split."""
    if len(line) <= limit:
        return None
    indent = line[: len(line) - len(line.lstrip())]
    comment = _comment(tokens)
    above: list[str] = []
    code = line
    pragma = ""  # a tool's comment stays on the statement's first line (where tools look first)
    width = limit
    if comment is not None:
        code = line[: comment.start[1]].rstrip()
        if _PRAGMA.match(comment.string):
            pragma = "  " + comment.string
            if not _LENGTH_EXEMPT.match(comment.string):
                width = max(limit - len(pragma), limit // 2)  # the first line holds the comment too
        else:
            above = _comment_lines(comment.string, indent, limit)
    atoms = _atoms(tokens)
    if not atoms:
        return None
    lines = _wrapped(code, atoms, limit, unit, hug, indent)
    if width < limit and len(lines[0]) + len(pragma) > limit:  # narrower, for the comment's sake
        lines = _wrapped(code, atoms, width, unit, hug, indent)
    if pragma:
        lines = [lines[0] + pragma, *lines[1:]]
    if lines == [line]:
        return None
    return above + lines


def styled(text: str, original: str, limit: int, unit: str, hug: bool = False) -> str:
    """``text``, the fixed ``original``, with continuation lines re-aligned after renames and
    its new long lines wrapped."""
    known = set(_physical(original))
    if any(line not in known and line.rstrip()[-1:] in ("(", "[", "{", ",") for line in _physical(text)):
        text = realign_continuations(text, original)
    return wrap_new_lines(text, original, limit, unit, hug)


def closes_on_last_line(original: str) -> bool:
    """Whether ``original`` closes the brackets it spreads over lines at the end of their last
    line (`f(\n    a, b)`: yapf's way, Google's) more often than on a line of their own (black's),
    and twice at least (one call aligned under its bracket says little)."""
    own = joined = 0
    opened: list[int] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(original).readline):
            if token.type != tokenize.OP:
                continue
            if token.string in _OPEN:
                opened.append(token.start[0])
            elif token.string in _CLOSE and opened and opened.pop() < token.start[0]:
                if token.line[: token.start[1]].strip():
                    joined += 1
                else:
                    own += 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return False
    return joined > own and joined >= 2


def _tokens(line: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(line + "\n").readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None


def _physical(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")):]


def wrap_new_lines(text: str, original: str, limit: int, unit: str, hug: bool = False) -> str:
    """``text`` with its lines longer than ``limit`` that ``original`` does not hold wrapped."""
    lines = _physical(text)
    known = set(_physical(original))
    long = {k for k, line in enumerate(lines) if len(line.rstrip("\r\n")) > limit and line not in known}
    if not long:
        return text
    logical = _logical_lines(text)
    if logical is None:
        return text
    replaced: dict[int, list[str]] = {}
    before: dict[int, list[str]] = {}  # comments moved above a definition's decorators
    continuation = continuation_unit(original, unit)
    for k in long:  # a comment on a line of its own: its words over several lines
        stripped = lines[k].strip()
        if stripped.startswith("#") and not _PRAGMA.match(stripped) and " " in stripped.strip("# "):
            indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
            end = _ending(lines[k]) or "\n"
            replaced[k] = [piece + end for piece in _comment_lines(stripped, indent, limit)]
    for entry in logical:
        if entry.first != entry.last or entry.first not in long:
            continue
        line = lines[entry.first]
        wrapped = wrap_line(line.rstrip("\r\n"), entry.tokens, limit, continuation, hug)
        if wrapped is None:
            continue
        end = _ending(line) or "\n"
        wrapped = [piece + end for piece in wrapped]
        indent = line[: len(line) - len(line.lstrip())]
        moved = [piece for piece in wrapped if piece.startswith(indent + "#")]
        top = _first_decorator(lines, entry.first, indent) if moved and _defines(line) else entry.first
        if top != entry.first:
            before.setdefault(top, []).extend(moved)
            wrapped = wrapped[len(moved):]
        replaced[entry.first] = wrapped
    if not replaced:
        return text
    return "".join(piece for k, line in enumerate(lines)
                   for piece in [*before.get(k, []), *replaced.get(k, [line])])


def _defines(line: str) -> bool:
    words = line.split()
    return bool(words) and (words[0] in ("def", "class") or words[:2] == ["async", "def"])


def _first_decorator(lines: list[str], at: int, indent: str) -> int:
    top = at
    while top > 0 and lines[top - 1].startswith(indent + "@"):
        top -= 1
    return top


def continuation_unit(original: str, unit: str) -> str:
    """The indentation the file gives a bracket's contents on the lines after it: the most common
    step after a line that ends with an open bracket; else one unit (two for a unit of two
    spaces, Google's style, which pyink follows)."""
    steps: dict[int, int] = {}
    lines = _physical(original)
    for k in range(len(lines) - 1):
        line = lines[k].rstrip()
        if line[-1:] in ("(", "[", "{") and not line.lstrip().startswith("#"):
            step = _indent_width(lines[k + 1]) - _indent_width(line)
            if 0 < step <= 8 and lines[k + 1].strip():
                steps[step] = steps.get(step, 0) + 1
    if steps:
        return " " * max(steps, key=lambda step: (steps[step], step))
    return unit * 2 if unit == "  " else unit


def _unclosed(line: str) -> list[int]:
    """The columns of the brackets a line leaves open (innermost last); [] when it closes more
    than it opens or cannot be read."""
    tokens = []
    try:  # a line that leaves brackets open ends the tokenizer with an error: its tokens until then
        for token in tokenize.generate_tokens(io.StringIO(line.lstrip()).readline):
            tokens.append(token)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    offset = len(line) - len(line.lstrip())
    stack: list[int] = []
    for token in tokens:
        if token.type != tokenize.OP:
            continue
        if token.string in _OPEN:
            stack.append(token.start[1] + offset)
        elif token.string in _CLOSE:
            if not stack:
                return []
            stack.pop()
    return stack


def realign_continuations(text: str, original: str) -> str:
    """``text`` where each line a fix changed keeps the original's unchanged continuation lines
    aligned with its open bracket (visual indentation moved by as many columns as the bracket
    moved). The changed line's original is the line before the continuation lines in ``original``."""
    before, after = _physical(original), _physical(text)
    if len(before) < 2:
        return text
    known, written = set(before), set(after)
    where: dict[str, list[int]] = {}
    for i, line in enumerate(before):
        where.setdefault(line, []).append(i)
    out = list(after)
    last = 0
    for j, new in enumerate(after[:-1]):
        if new in known or new.rstrip()[-1:] not in ("(", "[", "{", ","):
            continue
        e1 = next((i for i in where.get(after[j + 1], ()) if i > last and before[i - 1] not in written), None)
        if e1 is None:
            continue
        old = before[e1 - 1]
        old_open, new_open = _unclosed(old), _unclosed(new)
        if not old_open or len(old_open) != len(new_open) or old_open == new_open:
            continue
        shift = new_open[-1] - old_open[-1]
        column = old_open[-1] + 1
        if _indent_width(before[e1]) != column or not before[e1].strip():
            continue
        e2 = e1
        while e2 < len(before) and j + 1 + e2 - e1 < len(after) and after[j + 1 + e2 - e1] == before[e2]:
            e2 += 1
        if any('"""' in line or "\'\'\'" in line for line in (old, *before[e1:e2])):
            continue  # a string across lines: its text would move too
        last = e1
        depth = len(old_open)
        for k in range(e2 - e1):
            line = before[e1 + k]
            if not line.strip():
                break
            width = _indent_width(line)
            if width < column:
                break
            out[j + 1 + k] = " " * (width + shift) + line[width:]
            depth += _balance(line)
            if depth <= 0:
                break
    return "".join(out)


def _indent_width(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _balance(line: str) -> int:
    """Brackets opened minus closed on a line, strings and comments aside (roughly: by tokens)."""
    count = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.lstrip()).readline):
            if token.type == tokenize.OP and token.string in _OPEN:
                count += 1
            elif token.type == tokenize.OP and token.string in _CLOSE:
                count -= 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return count
