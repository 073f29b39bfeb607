"""Per-call cost of ``runtime_shim.pmap`` against ``jax.pmap`` and a hand-written
``jax.jit(jax.shard_map(...))`` on the same input.

Each contender is called ``--calls`` times, interleaved round-robin so that drift (clock
changes, other processes) hits all of them alike; the median wall time of one call,
including ``block_until_ready``, is reported. Every contender is fed its own previous
output, so each sees inputs laid out the way it produces them (the steady state of a
training loop).

    python benchmarks/bench_shim.py                       # all venvs, 8 devices and 1 device
    python benchmarks/bench_shim.py --worker --calls 3000  # one measurement, this python

The driver runs the worker in the cached venvs of ``tests/support/jaxenv.py`` (jax 0.7.2
with the legacy C++ pmap, 0.10.2, newest) with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = ("jax.pmap", "runtime_shim.pmap", "jit(shard_map)")


def worker(calls: int, shape: tuple[int, ...]) -> dict:
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    import runtime_shim

    def body(v):
        return v * 0.5 + 1.0  # a fixed point at 2: values stay finite over any number of calls

    n = jax.device_count()
    x = np.arange(n * int(np.prod(shape)), dtype=np.float32).reshape(n, *shape)
    mesh = Mesh(np.array(jax.devices()), ("i",))
    contenders = {
        "jax.pmap": jax.pmap(body),
        "runtime_shim.pmap": runtime_shim.pmap(body),
        "jit(shard_map)": jax.jit(jax.shard_map(jax.vmap(body), mesh=mesh, in_specs=P("i"),
                                                out_specs=P("i"), check_vma=False)),
    }
    state = {}
    for name, f in contenders.items():
        state[name] = jax.block_until_ready(f(f(x)))  # compile, then own-output layout
    times: dict[str, list[float]] = {name: [] for name in contenders}
    clock = time.perf_counter
    order = list(contenders.items())
    for i in range(calls):
        for name, f in order[i % 3:] + order[:i % 3]:  # rotate: no contender always first
            arg = state[name]
            t0 = clock()
            out = f(arg)
            out.block_until_ready()
            times[name].append(clock() - t0)
            state[name] = out
    return {
        "jax": jax.__version__,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "devices": n,
        "calls": calls,
        "shape": [n, *shape],
        "median_us": {k: statistics.median(v) * 1e6 for k, v in times.items()},
    }


def drive(calls: int, shape: tuple[int, ...], device_counts: list[int]) -> list[dict]:
    sys.path.insert(0, str(REPO / "tests"))
    from support import jaxenv

    results = []
    for env in (jaxenv.LEGACY, jaxenv.NEW_311, jaxenv.NEWEST):
        try:
            python = jaxenv.python_for(env)
        except jaxenv.EnvUnavailable as e:
            print(f"skipping {env.name}: {e}", file=sys.stderr)
            continue
        for devices in device_counts:
            proc = jaxenv.run_program(
                python, Path(__file__), "--worker", "--calls", str(calls),
                "--shape", ",".join(map(str, shape)), devices=devices, timeout=3600)
            if proc.returncode:
                raise SystemExit(f"{env.name}, {devices} devices:\n{proc.stderr}")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return results


def table(results: list[dict]) -> str:
    rows = ["| jax (python) | devices | `jax.pmap` | `runtime_shim.pmap` | hand-written "
            "`jit(shard_map)` | shim / jit(shard_map) | shim / jax.pmap |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        t = r["median_us"]
        pmap_kind = "legacy C++ pmap" if r["jax"] == "0.7.2" else "new pmap"
        rows.append(
            f"| {r['jax']} ({r['python']}) | {r['devices']} | {t['jax.pmap']:.1f} us "
            f"({pmap_kind}) | {t['runtime_shim.pmap']:.1f} us | {t['jit(shard_map)']:.1f} us | "
            f"{t['runtime_shim.pmap'] / t['jit(shard_map)']:.2f}x | "
            f"{t['runtime_shim.pmap'] / t['jax.pmap']:.2f}x |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="measure in this interpreter")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--shape", default="3", help="per-device shape, comma separated")
    parser.add_argument("--devices", default="8,1", help="device counts for the driver")
    args = parser.parse_args()
    shape = tuple(int(s) for s in args.shape.split(",") if s)
    if args.worker:
        print(json.dumps(worker(args.calls, shape)))
        return
    results = drive(args.calls, shape, [int(d) for d in args.devices.split(",")])
    print(json.dumps(results, indent=1), file=sys.stderr)
    print(f"Median per call over {args.calls} interleaved calls, input "
          f"(devices, {', '.join(map(str, shape))}) float32:\n")
    print(table(results))


if __name__ == "__main__":
    main()
