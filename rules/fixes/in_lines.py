"""A pmap call written over several lines, rewritten in its own lines.

    step = jax.pmap(                              step = jax.jit(_shard_mapped(
        functools.partial(train_step, c=c),           functools.partial(train_step, c=c),
        axis_name="batch",                            axis_name="batch"),
        # donate the state                            # donate the state
        donate_argnums=(0,),                          donate_argnums=(0,),
    )                                             )

`jax.pmap(` becomes `jax.jit(_shard_mapped(` and every argument stays on its line, with its
comments: the helper takes pmap's own options under pmap's names, the helper's parenthesis closes
after the last of them, and jit's options (donate_argnums) follow as they were written. A reviewer
sees the lines that changed and nothing else; the function and options are evaluated where pmap
evaluated them, as written. Applies where the arguments start on a line of their own (a hanging
indent, which no new prefix misaligns) and jit's options come after the helper's.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from pmap_migrate.rules.analysis.sites import TransformSite
from pmap_migrate.rules.fixes.code import code_of, keyword_arg
from pmap_migrate.rules.fixes.pmap_render import tuple_text

# pmap's options that jit takes (the rest go to the helper, under the same names)
JIT_OPTIONS = frozenset({"donate_argnums"})


def hanging(call: cst.Call) -> bool:
    """Whether ``call``'s arguments start on the line after its parenthesis."""
    return isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace) and bool(call.args)


def hanging_call(site: TransformSite) -> cst.Call | None:
    """The pmap call of ``site`` where the form may apply: spelled directly (its arguments are
    the site's), its arguments starting on the line after its parenthesis."""
    call = site.node
    if site.is_decorator or not isinstance(call, cst.Call) or tuple(site.args) != tuple(call.args) \
            or not hanging(call):
        return None
    return call


def in_lines(call: cst.Call, helper: cst.Call, values: dict[int, cst.BaseExpression], *,
             helper_extra: Sequence[cst.Arg] = (), jit_extra: Sequence[cst.Arg] = (),
             outer: cst.Call | None = None, room: int = 79, flat: bool = False) -> cst.Call | None:
    """`jax.jit(<helper>(<call's arguments>), <jit's options>)` in ``call``'s lines: ``helper`` is
    the helper's call without arguments (`_shard_mapped()`), ``values`` the arguments (by index)
    whose value changes (a folded literal), ``helper_extra`` arguments added after the helper's
    last one (`processes=True`), ``jit_extra`` jit's options that pmap did not spell
    (`static_argnums`), ``outer`` a call without arguments that takes the jitted function
    (`_global_call()`) and its options after it (`local=True`). The added arguments go on the
    line of the helper's last one, or on a line of their own where that line has a comment or
    would pass ``room`` columns (after the block's indentation). ``flat``: `<helper>(<call's
    arguments>, <added>)`, a helper that takes jit's options too (`_global_pmap`). None where the
    form does not apply: arguments on the parenthesis's line, a star argument, a jit option before
    a helper's."""
    if not hanging(call) or any(arg.star for arg in call.args):
        return None
    args = [arg.with_changes(value=values[k]) if k in values else arg for k, arg in enumerate(call.args)]
    roles = [not flat and arg.keyword is not None and arg.keyword.value in JIT_OPTIONS for arg in args]
    if roles != sorted(roles) or not roles or roles[0]:
        return None  # jit's options first, or only jit's: the helper's arguments would move
    mapped = [arg for arg, jit in zip(args, roles) if not jit]
    jitted = [arg for arg, jit in zip(args, roles) if jit]
    built = _built(call, helper, mapped, jitted, list(helper_extra), list(jit_extra), outer, own_line=False,
                   flat=flat)
    if helper_extra or jit_extra:
        old = set(code_of(call).split("\n"))
        new = code_of(built).split("\n")[1:]
        if any(line not in old and ("#" in line or len(line) > room) for line in new):
            built = _built(call, helper, mapped, jitted, list(helper_extra), list(jit_extra), outer,
                           own_line=True, flat=flat) or built
    return built


