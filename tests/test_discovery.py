"""Discovery honours .gitignore files as git does: git itself is the reference."""

from __future__ import annotations

import subprocess

import pytest

from pmap_migrate.session import Session

FILES = ["a.py", "build_x.py", "gen/x.py", "gen/keep.py", "sub/local.py", "sub/deep/local.py", "sub/deep/other.py",
         "sub/deep/kept.py", "sub/tmp_1.py", "docs/conf.py", "sub/docs/conf.py", "pkg/m_pb2.py", "pkg/keep_pb2.py",
         "pkg/inner/m_pb2.py", "lib/a.py", "lib/cache/b.py", "notes/n.ipynb"]
IGNORES = {
    ".gitignore": "gen/\n!gen/keep.py\n*_pb2.py\n!keep_pb2.py\n/docs/\nsub/tmp_*\ncache/\n",
    "sub/.gitignore": "local.py\n!deep/local.py\n",
    "sub/deep/.gitignore": "other.py\n# a comment\n\n",
    "pkg/inner/.gitignore": "!m_pb2.py\n",
}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n" if name.endswith(".py") else '{"cells": []}\n')
    for name, text in IGNORES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _git_visible(repo) -> set[str]:
    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout
    return {line for line in out.splitlines() if line.endswith((".py", ".ipynb"))}


@pytest.mark.parametrize("start", [".", "sub", "sub/deep", "pkg", "pkg/inner", "lib"])
def test_the_files_found_are_those_git_does_not_ignore(repo, start):
    visible = _git_visible(repo)
    assert "sub/deep/local.py" in visible and "pkg/inner/m_pb2.py" in visible and "gen/keep.py" not in visible
    found = set(Session.create([start]).files())
    prefix = "" if start == "." else start + "/"
    assert found == {p for p in visible if p.startswith(prefix)}


EXCLUDE_FILES = ["a.py", "gen_a.py", "src/gen_b.py", "src/build/x.py", "src/builder.py", "x/docs/_build/y.py",
                 "docs/_build/z.py", "lib/vendor/v.py", "vendor/top.py", "pkg/m.egg-info/n.py", "pkg/tests/t.py",
                 "pkg/tests_x.py", "nb/n.ipynb", "deep/a/b/c/tmp/d.py", "deep/tmpfile.py", "w/x#y.py", "s p/a b.py"]
EXCLUDES = ["gen_*", "/docs/_build/", "lib/vendor", "tests/", "*.ipynb", "deep/**/tmp", "x#y.py", "a b.py"]


@pytest.mark.parametrize("start", [".", "src", "pkg", "deep/a"])
def test_excluded_files_are_those_the_patterns_match_by_full_path(tmp_path, monkeypatch, start):
    """Patterns without a slash are judged by an entry's name (and remembered per name): the same
    files as matching every file's whole path against every pattern, the defaults included."""
    import pathspec

    from pmap_migrate.config import DEFAULT_EXCLUDE

    for name in EXCLUDE_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text(f"[tool.pmap-migrate]\nextend-exclude = {EXCLUDES!r}\n")
    monkeypatch.chdir(tmp_path)
    spec = pathspec.GitIgnoreSpec.from_lines([*DEFAULT_EXCLUDE, *EXCLUDES])
    every = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.suffix in (".py", ".ipynb")]
    expected = sorted(p for p in every if not spec.match_file(p) and (start == "." or p.startswith(start + "/")))
    if start == ".":
        assert "src/builder.py" in expected and "vendor/top.py" in expected and "src/build/x.py" not in expected
    assert Session.create([start]).files() == expected


def test_a_git_invalid_pattern_is_passed_over_as_git_does(repo):
    """`a\\` (a trailing backslash) is no pattern to git; pathspec refuses it. The rest of that
    .gitignore still applies, and the run goes on."""
    (repo / "sub" / ".gitignore").write_text("local.py\n!deep/local.py\nbroken\\\n")
    visible = _git_visible(repo)
    assert "sub/local.py" not in visible and "sub/deep/local.py" in visible
    assert set(Session.create(["."]).files()) == visible


def test_an_invalid_exclude_pattern_is_a_one_line_error(repo):
    from click.testing import CliRunner

    from pmap_migrate.cli import main

    (repo / "pyproject.toml").write_text('[tool.pmap-migrate]\nextend-exclude = ["gen", "bad\\\\"]\n')
    result = CliRunner().invoke(main, ["check", "."])
    assert result.exit_code == 2
    assert result.output.strip() == "pmap-migrate: error: invalid exclude pattern 'bad\\\\' (a gitignore-style pattern)"


def test_translations_are_remembered_and_a_cached_run_does_not_import_pathspec(repo):
    """pathspec's translations of the patterns are kept in the cache directory: the same files with
    them, without them, from a corrupt record; a run the cache answers whole never imports pathspec."""
    import sys

    cache = repo / ".pmap_migrate_cache"
    without = Session.create(["."]).files(use_cache=False)
    assert not cache.exists()
    assert Session.create(["."]).files() == without  # translates, and remembers
    [record] = cache.glob("patterns-*.pickle")
    assert Session.create(["."]).files() == without  # from the record
    record.write_bytes(b"not a pickle")
    assert Session.create(["."]).files() == without
    (cache / "patterns-1-0000000000000000.pickle").write_bytes(b"")  # another pathspec's: dropped on save
    (repo / "lib" / ".gitignore").write_text("cache/\nb.py\n")  # new lines: translated and saved
    assert "lib/a.py" in Session.create(["."]).files()
    assert [p.name for p in cache.glob("patterns-*.pickle")] == [record.name]


def test_a_run_the_cache_answers_does_not_import_pathspec(tmp_path):
    """Without negations (whose matching is pathspec's own) the remembered translations suffice."""
    import sys

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("__pycache__/\n*.py[cod]\nbuild/\n/docs/_build/\n")
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nextend-exclude = ["gen_*"]\n')
    for name in ("a.py", "build/b.py", "docs/_build/c.py", "gen_d.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("import jax\nf = jax.pmap(g)\n")
    program = ("import sys\nfrom pmap_migrate.cli import main\nsys.argv = ['pmap-migrate', 'check', '.']\n"
               "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write(str('pathspec' in sys.modules))\n")
    runs = [subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True) for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and "Found 1 legacy pattern in 1 file." in runs[0].stdout
    assert runs[0].stdout.startswith("a.py:2:5: PM101")
    assert runs[1].stderr.strip().splitlines()[-1] == "False"
