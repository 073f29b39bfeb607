"""The user documentation: the site builds without a warning, the generated pages are current and
are what `explain` prints, and the README stays a short entry point whose links resolve."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.docs import rule_document, rule_page, stale
from pmap_migrate.rules import all_rules

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(project / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, cwd=project)


def _docs_copy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy2(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", project / "docs")
    return project


def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path):
    built = _build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for rule in all_rules():
        assert (tmp_path / "site" / rule_page(rule).removesuffix(".md") / "index.html").is_file()


@pytest.mark.parametrize("breakage", [
    ("docs/troubleshooting.md", "\nSee [the missing page](no-such-page.md).\n"),
    ("docs/troubleshooting.md", "\nSee [a missing section](cli.md#no-such-section).\n"),
    ("docs/unlisted.md", "# A page the navigation does not list\n"),
])
def test_a_broken_link_or_an_unlisted_page_fails_the_build(tmp_path, breakage):
    project = _docs_copy(tmp_path)
    path, text = breakage
    with (project / path).open("a", encoding="utf-8") as file:
        file.write(text)
    built = _build(project, tmp_path / "site")
    assert built.returncode != 0 and "WARNING" in built.stderr, built.stderr


def test_the_generated_documentation_is_current():
    outdated = [str(path.relative_to(ROOT)) for path in stale(ROOT)]
    assert outdated == [], f"run `python -m pmap_migrate.docs` to regenerate: {outdated}"


def test_a_stale_rule_page_is_detected(tmp_path):
    project = _docs_copy(tmp_path)
    shutil.copy2(ROOT / "README.md", project / "README.md")
    assert stale(project) == []
    page = project / "docs" / "rules" / "pm101.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nedited by hand\n", encoding="utf-8")
    orphan = project / "docs" / "rules" / "pm999.md"
    orphan.write_text("# PM999\n", encoding="utf-8")
    assert stale(project) == [page, orphan]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.CODE)
def test_explain_prints_exactly_the_rule_page(rule):
    page = (ROOT / "docs" / rule_page(rule)).read_text(encoding="utf-8")
    assert page == rule_document(rule)
    for spelling in (rule.CODE, rule.CODE.lower(), rule.NAME):
        result = CliRunner().invoke(main, ["explain", spelling])
        assert result.exit_code == 0 and result.output == page


def test_the_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert len(local) > 20  # the rule table and the documentation list
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == []


HISTORY = re.compile(r"\b[Ss]essions? \d+|\b[Cc]ommit [0-9a-f]{7,40}\b")


def test_no_development_history_in_the_projects_files():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in tracked.stdout.splitlines():
        path = ROOT / name
        if path.suffix not in {".md", ".py", ".toml", ".yaml", ".yml"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []


def test_the_documented_pre_commit_hooks_exist():
    import yaml

    page = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    config = next(b for b in re.findall(r"```yaml\n(.*?)\n```", page, re.S) if "repos:" in b)
    named = {hook["id"] for repo in yaml.safe_load(config)["repos"] for hook in repo["hooks"]}
    named |= set(re.findall(r"#\s*- id: (\S+)", config))  # the alternative, commented out
    declared = {hook["id"] for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    assert named and named <= declared, (named, declared)
