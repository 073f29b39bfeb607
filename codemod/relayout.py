"""Statements that a fix edited inside, laid out again when an edit made one of their lines longer
than the project's line length.

A rename inside a statement that already spanned several lines (``jax.pmap(`` becoming
``runtime_shim.pmap(``, its continuation lines moved along), a call the fix put inside one
(``replicate(x)`` becoming ``_replicate(x, jax.local_devices())``), a comment it added after one
can push a line past the limit. Such a statement is laid out again the way ``pmap_migrate.layout``
wraps the lines a fix writes whole (black's way): its tokens joined on one line (a trailing comma
before a closing bracket dropped where Python does not need it), then split at the last bracket
whose opening line fits, one element per line; where the targets of an assignment do not fit on
its first line, they go in parentheses first (``(a, b) = f(...)``), as black does. Each trailing
comment stays after the token it followed; a bracket with a comment after one of its commas gets a
magic trailing comma (one element per line, each comment after its element), as black leaves it.
An f-string is kept as its source spells it.

Only a statement with more lines over the limit than the lines of the original it replaces (a line
that was already too long is the author's), without a string across lines, a comment on a line of
its own, a type comment or a comment with code after it on its new line, and only when the new
layout has fewer lines over the limit. Statements the fix did not touch stay as they are. The
caller checks that the result still compiles.
"""

from __future__ import annotations

import difflib
import io
import keyword
import re
import tokenize
from dataclasses import dataclass

from pmap_migrate.layout import continuation_unit, wrap_line

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(_OPEN.values())
_TYPE_COMMENT = re.compile(r"#\s*type:")
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _statements(text: str) -> list[tuple[int, int, list[tokenize.TokenInfo]]] | None:
    """Each logical line of ``text``: (first, last) 0-based rows and its tokens; None: ``text``
    does not tokenize."""
    out = []
    current: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if not current and token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER,
                                               tokenize.COMMENT):
                continue
            current.append(token)
            if token.type == tokenize.NEWLINE:
                first, last = current[0].start[0] - 1, token.start[0] - 1
                out.append((first, last, current))
                current = []
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return out


def _needless_commas(tokens: list[tokenize.TokenInfo]) -> set[int]:
    """The indices of trailing commas (right before a closing bracket) that can go: not the comma
    of a one-element tuple ``(x,)`` or of a subscript ``x[a,]``."""
    drop: set[int] = set()
    stack: list[tuple[int, int]] = []  # (index of the opening bracket, top-level commas inside)
    for k, token in enumerate(tokens):
        if token.type != tokenize.OP:
            continue
        if token.string in _OPEN:
            stack.append((k, 0))
        elif token.string == "," and stack:
            stack[-1] = (stack[-1][0], stack[-1][1] + 1)
        elif token.string in _CLOSE and stack:
            opening, commas = stack.pop()
            if tokens[k - 1].string != ",":
                continue
            before = tokens[opening - 1] if opening > 0 else None
            follows_value = before is not None and (
                (before.type == tokenize.NAME and not keyword.iskeyword(before.string))
                or before.string in _CLOSE or before.type == tokenize.STRING)
            opener = tokens[opening].string
            if commas > 1 or opener == "{" or (opener == "(" and follows_value) or (
                    opener == "[" and not follows_value):
                drop.add(k - 1)
    return drop


@dataclass
class Joined:
    """A logical line on one line: its text, the strings of its code tokens in order, and its
    comments by the index (in ``tokens``) of the code token each follows."""

    line: str
    tokens: list[str]
    comments: dict[int, str]
    columns: list[int]  # where each token starts in ``line``


