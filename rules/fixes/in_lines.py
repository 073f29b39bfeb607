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


def in_lines(call: cst.Call, helper: cst.Call, values: dict[int, cst.BaseExpression], *,
             helper_extra: Sequence[cst.Arg] = (), jit_extra: Sequence[cst.Arg] = (),
             outer: cst.Call | None = None) -> cst.Call | None:
    """`jax.jit(<helper>(<call's arguments>), <jit's options>)` in ``call``'s lines: ``helper`` is
    the helper's call without arguments (`_shard_mapped()`), ``values`` the arguments (by index)
    whose value changes (a folded literal), ``helper_extra`` arguments added after the helper's
    last one (`processes=True`), ``jit_extra`` jit's options that pmap did not spell
    (`static_argnums`), ``outer`` a call without arguments that takes the jitted function
    (`_global_call()`) and its options after it (`local=True`). None where the form does not
    apply: arguments on the parenthesis's line, a star argument, a jit option before a helper's."""
    if not hanging(call) or any(arg.star for arg in call.args):
        return None
    args = [arg.with_changes(value=values[k]) if k in values else arg for k, arg in enumerate(call.args)]
    roles = [arg.keyword is not None and arg.keyword.value in JIT_OPTIONS for arg in args]
    if roles != sorted(roles) or not roles or roles[0]:
        return None  # jit's options first, or only jit's: the helper's arguments would move
    mapped = [arg for arg, jit in zip(args, roles) if not jit]
    jitted = [arg for arg, jit in zip(args, roles) if jit]
    last = mapped[-1]
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    # the added arguments go on the last one's line, which ends as it ended
    tail = [last, *helper_extra]
    tail = [arg.with_changes(comma=space) for arg in tail[:-1]] + [tail[-1].with_changes(
        comma=last.comma if not jitted else cst.MaybeSentinel.DEFAULT,
        whitespace_after_arg=last.whitespace_after_arg if not jitted else cst.SimpleWhitespace(""))]
    inner = helper.with_changes(args=[*mapped[:-1], *tail], whitespace_before_args=call.whitespace_before_args)
    # jit's options: those pmap did not spell on the helper's closing line, then pmap's as they were
    extra = list(jit_extra)
    first_comma = last.comma if jitted else cst.MaybeSentinel.DEFAULT
    jit_args = [cst.Arg(inner), *extra, *jitted]
    if extra:
        jit_args = [arg.with_changes(comma=space) for arg in jit_args[:len(extra)]] + \
            [jit_args[len(extra)].with_changes(comma=first_comma), *jitted]
    else:
        jit_args = [jit_args[0].with_changes(comma=first_comma), *jitted]
    jit = cst.Call(cst.Attribute(cst.Name("jax"), cst.Name("jit")), jit_args)
    if outer is None:
        return jit.with_changes(lpar=call.lpar, rpar=call.rpar)
    outer_args = [cst.Arg(jit), *outer.args]
    outer_args = [arg.with_changes(comma=space) for arg in outer_args[:-1]] + [outer_args[-1]]
    return outer.with_changes(args=outer_args, lpar=call.lpar, rpar=call.rpar)


def fits(expression: cst.BaseExpression, first_column: int, limit: int) -> bool:
    """Whether the lines of ``expression``, its first starting at ``first_column``, end by ``limit``."""
    lines = code_of(expression).split("\n")
    return first_column + len(lines[0]) <= limit and all(len(line) <= limit for line in lines[1:])


def options_in_lines(call: cst.Call, name: str, helper: dict[str, str], jit: dict[str, str], *,
                     added: Sequence[str] = (), outer: cst.Call | None = None) -> cst.Call | None:
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
                    outer=outer)


def compact_in_lines(site: TransformSite, name: str, opts: dict, argnums: list) -> cst.Call | None:
    """`options_in_lines` for the single-process compact form (``opts``: SiteReader.compact_options;
    ``argnums``: jit's options and values, as the one-line form spells them)."""
    call = site.node
    if not isinstance(call, cst.Call) or tuple(site.args) != tuple(call.args) or not hanging(call):
        return None
    helper = {option: code_of(opts[option]) for option in ("in_axes", "out_axes") if opts[option] is not None}
    if opts["static"]:
        helper["static_broadcasted_argnums"] = tuple_text(opts["static"])
    return options_in_lines(call, name, helper, {option: code_of(value) for option, value in argnums})
