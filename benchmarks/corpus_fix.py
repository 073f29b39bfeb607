"""Prove `pmap-migrate fix --unsafe-fixes` on real code: no crash, no output that does not parse,
nothing left for a second run.

    python benchmarks/corpus_fix.py DIR [DIR ...] [--scratch DIR] [--pmap-migrate EXE] [--jobs N]
                                    [--json FILE] [--all-files] [--keep]

Every ``.py`` / ``.ipynb`` file under the DIRs that mentions ``pmap`` (``--all-files``: every
file) is copied, with its path relative to the DIR's parent, into a scratch directory (never into
the repository). Then:

1. ``pmap-migrate fix --unsafe-fixes --no-cache --output-format json`` runs over the copy as a
   subprocess, with ``--config`` naming an empty settings file so the repositories' own
   configuration cannot interfere;
2. every file it changed is parsed with ``ast`` under the running Python (a file that ``ast``
   already rejected before the fix is listed apart: code for a newer Python); its encoding, BOM
   and line-ending style are compared with the original's;
3. the same command runs again: any file it changes is a failure of idempotence;
4. in this process, the fixer API (``pmap_migrate.runner.fix_file``, all rules, unsafe fixes) runs
   over the original files to say what became of every pmap site (PM101 `jax.pmap` uses and PM103
   pmap-as-value): rewritten to plain JAX, routed to ``runtime_shim`` (``FixInfo.shimmed``), or
   left for manual work (an active finding after fixing, or a file that could not be fixed);
   its output must equal what the CLI wrote.

Crashes are PM002 findings, a traceback on either stream, or an exit status other than 0/1.
Exit status: 0 when there is no crash, no invalid output and no second-run change; 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import warnings
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# run as a script, so benchmarks/ is sys.path[0]
from _corpus_report import print_list, print_table

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EXE = shutil.which("pmap-migrate") or "/work/dev/bin/pmap-migrate"
SUFFIXES = (".py", ".ipynb")
SITE_CODES = ("PM101", "PM103")  # the pmap sites: `jax.pmap` used, or handed around as a value
TRACEBACK = re.compile(r"^Traceback \(most recent call last\)", re.MULTILINE)


# --------------------------------------------------------------------------- helpers
def source_files(roots: list[Path], all_files: bool, suffixes: tuple[str, ...] = SUFFIXES
                 ) -> Iterator[tuple[Path, Path, bytes]]:
    """``(root, path, data)`` of every ``.py`` / ``.ipynb`` file under the roots that mentions
    ``pmap`` (``all_files``: every one), ``root`` resolved; its copy goes to
    ``path.relative_to(root.parent)`` in a scratch tree."""
    for root in roots:
        root = root.resolve()
        for path in sorted(root.rglob("*")):
            if path.suffix not in suffixes or not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if not all_files and b"pmap" not in data:
                continue
            yield root, path, data


def copy_tree(roots: list[Path], scratch: Path, all_files: bool) -> list[Path]:
    copied = []
    for root, path, data in source_files(roots, all_files):
        target = scratch / path.relative_to(root.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        copied.append(target)
    return copied


def snapshot(files: list[Path]) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in files}


def python_problem(data: bytes, notebook: bool) -> str | None:
    """Why ``ast`` under this Python rejects ``data`` (a notebook: its JSON, then each code cell)."""
    if notebook:
        try:
            cells = json.loads(data)["cells"]
        except (ValueError, KeyError, TypeError) as error:
            return f"notebook JSON: {error}"
        for number, cell in enumerate(cells, 1):
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            lines = [ln for ln in source.splitlines(keepends=True)
                     if not ln.lstrip().startswith(("%", "!")) and not ln.rstrip().endswith("?")]
            if source.lstrip().startswith("%%"):
                continue
            problem = python_problem("".join(lines).encode(), False)
            if problem is not None:
                return f"cell {number}: {problem}"
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<corpus>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def text_format(data: bytes) -> tuple[str, bool, frozenset[str]]:
    """(encoding, BOM, line-ending styles) of a Python file."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "?"
    styles = set()
    crlf = data.count(b"\r\n")
    if crlf:
        styles.add("CRLF")
    if data.count(b"\n") > crlf:
        styles.add("LF")
    if data.count(b"\r") > crlf:
        styles.add("CR")
    return encoding, data.startswith(b"\xef\xbb\xbf"), frozenset(styles)