def joined(tokens: list[tokenize.TokenInfo], lines: list[str]) -> Joined | None:
    """The logical line of ``tokens`` on one line (the indentation of its first line), its
    comments aside; None when it holds a string across lines, a type comment or a comment on a
    line of its own."""
    code = _collapsed([t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                                           tokenize.DEDENT, tokenize.ENDMARKER)], lines)
    if code is None or any(t.start[0] != t.end[0] for t in code) or not code or code[0].type == tokenize.COMMENT:
        return None
    drop = _needless_commas(code)
    first = lines[code[0].start[0] - 1]
    out = [first[: code[0].start[1]]]
    emitted: list[str] = []
    columns: list[int] = []
    comments: dict[int, str] = {}
    previous = None
    for k, token in enumerate(code):
        if token.type == tokenize.COMMENT:
            if (_TYPE_COMMENT.match(token.string) or len(emitted) - 1 in comments
                    or previous is None or previous.end[0] != token.start[0]):
                return None  # a type comment, a comment on a line of its own
            comments[len(emitted) - 1] = token.string.rstrip()
            continue
        if k in drop:
            continue
        if previous is not None and k - 1 in drop:
            pass  # a dropped comma right before a closing bracket: nothing between them
        elif previous is not None:
            if previous.end[0] == token.start[0] and code[k - 1] is previous:
                out.append(lines[token.start[0] - 1][previous.end[1]:token.start[1]])
            elif not (previous.string in _OPEN or previous.string == "." or token.string in _CLOSE
                      or token.string in (",", ":", ".")):
                out.append(" ")
        columns.append(sum(map(len, out)))
        out.append(token.string)
        emitted.append(token.string)
        previous = token
    return Joined("".join(out).rstrip(), emitted, comments, columns)


def _collapsed(code: list[tokenize.TokenInfo], lines: list[str]) -> list[tokenize.TokenInfo] | None:
    """``code`` with each token's string its text in the source, and each f-string (several
    tokens from Python 3.12 on) one string token; None: an f-string across lines."""
    out: list[tokenize.TokenInfo] = []
    depth, start = 0, None
    for token in code:
        if _FSTRING_START is not None and token.type == _FSTRING_START:
            depth += 1
            start = token if depth == 1 else start
            continue
        if _FSTRING_END is not None and token.type == _FSTRING_END:
            depth -= 1
            if depth == 0:
                if start.start[0] != token.end[0]:
                    return None
                text = lines[start.start[0] - 1][start.start[1]:token.end[1]]
                out.append(tokenize.TokenInfo(tokenize.STRING, text, start.start, token.end, start.line))
            continue
        if depth:
            continue
        if token.start[0] == token.end[0]:
            token = token._replace(string=lines[token.start[0] - 1][token.start[1]:token.end[1]])
        out.append(token)
    return out


def _target_in_parentheses(line: str) -> str | None:
    """``a, b = value`` as ``(a, b) = value`` (black's way when the targets do not fit on the
    first line); None: not an assignment to several bare targets."""
    tokens = _tokens(line)
    if tokens is None:
        return None
    depth, start, commas = 0, None, False
    for token in tokens:
        if token.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NL):
            continue
        if start is None:
            start = token.start[1]
            if token.string in _OPEN:
                return None
        if token.type == tokenize.OP and token.string in _OPEN:
            depth += 1
        elif token.type == tokenize.OP and token.string in _CLOSE:
            depth -= 1
        elif depth == 0 and token.string == ",":
            commas = True
        elif depth == 0 and token.type == tokenize.OP and token.string == "=":
            if not commas:
                return None
            end = len(line[: token.start[1]].rstrip())
            return f"{line[:start]}({line[start:end]}){line[end:]}"
        elif depth == 0 and (token.type == tokenize.NEWLINE or token.string in (":", "lambda")):
            return None
    return None


def _commented(wrapped: list[str], piece: Joined) -> list[str] | None:
    """``wrapped`` (the layout of ``piece.line``) with each comment after the line that holds the
    token it followed; None: a token cannot be found, or two comments would share a line."""
    if not piece.comments:
        return wrapped
    try:
        found = _collapsed([t for t in tokenize.generate_tokens(io.StringIO("\n".join(wrapped) + "\n").readline)
                            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                              tokenize.ENDMARKER, tokenize.COMMENT)], wrapped)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    if found is None:
        return None
    rows, k = [], 0
    last: dict[int, int] = {}  # the index in `found` of each row's last token
    for n, token in enumerate(found):  # the layout only adds tokens (commas, parentheses): match in order
        last[token.start[0] - 1] = n
        if k < len(piece.tokens) and token.string == piece.tokens[k]:
            rows.append((token.start[0] - 1, n))
            k += 1
    if k != len(piece.tokens):
        return None
    out = list(wrapped)
    for index, comment in piece.comments.items():
        row, n = rows[index]
        follows = found[n + 1] if n + 1 < len(found) else None
        if last[row] != n and not (last[row] == n + 1 and follows.string == ","):
            return None  # code after the commented token on its row: the comment would not be its own
        out[row] += "  " + comment
    return out


