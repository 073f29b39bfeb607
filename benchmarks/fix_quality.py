"""Measure the code `pmap-migrate fix` writes on real code: what became of each pmap site, how many
lines it added, which lint findings it introduced, and where the safe fix alone falls back on the shim.

    python benchmarks/fix_quality.py DIR [DIR ...] [--all] [--pmap-migrate EXE] [--ruff EXE]
                                     [--jobs N] [--json FILE] [--show N] [--scratch DIR] [--keep]

Every ``.py`` / ``.ipynb`` file under the DIRs that mentions ``pmap`` (``--all``: every one) is
copied three times into a scratch directory (never into the repository), with its path relative to
its DIR's parent, along with every other ``.py`` file of the DIRs (not fixed, not counted: where
`fix` puts the shared helpers, and how modules import them, depends on the modules around them):
``before/`` stays as it is, ``safe/`` gets ``pmap-migrate fix`` of those files, ``unsafe/`` gets
``pmap-migrate fix --unsafe-fixes`` (the CLI installed beside the running Python, else the one on
``PATH``, or ``--pmap-migrate EXE``; ruff likewise, or ``--ruff EXE``; ``--config`` names an empty
settings file so no repository's ``[tool.pmap-migrate]`` applies: one run per DIR, each with an
empty settings file in that DIR's copy, which makes the DIR the project's root, as in the
repository itself). The project configuration files above each file (up to its DIR) are copied
along, so the fix sees the same settings files as in the original tree, and the requirements
files (a directory that has one runs against an installed package, not the repository's); so
are the ``__init__.py`` files above each file (up to its DIR), which say what is a package:
where `fix` puts the package's shared module, and how the fixed modules import it (those it
creates are counted, their lines among the lines added). Then:

- **each file's lint settings**: its line length comes from the nearest directory above it (up to
  its DIR) whose configuration sets one: ``ruff.toml`` / ``.ruff.toml`` / ``[tool.ruff]`` of
  ``pyproject.toml`` (``line-length``, or ``lint.pycodestyle.max-line-length``), then
  ``[tool.black]`` / ``[tool.pyink]`` ``line-length``, then ``[flake8] max-line-length`` of
  ``setup.cfg`` / ``tox.ini`` / ``.flake8``; else 88. Its project root (nearest directory with
  ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``.git``, else its DIR) is given to ruff as
  ``src``, so imports are classified first- or third-party as in the original project; and the
  isort settings `fix` follows (``known-first-party``, ``force-sort-within-sections``,
  ``combine-as-imports``, ``force-single-line``, from the nearest ``[tool.ruff.lint.isort]``,
  ``ruff.toml`` or ``[tool.isort]`` as ``pmap_migrate.projectstyle.isort_settings`` reads them)
  are given to ruff as ``lint.isort`` options, so I001 measures against the project's own order;
- **new lint findings**: ``ruff check --isolated --select E,W,F,I --line-length N --output-format
  json`` on every file a fix changed, before and after (files grouped by their settings); a
  finding of a code is new in a file when the fixed file has more of that code than the original
  (a file the fix created: all of its findings). Listed by code, with files and example lines.
  I001 is one finding per import block, and a block that was unsorted before hides any disorder
  the fix adds to it; so each I001 block is also measured by how many of its lines isort's order
  does not keep (``sort_distance``), and a file counts when that number grows;
- **lines added**: from a diff of each file before and after (a notebook: its code cells), total,
  net, per PM101 site found before the fix (issue 25's measure: all added lines / PM101 sites) and
  per site rewritten to plain JAX; added lines longer than the file's limit;
- **what became of each site** (rewritten / taken along by another site's fix / shimmed / manual,
  with the reasons): ``corpus_fix.py``'s accounting of the fixer API (unsafe fixes) over the
  original files, each at its place in the ``before/`` tree, so that its helpers come from the
  shared module `fix` places there, as in the CLI's run (the API reads no other module: sites
  that the CLI fixes through the project index may count as shimmed or manual here);
- **files importing the shim after the safe fix alone** (``import runtime_shim`` or ``from
  runtime_shim ...`` where the original had none), each with the reasons its fixes state (the fixer
  API with safe fixes only, over those files).

Exit status: 0 when issue 25's targets hold on the ``--unsafe-fixes`` run (no new lint finding of
any code, at most 6 added lines per PM101 site), 1 when they do not, 2 when a run crashed or on a
usage error.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# run as a script, so benchmarks/ is sys.path[0]
from _corpus_report import print_list, print_table
from corpus_fix import (
    DEFAULT_EXE,
    SUFFIXES,
    CliRun,
    account_sites,
    cli_crashes,
    discovered_files,
    run_api,
    run_cli,
    source_files,
)

from pmap_migrate.projectstyle import CONFIG_FILES, DEFAULT_LINE_LENGTH, PROJECT_MARKERS, isort_settings, line_length_in

TARGET_LINES_PER_SITE = 6  # issue 25: all added lines / PM101 sites found before the fix
RUFF_SELECT = "E,W,F,I"
SHIM_IMPORT = re.compile(r"\b(?:import\s+runtime_shim\b|from\s+runtime_shim[\w.]*\s+import\b)")
TREES = ("before", "safe", "unsafe")


# --------------------------------------------------------------------------- each file's settings
# `line_length_in`, the line length a directory's configuration sets, is the fixer's own reading
# (pmap_migrate.projectstyle): the figures measure against the limit the fix wrote for.
@dataclass(frozen=True)
class LintSettings:
    line_length: int
    source: str  # where the line length comes from ("default" when nothing sets it)
    project: Path  # the original project root, ruff's `src`
    isort: tuple[tuple[str, str], ...] = ()  # ruff's `lint.isort` options, as (key, TOML value)

    def ruff_options(self) -> list[str]:
        src = json.dumps([str(self.project), str(self.project / "src")])
        options = ["--line-length", str(self.line_length), "--config", f"src = {src}"]
        for key, value in self.isort:
            options += ["--config", f"lint.isort.{key} = {value}"]
        return options


class SettingsFinder:
    """Each file's lint settings, from the directories between it and its DIR (cached per directory)."""

    def __init__(self) -> None:
        self._length: dict[Path, tuple[int, str] | None] = {}

    def _directories(self, path: Path, root: Path) -> list[Path]:
        directories = []
        for directory in path.parents:
            directories.append(directory)
            if directory == root or directory == directory.parent:
                break
        return directories

    def settings(self, path: Path, root: Path) -> LintSettings:
        directories = self._directories(path, root)
        length = None
        for directory in directories:
            if directory not in self._length:
                self._length[directory] = line_length_in(directory)
            if self._length[directory] is not None:
                number, where = self._length[directory]
                length = (number, f"{directory.relative_to(root.parent).as_posix()}/{where}")
                break
        project = next((d for d in directories if any((d / m).exists() for m in PROJECT_MARKERS)), root)
        isort = tuple(sorted((key, json.dumps(value)) for key, value in isort_settings(str(path)).items()))
        return LintSettings(*(length or (DEFAULT_LINE_LENGTH, "default")), project, isort)

    def config_files(self, path: Path, root: Path) -> list[Path]:
        """The configuration files in the directories between ``path`` and ``root`` (with the
        requirements files, which say a directory installs what it runs against)."""
        return [f for d in self._directories(path, root)
                for f in [*(d / name for name in CONFIG_FILES), *sorted(d.glob("requirements*.txt"))]
                if f.is_file()]


