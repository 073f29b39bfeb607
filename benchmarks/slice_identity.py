"""Prove that analysing a module's relevant slice finds exactly what analysing the whole module finds.

    python benchmarks/slice_identity.py DIR [DIR ...] [--jobs N] [--json FILE]

`check` analyses a large module through its relevant slice (codemod/slices.py: the units that may
matter to a rule, every other line blanked). For every `.py` file under the given directories that
the prefilter admits, this script runs the analysis twice, on the whole file and through its slice
(all rules, no cache), and compares the results: every field of every finding (position, message,
fix applicability and summary, state) and the file error, if any. It prints the files compared,
how many were sliced, the share of non-blank lines the slices kept, the CPU time of both analyses,
the CPU time of libcst's parse alone of what `check` analyses (the floor under its cost), and
every difference.

Exit status: 0 when the two analyses agree on every file, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pmap_migrate.prefilter import Gate  # noqa: E402
from pmap_migrate.rules import all_rules  # noqa: E402
from pmap_migrate.runner import execute, lint_file, rules_for  # noqa: E402
from pmap_migrate.slices import kept_fraction, nonblank_lines, parse_python, relevant_slice, relevant_source  # noqa: E402
from pmap_migrate.stack import collector_paused  # noqa: E402


def _both(job: tuple[str, tuple[str, ...]]) -> dict:
    path, codes = job
    rules = rules_for(codes)
    data = Path(path).read_bytes()
    start = time.process_time()
    whole = lint_file(data, path, rules, whole=True)
    middle = time.process_time()
    sliced = lint_file(data, path, rules)
    end = time.process_time()
    parsed = parse_python(data)
    fraction, lines = 1.0, 0
    was_sliced = False
    analysed: str | bytes = data  # what `check` gives libcst to parse: the slice, or the whole file
    if parsed is not None:
        gate = Gate.of(rules)
        text = relevant_source(parsed.text, parsed.tree, gate)
        was_sliced = text is not None
        fraction = kept_fraction(parsed.text, text)
        lines = nonblank_lines(parsed.text)
        cut = relevant_slice(parsed.text, parsed.tree, gate, parsed.names)
        analysed = cut.text if cut is not None else parsed.text
    # The floor under `check`'s cost on this file: libcst's parse alone of what it analyses (and
    # Python's own parser on the same text, for scale); the collector paused, as in the analysis.
    with collector_paused():
        before_parse = time.process_time()
        try:
            cst.parse_module(analysed)
        except Exception:  # noqa: BLE001  (the analysis reports it; only the time counts here)
            pass
        between = time.process_time()
        try:
            ast.parse(analysed)
        except (SyntaxError, ValueError):
            pass
        after_parse = time.process_time()

    def as_json(result):
        return {"diagnostics": [d.to_json() | {"state": d.state.value} for d in result.diagnostics],
                "error": None if result.error is None else [result.error.code, result.error.message]}

    return {"path": path, "whole": as_json(whole), "sliced": as_json(sliced), "whole_s": middle - start,
            "sliced_s": end - middle, "was_sliced": was_sliced, "fraction": fraction, "lines": lines,
            "libcst_parse_s": between - before_parse, "ast_parse_s": after_parse - between}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--json", type=Path, help="write the figures and differences as JSON")
    args = parser.parse_args()

    rules = all_rules()
    codes = tuple(rule.CODE for rule in rules)
    gate = Gate.of(rules)
    started = time.perf_counter()
    admitted = []
    for directory in args.dirs:
        for path in sorted(directory.rglob("*.py")):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if gate.needs_parse(data):
                    admitted.append(str(path))
    results = list(execute(_both, [(path, codes) for path in admitted], args.jobs))
    differences = [r for r in results if r["whole"] != r["sliced"]]
    sliced = [r for r in results if r["was_sliced"]]
    lines = sum(r["lines"] for r in results)
    kept = sum(r["lines"] * r["fraction"] for r in results)
    whole_s = sum(r["whole_s"] for r in results)
    sliced_s = sum(r["sliced_s"] for r in results)
    findings = sum(len(r["whole"]["diagnostics"]) for r in results)
    print(f"files admitted by the prefilter: {len(results)}; sliced: {len(sliced)}")
    print(f"non-blank lines: {lines}; kept by the slices: {kept:.0f} ({kept / max(lines, 1):.1%})")
    print(f"findings (whole files): {findings}")
    print(f"CPU time: whole {whole_s:.1f} s, sliced {sliced_s:.1f} s (ratio {sliced_s / max(whole_s, 1e-9):.2f})")
    libcst_s = sum(r["libcst_parse_s"] for r in results)
    ast_s = sum(r["ast_parse_s"] for r in results)
    print(f"CPU time of libcst's parse alone of what `check` analyses (slices, or whole files): {libcst_s:.1f} s; "
          f"Python's ast on the same text: {ast_s:.1f} s")
    print(f"files whose results differ: {len(differences)}")
    for r in differences:
        whole = {json.dumps(d, sort_keys=True) for d in r["whole"]["diagnostics"]}
        cut = {json.dumps(d, sort_keys=True) for d in r["sliced"]["diagnostics"]}
        print(f"  {r['path']}")
        for d in sorted(whole - cut):
            print(f"    only whole:  {d}")
        for d in sorted(cut - whole):
            print(f"    only sliced: {d}")
        if r["whole"]["error"] != r["sliced"]["error"]:
            print(f"    errors: whole {r['whole']['error']}, sliced {r['sliced']['error']}")
    print(f"wall time {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"files": len(results), "sliced": len(sliced), "lines": lines,
                                         "kept": kept, "whole_cpu_s": whole_s, "sliced_cpu_s": sliced_s,
                                         "findings": findings, "libcst_parse_cpu_s": libcst_s,
                                         "ast_parse_cpu_s": ast_s, "differences": differences}, indent=1))
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
