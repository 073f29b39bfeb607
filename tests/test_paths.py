"""How a run shows the paths it was given: relative to the working directory when the file lies
below it (symbolic links resolved), else as given. `PathDisplay` works out each directory once;
it must show every path as resolving the whole path does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pmap_migrate.cli import main
from pmap_migrate.runner import PathDisplay, _relative_and_normal, display_path


def resolved_in_full(text: str) -> str:
    """The oracle: every path resolved on its own, whole (what the display did before)."""
    if _relative_and_normal(text):
        return text.replace(os.sep, "/")
    try:
        Path(text).resolve().relative_to(Path.cwd().resolve())
        below = True
    except ValueError:
        below = False
    shown = os.path.relpath(text) if not os.path.isabs(text) or below else text
    return shown.replace(os.sep, "/")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A working directory ``work`` (entered through the link ``entry``) and files around it:
    links out of it and into it, a dangling link, a directory outside."""
    work, outside = tmp_path / "real" / "work", tmp_path / "outside"
    (work / "pkg" / "sub").mkdir(parents=True)
    (outside / "lib").mkdir(parents=True)
    for path in (work / "a.py", work / "pkg" / "b.py", work / "pkg" / "sub" / "c.py", outside / "d.py",
                 outside / "lib" / "e.py"):
        path.write_text("x = 1\n")
    (work / "to_outside_dir").symlink_to(outside / "lib", target_is_directory=True)
    (work / "pkg" / "to_outside_file.py").symlink_to(outside / "d.py")
    (work / "pkg" / "to_inside_file.py").symlink_to(work / "a.py")
    (work / "pkg" / "dangling.py").symlink_to(work / "missing.py")
    (outside / "to_work_file.py").symlink_to(work / "pkg" / "b.py")
    (outside / "to_work_dir").symlink_to(work / "pkg", target_is_directory=True)
    (tmp_path / "entry").symlink_to(tmp_path / "real", target_is_directory=True)
    return tmp_path


def paths_of(tmp_path: Path) -> list[str]:
    work, entry, outside = tmp_path / "real" / "work", tmp_path / "entry" / "work", tmp_path / "outside"
    names = ["a.py", "pkg/b.py", "pkg/sub/c.py", "pkg/to_outside_file.py", "pkg/to_inside_file.py",
             "pkg/dangling.py", "to_outside_dir/e.py", "pkg", "pkg/sub", "nothing/here.py", ""]
    spellings = [str(base / name) if name else str(base) for base in (work, entry) for name in names]
    spellings += [str(outside / name) for name in ("d.py", "lib/e.py", "to_work_file.py", "to_work_dir/b.py",
                                                  "to_work_dir/sub/c.py", "to_work_dir")]
    spellings += [str(work / "pkg" / ".." / "a.py"), str(work / "to_outside_dir" / ".." / "d.py"),
                  str(work / "." / "pkg" / "b.py"), str(work / "pkg") + os.sep, str(tmp_path), "/",
                  str(outside / "to_work_dir" / ".." / "a.py"), "a.py", "pkg/b.py", "./a.py", "../work/a.py",
                  "pkg/../a.py", "../outside/d.py"]
    return spellings


@pytest.mark.parametrize("cwd", ["real/work", "entry/work", "real/work/pkg", "outside", "entry/work/to_outside_dir"])
def test_each_path_shown_as_resolving_it_whole_shows_it(tree: Path, cwd: str, monkeypatch) -> None:
    monkeypatch.chdir(tree / cwd)
    spellings = paths_of(tree)
    expected = [resolved_in_full(text) for text in spellings]
    shower = PathDisplay()  # one table for the whole run, as `run` keeps it
    assert [shower(text) for text in spellings] == expected
    links = [os.path.islink(text) if os.path.lexists(text) else None for text in spellings]
    told = PathDisplay()  # the caller tells which are links (run() knows from its lstat)
    assert [told(text, link) for text, link in zip(spellings, links)] == expected
    assert [display_path(text) for text in spellings] == expected
    # Some of them are shown relative, some as given: the cases differ.
    assert any(not os.path.isabs(shown) for shown in expected) and any(os.path.isabs(shown) for shown in expected)


def test_check_of_an_absolute_path_shows_paths_below_the_working_directory_relative(tree: Path, monkeypatch,
                                                                                     capsys) -> None:
    work = tree / "real" / "work"
    (work / "pkg" / "train.py").write_text("import jax\nstep = jax.pmap(lambda x: x)\n")
    (tree / "outside" / "lib" / "e.py").write_text("import jax\nf = jax.pmap(lambda x: x)\n")
    monkeypatch.chdir(tree / "entry" / "work")
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--no-cache", "--output-format", "concise", str(tree / "entry" / "work"),
              str(tree / "outside")])
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "pkg/train.py:2:8: PM101" in out
    # below the working directory only through a link out of it: shown as given
    assert f"{tree / 'outside' / 'lib' / 'e.py'}:2:5: PM101" in out
    assert str(work) not in out
