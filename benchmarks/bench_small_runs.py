"""`pmap-migrate check` on a handful of files, as pre-commit runs it, against ruff on the same files.

    python benchmarks/bench_small_runs.py FILE [FILE ...] [--rounds 9] [--json OUT]

pre-commit passes a hook the files a commit changes: most commits touch a few files, and those
are by definition not in the result cache. What the user waits for is then mostly the tool's
start: its imports, what it builds once per process, the first analysis. Each FILE is checked on
its own (`check --no-cache FILE`), then all of them in one run; each command runs ``--rounds``
times, alternating with `ruff check --isolated --no-cache --select NPY201` on the same files, and
the median wall time is reported, with the verdict (findings or clean: a file that does not
refer to any legacy name is ruled out by the prefilter and never parsed by libcst).

Needs `ruff` and pmap-migrate on PATH (or --ruff / --pmap-migrate).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENVIRONMENT)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ruff", default=shutil.which("ruff") or "ruff")
    parser.add_argument("--pmap-migrate", dest="tool", default=shutil.which("pmap-migrate") or "pmap-migrate")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args()

    cases = [[path] for path in args.files]
    if len(args.files) > 1:
        cases.append(list(args.files))
    # The tool's compiled bytecode exists before the first timed run, as after `pip install`.
    timed([args.tool, "check", "--no-cache", "--exit-zero", str(args.files[0])])
    figures = []
    print(f"{'files':52s} {'lines':>6s} {'verdict':>10s} {'pmap-migrate':>13s} {'ruff':>8s} {'ratio':>6s}")
    for case in cases:
        names = [str(path) for path in case]
        ours = [args.tool, "check", "--no-cache", "--output-format", "concise", *names]
        ruff = [args.ruff, "check", "--isolated", "--no-cache", "--select", "NPY201", "--exit-zero", *names]
        times: dict[str, list[float]] = {"ours": [], "ruff": []}
        code = 0
        for round_ in range(args.rounds):
            order = [("ours", ours), ("ruff", ruff)] if round_ % 2 == 0 else [("ruff", ruff), ("ours", ours)]
            for name, argv in order:
                seconds, returncode = timed(argv)
                if name == "ours":
                    if returncode not in (0, 1):
                        raise SystemExit(f"pmap-migrate exited with {returncode}: {' '.join(argv)}")
                    code = returncode
                times[name].append(seconds)
        mine, theirs = statistics.median(times["ours"]), statistics.median(times["ruff"])
        lines = sum(path.read_bytes().count(b"\n") for path in case)
        label = names[0] if len(case) == 1 else f"all {len(case)} files"
        verdict = "findings" if code == 1 else "clean"
        print(f"{label[-52:]:52s} {lines:6d} {verdict:>10s} {mine:12.3f}s {theirs:7.3f}s {mine / theirs:5.1f}x",
              flush=True)
        figures.append({"files": names, "lines": lines, "verdict": verdict, "pmap_migrate_s": mine,
                        "ruff_s": theirs, "rounds": args.rounds})
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
