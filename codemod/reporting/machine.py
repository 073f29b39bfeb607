"""Machine-readable outputs: JSON, GitHub Actions annotations, SARIF 2.1.0, JUnit XML, GitLab Code Quality."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote, urlparse

from pmap_migrate import __version__
from pmap_migrate.config import DOCS_URL_PLACEHOLDER
from pmap_migrate.counts import UNCHECKED_CODES
from pmap_migrate.diagnostics import Diagnostic
from pmap_migrate.rules.base import Rule

TOOL_URI = "https://pypi.org/project/pmap-migrate/"


def to_json(diagnostics: Sequence[Diagnostic]) -> str:
    return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def to_github(diagnostics: Sequence[Diagnostic]) -> str:
    """GitHub Actions workflow commands: one ``::error`` annotation per finding."""
    lines = []
    for d in diagnostics:
        if d.cell is not None:
            # Annotation lines index the file's JSON, not a cell: annotate the notebook as a whole.
            props = f"file={_escape_property(d.path)},title={_escape_property(d.code)}"
            text = f"{d.code} cell {d.cell}, line {d.line}: {d.message}"
        else:
            props = (
                f"file={_escape_property(d.path)},line={d.line},col={d.column},"
                f"endLine={d.end_line},endColumn={d.end_column},title={_escape_property(d.code)}"
            )
            text = f"{d.code} {d.message}"
        lines.append(f"::error {props}::{_escape_data(text)}")
    return "".join(line + "\n" for line in lines)


def rule_docs_template(configured: str | None) -> str | None:
    """Where a rule's documentation page is, as a template with ``{code}`` (the lower-case rule
    code): the configured one (`rule-docs-url`, `--rule-docs-url`), else the rule pages of the
    source the tool was installed from (pip's record of it, PEP 610): `docs/rules/` of that
    directory, or of that commit of a GitHub repository. None when neither is known."""
    return configured or _installed_docs_template()


@lru_cache(maxsize=1)
def _installed_docs_template() -> str | None:
    from importlib.metadata import distributions

    # The installation's record (an `.egg-info` left in a source tree on sys.path has none).
    recorded = next((text for found in distributions(name="pmap-migrate")
                     if (text := found.read_text("direct_url.json"))), None)
    try:
        origin = json.loads(recorded or "null")
    except ValueError:
        return None
    if not isinstance(origin, dict) or not isinstance(origin.get("url"), str):
        return None
    url, vcs = origin["url"], origin.get("vcs_info")
    subdirectory = origin.get("subdirectory")
    if isinstance(vcs, dict):
        github = re.fullmatch(r"(?:git\+)?(?:https|ssh)://(?:git@)?github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", url)
        commit = vcs.get("commit_id")
        if vcs.get("vcs") != "git" or github is None or not commit or subdirectory:
            return None
        return f"https://github.com/{github[1]}/{github[2]}/blob/{commit}/docs/rules/{DOCS_URL_PLACEHOLDER}.md"
    if "dir_info" in origin and url.startswith("file:"):
        from urllib.request import url2pathname

        pages = Path(url2pathname(urlparse(url).path), subdirectory or "", "docs", "rules")
        if pages.is_dir():
            return pages.as_uri() + f"/{DOCS_URL_PLACEHOLDER}.md"
    return None


def rule_docs_url(template: str | None, code: str) -> str | None:
    return template.replace(DOCS_URL_PLACEHOLDER, code.lower()) if template else None


def to_sarif(diagnostics: Sequence[Diagnostic], rules: Sequence[type[Rule]], docs_template: str | None = None) -> str:
    """SARIF 2.1.0 with one reportingDescriptor per rule code and ``ruleId`` on each result;
    ``docs_template``: where the rules' pages are (`rule_docs_template`), their ``helpUri``."""
    descriptors = []
    index: dict[str, int] = {}
    for rule in rules:
        index[rule.CODE] = len(descriptors)
        doc = rule.documentation()
        descriptor = {
            "id": rule.CODE,
            "name": rule.NAME,
            "shortDescription": {"text": rule.summary()},
            "fullDescription": {"text": doc},
            "help": {"text": doc, "markdown": doc},
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["jax", "pmap-migration"]},
        }
        if docs_template:
            descriptor["helpUri"] = rule_docs_url(docs_template, rule.CODE)
        descriptors.append(descriptor)
    for d in diagnostics:  # syntax and read errors have no rule class
        if d.code not in index:
            index[d.code] = len(descriptors)
            descriptors.append({
                "id": d.code,
                "name": d.name,
                "shortDescription": {"text": d.name.replace("-", " ")},
                "defaultConfiguration": {"level": "error"},
            })
    results = []
    for d in diagnostics:
        location = {"artifactLocation": {"uri": quote(os.fsencode(d.path)), "uriBaseId": "%SRCROOT%"}}
        properties = {}
        if d.cell is None:
            location["region"] = {
                "startLine": d.line,
                "startColumn": d.column,
                "endLine": d.end_line,
                "endColumn": d.end_column,
            }
            message = d.message
        else:
            # SARIF regions index the file's text (the notebook's JSON), not a cell: the location is
            # the notebook; the cell and the position within it go into the message and properties.
            properties.update(cell=d.cell, cellLine=d.line, cellColumn=d.column)
            message = f"cell {d.cell}, line {d.line}: {d.message}"
        result = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": "error",
            "message": {"text": message},
            "locations": [{"physicalLocation": location}],
        }
        if d.fix is not None:
            properties["fix"] = {"applicability": d.fix.applicability.value, "summary": d.fix.summary}
        if properties:
            result["properties"] = properties
        results.append(result)
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "pmap-migrate",
                "version": __version__,
                "informationUri": TOOL_URI,
                "rules": descriptors,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(log, indent=2) + "\n"


