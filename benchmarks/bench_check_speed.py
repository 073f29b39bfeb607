"""`pmap-migrate check` against `ruff check --select NPY201` on the same tree: cold, warm, and `fix`.

    python benchmarks/bench_check_speed.py DIR [DIR ...] [--rounds 3] [--fix] [--git] [--absolute] [--json FILE]

The directories are copied once into a scratch tree (so caches and `fix` write nothing where the
code came from). Each round runs, in alternating order so that drift in the machine's speed hits
both tools alike:

- cold: `pmap-migrate check --no-cache` and `ruff check --isolated --no-cache --select NPY201`;
- warm: both again with their caches filled and nothing changed since the last run.

Wall time is the median over the rounds; peak memory is the largest resident set of any single
process of the run (`wait4`'s ``ru_maxrss``, which covers the worker processes). With ``--fix``,
`pmap-migrate fix --unsafe-fixes` runs once on a fresh copy of the whole tree and once on a tree of
only the files that mention `pmap`: if the two times are close, `fix` scales with the pmap files,
not with the size of the tree.

With ``--absolute`` both tools are given the tree's absolute path instead of ``.`` (the paths they
show stay relative: the runs start in the tree).

With ``--git`` the scratch tree is a git repository with a typical Python ``.gitignore`` at its
root, as a user's checkout is: both tools then read and apply it on every run.

The tools run as installed: without ``PYTHONDONTWRITEBYTECODE`` (which some environments set), so
that the runs that fill the caches also leave pmap-migrate's compiled bytecode, as `pip install`
does; otherwise every run of an editable install would compile its modules again.

Needs `ruff` (pip install ruff) and pmap-migrate on PATH (or --ruff / --pmap-migrate).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUFFIXES = (".py", ".pyi", ".ipynb")
GITIGNORE = "__pycache__/\n*.py[cod]\n*.egg-info/\nbuild/\ndist/\n.venv/\n.ipynb_checkpoints/\n/docs/_build/\n*.so\n"


ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str], cwd: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in MiB of the largest process, exit code)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENVIRONMENT)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss // 1024, process.returncode


def copy_tree(sources: list[Path], target: Path, only_pmap: bool = False) -> tuple[int, int]:
    """Copy the Python files and notebooks of ``sources`` below ``target``; (files, lines)."""
    files = lines = 0
    for source in sources:
        for path in sorted(source.rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            if only_pmap and b"pmap" not in data:
                continue
            destination = target / source.name / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(data)
            files += 1
            lines += data.count(b"\n")
    return files, lines


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} cores ({model or platform.processor()}), Python {platform.python_version()}, {platform.system()}"


def version(argv: list[str]) -> str:
    try:
        return subprocess.run([*argv, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fix", action="store_true", help="also time `fix --unsafe-fixes` (one run each)")
    parser.add_argument("--ruff", default=shutil.which("ruff") or "ruff")
    parser.add_argument("--pmap-migrate", dest="tool", default=shutil.which("pmap-migrate") or "pmap-migrate")
    parser.add_argument("--git", action="store_true", help="make the tree a git repository with a .gitignore")
    parser.add_argument("--absolute", action="store_true",
                        help="name the tree by its absolute path (as some CI scripts do), not `.`")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="pmap-migrate-bench-"))
    try:
        tree = scratch / "tree"
        files, lines = copy_tree(args.dirs, tree)
        pmap_files = sum(1 for p in tree.rglob("*") if p.is_file() and b"pmap" in p.read_bytes())
        if args.git:
            subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
            (tree / ".gitignore").write_text(GITIGNORE)
        print(f"tree: {files} files, {lines} lines, {pmap_files} mention pmap; {machine()}")
        print(f"{version([args.tool])}; {version([args.ruff])}", flush=True)

        target = str(tree) if args.absolute else "."
        ours_cold = [args.tool, "check", "--no-cache", "--exit-zero", "--output-format", "concise", target]
        ours_warm = [args.tool, "check", "--exit-zero", "--output-format", "concise", target]
        ruff_base = [args.ruff, "check", "--isolated", "--select", "NPY201", "--exit-zero", "--output-format", "concise"]
        ruff_cold = [*ruff_base, "--no-cache", target]
        ruff_warm = [*ruff_base, "--cache-dir", str(scratch / "ruff-cache"), target]
        # Fill both caches (the warm runs measure "nothing changed since the last run").
        for argv in (ours_warm, ruff_warm):
            timed(argv, tree)

        runs: dict[str, list[tuple[float, int]]] = {k: [] for k in ("ours_cold", "ruff_cold", "ours_warm", "ruff_warm")}
        for round_ in range(args.rounds):
            order = [("ruff_cold", ruff_cold), ("ours_cold", ours_cold), ("ruff_warm", ruff_warm), ("ours_warm", ours_warm)]
            if round_ % 2:
                order = [order[1], order[0], order[3], order[2]]
            for name, argv in order:
                seconds, rss, code = timed(argv, tree)
                if code != 0:
                    raise SystemExit(f"{name} exited with {code}: {' '.join(argv)}")
                runs[name].append((seconds, rss))
                print(f"  round {round_ + 1}: {name:9s} {seconds:8.2f} s {rss:6d} MiB", flush=True)

        def median(name: str) -> float:
            return statistics.median(s for s, _ in runs[name])

        figures: dict = {
            "files": files, "lines": lines, "pmap_files": pmap_files, "machine": machine(), "rounds": args.rounds,
            "git": args.git, "absolute": args.absolute, **{f"{name}_s": round(median(name), 3) for name in runs},
            **{f"{name}_peak_mib": max(r for _, r in runs[name]) for name in runs},
        }
        figures["cold_ratio"] = round(figures["ours_cold_s"] / figures["ruff_cold_s"], 2)
        figures["warm_ratio"] = round(figures["ours_warm_s"] / figures["ruff_warm_s"], 2)

        if args.fix:
            fix = [args.tool, "fix", "--unsafe-fixes", "."]  # exit 1 when findings remain: not a failure
            whole = scratch / "fix-whole"
            copy_tree(args.dirs, whole)
            seconds, rss, _ = timed(fix, whole)
            figures.update(fix_whole_tree_s=round(seconds, 2), fix_whole_tree_peak_mib=rss)
            only = scratch / "fix-pmap-only"
            only_files, _ = copy_tree(args.dirs, only, only_pmap=True)
            seconds, rss, _ = timed(fix, only)
            figures.update(fix_pmap_files_only_s=round(seconds, 2), fix_pmap_files_only_peak_mib=rss,
                           fix_pmap_files_only_files=only_files)

        print(json.dumps(figures, indent=2))
        print(f"cold: pmap-migrate {figures['ours_cold_s']:.2f} s vs ruff {figures['ruff_cold_s']:.2f} s "
              f"= {figures['cold_ratio']}x; warm: {figures['ours_warm_s']:.2f} s vs {figures['ruff_warm_s']:.2f} s "
              f"= {figures['warm_ratio']}x")
        if args.json:
            args.json.write_text(json.dumps({"figures": figures, "runs": runs}, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