# --------------------------------------------------------------------------- what a file holds
NEWLINE = re.compile(r"\r\n|\r|\n")


def physical_lines(text: str) -> list[str]:
    """Python's physical lines (``str.splitlines`` also splits at form feeds and other separators,
    which would put ruff's line numbers on the wrong lines)."""
    lines = NEWLINE.split(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def code_lines(data: bytes, notebook: bool) -> dict[int | None, list[str]]:
    """The lines ruff reports on: a module's (key None), or each code cell's by its 1-based index
    among all of the notebook's cells (ruff's numbering)."""
    text = data.decode("utf-8", errors="replace")
    if not notebook:
        return {None: physical_lines(text)}
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return {}
    lines = {}
    for number, cell in enumerate(cells, 1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            lines[number] = physical_lines("".join(source) if isinstance(source, list) else str(source))
    return lines


def diff_lines(before: bytes | None, after: bytes, notebook: bool) -> tuple[list[str], int]:
    """(the lines added, the number of lines removed) from ``before`` (None: a new file) to ``after``."""

    def flat(data: bytes | None) -> list[str]:
        if data is None:
            return []
        out = []
        for cell, lines in code_lines(data, notebook).items():
            if cell is not None:
                out.append(f"\0cell {cell}")  # keeps a diff from matching lines across cells
            out.extend(lines)
        return out

    old, new = flat(before), flat(after)
    added, removed = [], 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += sum(1 for line in old[i1:i2] if not line.startswith("\0cell "))
        if tag in ("replace", "insert"):
            added += [line for line in new[j1:j2] if not line.startswith("\0cell ")]
    return added, removed


@dataclass
class LintFinding:
    code: str
    row: int
    column: int
    cell: int | None
    message: str
    text: str  # the line it is on ("" when unknown)
    out_of_place: int = 0  # I001: the block's lines that isort's order does not keep (see sort_distance)

    @property
    def signature(self) -> tuple[str, str, str]:
        return self.code, self.message, self.text.strip()

    def where(self) -> str:
        return f"{f'cell {self.cell}:' if self.cell else ''}{self.row}:{self.column}"


def sort_distance(lines: list[str], item: dict) -> int:
    """How far an import block is from isort's order: of the block's lines and the lines ruff's I001
    fix puts in their place, how many the longest common subsequence leaves out (the larger side).
    An import added where isort would put it adds nothing; one appended out of order adds at least 1."""
    edits = (item.get("fix") or {}).get("edits") or []
    if len(edits) != 1:
        return 0
    edit = edits[0]
    start, end = edit["location"]["row"], edit["end_location"]["row"]
    end = end if edit["end_location"]["column"] > 1 else end - 1
    block, fixed = lines[start - 1:end], physical_lines(edit["content"])
    kept = sum(m.size for m in difflib.SequenceMatcher(None, block, fixed, autojunk=False).get_matching_blocks())
    return max(len(block), len(fixed)) - kept


def run_ruff(ruff: str, tree: Path, files: dict[str, bytes], settings: dict[str, LintSettings]
             ) -> tuple[dict[str, list[LintFinding]], list[str]]:
    """ruff's findings in each file of ``tree`` (by path relative to it), one ruff run per set of
    settings; and the errors of runs that failed."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for rel in files:
        groups[tuple(settings[rel].ruff_options())].append(rel)
    findings: dict[str, list[LintFinding]] = {rel: [] for rel in files}
    errors = []
    for options, rels in sorted(groups.items()):
        command = [ruff, "check", "--isolated", "--no-cache", "--select", RUFF_SELECT, *options,
                   "--output-format", "json", "--", *sorted(rels)]
        proc = subprocess.run(command, cwd=tree, capture_output=True, text=True, errors="replace", check=False)
        try:
            results = json.loads(proc.stdout)
        except ValueError:
            results = None
        if proc.returncode not in (0, 1) or not isinstance(results, list):
            errors.append(f"{tree.name}: ruff exit status {proc.returncode}: {proc.stderr.strip()[-1000:]}")
            continue
        for item in results:
            rel = Path(item["filename"]).resolve().relative_to(tree.resolve()).as_posix()
            lines = code_lines(files[rel], rel.endswith(".ipynb")).get(item.get("cell"), [])
            row = item["location"]["row"]
            text = lines[row - 1] if 0 < row <= len(lines) else ""
            code = item.get("code") or item.get("name") or "invalid-syntax"
            findings[rel].append(LintFinding(code, row, item["location"]["column"], item.get("cell"),
                                             item["message"], text,
                                             sort_distance(lines, item) if code == "I001" else 0))
    return findings, errors


def new_findings(before: list[LintFinding] | None, after: list[LintFinding]
                 ) -> dict[str, tuple[int, list[LintFinding]]]:
    """Per code that the fixed file has more of than the original (None: a new file): how many
    more, and the findings of the fixed file that no finding of the original matches (same code,
    message and line text), as examples."""
    before = before or []
    count_before = Counter(f.code for f in before)
    count_after = Counter(f.code for f in after)
    unmatched = Counter(f.signature for f in before)
    out = {}
    for code in sorted(count_after):
        more = count_after[code] - count_before[code]
        if more <= 0:
            continue
        examples = []
        for finding in (f for f in after if f.code == code):
            if unmatched[finding.signature] > 0:
                unmatched[finding.signature] -= 1
            else:
                examples.append(finding)
        out[code] = (more, examples)
    return out


# --------------------------------------------------------------------------- one fixed tree
@dataclass
class FileQuality:
    """One file of one fixed tree against the original."""

    path: str
    line_length: int
    added: int = 0
    removed: int = 0
    long_added: list[str] = field(default_factory=list)  # added lines longer than the limit
    new: dict[str, tuple[int, list[LintFinding]]] = field(default_factory=dict)  # code -> (count, examples)
    created: bool = False  # a file the fix created
    unsorted: tuple[int, int] = (0, 0)  # import lines out of isort's order, before and after (sort_distance)


def compare_tree(before: dict[str, bytes], after: dict[str, bytes], settings: dict[str, LintSettings],
                 lint_before: dict[str, list[LintFinding]], lint_after: dict[str, list[LintFinding]]
                 ) -> list[FileQuality]:
    out = []
    for rel in sorted(after):
        if rel in before and before[rel] == after[rel]:
            continue
        limit = settings[rel].line_length
        added, removed = diff_lines(before.get(rel), after[rel], rel.endswith(".ipynb"))
        unsorted = tuple(sum(f.out_of_place for f in (lint or []) if f.code == "I001")
                         for lint in (lint_before.get(rel), lint_after[rel]))
        out.append(FileQuality(
            rel, limit, len(added), removed, [line for line in added if len(line) > limit],
            new_findings(lint_before.get(rel), lint_after[rel]), created=rel not in before, unsorted=unsorted))
    return out


def python_files(tree: Path) -> dict[str, bytes]:
    return {p.relative_to(tree).as_posix(): p.read_bytes()
            for p in sorted(tree.rglob("*")) if p.suffix in SUFFIXES and p.is_file() and not p.is_symlink()}


def new_by_code(files: list[FileQuality]) -> Counter:
    return Counter({code: sum(q.new[code][0] for q in files if code in q.new)
                    for code in {code for q in files for code in q.new}})


# --------------------------------------------------------------------------- main
def _version(command: list[str]) -> str:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        return f"unavailable ({error})"
    return (proc.stdout or proc.stderr).strip().splitlines()[-1] if (proc.stdout or proc.stderr).strip() else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--all", action="store_true", help="copy every Python file, not only those mentioning pmap")
    def beside(name: str, default: str) -> str:  # the program of this venv, else the default
        path = Path(sys.executable).parent / name
        return str(path) if path.is_file() else default

    parser.add_argument("--pmap-migrate", dest="exe", default=beside("pmap-migrate", DEFAULT_EXE))
    parser.add_argument("--ruff", default=beside("ruff", shutil.which("ruff") or "ruff"))
    parser.add_argument("--jobs", type=int, default=None, help="processes for fix and for the fixer API")
    parser.add_argument("--json", dest="json_out", type=Path, default=None, help="write every figure to this file")
    parser.add_argument("--show", type=int, default=10, help="files listed per lint code (0: all)")
    parser.add_argument("--scratch", type=Path, default=None, help="where to copy the files (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    roots = [root.resolve() for root in args.roots]
    for root in roots:
        if not root.is_dir():
            parser.error(f"not a directory: {root}")
    for label, exe in (("--pmap-migrate", args.exe), ("--ruff", args.ruff)):
        if shutil.which(exe) is None:
            parser.error(f"{label}: no such program: {exe}")
    names = Counter(root.name for root in roots)
    if any(n > 1 for n in names.values()):
        parser.error("two DIRs of the same name: their copies would mix")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="pmap-migrate-fix-quality-"))
    if args.scratch is not None and scratch.exists() and any(scratch.iterdir()):
        parser.error(f"--scratch {scratch} is not empty")
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        return _run(args, roots, scratch)
    finally:
        if args.keep or args.scratch is not None:
            print(f"\nscratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


SETTINGS_NAME = ".pmap-migrate-benchmark.toml"  # an empty settings file in each repository's copy


def fix_each_repository(args, tree: Path, roots: list[Path], fixed: list[str], unsafe: bool) -> CliRun:
    """``fix`` of each repository's files in ``tree``, one run per repository, with an empty
    settings file in the repository's copy: its directory is the project's root (where `fix` looks
    for the importers of a module's public aliases and for the programs that run its pmaps), as
    in the repository itself, not the scratch directory that holds every repository three times.
    The runs' findings, joined; their seconds, summed; the worst exit status."""
    parts = []
    for root in roots:
        paths = [rel for rel in fixed if rel.split("/", 1)[0] == root.name]
        if paths:
            settings = tree / root.name / SETTINGS_NAME
            settings.write_text("")
            parts.append(run_cli(args.exe, tree, settings, args.jobs, unsafe=unsafe, paths=paths))
    if not parts:
        return CliRun(0.0, 0, [], "", "")
    return CliRun(sum(p.seconds for p in parts), max(p.returncode for p in parts),
                  [d for p in parts for d in p.diagnostics], "".join(p.stdout for p in parts),
                  "".join(p.stderr for p in parts), next((p.json_error for p in parts if p.json_error), None))


def _run(args, roots: list[Path], scratch: Path) -> int:
    wall = time.perf_counter()
    config = scratch / "empty-settings.toml"  # no [tool.pmap-migrate] settings: defaults only
    config.write_text("")
    trees = {name: scratch / name for name in TREES}
    finder = SettingsFinder()
    original: dict[str, bytes] = {}
    settings: dict[str, LintSettings] = {}
    configs: set[tuple[Path, Path]] = set()
    for root, path, data in source_files(roots, args.all):
        rel = path.relative_to(root.parent).as_posix()
        original[rel], settings[rel] = data, finder.settings(path, root)
        configs.update((root, c) for c in finder.config_files(path, root))
        configs.update((root, d / "__init__.py") for d in path.parents
                       if d.is_relative_to(root) and (d / "__init__.py").is_file())
    # The other modules of each tree go along too (not fixed, not counted): where `fix` puts a
    # module's shared helpers and how it imports them depends on the modules beside and above it
    # (`import models` with `models.py` beside it; `import big_vision.pp.builder`), and the
    # project index reads importers and imported modules.
    if not args.all:
        configs.update((root, path) for root, path, _ in source_files(roots, True, suffixes=(".py",))
                       if path.relative_to(root.parent).as_posix() not in original)
    context = {path.relative_to(root.parent).as_posix() for root, path in configs} - set(original)
    for tree in trees.values():
        for rel, data in original.items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(data)
        for root, path in configs:
            (tree / path.relative_to(root.parent)).parent.mkdir(parents=True, exist_ok=True)
            (tree / path.relative_to(root.parent)).write_bytes(path.read_bytes())

    fixed = sorted(original)  # `fix` is given the files that mention pmap, as the issue measures
    runs = {name: fix_each_repository(args, trees[name], roots, fixed, unsafe=name == "unsafe")
            for name in ("safe", "unsafe")}
    crashes = cli_crashes("safe fix", runs["safe"]) + cli_crashes("unsafe fix", runs["unsafe"])
    after = {name: {rel: data for rel, data in python_files(trees[name]).items() if rel not in context}
             for name in ("safe", "unsafe")}
    by_name = {root.name: root for root in roots}
    for name in ("safe", "unsafe"):
        for rel in after[name]:
            if rel not in settings:  # a file the fix created: the settings of where it lies
                root = by_name[rel.split("/", 1)[0]]
                settings[rel] = finder.settings(root.parent / rel, root)

    # What became of each site (the fixer API, unsafe fixes, over the original files).
    api_start = time.perf_counter()
    discovered = discovered_files(trees["before"], config)
    listed = [rel for rel in original if (trees["before"] / rel).resolve() in discovered]
    api = run_api([(rel, original[rel], True, str(trees["before"] / rel)) for rel in listed], args.jobs)
    account = account_sites(api)
    crashes += [f"api: {r.path}: raised {r.exception}" for r in api if r.exception]

    # Files the safe fix alone makes import the shim, and why (the fixer API, safe fixes only).
    shim_files = [rel for rel, data in after["safe"].items()
                  if SHIM_IMPORT.search(data.decode("utf-8", errors="replace"))
                  and not SHIM_IMPORT.search(original.get(rel, b"").decode("utf-8", errors="replace"))]
    safe_api = {r.path: r for r in run_api([(rel, original[rel], False, str(trees["before"] / rel))
                                            for rel in shim_files if rel in original], args.jobs)}
    crashes += [f"api (safe): {r.path}: raised {r.exception}" for r in safe_api.values() if r.exception]
    api_seconds = time.perf_counter() - api_start
    shim_why: dict[str, list[str]] = {}
    for rel in shim_files:
        result = safe_api.get(rel)
        applied = result.applied if result else []
        reasons = [f"{code}: {summary.split(': ', 1)[-1]}" for code, shimmed, summary in applied if shimmed]
        shim_why[rel] = reasons or [f"{code}: {summary}" for code, _, summary in applied
                                    if "runtime_shim" in summary] or ["(no shimmed fix reported by the fixer API)"]
    shim_reason_counts = Counter(reason for reasons in shim_why.values() for reason in reasons)

    # Lint the files a fix changed, before and after, at each file's settings.
    lint_start = time.perf_counter()
    changed = {name: {rel: data for rel, data in after[name].items() if original.get(rel) != data}
               for name in ("safe", "unsafe")}
    lint_before, ruff_errors = run_ruff(
        args.ruff, trees["before"], {rel: original[rel] for rel in original if rel in changed["safe"]
                                     or rel in changed["unsafe"]}, settings)
    quality: dict[str, list[FileQuality]] = {}
    for name in ("safe", "unsafe"):
        lint_after, errors = run_ruff(args.ruff, trees[name], changed[name], settings)
        ruff_errors += errors
        quality[name] = compare_tree(original, changed[name], settings, lint_before, lint_after)
    lint_seconds = time.perf_counter() - lint_start
    crashes += ruff_errors

    # Figures.
    unsafe = quality["unsafe"]
    added = sum(q.added for q in unsafe)
    removed = sum(q.removed for q in unsafe)
    pm101 = account.sites_before["PM101"]
    rewritten = sum(account.rewritten.values()) + sum(account.with_another.values())
    per_site = added / pm101 if pm101 else 0.0
    per_rewritten = added / rewritten if rewritten else 0.0
    new_codes = {name: new_by_code(quality[name]) for name in quality}
    long_added = [(q.path, line) for q in unsafe for line in q.long_added]
    unsorted = {name: [q for q in quality[name] if q.unsorted[1] > q.unsorted[0]] for name in quality}
    lengths = Counter((s.line_length, s.source) for rel, s in settings.items() if rel in original)
    targets = {
        "no new lint finding (unsafe fix)": not new_codes["unsafe"],
        f"at most {TARGET_LINES_PER_SITE} added lines per PM101 site": per_site <= TARGET_LINES_PER_SITE,
    }

    def by_code(counter: Counter) -> str:
        return ", ".join(f"{code} {n}" for code, n in sorted(counter.items())) or "none"

    def sites(counter: Counter) -> str:
        return f"{sum(counter.values())}  ({by_code(counter)})"

    rows = [
        ("date", datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("machine", f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"),
        ("command", shlex.join(["python", "benchmarks/fix_quality.py", *args.argv])),
        ("pmap-migrate", f"{args.exe} ({_version([args.exe, '--version'])})"),
        ("ruff", f"{args.ruff} ({_version([args.ruff, '--version'])}); check --isolated --select {RUFF_SELECT}"),
        ("corpus", ", ".join(str(r) for r in args.roots)),
        ("files copied" + ("" if args.all else " (mention pmap)"), len(original)),
        ("  looked at by the fixer API (the CLI's discovery)", len(listed)),
        ("line lengths (files)", "; ".join(f"{n} {src} ({count})" for (n, src), count in sorted(lengths.items()))),
        ("safe fix: exit status / wall time (s) / files changed",
         f"{runs['safe'].returncode} / {runs['safe'].seconds:.1f} / {len(quality['safe'])}"),
        ("unsafe fix: exit status / wall time (s) / files changed",
         f"{runs['unsafe'].returncode} / {runs['unsafe'].seconds:.1f} / {len(unsafe)}"),
        ("  files it created", len([q for q in unsafe if q.created])),
        ("crashes (PM002, tracebacks, exit status 2, ruff errors)", len(crashes)),
        ("pmap sites before the fix", f"{sites(account.sites_before)}; by state: {dict(account.states)}"),
        ("  rewritten to plain JAX", sites(account.rewritten)),
        ("  fixed by another site's fix (one plan, several pmaps)", sites(account.with_another)),
        ("  shimmed (runtime_shim.pmap)", sites(account.shimmed)),
        ("  left for manual work", sites(account.manual)),
        ("other fixes applied (per rule)", by_code(account.other_fixes)),
        ("lines added / removed / net (unsafe fix)", f"{added} / {removed} / {added - removed:+d}"),
        ("  added per PM101 site before the fix (target <= 6)", f"{per_site:.1f}  ({added} / {pm101})"),
        ("  added per site rewritten to plain JAX", f"{per_rewritten:.1f}  ({added} / {rewritten})"),
        ("  added lines over the file's limit", f"{len(long_added)} in {len({p for p, _ in long_added})} files"
         + (f"; longest {max(len(line) for _, line in long_added)}" if long_added else "")),
        ("new lint findings (unsafe fix)", f"{sum(new_codes['unsafe'].values())}: {by_code(new_codes['unsafe'])}"),
        ("  in files", len([q for q in unsafe if q.new])),
        ("  import lines out of isort's order, added (I001 blocks; unsafe fix)",
         (f"{sum(q.unsorted[1] - q.unsorted[0] for q in unsorted['unsafe'])} in {len(unsorted['unsafe'])} files "
          f"(of the {len(unsafe)} changed, {len([q for q in unsafe if q.unsorted[0]])} were already unsorted)")),
        ("new lint findings (safe fix)", f"{sum(new_codes['safe'].values())}: {by_code(new_codes['safe'])}"),
        ("files importing runtime_shim after the safe fix alone", len(shim_files)),
        ("fixer API / ruff wall time (s)", f"{api_seconds:.1f} / {lint_seconds:.1f}"),
    ]
    print_table(rows)
    print("\nissue 25's targets:")
    for target, met in targets.items():
        print(f"  {'met    ' if met else 'NOT MET'}  {target}")
    for title, counter in (("why sites were shimmed (unsafe fix)", account.shim_reasons),
                           ("why sites were left for manual work", account.manual_reasons),
                           ("why the safe fix alone shimmed (sites in the files below)", shim_reason_counts)):
        if counter:
            print(f"\n{title}:")
            for reason, count in counter.most_common():
                print(f"  {count:4d}  {reason}")

    limit = args.show or None
    for name in ("unsafe", "safe"):
        for code, total in sorted(new_codes[name].items(), key=lambda item: (-item[1], item[0])):
            files = sorted((q for q in quality[name] if code in q.new), key=lambda q: (-q.new[code][0], q.path))
            print(f"\nnew {code} ({name} fix): {total} in {len(files)} files")
            for q in files[:limit]:
                count, examples = q.new[code]
                shown = examples[:3]
                print(f"  {q.path}: {count}")
                for finding in shown:
                    print(f"    {finding.where()}: {finding.message}")
                    if finding.text:
                        print(f"      | {finding.text.strip()[:150]}")
            if limit and len(files) > limit:
                print(f"  ... and {len(files) - limit} more files (--show 0, or --json)")
    shown = unsorted["unsafe"][:limit]
    print_list(f"import blocks the unsafe fix put further from isort's order ({len(unsorted['unsafe'])} files; "
               "I001 lines out of place, before -> after)", shown,
               lambda q: f"  {q.path}: {q.unsorted[0]} -> {q.unsorted[1]}")
    if len(shown) < len(unsorted["unsafe"]):
        print(f"  ... and {len(unsorted['unsafe']) - len(shown)} more files (--show 0, or --json)")
    print_list("files importing runtime_shim after the safe fix alone ({n})", shim_files,
               lambda rel: f"  {rel}: " + "; ".join(f"{n}x {r}" if n > 1 else r
                                                   for r, n in Counter(shim_why[rel]).items()))
    most = sorted(unsafe, key=lambda q: -q.added)[:10]
    print_list("most lines added (unsafe fix)", most,
               lambda q: f"  {q.added:5d} added, {q.removed:4d} removed  {q.path}")
    print_list("CRASHES ({n})", crashes, lambda crash: f"  {crash}")
    print(f"\ntotal wall time: {time.perf_counter() - wall:.1f}s")

    if args.json_out:
        def finding(f: LintFinding) -> dict:
            return {"code": f.code, "row": f.row, "column": f.column, "cell": f.cell, "message": f.message,
                    "text": f.text}

        def tree_json(files: list[FileQuality]) -> dict:
            return {
                "new_findings_by_code": dict(new_by_code(files)),
                "files": [{"path": q.path, "line_length": q.line_length, "created": q.created,
                           "added": q.added, "removed": q.removed, "long_added": q.long_added,
                           "import_lines_out_of_order": {"before": q.unsorted[0], "after": q.unsorted[1]},
                           "new_findings": {code: {"count": n, "examples": [finding(f) for f in ex]}
                                            for code, (n, ex) in q.new.items()}} for q in files],
            }

        args.json_out.write_text(json.dumps({
            "date": rows[0][1], "machine": rows[1][1], "command": rows[2][1], "pmap_migrate": rows[3][1],
            "ruff": rows[4][1], "roots": [str(r) for r in args.roots], "files": len(original),
            "api_files": len(listed),
            "settings": {rel: {"line_length": s.line_length, "source": s.source, "project": str(s.project),
                               "isort": dict(s.isort)}
                         for rel, s in sorted(settings.items())},
            "sites": {"before": dict(account.sites_before), "states": dict(account.states),
                      "rewritten": dict(account.rewritten), "fixed_with_another": dict(account.with_another),
                      "shimmed": dict(account.shimmed), "manual": dict(account.manual),
                      "shim_reasons": dict(account.shim_reasons), "manual_reasons": dict(account.manual_reasons)},
            "other_fixes": dict(account.other_fixes),
            "lines": {"added": added, "removed": removed, "pm101_sites": pm101, "per_pm101_site": per_site,
                      "rewritten_sites": rewritten, "per_rewritten_site": per_rewritten,
                      "long_added": len(long_added)},
            "runs": {name: {"returncode": run.returncode, "seconds": round(run.seconds, 1)}
                     for name, run in runs.items()},
            "unsafe": tree_json(unsafe), "safe": tree_json(quality["safe"]),
            "shim_after_safe_fix": {rel: shim_why[rel] for rel in shim_files},
            "targets": targets, "crashes": crashes,
        }, indent=1))
    if crashes:
        return 2
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