@dataclass
class CliRun:
    seconds: float
    returncode: int
    diagnostics: list[dict]
    stdout: str
    stderr: str
    json_error: str | None = None


def discovered_files(tree: Path, config: Path) -> set[Path]:
    """The files (resolved) that the CLI run in ``tree`` with ``--config config .`` looks at: the API
    pass looks at the same ones."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from pmap_migrate.config import load_settings
    from pmap_migrate.discovery import discover

    settings = load_settings(config, tree)
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        return {(tree / p).resolve() for p in discover(["."], settings).files}
    finally:
        os.chdir(cwd)


def run_cli(exe: str, scratch: Path, config: Path, jobs: int | None, unsafe: bool = True,
            paths: list[str] | None = None) -> CliRun:
    """``fix`` (``--unsafe-fixes`` when ``unsafe``) over ``paths`` in ``scratch`` (default: all of
    it), its findings as JSON."""
    command = [exe, "fix", *(["--unsafe-fixes"] if unsafe else []), "--no-cache", "--config", str(config),
               "--output-format", "json"]
    if jobs:
        command += ["--jobs", str(jobs)]
    command += paths if paths else ["."]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=scratch, capture_output=True, text=True, errors="replace")
    seconds = time.perf_counter() - start
    try:
        diagnostics, json_error = json.loads(proc.stdout or "[]"), None
    except ValueError as error:
        diagnostics, json_error = [], str(error)
    return CliRun(seconds, proc.returncode, diagnostics, proc.stdout, proc.stderr, json_error)


def cli_crashes(label: str, run: CliRun) -> list[str]:
    """The run's crashes: PM002 findings, a traceback on either stream, an exit status other than
    0/1, output that is not JSON."""
    crashes = []
    for d in run.diagnostics:
        if d.get("code") == "PM002":
            crashes.append(f"{label}: {d['path']}:{d['line']}:{d['column']}: PM002 {d['message']}")
    for stream, text in (("stdout", run.stdout), ("stderr", run.stderr)):
        if TRACEBACK.search(text):
            crashes.append(f"{label}: traceback on {stream}:\n{text[-3000:]}")
    if run.returncode not in (0, 1):
        crashes.append(f"{label}: exit status {run.returncode}: {run.stderr.strip()[-2000:]}")
    if run.json_error:
        crashes.append(f"{label}: output is not JSON ({run.json_error})")
    return crashes


# --------------------------------------------------------------------------- the fixer API, per file
@dataclass
class ApiResult:
    path: str
    seconds: float
    fixed: bytes | None
    error: tuple[str, str] | None  # (code, message)
    applied: list[tuple[str, bool, str]] = field(default_factory=list)  # (code, shimmed, summary)
    remaining: list[str] = field(default_factory=list)  # active codes after fixing
    remaining_messages: list[str] = field(default_factory=list)  # their messages, in the same order
    original: list[tuple[str, str]] = field(default_factory=list)  # (code, state) before fixing
    exception: str | None = None


def _api_job(job: tuple[str, bytes, bool] | tuple[str, bytes, bool, str]) -> ApiResult:
    """``(shown path, data, unsafe[, where])``: the findings before, then what the fix (with unsafe
    fixes or not) applies and leaves; ``where``, the file's path in a tree that holds the modules
    around it: the helpers are imported from the shared module `fix` would place there, as the CLI
    does (without it, they are written in the module, and a name they would rebind refuses the fix)."""
    path, data, unsafe, *where = job
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from pmap_migrate.rules import all_rules
    from pmap_migrate.runner import fix_file, lint_file

    rules = all_rules()
    start = time.perf_counter()
    try:
        before = lint_file(data, path, rules)
        outcome = fix_file(data, where[0], rules, unsafe=unsafe, shared=True) if where else \
            fix_file(data, path, rules, unsafe=unsafe)
    except BaseException as error:  # noqa: BLE001 - the API promises never to raise; report it if it does
        return ApiResult(path, time.perf_counter() - start, None, None, exception=f"{type(error).__name__}: {error}")
    seconds = time.perf_counter() - start
    return ApiResult(
        path, seconds, outcome.fixed if outcome.changed else None,
        (outcome.error.code, outcome.error.message) if outcome.error else None,
        applied=[(d.code, bool(d.fix and d.fix.shimmed), d.fix.summary if d.fix else "") for d in outcome.applied],
        remaining=[d.code for d in outcome.remaining],
        remaining_messages=[d.message for d in outcome.remaining],
        original=[(d.code, d.state.value) for d in before.diagnostics],
    )


def run_api(jobs: list[tuple[str, bytes, bool]], workers: int | None) -> list[ApiResult]:
    """``_api_job`` of each job, in a process pool of ``workers`` (default: one per core)."""
    if not jobs:
        return []
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(_api_job, jobs, chunksize=1))


# --------------------------------------------------------------------------- what became of each site
@dataclass
class SiteAccount:
    """What the fixer API's results say became of the pmap sites (``SITE_CODES``), counted by code."""

    sites_before: Counter = field(default_factory=Counter)  # every site found before fixing
    states: Counter = field(default_factory=Counter)  # ... by state (active / suppressed / guarded)
    rewritten: Counter = field(default_factory=Counter)  # a fix of its own, to plain JAX
    with_another: Counter = field(default_factory=Counter)  # taken along by another site's fix
    shimmed: Counter = field(default_factory=Counter)  # routed to runtime_shim
    manual: Counter = field(default_factory=Counter)  # still active after fixing, or in a file not fixed
    unfixable_files: Counter = field(default_factory=Counter)  # files with manual sites not fixed, by error
    other_fixes: Counter = field(default_factory=Counter)  # fixes of the other rules, by code
    shim_reasons: Counter = field(default_factory=Counter)  # shimmed sites by the reason their fix states
    manual_reasons: Counter = field(default_factory=Counter)  # manual sites by finding message (or file error)


