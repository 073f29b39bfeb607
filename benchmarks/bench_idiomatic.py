"""Per training step: `jax.pmap` + `loss[0]`, the faithful rewrite + `loss[0]`, and the idiomatic rewrite.

One legacy data-parallel loop (an MLP, replicated params, a batch reshaped per device, a step that
`pmean`s its gradients and donates the params, the loss read with `[0]`) is rewritten by
pmap-migrate's own fixer twice: faithfully (`fix`) and idiomatically (`fix --unsafe-fixes
--idiomatic`), so the benchmark times exactly what the tool emits. Each form then runs the same
steady-state step: params are the previous step's outputs, the batch is already on the devices
(placed as each form expects it), and the loss is read to the host every step, as a training loop
that logs it does. Forms:

* `jax.pmap`               the legacy module as written: stacked params, `float(loss[0])`
* faithful + `[0]`          the faithful rewrite, same stacked inputs, `float(loss[0])`
* faithful + shard read     the same, with the read PM201 rewrites `[0]` to:
                            `float(loss.addressable_shards[0].data.squeeze(0))`
* idiomatic                 params `NamedSharding(mesh, P())`, global batch `P("batch")`, `float(loss)`

Steps are interleaved (one of each per round, the order rotating) so that drift in the machine's
speed hits all forms alike; figures are medians. "step" is the call until the loss is ready,
"read" the host read of the loss after it.

    python benchmarks/bench_idiomatic.py                                   # this interpreter (needs jax, libcst)
    python benchmarks/bench_idiomatic.py --python ~/.cache/pmap-migrate/venvs/jax-0.7.2-py3.11/bin/python

Run from the repository root (it imports the fixer from the working tree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEGACY_MODULE = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def loss_fn(params, x, y):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
    return params, lax.pmean(loss, "batch")


def train(params, batches):
    n = jax.local_device_count()
    params = jax.device_put_replicated(params, jax.local_devices())
    for x, y in batches:
        x = x.reshape(n, -1, *x.shape[1:])
        y = y.reshape(n, -1, *y.shape[1:])
        params, loss = train_step(params, x, y)
        print(loss[0])
'''

FORMS = ("jax.pmap + [0]", "faithful + [0]", "faithful + shard read", "idiomatic")


def rewritten_sources() -> dict[str, str]:
    """The legacy module, its faithful and its idiomatic rewrite (as `pmap-migrate fix` emits them)."""
    sys.path.insert(0, str(ROOT))
    from pmap_migrate.fixer import fix_bytes
    from pmap_migrate.rules import all_rules
    from pmap_migrate.rules.fixes.choices import RuleOptions

    sources = {"legacy": LEGACY_MODULE}
    for label, options in (("faithful", None), ("idiomatic", RuleOptions(idiomatic=True))):
        outcome = fix_bytes(LEGACY_MODULE.encode(), "bench_module.py", all_rules(), unsafe=True, options=options)
        if outcome.fixed is None or outcome.error is not None:
            raise SystemExit(f"the fixer did not rewrite the benchmark module ({label}): {outcome.error}")
        sources[label] = outcome.fixed.decode()
    if "per_device" not in sources["faithful"] or "batch_mesh" not in sources["idiomatic"]:
        raise SystemExit("unexpected rewrite: the faithful form lost its wrapper or the idiomatic form was not applied")
    return sources


def measure(sources: dict[str, str], rounds: int, warmup: int, width: int, per_device: int) -> dict:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    namespaces = {}
    for label, source in sources.items():
        namespace: dict = {}
        exec(compile(source, f"bench_{label}", "exec"), namespace)
        namespaces[label] = namespace
    n = jax.local_device_count()
    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(width, width)).astype(np.float32) / np.sqrt(width),
              "b1": np.zeros((width,), np.float32),
              "w2": rng.normal(size=(width, 1)).astype(np.float32) / np.sqrt(width)}
    x = rng.normal(size=(n * per_device, width)).astype(np.float32)
    y = np.sin(x[:, :1])

    def stacked(tree):
        return jax.tree_util.tree_map(lambda leaf: np.stack([leaf] * n), tree)

    # Device-resident inputs, as each form wants them (the stacked ones on the legacy pmap's layout).
    devices = jax.local_devices()
    stack_sharding = NamedSharding(Mesh(np.array(devices), ("batch",)), P("batch"))
    if getattr(jax.config, "jax_pmap_shmap_merge", True) is False:  # legacy pmap: its own sharded arrays
        put_stack = jax.pmap(lambda leaf: leaf)
    else:
        def put_stack(tree):
            return jax.device_put(tree, stack_sharding)
    xs, ys = put_stack(x.reshape(n, per_device, width)), put_stack(y.reshape(n, per_device, 1))
    xf, yf = jax.device_put(x.reshape(n, per_device, width), stack_sharding), jax.device_put(
        y.reshape(n, per_device, 1), stack_sharding)
    mesh = namespaces["idiomatic"]["batch_mesh"]()
    xi, yi = jax.device_put(x, NamedSharding(mesh, P("batch"))), jax.device_put(y, NamedSharding(mesh, P("batch")))

    pmap_step = namespaces["legacy"]["train_step"]
    faithful_step = namespaces["faithful"]["train_step"]
    idiomatic_step = namespaces["idiomatic"]["train_step"]
    state = {
        "jax.pmap + [0]": [put_stack(stacked(params))],
        "faithful + [0]": [jax.device_put(stacked(params), stack_sharding)],
        "faithful + shard read": [jax.device_put(stacked(params), stack_sharding)],
        "idiomatic": [jax.device_put(params, NamedSharding(mesh, P()))],
    }
    calls = {
        "jax.pmap + [0]": (lambda p: pmap_step(p, xs, ys), lambda loss: float(loss[0])),
        "faithful + [0]": (lambda p: faithful_step(p, xf, yf), lambda loss: float(loss[0])),
        "faithful + shard read": (lambda p: faithful_step(p, xf, yf),
                                  lambda loss: float(loss.addressable_shards[0].data.squeeze(0))),
        "idiomatic": (lambda p: idiomatic_step(p, xi, yi), lambda loss: float(loss)),
    }
    first_losses = {}

    def one(form: str, record: dict | None) -> None:
        step, read = calls[form]
        start = time.perf_counter()
        new_params, loss = step(state[form][0])
        loss.block_until_ready()
        middle = time.perf_counter()
        value = read(loss)
        end = time.perf_counter()
        state[form][0] = new_params
        first_losses.setdefault(form, value)
        if record is not None:
            record[form][0].append(middle - start)
            record[form][1].append(end - middle)

    for form in FORMS:  # the first step of each form: the same loss from the same params and batch
        one(form, None)
    reference = first_losses["jax.pmap + [0]"]
    for form, value in first_losses.items():
        if abs(value - reference) > 1e-5 * max(1.0, abs(reference)):
            raise SystemExit(f"{form} computed loss {value}, jax.pmap {reference}: not the same program")
    for _ in range(warmup):
        for form in FORMS:
            one(form, None)
    record = {form: ([], []) for form in FORMS}
    for k in range(rounds):
        order = FORMS[k % len(FORMS):] + FORMS[:k % len(FORMS)]
        for form in order:
            one(form, record)
    totals = {form: [a + b for a, b in zip(*record[form])] for form in FORMS}

    def paired(form: str, base: str) -> float:
        """The median of per-round ratios: each round's steps ran back to back, so a slow spell of
        the machine cancels out."""
        return statistics.median(a / b for a, b in zip(totals[form], totals[base]))

    result = {form: {"step_us": statistics.median(s) * 1e6, "read_us": statistics.median(r) * 1e6,
                     "total_us": statistics.median(totals[form]) * 1e6,
                     "total_p10_us": statistics.quantiles(totals[form], n=10)[0] * 1e6,
                     "vs_pmap": paired(form, FORMS[0]), "vs_faithful": paired(form, FORMS[1])}
              for form, (s, r) in record.items()}
    return {"jax": jax.__version__, "python": sys.version.split()[0], "devices": n, "rounds": rounds,
            "legacy_pmap": getattr(jax.config, "jax_pmap_shmap_merge", True) is False,
            "width": width, "per_device": per_device, "forms": result}


def render(data: dict) -> str:
    pmap_kind = "legacy C++ pmap" if data["legacy_pmap"] else "jit(shard_map)-based pmap"
    lines = [f"jax {data['jax']} ({pmap_kind}), python {data['python']}, {data['devices']} CPU devices, "
             f"MLP {data['width']}x{data['width']}, {data['per_device']} rows/device, "
             f"{data['rounds']} interleaved steps each (medians)",
             f"{'form':24} {'step':>10} {'read':>10} {'step+read':>11} {'(p10)':>10} {'vs pmap':>8} "
             f"{'vs faithful':>11}"]
    forms = data["forms"]
    for form in FORMS:
        f = forms[form]
        lines.append(f"{form:24} {f['step_us']:8.1f}us {f['read_us']:8.1f}us {f['total_us']:9.1f}us "
                     f"{f['total_p10_us']:8.1f}us {f['vs_pmap']:7.2f}x {f['vs_faithful']:10.2f}x")
    lines.append("vs pmap / vs faithful: median over rounds of the per-round ratio of step+read times")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--width", type=int, default=128, help="hidden width of the MLP")
    parser.add_argument("--per-device", type=int, default=32, help="batch rows per device")
    parser.add_argument("--python", default=None, help="time under this interpreter (e.g. a venv with another jax)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--sources", default=None, help=argparse.SUPPRESS)  # internal: pre-rewritten modules
    args = parser.parse_args()
    if args.sources:
        sources = json.loads(Path(args.sources).read_text())
    else:
        sources = rewritten_sources()
    if args.python:
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "sources.json"
            spec.write_text(json.dumps(sources))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
            env["JAX_PLATFORMS"] = "cpu"
            command = [args.python, __file__, "--sources", str(spec), "--devices", str(args.devices),
                       "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--width", str(args.width),
                       "--per-device", str(args.per_device)] + (["--json"] if args.json else [])
            sys.exit(subprocess.run(command, env=env, cwd=tmp).returncode)
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    data = measure(sources, args.rounds, args.warmup, args.width, args.per_device)
    print(json.dumps(data, indent=2) if args.json else render(data))


if __name__ == "__main__":
    main()