def to_junit(diagnostics: Sequence[Diagnostic], *, files: int) -> str:
    """JUnit XML, as CI systems read test reports: a test suite per file, a test case per finding,
    a ``failure`` for a legacy pattern and an ``error`` for a file that could not be checked. A
    run without findings is one passing test case (``files``: how many files it checked)."""
    from xml.etree import ElementTree

    by_path: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        by_path.setdefault(d.path, []).append(d)
    failures = sum(1 for d in diagnostics if d.code not in UNCHECKED_CODES)
    errors = len(diagnostics) - failures
    root = ElementTree.Element("testsuites", name="pmap-migrate", tests=str(max(1, len(diagnostics))),
                               failures=str(failures), errors=str(errors))
    if not diagnostics:
        suite = ElementTree.SubElement(root, "testsuite", name="pmap-migrate", tests="1", failures="0", errors="0")
        ElementTree.SubElement(suite, "testcase", name="pmap-migrate", classname="pmap-migrate").append(
            _element("system-out", f"All checks passed ({files} file{'s' if files != 1 else ''} checked)"))
    for path, found in by_path.items():
        path_failures = sum(1 for d in found if d.code not in UNCHECKED_CODES)
        suite = ElementTree.SubElement(root, "testsuite", name=path, tests=str(len(found)),
                                       failures=str(path_failures), errors=str(len(found) - path_failures))
        for d in found:
            case = ElementTree.SubElement(suite, "testcase", name=f"pmap-migrate.{d.code}", classname=path,
                                          line=str(d.line), column=str(d.column))
            where = (f"cell {d.cell}, " if d.cell is not None else "") + f"line {d.line}, col {d.column}"
            outcome = ElementTree.SubElement(case, "error" if d.code in UNCHECKED_CODES else "failure",
                                             message=d.message, type=d.code)
            outcome.text = f"{where}: {d.code} {d.message}"
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def _element(tag: str, text: str):
    from xml.etree import ElementTree

    element = ElementTree.Element(tag)
    element.text = text
    return element


def to_gitlab(diagnostics: Sequence[Diagnostic]) -> str:
    """GitLab Code Quality (a subset of the Code Climate issue format): ``description``,
    ``check_name``, ``fingerprint``, ``severity`` and ``location`` (``path``, ``lines.begin``) on
    each issue. The fingerprint does not change when code moves (rule, path, message and the
    finding's rank among identical ones), and no two issues share one."""
    from hashlib import blake2b

    seen: Counter = Counter()
    issues = []
    for d in diagnostics:
        key = (d.code, d.path, d.message)
        seen[key] += 1
        fingerprint = blake2b("\0".join([*key, str(seen[key])]).encode("utf-8", "surrogateescape"),
                              digest_size=16).hexdigest()
        notebook = d.cell is not None
        issues.append({
            "type": "issue",
            "check_name": d.code,
            "description": (f"{d.code} cell {d.cell}, line {d.line}: {d.message}" if notebook
                            else f"{d.code} {d.message}"),
            "categories": ["Compatibility"] if d.code not in UNCHECKED_CODES else ["Bug Risk"],
            "severity": "critical" if d.code in UNCHECKED_CODES else "major",
            "fingerprint": fingerprint,
            # a notebook's lines are those of its JSON, not of a cell: the notebook as a whole
            "location": {"path": d.path, "lines": {"begin": 1 if notebook else d.line,
                                                   "end": 1 if notebook else d.end_line}},
        })
    return json.dumps(issues, indent=2) + "\n"