def _built(call: cst.Call, helper: cst.Call, mapped: list[cst.Arg], jitted: list[cst.Arg], helper_extra: list[cst.Arg],
           jit_extra: list[cst.Arg], outer: cst.Call | None, *, own_line: bool, flat: bool = False
           ) -> cst.Call | None:
    last = mapped[-1]
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    follow = last.comma  # after the last of the helper's arguments, where jit's come next
    closing = last.whitespace_after_arg  # before the parenthesis, where the last one has no comma
    if own_line:
        # the added arguments on a line of their own, indented as the last one's line: its comment
        # stays on its line, the comment lines after it go after the added ones
        starts = [call.whitespace_before_args, *(arg.comma.whitespace_after for arg in mapped[:-1])]
        before = next((w for w in reversed(starts) if isinstance(w, cst.ParenthesizedWhitespace)), None)
        if before is None:
            return None
        after = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else None
        if isinstance(after, cst.ParenthesizedWhitespace):
            brk = last.comma.with_changes(whitespace_after=after.with_changes(
                empty_lines=(), indent=before.indent, last_line=before.last_line))
            follow = cst.Comma(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace()))
        elif after is None and not jitted and isinstance(closing, cst.ParenthesizedWhitespace):
            brk = cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
                indent=before.indent, last_line=before.last_line))
            last = last.with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
        else:
            return None
    ends = bool(jitted or jit_extra)  # the helper's parenthesis closes on its last argument's line
    tail = [last, *helper_extra]
    commas = [brk if own_line and k == 0 else space for k in range(len(tail) - 1)]
    # (the last one's whitespace before its comma, where it had none, went before the parenthesis)
    tail = [arg.with_changes(comma=comma, whitespace_after_arg=arg.whitespace_after_arg if own_line
                             else cst.SimpleWhitespace("")) for arg, comma in zip(tail, commas)] + [
        tail[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT if ends else follow,
                              whitespace_after_arg=cst.SimpleWhitespace("") if ends else closing)]
    inner = cst.Arg(helper.with_changes(args=[*mapped[:-1], *tail], whitespace_before_args=call.whitespace_before_args))
    if flat:
        return inner.value.with_changes(lpar=call.lpar, rpar=call.rpar)
    # jit's options: those pmap did not spell after the helper's parenthesis, then pmap's as written
    jit_args = [inner, *jit_extra]
    commas = [brk if own_line and not helper_extra and k == 0 else space for k in range(len(jit_args) - 1)]
    jit_args = [arg.with_changes(comma=comma) for arg, comma in zip(jit_args, commas)] + [
        jit_args[-1].with_changes(comma=follow if jitted else cst.MaybeSentinel.DEFAULT)]
    jit = cst.Call(cst.Attribute(cst.Name("jax"), cst.Name("jit")), [*jit_args, *jitted])
    if outer is None:
        return jit.with_changes(lpar=call.lpar, rpar=call.rpar)
    outer_args = [cst.Arg(jit), *outer.args]
    outer_args = [arg.with_changes(comma=space) for arg in outer_args[:-1]] + [outer_args[-1]]
    return outer.with_changes(args=outer_args, lpar=call.lpar, rpar=call.rpar)


def room(model, node: cst.CSTNode, width: int = 79) -> int:
    """The columns a continuation line of ``node`` (indented from its block) has within ``width``
    (79: the smallest common line length; the layout knows the project's, not the rule)."""
    indent = sum(len(block.indent if block.indent is not None else model.module.default_indent)
                 for block in model.ancestors(node) if isinstance(block, cst.IndentedBlock))
    return width - indent


def options_in_lines(call: cst.Call, name: str, helper: dict[str, str], jit: dict[str, str], *,
                     added: Sequence[str] = (), outer: cst.Call | None = None, room: int = 79,
                     flat: bool = False) -> cst.Call | None:
    """The compact form (`jax.jit(name(f, ...), ...)`) in the lines of ``call``, a pmap written over
    several: ``helper`` and ``jit`` map the options the one-line form gives the helper and jit to
    their values' text; an argument that spells one keeps its line (and its text, where that is
    the same), the others are added (``added``: the helper's own, `processes=True`, last). The
    function, the axis name, devices and backend stay as written (the helper takes them under
    pmap's names and evaluates nothing of them); None for any other argument, or where the form
    does not apply (fixes/in_lines.in_lines)."""
    values: dict[int, cst.BaseExpression] = {}
    unspelled = {**helper, **jit}
    for k, arg in enumerate(call.args):
        option = arg.keyword.value if arg.keyword is not None else None
        if option is None or option in ("axis_name", "devices", "backend"):
            if option is None and k > 1:
                return None
            continue
        text = unspelled.pop(option, None)
        if text is None and option not in ("in_axes", "out_axes", "static_broadcasted_argnums"):
            return None  # an option the form drops (global_arg_shapes=None), or another
        if text is not None and code_of(arg.value) != text and not (
                option.endswith("argnums") and isinstance(arg.value, cst.Integer) and text == f"({arg.value.value},)"):
            values[k] = cst.parse_expression(text)  # (an int argnums is the tuple of it, to jit and the helper)
    helper_extra = [keyword_arg(option, cst.parse_expression(text)) for option, text in unspelled.items()
                    if option in helper]
    helper_extra += [cst.parse_expression(f"f({text})").args[0] for text in added]
    jit_extra = [keyword_arg(option, cst.parse_expression(text)) for option, text in unspelled.items()
                 if option in jit]
    return in_lines(call, cst.Call(cst.Name(name)), values, helper_extra=helper_extra, jit_extra=jit_extra,
                    outer=outer, room=room, flat=flat)


def compact_in_lines(site: TransformSite, name: str, opts: dict, argnums: list, model) -> cst.Call | None:
    """`options_in_lines` for the single-process compact form (``opts``: SiteReader.compact_options;
    ``argnums``: jit's options and values, as the one-line form spells them; ``model``: the
    module's, for `room`)."""
    call = hanging_call(site)
    if call is None:
        return None
    helper = {option: code_of(opts[option]) for option in ("in_axes", "out_axes") if opts[option] is not None}
    if opts["static"]:
        helper["static_broadcasted_argnums"] = tuple_text(opts["static"])
    return options_in_lines(call, name, helper, {option: code_of(value) for option, value in argnums},
                            room=room(model, call))
