from __future__ import annotations

import re

import libcst as cst

from pmap_migrate.rules.analysis.sites import PMAP
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.placement_fixes import remove_line
from pmap_migrate.rules.fixes.spec import Edit, FixSpec
from pmap_migrate.rules.knowledge import gates, tables

_CONFIG_UPDATE = frozenset({"jax.config.update"})
_ENVIRON = frozenset({"os.environ"})
# Values jax reads as False for a boolean flag (`jax._src.config.bool_env`): the legacy default.
_FALSE_STRINGS = frozenset({"n", "no", "f", "false", "off", "0"})

# The flag's name as a word of a string: "jax_pmap_shmap_merge", "--jax_pmap_shmap_merge=true",
# "JAX_PMAP_SHMAP_MERGE" (the environment variable), "--xla_x=1 --jax_pmap_shmap_merge".
_FLAG_WORD = re.compile(rf"(?<![a-z0-9_]){tables.PMAP_SHMAP_MERGE_FLAG}(?![a-z0-9_])")


class RemovedPmapOption(Rule):
    """A pmap option or configuration flag that no longer exists.

    ## What it does
    Finds `global_arg_shapes=` passed to `jax.pmap` (directly, as a decorator, or bound by
    `functools.partial`), and every use of the `jax_pmap_shmap_merge` flag: `jax.config.update(
    "jax_pmap_shmap_merge", ...)`, `jax.config.jax_pmap_shmap_merge`, the `JAX_PMAP_SHMAP_MERGE`
    environment variable (`os.environ[...] = ...`, `os.environ.setdefault(...)`, env dicts),
    `--jax_pmap_shmap_merge` in flag lists, `jax_pmap_shmap_merge=` keyword arguments
    (`jtu.with_config(...)`, absl `FLAGS`), and the `pmap_shmap_merge` state object of
    `jax._src.config` (`jax.config.pmap_shmap_merge`).

    ## Why is this bad?
    `global_arg_shapes` was a legacy-pmap-only option and is gone from `jax.pmap`'s signature
    (TypeError). `jax_pmap_shmap_merge` switched between the legacy and the new pmap; jax 0.10.0
    removed it, so `jax.config.update("jax_pmap_shmap_merge", False)` raises and reading it raises
    AttributeError. Setting the environment variable silently does nothing: the code that relied
    on it to keep the legacy pmap now runs the new one.

    ## Example
    ```python
    import jax

    jax.config.update("jax_pmap_shmap_merge", False)
    step = jax.pmap(f, axis_name="i", global_arg_shapes=(shape,))
    ```

    ## Use instead
    ```python
    import jax

    step = jax.pmap(f, axis_name="i")  # then migrate the pmap itself (PM101)
    ```

    ## Fix safety
    - `global_arg_shapes=None` is dropped (safe: the default). Another value is dropped as an
      unsafe fix: jax 0.4.x and later raised `ValueError` for it, so the call never ran as written.
    - A statement that only sets the flag (`jax.config.update("jax_pmap_shmap_merge", False)`,
      `os.environ["JAX_PMAP_SHMAP_MERGE"] = "0"`, `os.environ.setdefault(...)`) is deleted: safe
      when it sets the legacy default (False: jax 0.7.2 behaves the same without it, jax 0.10+
      rejects it), unsafe otherwise (on jax 0.7.2, pmaps this module does not migrate would go back
      to the legacy implementation). Reads of the flag, flag lists and test decorators are not
      rewritten. The pmaps themselves are migrated by PM101.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/changelog.html
    """

    CODE = "PM104"
    NAME = "removed-pmap-option"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = "`jax_pmap_shmap_merge` was removed in jax 0.10.0: the legacy pmap cannot be selected any more"
    TRIGGERS = gates.PM104.TRIGGERS

    VALID = [
        Valid("import jax\nstep = jax.pmap(f, axis_name='i', in_axes=(0, None))\n"),
        Valid("import jax\njax.config.update('jax_enable_x64', True)\n"),
        Valid("def f(global_arg_shapes=None):\n    return global_arg_shapes\nf(global_arg_shapes=1)\n"),
        Valid("import jax\nstep = jax.jit(f, global_arg_shapes=s)\n"),
        Valid("import jax\njax.config.update('jax_pmap_shmap_merge_extra', True)\n"),
        Valid('"""Set jax_pmap_shmap_merge=False to get the legacy pmap."""\nimport jax\n'),
        Valid(
            "import jax\n"
            "def f():\n"
            "    '''Docs mention jax_pmap_shmap_merge.'''\n"
            "    return 1\n"
        ),
        Valid("import os\nos.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'\n"),
    ]
    INVALID = [
        Invalid("import jax\nstep = jax.pmap(f, axis_name='i', global_arg_shapes=(s,))\n", lines=(2,),
                expected="import jax\nstep = jax.pmap(f, axis_name='i')\n"),
        Invalid("import jax\nstep = jax.pmap(\n    f,\n    global_arg_shapes=None,\n    axis_name='i',\n)\n", lines=(4,),
                expected="import jax\nstep = jax.pmap(\n    f,\n    axis_name='i',\n)\n"),
        Invalid(
            "import jax\nfrom functools import partial\n"
            "@partial(jax.pmap, axis_name='i',\n         global_arg_shapes=(s,))\n"
            "def step(x):\n    return x\n",
            lines=(4,),
        ),
        Invalid(
            "import jax\nfrom functools import partial\n"
            "pmap_g = partial(jax.pmap, global_arg_shapes=(s,))\n"
            "a = pmap_g(f)\nb = pmap_g(g)\n",
            lines=(3,),
        ),
        Invalid("from jax import pmap as p\nstep = p(f, global_arg_shapes=s)\n", lines=(2,)),
        Invalid("import jax\njax.config.update('jax_pmap_shmap_merge', False)\nx = 1\n", lines=(2,),
                expected="import jax\nx = 1\n"),
        Invalid("import jax\nif legacy:\n    jax.config.update('jax_pmap_shmap_merge', True)\n", lines=(3,),
                expected="import jax\nif legacy:\n    pass\n"),
        Invalid("from jax import config\nconfig.update(\n    'jax_pmap_shmap_merge',\n    True)\n", lines=(3,)),
        Invalid("import jax\nif jax.config.jax_pmap_shmap_merge:\n    pass\n", lines=(2,)),
        Invalid("import os\nos.environ['JAX_PMAP_SHMAP_MERGE'] = '0'  # keep the C++ pmap\nimport jax\n", lines=(2,),
                expected="import os\nimport jax\n"),
        Invalid("import os\nos.environ.setdefault('JAX_PMAP_SHMAP_MERGE', 'false')\n", lines=(2,),
                expected="import os\n"),
        # Reads of the flag are reported, not rewritten.
        Invalid("import jax\nif jax.config.jax_pmap_shmap_merge:\n    pass\nlegacy = jax.config.read('jax_pmap_shmap_merge')\n",
                lines=(2, 4),
                expected="import jax\nif jax.config.jax_pmap_shmap_merge:\n    pass\nlegacy = jax.config.read('jax_pmap_shmap_merge')\n"),
        Invalid("import sys\nsys.argv += ['--jax_pmap_shmap_merge=false', '--xla_flag=1']\n", lines=(2,)),
        Invalid("FLAGS = ['--jax_pmap_shmap_merge']\n", lines=(1,)),
        Invalid("import jax\nwith jax.config.pmap_shmap_merge(False):\n    pass\n", lines=(2,)),
        Invalid("from jax._src import config\nconfig.pmap_shmap_merge.value\n", lines=(2,)),
        Invalid("from jax._src.config import pmap_shmap_merge\nold = pmap_shmap_merge.value\n", lines=(2,)),
        Invalid("from jax._src import test_util as jtu\n@jtu.with_config(jax_pmap_shmap_merge=False)\nclass T:\n    pass\n",
                lines=(2,)),
        Invalid("import subprocess\nsubprocess.run(cmd, env={'JAX_PMAP_SHMAP_MERGE': '1'})\n", lines=(2,)),
        Invalid("from absl import flags\nFLAGS = flags.FLAGS\nlegacy = FLAGS.jax_pmap_shmap_merge\n", lines=(3,)),
        Invalid("import jax\nlegacy = jax.config.read('jax_pmap_shmap_merge')\n", lines=(2,)),
        Invalid("argv = [f'--jax_pmap_shmap_merge={legacy}']\n", lines=(1,)),
        Invalid("import os\nos.environ.update(JAX_PMAP_SHMAP_MERGE='1')\n", lines=(2,)),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        # A pmap site, or a partial of pmap (aliased, used as a decorator or applied): its own
        # keyword arguments, so a partial alias is reported once, not at every application.
        site = self.model.site(node)
        if site is not None and site.transform != PMAP:
            return
        if site is None:
            callee = self.model.callee(node)
            if callee is None or callee.transform != PMAP:
                return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in tables.REMOVED_PMAP_KEYWORDS:
                self.report(arg, f"`{arg.keyword.value}=` is not a `jax.pmap` option any more (removed with the "
                                 "legacy pmap); drop it", fix=self._drop_argument(node, arg))

    def _drop_argument(self, call: cst.Call, arg: cst.Arg) -> FixSpec:
        edits = [Edit(arg, cst.RemovalSentinel.REMOVE)]
        index = next(i for i, a in enumerate(call.args) if a is arg)
        if index == len(call.args) - 1 and index > 0:
            previous = call.args[index - 1]  # it becomes the last argument: it ends as this one ended
            edits.append(Edit(previous, previous.with_changes(comma=arg.comma)))
        if isinstance(arg.value, cst.Name) and arg.value.value == "None":
            return FixSpec(Applicability.SAFE, f"drop `{arg.keyword.value}=None` (the default)", edits=tuple(edits))
        return FixSpec(Applicability.UNSAFE, f"drop `{arg.keyword.value}=`; jax 0.4 and later rejected any value but None, so "
                                 "this call did not run as written", edits=tuple(edits))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value.lower() == tables.PMAP_SHMAP_MERGE_FLAG:
            self._report_flag(node, node.keyword.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "pmap_shmap_merge" not in node.value.lower() or self._is_docstring(node):
            return
        value = node.evaluated_value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if _FLAG_WORD.search(value.lower()):
            self._report_flag(node, value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        if _FLAG_WORD.search(node.value.lower()):  # f"--jax_pmap_shmap_merge={legacy}"
            self.report(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        attr = node.attr.value
        if attr == tables.PMAP_SHMAP_MERGE_FLAG:
            # The flag's own name, on `jax.config` or on an absl FLAGS object that cannot be resolved.
            self.report(node)
        elif attr == "pmap_shmap_merge" and self.model.matches(node, tables.PMAP_SHMAP_MERGE_STATE):
            self.report(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "pmap_shmap_merge" and not self._is_attribute_tail(node) and self.model.matches(
                node, tables.PMAP_SHMAP_MERGE_STATE):
            self.report(node)

    def _report_flag(self, node: cst.CSTNode, text: str) -> None:
        fix = self._flag_setting_removal(node)
        if tables.PMAP_SHMAP_MERGE_FLAG.upper() in text:
            self.report(node, f"`{tables.PMAP_SHMAP_MERGE_FLAG.upper()}` is ignored since jax 0.10.0 removed the "
                              "flag: the legacy pmap it selected is gone, so this silently runs the new pmap", fix=fix)
        else:
            self.report(node, fix=fix)

    def _flag_setting_removal(self, node: cst.CSTNode) -> FixSpec | None:
        """Delete a statement whose only effect is setting the flag: `jax.config.update(flag, v)`,
        `os.environ[FLAG] = v`, `os.environ.setdefault(FLAG, v)`, with the flag's name as ``node``."""
        model = self.model
        parent = model.parent(node)
        value = None
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            call = model.parent(parent)
            if not isinstance(call, cst.Call) or len(call.args) != 2 or call.args[0] is not parent \
                    or call.args[1].keyword is not None or call.args[1].star:
                return None
            setdefault = isinstance(call.func, cst.Attribute) and call.func.attr.value == "setdefault" \
                and model.matches(call.func.value, _ENVIRON)
            if not (model.matches(call.func, _CONFIG_UPDATE) or setdefault):
                return None
            value = call.args[1].value
            statement = model.parent(call)
            if not isinstance(statement, cst.Expr):
                return None
        elif isinstance(parent, cst.Index):
            subscript = model.parent(model.parent(parent))
            target = model.parent(subscript)
            statement = model.parent(target)
            if not (isinstance(subscript, cst.Subscript) and isinstance(target, cst.AssignTarget)
                    and isinstance(statement, cst.Assign) and len(statement.targets) == 1
                    and model.matches(subscript.value, _ENVIRON)):
                return None
            value = statement.value
        else:
            return None
        line = model.parent(statement)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        summary = f"delete the `{tables.PMAP_SHMAP_MERGE_FLAG}` setting"
        if _sets_false(value):
            return FixSpec(Applicability.SAFE, summary + " (it sets the legacy default; jax 0.10 and later reject the flag)",
                           replacement=remove_line(model, line), target=line)
        return FixSpec(Applicability.UNSAFE, summary + "; on jax 0.7.2, pmaps not migrated here would run the legacy pmap "
                                           "again", replacement=remove_line(model, line), target=line)

    def _is_attribute_tail(self, node: cst.Name) -> bool:
        parent = self.model.parent(node)
        if isinstance(parent, (cst.ImportAlias, cst.AsName)):
            return True  # the import itself; its uses are reported
        return isinstance(parent, cst.Attribute) and parent.attr is node

    def _is_docstring(self, node: cst.SimpleString) -> bool:
        parent = self.model.parent(node)
        if isinstance(parent, cst.ConcatenatedString):
            parent = self.model.parent(parent)
        return isinstance(parent, cst.Expr)


def _sets_false(value: cst.BaseExpression | None) -> bool:
    if isinstance(value, cst.Name):
        return value.value == "False"
    if isinstance(value, cst.Integer):
        return value.evaluated_value == 0
    if isinstance(value, cst.SimpleString):
        text = value.evaluated_value
        return isinstance(text, str) and text.strip().lower() in _FALSE_STRINGS
    return False
