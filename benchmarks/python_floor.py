"""A lower bound on any pure-Python `check` of a tree, next to ruff's cold run on the same tree.

    python benchmarks/python_floor.py DIR [DIR ...] [--rounds 3] [--ruff ruff]

Whatever its design, a Python linter that reports the legacy patterns of this project must at
least (1) read every file, (2) search each one for the names it reports (here: only the first
step of the real prefilter, whether the first component of a name, `jax` or `flax`, or a trigger
word occurs at all: a file without one cannot refer to a reported name), (3) parse the files that do refer to a reported name (here: only those our full
prefilter admits, a smaller set than step 2's) with Python's fastest parser, `ast`, and (4) visit
each node of those trees at least once (here: `ast.walk`, doing nothing with the nodes). The real
analysis does much more than one walk; the real `check` does all of this and libcst on top.

A second bound holds for this project's design (the rules and their fixes are libcst visitors,
docs: DESIGN.md): it adds (5) libcst's parse, as the engine calls it (`pmap_migrate.libcst_patches.parse_module`), of
what the engine gives libcst of each admitted file: its relevant slice (codemod/slices.py), or the
whole file where there is none or it does not parse. Not timed: slicing, and everything after the
parse (scopes, the rules' visits, positions).

The steps run serially in this process (CPU time, garbage collector off); each bound divides
its steps' sum by the number of cores (a perfect split over worker processes, with no cost to start them
or to send them work) and adds the start of a bare Python interpreter. Each round also times
`ruff check --isolated --no-cache --select NPY201` on the same tree (as bench_check_speed.py runs
it); the figures printed are medians over the rounds.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libcst import ParserSyntaxError

from pmap_migrate.engine import sliced_module
from pmap_migrate.libcst_patches import parse_module
from pmap_migrate.prefilter import gate_of_codes
from pmap_migrate.rules.knowledge.gates import BY_CODE
from pmap_migrate.runner import rules_for

SUFFIXES = (".py", ".pyi")


def files_of(directories: list[Path]) -> list[Path]:
    return [path for directory in directories for path in sorted(directory.rglob("*"))
            if path.suffix in SUFFIXES and path.is_file() and not path.is_symlink()]


def stages(paths: list[Path]) -> dict[str, float]:
    """CPU seconds of the four steps, and the counts they work on."""
    gate = gate_of_codes(tuple(sorted(BY_CODE)))
    words = (*gate.firsts, *(gate.triggers or ()))
    gc.disable()
    try:
        start = time.process_time()
        contents = [path.read_bytes() for path in paths]
        read = time.process_time()
        candidates = [data for data in contents if any(word in data for word in words)]
        searched = time.process_time()
        # Which files the real prefilter admits (not timed: the bound parses only those).
        admitted = []
        for data in candidates:
            if gate.text_match(data):
                admitted.append(data)
                continue
            if not gate.spells_names(data):
                continue
            try:
                tree = ast.parse(data)
            except (SyntaxError, ValueError):
                admitted.append(data)
                continue
            if gate.tree_refers_to_names(tree):
                admitted.append(data)
        parse_start = time.process_time()
        trees = []
        for data in admitted:
            try:
                trees.append(ast.parse(data))
            except (SyntaxError, ValueError):
                pass
        parsed = time.process_time()
        nodes = 0
        for tree in trees:
            for _ in ast.walk(tree):
                nodes += 1
        walked = time.process_time()
        texts = [_libcst_input(data) for data in admitted]
        libcst_start = time.process_time()
        for text in texts:
            with contextlib.suppress(ParserSyntaxError):  # a file libcst rejects costs its failed parse
                parse_module(text)
        libcst_parsed = time.process_time()
    finally:
        gc.enable()
    return {
        "files": len(paths), "candidates": len(candidates), "admitted": len(admitted), "nodes": nodes,
        "admitted_lines": sum(data.count(b"\n") for data in admitted),
        "read_s": read - start, "search_s": searched - read, "parse_s": parsed - parse_start,
        "walk_s": walked - parsed, "libcst_s": libcst_parsed - libcst_start,
        "libcst_lines": sum(text.count(b"\n" if isinstance(text, bytes) else "\n") for text in texts),
    }


def _libcst_input(data: bytes) -> str | bytes:
    """What the engine hands libcst for a file (`pmap_migrate.engine.sliced_module`): its relevant
    slice, else (none, or one libcst rejects) the whole file."""
    sliced = sliced_module(data, "file.py", rules_for(tuple(sorted(BY_CODE))), None)
    return data if sliced is None else sliced[2].text


def wall(argv: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ruff", default="ruff")
    args = parser.parse_args()
    paths = files_of(args.directories)
    cores = os.cpu_count() or 1
    rows, ruff, start = [], [], []
    for round_ in range(args.rounds):
        ruff.append(wall([args.ruff, "check", "--isolated", "--no-cache", "--select", "NPY201",
                          *map(str, args.directories)]))
        start.append(wall([sys.executable, "-I", "-S", "-c", "pass"]))
        rows.append(stages(paths))
        print(f"  round {round_ + 1}: ruff cold {ruff[-1]:.2f} s; steps (CPU) read {rows[-1]['read_s']:.2f}, "
              f"search {rows[-1]['search_s']:.2f}, ast.parse {rows[-1]['parse_s']:.2f}, "
              f"ast.walk {rows[-1]['walk_s']:.2f} s; libcst parse {rows[-1]['libcst_s']:.2f} s", flush=True)
    median = {key: statistics.median(row[key] for row in rows) for key in ("read_s", "search_s", "parse_s", "walk_s")}
    libcst = statistics.median(row["libcst_s"] for row in rows)
    steps = sum(median.values())
    bound = steps / cores + statistics.median(start)
    first = rows[0]
    print(f"tree: {first['files']} files; {first['candidates']} hold `jax`, `flax` or a trigger; "
          f"{first['admitted']} admitted by the prefilter ({first['admitted_lines']} lines, {first['nodes']} ast nodes)")
    print("steps, CPU seconds (median): " + ", ".join(f"{key[:-2]} {value:.2f}" for key, value in median.items())
          + f"; sum {steps:.2f}")
    print(f"lower bound on {cores} cores: {bound:.2f} s (sum / cores + a bare interpreter's start, "
          f"{statistics.median(start):.3f} s)")
    print(f"ruff cold: {statistics.median(ruff):.2f} s; the bound is {bound / statistics.median(ruff):.2f}x ruff "
          f"(target: 2x, {2 * statistics.median(ruff):.2f} s)")
    design = (steps + libcst) / cores + statistics.median(start)
    print(f"with libcst's parse of what the engine gives it ({first['libcst_lines']} lines, CPU {libcst:.2f} s, "
          f"median): {design:.2f} s on {cores} cores = {design / statistics.median(ruff):.2f}x ruff")
    return 0


if __name__ == "__main__":
    sys.exit(main())