def account_sites(api: list[ApiResult]) -> SiteAccount:
    sites_before = Counter()
    states = Counter()
    for r in api:
        for code, state in r.original:
            if code in SITE_CODES:
                sites_before[code] += 1
                states[state] += 1
    rewritten = Counter()
    shimmed = Counter()
    manual = Counter()
    with_another = Counter()
    unfixable_files = Counter()
    for r in api:
        if r.error is not None or r.exception:
            # nothing of this file was fixed: every active site in it waits for a person
            lost = [c for c, state in r.original if c in SITE_CODES and state == "active"]
            manual.update(lost)
            if lost:
                unfixable_files[r.error[0] if r.error else "exception"] += 1
            continue
        for code, is_shim, _ in r.applied:
            if code in SITE_CODES:
                (shimmed if is_shim else rewritten)[code] += 1
        manual.update(c for c in r.remaining if c in SITE_CODES)
        # A site active before the fix, with no fix of its own applied and no finding left after:
        # another site's fix took it along (the global-mesh plan of a multi-process module
        # rewrites all of the module's pmaps it can in one fix, reported on one of them).
        for code in SITE_CODES:
            gone = sum(1 for c, state in r.original if c == code and state == "active") \
                - sum(1 for c, _, _ in r.applied if c == code) - sum(1 for c in r.remaining if c == code)
            if gone > 0:
                with_another[code] += gone
    other_fixes = Counter(code for r in api if r.error is None for code, _, _ in r.applied if code not in SITE_CODES)
    shim_reasons = Counter()
    for r in api:
        if r.error is None:
            for code, is_shim, summary in r.applied:
                if code in SITE_CODES and is_shim:
                    shim_reasons[summary.split(": ", 1)[-1]] += 1
    manual_reasons = Counter()
    for r in api:
        if r.error is not None or r.exception:
            why = f"file not fixed: {r.error[0]} {r.error[1]}" if r.error else f"file not fixed: {r.exception}"
            manual_reasons[why] += sum(1 for c, state in r.original if c in SITE_CODES and state == "active")
        else:
            manual_reasons.update(m for c, m in zip(r.remaining, r.remaining_messages) if c in SITE_CODES)
    return SiteAccount(sites_before, states, rewritten, with_another, shimmed, manual, unfixable_files,
                       other_fixes, shim_reasons, +manual_reasons)


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--scratch", type=Path, default=None, help="where to copy the files (default: a temp dir)")
    parser.add_argument("--pmap-migrate", dest="exe", default=DEFAULT_EXE)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--json", dest="json_out", type=Path, default=None)
    parser.add_argument("--all-files", action="store_true", help="copy every Python file, not only those mentioning pmap")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    for root in args.roots:
        if not root.is_dir():
            parser.error(f"not a directory: {root}")
    wall = time.perf_counter()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="pmap-migrate-corpus-fix-"))
    if args.scratch is not None and scratch.exists() and any(scratch.iterdir()):
        parser.error(f"--scratch {scratch} is not empty")
    scratch.mkdir(parents=True, exist_ok=True)
    tree = scratch / "tree"
    tree.mkdir()
    config = scratch / "empty-settings.toml"  # no [tool.pmap-migrate] settings: defaults only
    config.write_text("")
    try:
        return _run(args, tree, config, wall)
    finally:
        if args.keep or args.scratch is not None:
            print(f"\nscratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _run(args, tree: Path, config: Path, wall: float) -> int:
    files = copy_tree(args.roots, tree, args.all_files)
    original = snapshot(files)
    rel = {p: p.relative_to(tree).as_posix() for p in files}

    discovered = discovered_files(tree, config)
    not_discovered = [p for p in files if p.resolve() not in discovered]

    first = run_cli(args.exe, tree, config, args.jobs)
    after_first = snapshot(files)
    second = run_cli(args.exe, tree, config, args.jobs)
    after_second = snapshot(files)

    changed = [p for p in files if after_first[p] != original[p]]
    invalid, newer_syntax, format_drift = [], [], []
    for p in changed:
        notebook = p.suffix == ".ipynb"
        problem = python_problem(after_first[p], notebook)
        if problem is not None:
            if python_problem(original[p], notebook) is None:
                invalid.append((p, problem))
            else:
                newer_syntax.append((p, problem))
        if not notebook:
            was, now = text_format(original[p]), text_format(after_first[p])
            if was[:2] != now[:2] or not now[2] <= was[2] | ({"LF"} if not was[2] else set()):
                format_drift.append((p, was, now))
    second_changed = [p for p in files if after_second[p] != after_first[p]]
    leftovers = [p for p in tree.rglob("*") if p.name.endswith(".pmap-migrate")]

    crashes = cli_crashes("run 1", first) + cli_crashes("run 2", second)

    # The fixer API over the original bytes: what became of each site.
    api_start = time.perf_counter()
    jobs = [(rel[p], original[p], True) for p in files if p.resolve() in discovered]
    api = run_api(jobs, args.jobs)
    api_seconds = time.perf_counter() - api_start
    by_rel = {r.path: r for r in api}
    api_mismatch = []
    for p in files:
        result = by_rel.get(rel[p])
        if result is None:
            continue
        expected = result.fixed if result.fixed is not None else original[p]
        if expected != after_first[p]:
            api_mismatch.append(p)
    api_exceptions = [r for r in api if r.exception]
    crashes += [f"api: {r.path}: raised {r.exception}" for r in api_exceptions]

    account = account_sites(api)
    sites_before, states, rewritten, with_another, shimmed, manual, unfixable_files, other_fixes, shim_reasons = (
        account.sites_before, account.states, account.rewritten, account.with_another, account.shimmed,
        account.manual, account.unfixable_files, account.other_fixes, account.shim_reasons)
    file_errors = Counter(d["code"] for d in first.diagnostics if d.get("code", "").startswith("PM00"))
    slowest = sorted(api, key=lambda r: -r.seconds)[:5]

    def total(counter: Counter) -> str:
        return f"{sum(counter.values())}  ({', '.join(f'{c} {counter[c]}' for c in SITE_CODES)})"

    rows = [
        ("corpus", ", ".join(str(r) for r in args.roots)),
        ("files copied (mention pmap)" if not args.all_files else "files copied", len(files)),
        ("  not discovered by the CLI (default excludes)", len(not_discovered)),
        ("command", f"{args.exe} fix --unsafe-fixes --no-cache --config <empty> --output-format json ."),
        ("run 1: exit status / wall time (s)", f"{first.returncode} / {first.seconds:.1f}"),
        ("files changed", len(changed)),
        ("changed files ast rejects (Python %d.%d)" % sys.version_info[:2], len(invalid)),
        ("  ... that ast already rejected before the fix", len(newer_syntax)),
        ("changed files whose encoding/BOM/line endings drifted", len(format_drift)),
        ("PM000 / PM001 (files not parsed / not read or written)",
         f"{file_errors.get('PM000', 0)} / {file_errors.get('PM001', 0)}"),
        ("run 2: exit status / wall time (s)", f"{second.returncode} / {second.seconds:.1f}"),
        ("files changed by the second run", len(second_changed)),
        ("temporary files left", len(leftovers)),
        ("crashes (PM002, tracebacks, exit status 2)", len(crashes)),
        ("pmap sites before the fix", f"{total(sites_before)}; by state: {dict(states)}"),
        ("  rewritten to plain JAX", total(rewritten)),
        ("  fixed by another site's fix (one plan, several pmaps)", total(with_another)),
        ("  shimmed (runtime_shim.pmap)", total(shimmed)),
        ("  left for manual work (active after fixing)", total(manual)),
        ("    of which in files that could not be fixed", f"{dict(unfixable_files)} files"),
        ("  suppressed / guarded (left as they are)",
         f"{states.get('suppressed', 0)} / {states.get('guarded', 0)}"),
        ("other fixes applied (per rule)", dict(sorted(other_fixes.items()))),
        ("API output differs from what the CLI wrote", len(api_mismatch)),
        ("fixer API wall time (s, process pool)", f"{api_seconds:.1f}"),
        ("slowest files (s)", ", ".join(f"{r.path} {r.seconds:.1f}" for r in slowest)),
    ]
    print_table(rows)
    if shim_reasons:
        print("\nwhy sites were shimmed:")
        for reason, count in shim_reasons.most_common():
            print(f"  {count:4d}  {reason}")
    if account.manual_reasons:
        print("\nwhy sites were left for manual work:")
        for reason, count in account.manual_reasons.most_common():
            print(f"  {count:4d}  {reason}")
    errors = [d for d in first.diagnostics if d.get("code", "").startswith("PM00")]
    print_list("files the fix could not handle ({n})", errors,
               lambda d: f"  {d['path']}:{d['line']}:{d['column']}: {d['code']} {d['message']}")
    def path_problem(item: tuple[Path, str]) -> str:
        return f"  {rel[item[0]]}: {item[1]}"

    print_list("OUTPUT ast REJECTS ({n})", invalid, path_problem)
    print_list("output for a newer Python (input already rejected) ({n})", newer_syntax, path_problem)
    print_list("FORMAT DRIFT ({n})", format_drift, lambda item: f"  {rel[item[0]]}: {item[1]} -> {item[2]}")
    print_list("CHANGED BY THE SECOND RUN ({n})", second_changed, lambda p: f"  {rel[p]}")
    print_list("API OUTPUT DIFFERS FROM THE CLI'S ({n})", api_mismatch, lambda p: f"  {rel[p]}")
    print_list("CRASHES ({n})", crashes, lambda crash: f"  {crash}")
    print_list("TEMPORARY FILES LEFT ({n})", leftovers, lambda p: f"  {p}")
    print(f"\ntotal wall time: {time.perf_counter() - wall:.1f}s")

    if args.json_out:
        args.json_out.write_text(json.dumps({
            "files": len(files), "changed": [rel[p] for p in changed],
            "invalid": [[rel[p], why] for p, why in invalid],
            "newer_syntax": [[rel[p], why] for p, why in newer_syntax],
            "second_run_changed": [rel[p] for p in second_changed],
            "crashes": crashes, "file_errors": errors,
            "sites": {"before": dict(sites_before), "rewritten": dict(rewritten),
                      "fixed_with_another": dict(with_another), "shimmed": dict(shimmed),
                      "manual": dict(manual), "states": dict(states),
                      "shim_reasons": dict(shim_reasons), "manual_reasons": dict(account.manual_reasons)},
            "other_fixes": dict(other_fixes), "api_mismatch": [rel[p] for p in api_mismatch],
            "format_drift": [rel[p] for p, _, _ in format_drift],
            "per_file": [{"path": r.path, "seconds": round(r.seconds, 3), "error": r.error,
                          "applied": r.applied, "remaining": r.remaining} for r in api],
        }, indent=1))
    failed = invalid or second_changed or crashes or leftovers or api_mismatch or format_drift
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
