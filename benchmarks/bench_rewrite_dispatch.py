"""Per-call dispatch: the rewriter's output vs `jax.pmap` on the same input.

The rewritten function is produced by running pmap-migrate's own fixer on a small legacy module,
so the benchmark measures exactly what `pmap-migrate fix` emits. Calls are interleaved (one of
each per round, order alternating) so that drift in the machine's speed hits both alike; the
figures are medians per call: the dispatch (until the call returns: JAX runs the computation
asynchronously, so this is the host-side cost of a call, what the rewrite changes) and the round
trip (until the result is ready: the same XLA computation's execution included).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/bench_rewrite_dispatch.py
    python benchmarks/bench_rewrite_dispatch.py --devices 1 --rounds 5000
    python benchmarks/bench_rewrite_dispatch.py --repeat 5   # five measurements, the median ratio

Needs jax; run it from the repository root (it imports the fixer from the working tree).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

LEGACY_MODULE = '''
import functools
import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i")
def step(x, y):
    return x * 2.0 + lax.psum(y, "i")
'''


def rewritten_source() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pmap_migrate.fixer import fix_bytes
    from pmap_migrate.rules import all_rules

    outcome = fix_bytes(LEGACY_MODULE.encode(), "bench_module.py", all_rules())
    if outcome.fixed is None or b"shard_map" not in outcome.fixed:
        raise SystemExit(f"the fixer did not rewrite the benchmark module: {outcome.error or outcome.remaining}")
    return outcome.fixed.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure this many times (each: --rounds interleaved calls) and report each and the median ratio")
    args = parser.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    source = rewritten_source()

    import jax
    import numpy as np

    legacy_ns: dict = {}
    exec(compile(LEGACY_MODULE, "legacy_module", "exec"), legacy_ns)
    new_ns: dict = {}
    exec(compile(source, "rewritten_module", "exec"), new_ns)
    pmapped, rewritten = legacy_ns["step"], new_ns["step"]

    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.ones((n, 3), np.float32)
    # Steady state, as in a training loop: inputs are the previous call's device-resident outputs.
    xp, xr = pmapped(x, y), rewritten(x, y)
    np.testing.assert_allclose(np.asarray(xp), np.asarray(xr))
    yp, yr = pmapped(xp, y), rewritten(xr, y)

    def timed(fn, a, b) -> tuple[float, float]:
        """(dispatch, round trip): until the call returns (JAX dispatches asynchronously: the
        host-side cost of a call), and until its result is ready (execution included)."""
        start = time.perf_counter()
        out = fn(a, b)
        dispatched = time.perf_counter()
        out.block_until_ready()
        return dispatched - start, time.perf_counter() - start

    for _ in range(args.warmup):
        timed(pmapped, xp, yp)
        timed(rewritten, xr, yr)
    print(f"jax {jax.__version__}, python {sys.version.split()[0]}, {n} CPU devices, {args.rounds} interleaved calls each")
    ratios: list[tuple[float, float]] = []
    for repeat in range(args.repeat):
        legacy_times, new_times = [], []
        for k in range(args.rounds):
            if k % 2:
                legacy_times.append(timed(pmapped, xp, yp))
                new_times.append(timed(rewritten, xr, yr))
            else:
                new_times.append(timed(rewritten, xr, yr))
                legacy_times.append(timed(pmapped, xp, yp))
        figures = []
        for i, what in enumerate(("dispatch (call returns)", "round trip (result ready)")):
            lp = statistics.median(t[i] for t in legacy_times) * 1e6
            nr = statistics.median(t[i] for t in new_times) * 1e6
            figures.append(nr / lp)
            label = f"[{repeat + 1}/{args.repeat}] " if args.repeat > 1 else ""
            print(f"{label}{what:26s} jax.pmap {lp:8.1f} us   rewritten {nr:8.1f} us   ratio {nr / lp:.2f}")
        ratios.append((figures[0], figures[1]))
    if args.repeat > 1:
        dispatch = sorted(r[0] for r in ratios)
        trip = sorted(r[1] for r in ratios)
        print(f"median ratio over {args.repeat} measurements: dispatch {statistics.median(dispatch):.2f} "
              f"(range {dispatch[0]:.2f}-{dispatch[-1]:.2f}), round trip {statistics.median(trip):.2f} "
              f"(range {trip[0]:.2f}-{trip[-1]:.2f})")


if __name__ == "__main__":
    main()
