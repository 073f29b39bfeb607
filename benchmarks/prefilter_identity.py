"""Prove the prefilter loses nothing: every file it rules out gives no finding when analysed anyway.

    python benchmarks/prefilter_identity.py DIR [DIR ...] [--jobs N] [--json FILE] [--mentioned-only] [--spelled-only]

`check` analyses a file with libcst only when the prefilter (codemod/prefilter.py: trigger
substrings, then the names the file refers to, found with Python's `ast`) says a rule could fire.
A full, slow run analyses every file. Both runs give the same findings exactly when every file the
prefilter rules out gives none in the full run, since an admitted file goes through the very same
analysis. This script runs that full analysis on every ruled-out `.py`/`.ipynb` file under the
given directories (all rules, no cache) and lists any finding. Files that do not parse are
counted apart: a syntax error is not a legacy pattern, and the prefilter passes over unrelated
broken files as it passes over unrelated good ones.

``--mentioned-only`` analyses only the ruled-out files whose text holds a trigger word or the last
component of some name anywhere (``pmap``, ``tree_map``): a superset of the spelled ones.
``--spelled-only`` analyses only the ruled-out files that spell every component of some reported
name, the ones the `ast` names test decided on (a fraction of the time). The others contain no
trigger word and no complete spelling of a name a rule reports; libcst can resolve a qualified name
only from components the file spells (in an import or an attribute chain).

Exit status: 0 when the ruled-out files hold no finding, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pmap_migrate.prefilter import Gate  # noqa: E402
from pmap_migrate.rules import all_rules  # noqa: E402
from pmap_migrate.runner import execute, lint_file, rules_for  # noqa: E402

SUFFIXES = (".py", ".pyi", ".ipynb")


def _full_analysis(job: tuple[str, tuple[str, ...]]):
    path, codes = job
    data = Path(path).read_bytes()
    result = lint_file(data, path, rules_for(codes), whole=True)
    return path, [(d.code, d.line, d.column) for d in result.diagnostics], result.error.code if result.error else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument("--spelled-only", action="store_true",
                        help="analyse only the ruled-out files that spell every component of some name "
                             "(those the `ast` names test decided on); the others hold no trigger word and "
                             "no complete spelling of a reported name")
    parser.add_argument("--mentioned-only", action="store_true",
                        help="analyse only the ruled-out files that hold a trigger word or the last component "
                             "of some name (`pmap`, `tree_map`, ...) anywhere in their text")
    args = parser.parse_args()

    rules = all_rules()
    codes = tuple(rule.CODE for rule in rules)
    gate = Gate.of(rules)
    files = sorted({p for d in args.dirs for p in d.rglob("*") if p.suffix in SUFFIXES and p.is_file()})
    start = time.perf_counter()
    admitted, ruled_out, spelled, mentioned = [], [], [], []
    for path in files:
        data = path.read_bytes()
        if gate.needs_parse(data, path.suffix == ".ipynb"):
            admitted.append(path)
            continue
        ruled_out.append(path)
        if any(all(part in data for part in parts) for parts in gate.spellings):
            spelled.append(path)
        if gate.mentions(data):
            mentioned.append(path)
    gate_seconds = time.perf_counter() - start
    print(f"{len(files)} files: {len(admitted)} admitted by the prefilter, {len(ruled_out)} ruled out "
          f"({len(spelled)} of them by the `ast` names test; {gate_seconds:.1f} s serial for the prefilter)",
          flush=True)
    if args.spelled_only:
        ruled_out = spelled
    elif args.mentioned_only:
        ruled_out = mentioned

    start = time.perf_counter()
    missed, unparsable, crashes = [], 0, []
    work = [(str(p), codes) for p in ruled_out]
    for done, (path, found, error) in enumerate(execute(_full_analysis, work, args.jobs), 1):
        if found:
            missed.append((path, found))
            print(f"MISSED {path}: {found}", flush=True)
        if error == "PM000":
            unparsable += 1
        elif error is not None:
            crashes.append((path, error))
        if done % 500 == 0:
            print(f"  {done}/{len(work)} analysed", flush=True)
    figures = {
        "files": len(files), "admitted": len(admitted), "ruled_out_analysed": len(ruled_out),
        "ruled_out_by_names_test": len(spelled), "spelled_only": args.spelled_only,
        "ruled_out_mentioning_a_name": len(mentioned), "mentioned_only": args.mentioned_only,
        "ruled_out_with_findings": len(missed), "findings_missed": sum(len(f) for _, f in missed),
        "ruled_out_unparsable": unparsable, "ruled_out_other_errors": len(crashes),
        "full_analysis_seconds": round(time.perf_counter() - start, 1), "jobs": args.jobs or os.cpu_count(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "missed": missed, "errors": crashes}, indent=2))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
