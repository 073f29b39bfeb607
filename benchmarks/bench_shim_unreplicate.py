"""Cost of taking replica 0 of a pmap output: ``runtime_shim.unreplicate(out)`` against
``out[0]`` (what ``flax.jax_utils.unreplicate`` does).

On legacy jax ``out[0]`` of a pmap output was a cheap single-device slice; on new jax it
is a computation over every device whose result is replicated. ``unreplicate`` hands over
the block device 0 already holds. Median of ``--calls`` interleaved calls each, with
``block_until_ready``; 8 CPU devices, float32 output of shape (8, N, N).

    python benchmarks/bench_shim_unreplicate.py            # all venvs
    python benchmarks/bench_shim_unreplicate.py --worker   # this python
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(calls: int, size: int) -> dict:
    import jax
    import jax.numpy as jnp

    import runtime_shim

    n = jax.device_count()
    x = jnp.ones((n, size, size), jnp.float32)
    legacy_out = jax.pmap(lambda v: v * 2)(x)  # the legacy pmap on jax 0.7.2
    shim_out = runtime_shim.pmap(lambda v: v * 2)(x)
    contenders = {
        "jax.pmap output, x[0]": lambda: legacy_out[0],
        "shim output, x[0]": lambda: shim_out[0],
        "shim output, unreplicate": lambda: runtime_shim.unreplicate(shim_out),
    }
    for f in contenders.values():
        jax.block_until_ready(f())
    times: dict[str, list[float]] = {k: [] for k in contenders}
    order = list(contenders.items())
    for i in range(calls):
        for name, f in order[i % 3:] + order[:i % 3]:
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            times[name].append(time.perf_counter() - t0)
    return {"jax": jax.__version__, "devices": n, "shape": [n, size, size], "calls": calls,
            "median_us": {k: statistics.median(v) * 1e6 for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.calls, args.size)))
        return
    sys.path.insert(0, str(REPO / "tests"))
    from support import jaxenv

    rows = ["| jax | output | `jax.pmap` output, `x[0]` | shim output, `x[0]` | shim output, "
            "`runtime_shim.unreplicate` |", "|---|---|---|---|---|"]
    for env in (jaxenv.LEGACY, jaxenv.NEW_311, jaxenv.NEWEST):
        proc = jaxenv.run_program(jaxenv.python_for(env), Path(__file__), "--worker",
                                  "--calls", str(args.calls), "--size", str(args.size),
                                  timeout=3600)
        if proc.returncode:
            raise SystemExit(f"{env.name}:\n{proc.stderr}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        t = r["median_us"]
        kind = "legacy" if r["jax"] == "0.7.2" else "new"
        rows.append(f"| {r['jax']} | {tuple(r['shape'])} | {t['jax.pmap output, x[0]']:.0f} us "
                    f"({kind} pmap) | {t['shim output, x[0]']:.0f} us | "
                    f"{t['shim output, unreplicate']:.0f} us |")
    print(f"Median per call over {args.calls} interleaved calls, 8 CPU devices:\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
