"""How safe PM201/PM202's rows are, by where they go.

A row read from its shard (`out.addressable_shards[0].data.squeeze(0)`) is committed to its device;
legacy's `out[0]` was not. Where the row goes straight to the host that cannot matter (safe); where
it may be combined with other devices' arrays it can (unsafe); where it reaches a pmap, which
refuses it, or rows of every device are gathered, there is no fix (`out[k]` stays, a gather).
`fixtures/programs/row_flows.py` runs the failing flows on the three jax releases.
"""

from __future__ import annotations

from pmap_migrate.engine import lint_bytes
from pmap_migrate.rules import all_rules

HEAD = ("import jax\nimport jax.numpy as jnp\nimport numpy as np\nstep = jax.pmap(lambda x: x * 2)\n"
        "predict = jax.pmap(lambda w, x: x * w, in_axes=(None, 0))\nout = step(xs)\n")


def fixes(body: str) -> dict[int, str | None]:
    """Line -> applicability of the PM201/PM202 finding there (None: no fix)."""
    result = lint_bytes((HEAD + body).encode(), "rows.py", all_rules())
    assert result.error is None, result.error
    first = HEAD.count("\n") + 1
    return {d.line - first + 1: (d.fix.applicability if d.fix else None)
            for d in result.diagnostics if d.code in ("PM201", "PM202")}


def test_rows_going_straight_to_the_host_are_safe():
    body = ("print(float(out[0]))\nprint(out[0], 'loss')\nv = np.asarray(out[0])\nh = jax.device_get(out[0])\n"
            "s = f'{out[0]}'\nq = out[0].item()\nt = jax.device_get(jax.tree.map(lambda x: x[0], out))\n")
    assert fixes(body) == {1: "safe", 2: "safe", 3: "safe", 4: "safe", 5: "safe", 6: "safe", 7: "safe"}


def test_parts_of_rows_taken_by_literal_indices_and_their_metadata_are_safe():
    body = ("a = float(out[0][1])\nb = out[0][:, -1].tolist()\nc = np.asarray(out[0][2:4])\nn = out[0].shape\n"
            "d = out[0].dtype\ne = float(out[0][i])\nf = out[0][1] * 2\n")
    assert fixes(body) == {1: "safe", 2: "safe", 3: "safe", 4: "safe", 5: "safe", 6: "unsafe", 7: "unsafe"}


def test_rows_kept_as_arrays_are_unsafe():
    body = "w = out[0]\ny = out[0] * 2\nz = out[3]\nparams = jax.tree.map(lambda x: x[0], out)\n"
    assert fixes(body) == {1: "unsafe", 2: "unsafe", 3: "unsafe", 4: "unsafe"}


def test_rows_reaching_a_pmap_or_gathered_together_get_no_fix():
    body = ("w0 = out[0]\nys = predict(w0, xs)\nzs = predict(out[0], xs)\n"
            "params = jax.tree.map(lambda x: x[0], out)\nus = predict(params, xs)\n"
            "rows = jnp.stack([out[i] for i in range(8)])\n")
    assert fixes(body) == {1: None, 3: None, 4: None, 6: None}
