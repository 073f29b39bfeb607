"""Machine-readable outputs: JSON, GitHub Actions annotations, SARIF 2.1.0."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from urllib.parse import quote

from pmap_migrate import __version__
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


def to_sarif(diagnostics: Sequence[Diagnostic], rules: Sequence[type[Rule]]) -> str:
    """SARIF 2.1.0 with one reportingDescriptor per rule code and ``ruleId`` on each result."""
    descriptors = []
    index: dict[str, int] = {}
    for rule in rules:
        index[rule.CODE] = len(descriptors)
        doc = rule.documentation()
        descriptors.append({
            "id": rule.CODE,
            "name": rule.NAME,
            "shortDescription": {"text": rule.summary()},
            "fullDescription": {"text": doc},
            "help": {"text": doc, "markdown": doc},
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["jax", "pmap-migration"]},
        })
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
