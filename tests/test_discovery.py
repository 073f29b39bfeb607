"""Discovery honours .gitignore files as git does: git itself is the reference."""

from __future__ import annotations

import subprocess

import pytest

from codemod.session import Session

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
    found = {p.as_posix() for p in Session.create([start]).files()}
    prefix = "" if start == "." else start + "/"
    assert found == {p for p in visible if p.startswith(prefix)}