def _magic_commas(piece: Joined) -> str | None:
    """``piece.line`` with a trailing comma in each bracket that holds a comment after one of its
    commas (black's magic trailing comma: one element per line, each comment after its own);
    None: no comment is after a comma."""
    closes = set()
    for index in piece.comments:
        if piece.tokens[index] != ",":
            continue
        depth = 0
        for k in range(index + 1, len(piece.tokens)):
            if piece.tokens[k] in _OPEN:
                depth += 1
            elif piece.tokens[k] in _CLOSE:
                if depth == 0:
                    if piece.tokens[k - 1] != ",":
                        closes.add(k)
                    break
                depth -= 1
    if not closes:
        return None
    line = piece.line
    for k in sorted(closes, reverse=True):
        at = len(line[: piece.columns[k]].rstrip())
        line = f"{line[:at]},{line[at:]}"
    return line


def _long(lines: list[str], limit: int) -> int:
    return sum(len(line.rstrip("\r\n")) > limit for line in lines)


def _laid_out(piece: Joined, limit: int, unit: str, hug: bool = False) -> list[str] | None:
    """The layout of ``piece`` with the fewest lines over ``limit``: wrapped as it is, or with
    its targets in parentheses."""
    best = None
    magic = _magic_commas(piece) if piece.comments else None
    plain = magic or piece.line
    for line in (plain, _target_in_parentheses(plain)):
        tokens = _tokens(line) if line is not None else None
        if tokens is None:
            continue
        # a magic trailing comma splits its bracket even where the line fits (as black does)
        width = min(limit, len(line) - 1) if magic is not None else limit
        wrapped = _commented(wrap_line(line, tokens, width, unit, hug and magic is None) or [line], piece)
        if wrapped is not None and (best is None or _long(wrapped, limit) < _long(best, limit)):
            best = wrapped
        if best is not None and not _long(best, limit):
            break
    return best


def relayout(text: str, original: str, limit: int, unit: str, hug: bool = False) -> str:
    """``text`` (``original`` fixed) with each statement laid out again where it has more lines
    over ``limit`` than the lines of ``original`` it replaces (see the module)."""
    after = text.splitlines(keepends=True)
    known = set(original.splitlines(keepends=True))
    if not any(len(line.rstrip("\r\n")) > limit and line not in known for line in after):
        return text
    statements = _statements(text)
    if not statements:
        return text
    before = original.splitlines(keepends=True)
    # each row of `after` -> the rows of `before` it stands for (its own, or its changed hunk's)
    source: list[range] = [range(0)] * len(after)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            source[j] = range(i1 + j - j1, i1 + j - j1 + 1) if tag == "equal" else range(i1, i2)
    continuation = continuation_unit(original, unit)
    replaced: dict[int, tuple[int, list[str]]] = {}
    for first, last, tokens in statements:
        rows = after[first:last + 1]
        now = _long(rows, limit)
        if not now or all(line in known for line in rows):
            continue
        was = sorted({i for j in range(first, last + 1) for i in source[j]})
        if now <= _long([before[i] for i in was], limit):
            continue
        piece = joined(tokens, after)
        wrapped = _laid_out(piece, limit, continuation, hug) if piece is not None else None
        if wrapped is None or _long(wrapped, limit) >= now:
            continue
        end = after[last][len(after[last].rstrip("\r\n")):] or "\n"
        replaced[first] = (last, [line + end for line in wrapped])
    if not replaced:
        return text
    out: list[str] = []
    k = 0
    while k < len(after):
        if k in replaced:
            last, pieces = replaced[k]
            out.extend(pieces)
            k = last + 1
        else:
            out.append(after[k])
            k += 1
    return "".join(out)


def _tokens(line: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(line + "\n").readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
