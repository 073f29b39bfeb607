from __future__ import annotations

import libcst as cst

from pmap_migrate.rules.analysis.sites import DEVICE_STACKED, PMAP, PMAP_OUTPUT, TransformSite
from pmap_migrate.rules.base import Fixable, Invalid, Rule, Valid
from pmap_migrate.rules.fixes.choices import Applicability
from pmap_migrate.rules.fixes.placement_fixes import (
    ROW_COMMITTED,
    is_assignment_target,
    keep_parens,
    literal_index,
    row_of,
    single_index,
)
from pmap_migrate.rules.fixes.spec import FixSpec
from pmap_migrate.rules.knowledge import gates

# Expressions that evaluate `out[i]` for several i and keep the rows together.
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


class ShardedIntIndex(Rule):
    """An integer index into the device axis of a pmap output.

    ## What it does
    Finds `out[0]`, `out[-1]`, `out[i]` (and `metrics["loss"][0]`, `state.params[0]`,
    `step(x)[0]`) where `out` holds the output of a pmap, of `jax.device_put_replicated` /
    `jax.device_put_sharded`, or of flax's `replicate` — values whose leading axis is laid out one
    slice per device — or what a function returns whose every return is one of these
    (`run_step(x)[0]` with `def run_step(x): return p_step(x)`, or `return state, metrics` of a
    pmap's outputs; in the module, or imported from another module of the project). Names bound
    by tuple unpacking (`loss, grads = p_step(x)`) count. Not
    reported: `out.shape[0]` and other array attributes, slices (`out[:2]`, `out[:, 0]`), outputs
    of pmaps with `out_axes=None`, and `out[0]` that picks one output of a pmapped function
    returning a tuple (`step(x)[0]` with `return loss, grads`) or an element of a list or tuple in
    the output pytree (`params[0]["w"]` with `params` a list of layers, shown by the string key or
    by a pmapped function or replicated value visibly returning a list); an index into the
    element's arrays is reported (`params[0]["w"][0]`).

    ## Why is this bad?
    On the legacy pmap the output was a `ShardedDeviceArray` and `out[0]` read device 0's buffer.
    The new pmap returns a `jax.Array` sharded over a mesh; `out[0]` is a jitted gather that
    replicates the slice on every device. On an (8, 512, 512) output it went from 0.23 ms to
    6-10 ms per index, inside what is usually a training loop.

    ## Example
    ```python
    loss = p_train_step(state, batch)
    print(loss[0])
    ```

    ## Use instead
    ```python
    loss = p_train_step(state, batch)
    print(loss.addressable_shards[0].data.squeeze(0))  # device 0's slice, no communication
    ```

    ## Fix safety
    `out[k]` becomes `out.addressable_shards[k].data.squeeze(0)`, exact when every value `out` may
    hold (on every path to the index) is a stack with one row per device along a 1-D mesh: an output
    of a pmap (the migrated form, the new `jax.pmap` and `runtime_shim.pmap` all put row k on the
    k-th device of their mesh, and `addressable_shards` follows mesh order) or a
    `device_put_replicated` / `device_put_sharded` / flax `replicate` stack. One difference: the row
    read from its shard is committed to its device, where legacy's `out[k]` was an uncommitted array
    on that device. Nothing changes for a row used on its own, but rows of two devices cannot be
    combined (`out[0] + out[1]`), nor a row with a stacked array (a jitted `f(out[0], out)`), and a
    pmap refuses a committed row as an input. So: safe for `out[0]` going straight to the host
    (`float(...)`, `print(...)`, `np.asarray(...)`, `jax.device_get(...)`, `.item()`, `.tolist()`,
    an f-string), also through integer indices and slices of the row (`float(out[0][1])`) and for
    its `.shape`/`.dtype`; unsafe otherwise (assumes the row is used on its own), and for `out[i]`
    also assumes that `i` is an int, not a slice or an index array. No fix for `out[i]` inside a
    comprehension (the rows are gathered together), for a row passed to a pmap (directly or through
    the name it is assigned to), where the value may come from elsewhere on some path (a host array
    before a loop, a parameter), for outputs of nested pmaps (2-D meshes), in code that may run
    under jit (the value would be a tracer), or in multi-process programs (the first addressable
    shard is not row 0 of the global array), or for what a function returns (its pmap's mesh and
    processes are not seen at the call). Those keep `out[k]`: correct on the new jax, as a
    gather. Where every pmap whose output `out` may hold goes to `runtime_shim.pmap` with its own
    fix (here, or through an alias its module keeps on the shim), that fix takes the finding with
    it (code calling the shim keeps legacy semantics): the finding carries it, with nothing to edit
    at the index, and is counted as fixable and shimmed.

    ## References
    - https://docs.jax.dev/en/latest/migrate_pmap.html
    - https://docs.jax.dev/en/latest/jax.Array.html
    """

    CODE = "PM201"
    NAME = "sharded-int-index"
    FIXABLE = Fixable.SOMETIMES
    MESSAGE = ("integer index into the device axis of a pmap output: now a cross-device gather; "
               "read `x.addressable_shards[0].data` for one device's slice")
    TRIGGERS = gates.PM201.TRIGGERS
    NAMES = gates.PM201.NAMES
    CONTEXT_NAMES = gates.PM201.CONTEXT_NAMES

    VALID = [
        Valid("import numpy as np\nx = np.ones((8, 3))\ny = x[0]\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nn = out.shape[0]\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nhead = out[:2]\ncol = out[:, 0]\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\ny = out[None]\nz = out[...]\n"),
        Valid("import jax\nstep = jax.pmap(f, out_axes=None)\nout = step(x)\ny = out[0]\n"),
        Valid("import jax\nstep = jax.jit(f)\nout = step(x)\ny = out[0]\n"),
        Valid("import jax\nout = jax.device_get(jax.pmap(f)(x))\ny = out[0]\n"),
        # Picking an output of a pmapped function that returns a tuple.
        Valid(
            "import jax\n"
            "@jax.pmap\n"
            "def step(x):\n    return x * 2, x + 1\n"
            "loss = step(x)[0]\nout = step(x)\ngrads = out[1]\n"
        ),
        # A function that may return something else (a host copy on one path, its parameter).
        Valid("import jax\nstep = jax.pmap(f)\ndef run(x, log):\n    if log:\n        return jax.device_get(step(x))\n"
              "    return step(x)\ndef same(out):\n    return out\ny = run(x, True)[0]\nz = same(x)[0]\n"),
        # A parameter that only shares its name with an output elsewhere.
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\ndef g(out):\n    return out[0]\n"),
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\ny = out.sharding.devices[0]\n"),
        # The output was replaced by a host copy before the index (on every path to it).
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nout = jax.device_get(out)\ny = out[0]\n"),
        Valid(
            "import jax\nfrom flax import jax_utils\nstep = jax.pmap(f)\n"
            "def train(state, batches):\n"
            "    for batch in batches:\n        state, metrics = step(state, batch)\n"
            "        metrics = jax_utils.unreplicate(metrics)\n"
            "        print(metrics['loss'][0])\n"
        ),
        # Unpacking an array output iterates its device axis: the pieces are per-device values.
        Valid("import jax\nstep = jax.pmap(f)\nout = step(x)\nfirst, *rest = out\nz = first[0]\n"),
        # A list of the output pytree (a list of layers): `[0]` picks a layer, as the string key
        # after it or the producer shows; the layer's arrays keep the device axis.
        Valid("import jax\nstep = jax.pmap(f)\nparams, loss = step(params, batch)\nw = params[0]['w']\n"),
        Valid(
            "import jax\n"
            "@jax.pmap\n"
            "def step(ws, x):\n    return [w * x for w in ws], x.sum()\n"
            "ws, total = step(ws, x)\nfirst = ws[0]\n"
        ),
        Valid(
            "import jax\n"
            "def init(key):\n    return [jax.random.normal(key, (4, 4)) for _ in range(3)]\n"
            "params = jax.device_put_replicated(init(key), jax.local_devices())\nfirst = params[0]\n"
            "pair = jax.device_put_replicated([w, b], jax.local_devices())\nbias = pair[1]\n"
        ),
        # The read in the value runs before the statement binds `x`: it is the host array, not the stack.
        Valid("import jax\nimport numpy as np\nx = np.ones((8, 3))\n"
              "x = jax.device_put_replicated(x[0], jax.local_devices())\n"),
    ]
    INVALID = [
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(x)\ny = out[0]\n", lines=(4,)),
        # Fixed where every value of `out` is an array with one row per device: safe for `out[0]`
        # going straight to the host, unsafe otherwise (applied here as --unsafe-fixes would).
        Invalid(
            "import jax\nimport jax.numpy as jnp\n@jax.pmap\ndef step(x):\n    return jnp.sin(x) * 2\n"
            "out = step(xs)\nfirst, last = out[0], out[-1]\nfor i in range(8):\n    print(out[i])\n",
            lines=(7, 7, 9),
            expected=(
                "import jax\nimport jax.numpy as jnp\n@jax.pmap\ndef step(x):\n    return jnp.sin(x) * 2\n"
                "out = step(xs)\n"
                "first, last = out.addressable_shards[0].data.squeeze(0), out.addressable_shards[-1].data.squeeze(0)\n"
                "for i in range(8):\n    print(out.addressable_shards[i].data.squeeze(0))\n"
            ),
        ),
        Invalid(
            "import jax\nfrom jax import lax\nstep = jax.pmap(lambda x: (lax.psum(x, 'i'), {'y': x + 1}), axis_name='i')\n"
            "loss, aux = step(xs)\nprint(aux['y'][0])\n",
            lines=(5,),
            expected=(
                "import jax\nfrom jax import lax\nstep = jax.pmap(lambda x: (lax.psum(x, 'i'), {'y': x + 1}), axis_name='i')\n"
                "loss, aux = step(xs)\nprint(aux['y'].addressable_shards[0].data.squeeze(0))\n"
            ),
        ),
        # Not fixed: a row passed to a pmap (committed to its device, the migrated pmap refuses it),
        # rows of several devices gathered by a comprehension.
        Invalid(
            "import jax\nimport jax.numpy as jnp\nstep = jax.pmap(lambda x: jnp.sin(x))\n"
            "predict = jax.pmap(lambda w, x: x * w, in_axes=(None, 0))\n"
            "out = step(xs)\nw0 = out[0]\nys = predict(w0, xs)\nrows = jnp.stack([out[i] for i in range(8)])\n",
            lines=(6, 8),
            expected=("import jax\nimport jax.numpy as jnp\nstep = jax.pmap(lambda x: jnp.sin(x))\n"
                      "predict = jax.pmap(lambda w, x: x * w, in_axes=(None, 0))\n"
                      "out = step(xs)\nw0 = out[0]\nys = predict(w0, xs)\n"
                      "rows = jnp.stack([out[i] for i in range(8)])\n"),
        ),
        # Not fixed: the output may be a list of the pytree (`[0]` picks an element), or a traced value.
        Invalid(
            "import jax\n@jax.pmap\ndef step(params):\n    return params\nparams = step(params)\nlayer = params[0]\n",
            lines=(6,),
            expected="import jax\n@jax.pmap\ndef step(params):\n    return params\nparams = step(params)\nlayer = params[0]\n",
        ),
        Invalid(
            "import jax\nstep = jax.pmap(lambda x: x + 1)\n@jax.jit\ndef g(x):\n    return step(x)[0]\n",
            lines=(5,),
            expected="import jax\nstep = jax.pmap(lambda x: x + 1)\n@jax.jit\ndef g(x):\n    return step(x)[0]\n",
        ),
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(x)\na = out[-1]\nfor i in range(8):\n    print(out[i])\n",
                lines=(4, 6)),
        # What a function returns whose every return is a pmap output (not fixed: its pmap is not
        # seen at the read); a tuple of them, unpacked; `[0]` picking an element of that tuple is not
        # reported.
        Invalid(
            "import jax\nstep = jax.pmap(f)\ndef run(x):\n    return step(x)\n"
            "def both(x):\n    out = step(x)\n    return out, 1.0\n"
            "y = run(x)[0]\nout, n = both(x)\nz = out[1]\nw = both(x)[0]\n",
            lines=(8, 10),
            expected=("import jax\nstep = jax.pmap(f)\ndef run(x):\n    return step(x)\n"
                      "def both(x):\n    out = step(x)\n    return out, 1.0\n"
                      "y = run(x)[0]\nout, n = both(x)\nz = out[1]\nw = both(x)[0]\n"),
        ),
        Invalid("import jax\nstep = jax.pmap(f)\nmetrics = step(x)\nloss = metrics['loss'][0]\n", lines=(4,)),
        Invalid("import jax\nstep = jax.pmap(f)\ny = step(x)[0]\n", lines=(3,)),
        Invalid("import jax\ny = jax.pmap(lambda v: v * 2)(x)[0]\n", lines=(2,)),
        Invalid("import jax\n@jax.pmap\ndef step(s, b):\n    return s\nstate, metrics = step(s, b)\nm = metrics[0]\n",
                lines=(6,)),
        Invalid("import jax\nstep = jax.pmap(f)\nstate = step(x)\np = state.params[0]\n", lines=(4,)),
        Invalid(
            "import jax\n"
            "@jax.pmap\n"
            "def step(x):\n    return x * 2, x + 1\n"
            "out = step(x)\nfirst_device = out[0][0]\n",
            lines=(6,),
        ),
        Invalid("import jax\nstep = jax.pmap(f, out_axes=(0, None))\na, b = step(x)\nu = a[0]\nv = b[0]\n", lines=(4,)),
        Invalid("import jax\nparams = jax.device_put_replicated(p, jax.local_devices())\nw = params[0]\n", lines=(3,)),
        # An array of a list of the output is reported, once (`params[0]` picks the layer).
        Invalid("import jax\nstep = jax.pmap(f)\nparams, loss = step(params, batch)\nw0 = params[0]['w'][0]\n",
                lines=(4,)),
        # Through plain copies of an output, and unpacking of a whole tuple output.
        Invalid(
            "import jax\n"
            "@jax.pmap\n"
            "def step(x):\n    return x * 2, {'loss': x}\n"
            "out = step(x)\nys, aux = out\nm = aux\nl = m['loss']\n"
            "a = ys[0]\nb = l[0]\n",
            lines=(9, 10),
        ),
        Invalid("import jax\nstep = jax.pmap(f)\nstate = step(x)\nparams = state.params\nw = params['w'][0]\n",
                lines=(5,)),
        # A host copy made only on some paths does not hide the output; nor does one made before
        # a loop whose later iterations read the pmap output assigned at its end.
        Invalid(
            "import jax\nstep = jax.pmap(f)\nout = step(x)\nif log:\n    out = jax.device_get(out)\ny = out[0]\n",
            lines=(6,),
        ),
        Invalid(
            "import jax, numpy as np\nstep = jax.pmap(lambda x: x * 2)\nout = np.zeros((8, 3))\n"
            "for i in range(3):\n    print(out[0])\n    out = step(x)\n",
            lines=(5,),
            # not fixed: the first iteration reads the NumPy array
            expected=("import jax, numpy as np\nstep = jax.pmap(lambda x: x * 2)\nout = np.zeros((8, 3))\n"
                      "for i in range(3):\n    print(out[0])\n    out = step(x)\n"),
        ),
        # Rebinding the name to a row: the read is the output, bound before this statement; in a
        # loop whose previous iteration's row may reach the read, not fixed.
        Invalid(
            "import jax\nstep = jax.pmap(lambda x: x * 2)\nout = step(xs)\nout = out[0]\n",
            lines=(4,),
            expected=("import jax\nstep = jax.pmap(lambda x: x * 2)\nout = step(xs)\n"
                      "out = out.addressable_shards[0].data.squeeze(0)\n"),
        ),
        Invalid(
            "import jax\nstep = jax.pmap(lambda x: x * 2)\nout = step(xs)\nfor _ in range(2):\n    out = out[0]\n",
            lines=(5,),
            expected=("import jax\nstep = jax.pmap(lambda x: x * 2)\nout = step(xs)\n"
                      "for _ in range(2):\n    out = out[0]\n"),
        ),
        # The value of `jax.value_and_grad` is a scalar array (jax allows nothing else): a pmean of it
        # is a stacked array, its row can be read from its shard; the gradients (a pytree) cannot.
        Invalid(
            "import jax\nfrom jax import lax\n"
            "@jax.pmap\ndef step(p, x):\n    loss, grads = jax.value_and_grad(f)(p, x)\n"
            "    return lax.pmean(loss, 'i'), lax.pmean(grads, 'i')\n"
            "loss, grads = step(p, x)\nprint(float(loss[0]))\ng = grads[0]\n",
            lines=(8, 9),
            expected=(
                "import jax\nfrom jax import lax\n"
                "@jax.pmap\ndef step(p, x):\n    loss, grads = jax.value_and_grad(f)(p, x)\n"
                "    return lax.pmean(loss, 'i'), lax.pmean(grads, 'i')\n"
                "loss, grads = step(p, x)\nprint(float(loss.addressable_shards[0].data.squeeze(0)))\ng = grads[0]\n"
            ),
        ),
        Invalid(
            "import jax\nfrom jax import lax\nvg = jax.value_and_grad(f, has_aux=True)\n"
            "@jax.pmap\ndef step(p, x):\n    (loss, aux), grads = vg(p, x)\n    return lax.pmean(loss, 'i'), aux\n"
            "loss, aux = step(p, x)\nprint(float(loss[0]), float(aux[0]))\n",
            lines=(9, 9),
            expected=(
                "import jax\nfrom jax import lax\nvg = jax.value_and_grad(f, has_aux=True)\n"
                "@jax.pmap\ndef step(p, x):\n    (loss, aux), grads = vg(p, x)\n    return lax.pmean(loss, 'i'), aux\n"
                "loss, aux = step(p, x)\nprint(float(loss.addressable_shards[0].data.squeeze(0)), float(aux[0]))\n"
            ),
        ),
        # One device's slice is an ordinary array: indexing it again is not another gather.
        Invalid("import jax\nstep = jax.pmap(f)\nout = step(x)\nrow = out[0]\ncopy = row\nz = copy[0]\n", lines=(4,)),
        Invalid("from flax import jax_utils\nstate = jax_utils.replicate(state)\ns0 = state[0]\n", lines=(3,)),
        Invalid("import jax\nxs = jax.device_put_sharded(shards, jax.devices())\nx0 = xs[0]\n", lines=(3,)),
        Invalid(
            "import jax\nclass T:\n    def __init__(self):\n        self.p_step = jax.pmap(self.step)\n"
            "    def step(self, x):\n        return x\n"
            "    def run(self, x):\n        out = self.p_step(x)\n        return out[0]\n",
            lines=(9,),
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        # Indices with no fix of their own into outputs of pmaps only: reported once every pmap's
        # fix is known (the end of the module), with their pmaps' shim fix where all have one.
        self._pending: list[tuple[cst.Subscript, list[TransformSite]]] = []

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.model.indexes_device_axis(node):
            fix = self._fix(node) or self.with_global_rewrite(node)
            if fix is None:
                producers = self.model.producers(node.value)
                if producers and all(site.transform == PMAP for site in producers) \
                        and self.model.value_tags(node.value) & DEVICE_STACKED <= {PMAP_OUTPUT}:
                    self._pending.append((node, producers))
                    return
            self.report(node, fix=fix)

    def leave_Module(self, original_node: cst.Module) -> None:
        for node, producers in self._pending:
            nodes = [site.node for site in producers]
            self.report(node, fix=self.with_shimmed_pmaps(nodes, "the index"))

    def _fix(self, node: cst.Subscript) -> FixSpec | None:
        index = single_index(node)
        if index is None or is_assignment_target(self.model, node):
            return None
        if self.context.fixes.placement.first_shard_reason(node, node.value) is not None:
            return None
        if not literal_index(index) and any(isinstance(a, _COMPREHENSIONS) for a in self.model.ancestors(node)):
            return None  # rows of several devices gathered together: committed rows cannot be combined
        replacement = keep_parens(node, row_of(node.value, index))
        summary = "read the row from the device that holds it (`addressable_shards`), without a cross-device gather"
        if literal_index(index) and self.model.module.code_for_node(index) == "0" \
                and self.context.fixes.placement.used_on_host(node):
            return FixSpec(Applicability.SAFE, summary, replacement=replacement)
        assumes = [ROW_COMMITTED]
        if not literal_index(index):
            assumes.insert(0, f"`{self.model.module.code_for_node(index)}` is an int (a slice or an index array "
                              "would select other rows)")
        return FixSpec(Applicability.UNSAFE, summary + "; assumes " + " and ".join(assumes), replacement=replacement)
