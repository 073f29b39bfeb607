"""`fix` is safe on anything: encodings and line endings survive byte for byte outside the edits,
odd files get a one-line message while the run goes on, symbolic links never lead outside the
given paths, writes are atomic (also under Ctrl-C), and Python syntax up to 3.13 parses."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
import tokenize
from pathlib import Path

import pytest
from click.testing import CliRunner

from pmap_migrate.cli import main
from pmap_migrate.engine import lint_bytes
from pmap_migrate.files import FileChanged, write_atomic
from pmap_migrate.fixer import fix_bytes
from pmap_migrate.rules import all_rules
from pmap_migrate.rules.fixes.choices import Applicability

RULES = all_rules()
REPO = Path(__file__).resolve().parents[1]
SITE = "step = jax.pmap(lambda x: x * 2)"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _working_interpreter(minor: str) -> str | None:
    """A Python ``minor`` that runs (a pyenv shim may name a version it cannot start)."""
    import glob
    import shutil

    candidates = [shutil.which(f"python{minor}"), *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{minor}.*/bin/python")))]
    for candidate in filter(None, candidates):
        try:
            if subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=60).returncode == 0:
                return candidate
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def fix(data: bytes, path: str = "m.py"):
    return fix_bytes(data, path, RULES, unsafe=True)


def kept_outside(original: bytes, fixed: bytes, marker: bytes = b"pmap") -> None:
    """Every line of ``original`` that does not hold ``marker`` (the edited statement) is in
    ``fixed``, byte for byte with its line ending, in the same order."""
    after = fixed.splitlines(keepends=True)
    position = 0
    for line in original.splitlines(keepends=True):
        if marker in line:
            continue
        while position < len(after) and after[position] != line:
            position += 1
        assert position < len(after), f"line {line!r} was changed or lost:\n{fixed.decode('latin-1')}"
        position += 1


def endings(data: bytes) -> set[bytes]:
    return {line[len(line.rstrip(b"\r\n")):] for line in data.splitlines(keepends=True)} - {b""}


def encoding_of(data: bytes) -> str:
    return tokenize.detect_encoding(io.BytesIO(data).readline)[0]


def assert_sound(original: bytes, outcome) -> bytes:
    """The fix changed the file, its output compiles, a second fix changes nothing."""
    assert outcome.error is None, outcome.error
    assert outcome.changed, "nothing was fixed"
    fixed = outcome.fixed
    compile(fixed, "fixed.py", "exec", dont_inherit=True)
    again = fix(fixed)
    assert again.error is None and not again.changed, "a second fix changed the file"
    assert encoding_of(fixed) == encoding_of(original)
    assert fixed.startswith(b"\xef\xbb\xbf") == original.startswith(b"\xef\xbb\xbf")
    return fixed


# --------------------------------------------------------------------------- encodings, line endings
PROGRAM = (
    "# caf\u00e9 \u2603 (a comment in UTF-8)\n"
    "import jax\n"
    "\n"
    "name = 'na\u00efve'   \n"  # trailing spaces are kept
    "total = 1 + \\\n"
    "    2\n"
    f"{SITE}\n"
    "print(name, total)\n"
)
LATIN = "# -*- coding: latin-1 -*-\nimport jax\nname = 'caf\u00e9 \u00e0 \u00ff'\n" + SITE + "\nprint(name)\n"
CP1252 = "# vim: set fileencoding=cp1252 :\nimport jax\nprice = '5 \u20ac'\n" + SITE + "\n"

ENCODED = {
    "utf-8": PROGRAM.encode("utf-8"),
    "utf-8 with BOM": b"\xef\xbb\xbf" + PROGRAM.encode("utf-8"),
    "latin-1 cookie": LATIN.encode("latin-1"),
    "cp1252 cookie": CP1252.encode("cp1252"),
    "CRLF": PROGRAM.replace("\n", "\r\n").encode("utf-8"),
    "BOM and CRLF": b"\xef\xbb\xbf" + PROGRAM.replace("\n", "\r\n").encode("utf-8"),
    "CR": PROGRAM.replace("\n", "\r").encode("utf-8"),
    "mixed": b"import jax\r\nx = 1\ny = 2\r\n\r\nz = 3\r" + SITE.encode() + b"\nprint(x)\r\nprint(y)\n",
    "tabs": b"import jax\nif True:\n\tx = 1\n\t" + SITE.encode() + b"\n\tdef f():\n\t\treturn x\n",
    "form feeds": b"import jax\n\x0c\n\x0cdef f():\n    return 1\n\x0c\n" + SITE.encode()
                  + b"\n\x0cclass A:\n    y = 1\n\x0c    z = 2\n",
    # libcst takes the first indented line's indentation, form feed included, as the module's unit
    "form feed on the first indented line": b"import jax\n\ndef f():\n\x0c    return 1\n    # c\n\n" + SITE.encode()
                                            + b"\n",
    "no final newline, site last": b"import jax\nx = 1\n" + SITE.encode(),
    "no final newline, site first": b"import jax\n" + SITE.encode() + b"\nx = 1",
    "comment on the last line without newline": b"import jax\n" + SITE.encode() + b"\n# end",
}


@pytest.mark.parametrize("name", list(ENCODED))
def test_bytes_outside_the_edit_are_kept(name):
    original = ENCODED[name]
    fixed = assert_sound(original, fix(original))
    kept_outside(original, fixed)
    assert endings(fixed) <= endings(original) | ({b"\n"} if not endings(original) else set())
    assert fixed.endswith((b"\n", b"\r")) == original.endswith((b"\n", b"\r"))
    assert b"jax.shard_map(" in fixed and b"jax.pmap" not in fixed


def test_crlf_file_gets_crlf_code():
    original = ENCODED["CRLF"]
    fixed = fix(original).fixed
    assert b"\n" not in fixed.replace(b"\r\n", b"")


def test_tabs_indent_the_new_code_with_tabs():
    fixed = fix(ENCODED["tabs"]).fixed
    body = [line for line in fixed.splitlines() if line.startswith((b" ", b"\t"))]
    assert body and all(line.startswith(b"\t") for line in body)


def test_a_file_with_form_feeds_and_nothing_to_fix_is_not_touched():
    original = b"import jax\n\x0cdef f():\n    return jax.jit(g)\n\x0c\nname = 'pmap'\n"
    outcome = fix(original)
    assert outcome.error is None and not outcome.changed


@pytest.mark.parametrize("data, expected", [
    (b"import jax\n" + SITE.encode() + b"\ns = '\xff\xfe'\n", "utf-8"),  # invalid UTF-8, no cookie
    (("import jax\n" + SITE + "\n").encode("utf-16"), "encoding"),  # UTF-16 with its BOM
    (b"# coding: klingon\nimport jax\n" + SITE.encode() + b"\n", "klingon"),  # a codec that does not exist
    (b"# coding: rot13\nimport jax\n" + SITE.encode() + b"\n", "rot13"),  # not a text codec
    (b"# coding: undefined\nimport jax\n" + SITE.encode() + b"\n", "undefined"),
    (b"\xef\xbb\xbf# coding: latin-1\nimport jax\n" + SITE.encode() + b"\n", "encoding problem"),
], ids=["bad utf-8", "utf-16", "unknown codec", "rot13", "undefined codec", "BOM vs cookie"])
def test_undecodable_files_are_reported_not_crashed_on(data, expected):
    for result in (fix(data), lint_bytes(data, "m.py", RULES)):
        error = result.error
        assert error is not None and error.code == "PM001", error
        assert error.message.startswith("cannot decode file") and "\n" not in error.message
        assert expected in error.message


def test_output_python_would_not_compile_is_refused():
    """libcst parses `return` at module level; CPython's compiler does not: never written."""
    import libcst as cst

    from pmap_migrate.rules.base import Rule
    from pmap_migrate.rules.fixes.spec import FixSpec

    class ReturnAtModuleLevel(Rule):
        CODE, NAME, MESSAGE, TRIGGERS = "PM994", "test-return", "return", ("finish",)

        def visit_Expr(self, node: cst.Expr) -> None:
            if isinstance(node.value, cst.Call) and getattr(node.value.func, "value", None) == "finish":
                self.report(node, fix=FixSpec(Applicability.SAFE, "return", replacement=cst.Return(cst.Integer("1"))))

    outcome = fix_bytes(b"x = 1\nfinish()\n", "m.py", (ReturnAtModuleLevel,))
    assert outcome.fixed is None and outcome.error is not None and outcome.error.code == "PM002"
    assert "does not compile" in outcome.error.message and "'return' outside function" in outcome.error.message


# --------------------------------------------------------------------------- odd files, end to end
LEGACY = f"import jax\n\n{SITE}\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n")
    return tmp_path


def cli(*args):
    return CliRunner().invoke(main, [*args[:1], "--no-cache", *args[1:]], catch_exceptions=False)


def write(root: Path, relative: str, data: bytes | str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def deep_sum(terms: int) -> str:
    return "deep = " + " + ".join(["1"] * terms) + "\n"


def test_odd_files_get_one_line_each_and_the_run_goes_on(project):
    files = {
        "good.py": LEGACY,
        "empty.py": "",
        "only_a_comment.py": "# jax.pmap is gone\n",
        "broken.py": "import jax\nstep = jax.pmap(f\n",
        "nul_byte.py": b"import jax\n" + SITE.encode() + b"\n\x00\n",
        "undecodable.py": b"import jax\n" + SITE.encode() + b"\nname = '\xff'\n",
        "utf16.py": LEGACY.encode("utf-16"),  # not Python (NUL bytes); no trigger word in it: passed over
        "too_deep.py": "import jax\n" + SITE + "\ny = " + "(" * 1000 + "1" + ")" * 1000 + "\n",
        "deep_but_fine.py": "import jax\n" + SITE + "\n" + deep_sum(600),
        "dir with space/\u00fcn\u00efc\u00f6d\u00e9 m\u00f3dule.py": LEGACY,
    }
    paths = {name: write(project, name, data) for name, data in files.items()}
    before = {name: path.read_bytes() for name, path in paths.items()}
    result = cli("fix", "--unsafe-fixes", "--output-format", "json", ".")
    assert result.exit_code == 1, result.output  # files that cannot be fixed are findings
    assert "Traceback" not in result.output
    found = {d["path"]: d for d in json.loads(result.output)}
    expected_codes = {"broken.py": "PM000", "nul_byte.py": "PM000", "too_deep.py": "PM000",
                      "undecodable.py": "PM001"}
    assert {p: d["code"] for p, d in found.items()} == expected_codes
    for d in found.values():
        assert "\n" not in d["message"]
    for name in expected_codes:
        assert paths[name].read_bytes() == before[name], f"{name} was changed"
    for name in ("good.py", "deep_but_fine.py", "dir with space/\u00fcn\u00efc\u00f6d\u00e9 m\u00f3dule.py"):
        text = paths[name].read_text()
        assert "jax.shard_map(" in text and "jax.pmap" not in text, name
    assert paths["deep_but_fine.py"].read_text().endswith(deep_sum(600))
    for name in ("empty.py", "only_a_comment.py", "utf16.py"):
        assert paths[name].read_bytes() == before[name]

    # The text output: one line per file that could not be fixed, `path:line:col: CODE message`.
    text = cli("check", "--output-format", "concise", "--quiet", ".")
    assert text.exit_code == 1 and "Traceback" not in text.output
    lines = [line for line in text.output.splitlines() if " PM00" in line]
    assert sorted(line.split(":", 1)[0] for line in lines) == sorted(expected_codes)


def test_a_read_only_file_is_reported_and_left_alone(project):
    path = write(project, "frozen.py", LEGACY)
    other = write(project, "other.py", LEGACY)
    os.chmod(path, 0o444)
    try:
        result = cli("fix", "--unsafe-fixes", ".")
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output
        assert "frozen.py:1:1: PM001 cannot write file: file is read-only; left unchanged" in result.output
        assert "frozen.py:3:8: PM101" in result.output  # its findings are still reported
        assert path.read_text() == LEGACY and stat.S_IMODE(path.stat().st_mode) == 0o444
        assert "jax.shard_map(" in other.read_text()
        assert "Fixed 1 of 2 legacy patterns in 1 file." in result.output
        assert "Found 1 legacy pattern in 1 file; 1 file could not be checked or fixed." in result.output
    finally:
        os.chmod(path, 0o644)


def test_an_unreadable_file_is_reported_and_the_run_goes_on(project, monkeypatch):
    secret = write(project, "secret.py", LEGACY)
    other = write(project, "other.py", LEGACY)
    if IS_ROOT:  # root reads anything: make this one file fail to read
        import builtins

        import pmap_migrate.runner

        def fussy_open(file, *args, **kwargs):
            if os.path.basename(file) == "secret.py":
                raise PermissionError(13, "Permission denied", str(file))
            return builtins.open(file, *args, **kwargs)

        monkeypatch.setattr(pmap_migrate.runner, "open", fussy_open, raising=False)
    else:
        os.chmod(secret, 0)
    try:
        result = cli("fix", "--jobs", "1", ".")
    finally:
        os.chmod(secret, 0o644)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "secret.py:1:1: PM001 cannot read file: Permission denied" in result.output
    assert "jax.shard_map(" in other.read_text()


def test_a_file_edited_while_being_fixed_is_left_alone(project, monkeypatch):
    import pmap_migrate.runner

    path = write(project, "busy.py", LEGACY)
    real = pmap_migrate.runner.run_fix

    def run_fix_then_edit(*args, **kwargs):
        outcomes = real(*args, **kwargs)
        path.write_text(LEGACY + "# edited meanwhile\n")  # an editor saved after the file was read
        return outcomes

    monkeypatch.setattr(pmap_migrate.runner, "run_fix", run_fix_then_edit)
    result = cli("fix", ".")
    assert result.exit_code == 1
    assert "busy.py:1:1: PM001 cannot write file: file changed while it was being fixed; left unchanged" in result.output
    assert path.read_text() == LEGACY + "# edited meanwhile\n"


def test_an_internal_error_in_one_file_is_exit_2_and_the_others_are_fixed(project, monkeypatch):
    from pmap_migrate.rules.fixes import services

    write(project, "a.py", LEGACY)
    write(project, "b.py", LEGACY.replace("step", "other"))
    real = services.FileFixes.pmap_fix

    def crash_on_other(self, site):
        if "other" in self.model.module.code:
            raise ValueError("a rule bug\nwith a second line")
        return real(self, site)

    monkeypatch.setattr(services.FileFixes, "pmap_fix", crash_on_other)
    result = cli("fix", "--jobs", "1", ".")
    assert result.exit_code == 2 and "Traceback" not in result.output
    [line] = [line for line in result.output.splitlines() if "PM002" in line]
    assert line.startswith("b.py:1:1: PM002 internal error: ValueError: a rule bug with a second line")
    assert "jax.shard_map(" in (project / "a.py").read_text()


def test_a_file_name_that_is_not_utf8_is_reported_in_every_format(tmp_path):
    """Linux file names are bytes: one that is not UTF-8 must not end a run in any output format."""
    try:
        (tmp_path / os.fsdecode(b"legacy_\xff.py")).write_bytes(LEGACY.encode())
        (tmp_path / os.fsdecode(b"broken_\xfe.py")).write_bytes(b"import jax\nstep = jax.pmap(f\n")
    except (OSError, UnicodeError):
        pytest.skip("the file system refuses such names")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"}
    for output_format in ("text", "concise", "json", "github", "sarif"):
        run = subprocess.run([sys.executable, "-m", "pmap_migrate", "check", "--no-cache", "--output-format", output_format, "."],
                             cwd=tmp_path, env=env, capture_output=True)
        assert run.returncode == 1, (output_format, run.stderr.decode(errors="replace"))
        assert b"Traceback" not in run.stderr and b"internal error" not in run.stderr, run.stderr
    run = subprocess.run([sys.executable, "-m", "pmap_migrate", "fix", "--no-cache", "."], cwd=tmp_path, env=env,
                         capture_output=True)
    assert run.returncode == 1 and b"Traceback" not in run.stderr  # the broken file is left
    assert b"jax.shard_map(" in (tmp_path / os.fsdecode(b"legacy_\xff.py")).read_bytes()


# --------------------------------------------------------------------------- symbolic links
def test_symlinks_are_followed_once_and_never_outside_the_given_paths(project):
    root = project / "root"
    real = write(root, "real.py", LEGACY)
    (root / "link.py").symlink_to("real.py")  # the same file twice: fixed once, the link stays a link
    (root / "chain.py").symlink_to("link.py")
    outside = write(project, "outside/victim.py", LEGACY)
    (root / "escape.py").symlink_to(outside)
    (root / "escape_dir").symlink_to(project / "outside", target_is_directory=True)
    (root / "loop.py").symlink_to("loop.py")
    (root / "dangling.py").symlink_to("missing.py")
    result = cli("fix", "--show-fixes", "root")
    assert result.exit_code == 1, result.output  # the links that lead nowhere are files that could not be checked
    assert "root/dangling.py:1:1: PM001 no such file or directory" in result.output
    assert "root/loop.py:1:1: PM001 cannot read file: Too many levels of symbolic links" in result.output
    assert "Fixed 1 of 1 legacy pattern in 1 file." in result.output and "Traceback" not in result.output
    assert "  root/real.py:3:8: PM101 rewrite `step`" in result.output  # shown under its own name, not a link's
    assert "jax.shard_map(" in real.read_text()
    assert (root / "link.py").is_symlink() and (root / "chain.py").is_symlink()
    assert outside.read_text() == LEGACY
    # a link named on the command line is the user's choice: followed, and the link kept
    named = cli("fix", "root/escape.py")
    assert named.exit_code == 0, named.output
    assert "jax.shard_map(" in outside.read_text() and (root / "escape.py").is_symlink()


# --------------------------------------------------------------------------- atomic writes
def test_write_atomic_keeps_mode_and_refuses_read_only_and_changed_files(tmp_path):
    path = tmp_path / "script.py"
    for mode in (0o755, 0o640, 0o600):
        path.write_bytes(b"old\n")
        os.chmod(path, mode)
        write_atomic(path, b"new\n", expected=b"old\n")
        assert path.read_bytes() == b"new\n" and stat.S_IMODE(path.stat().st_mode) == mode
    os.chmod(path, 0o444)
    with pytest.raises(PermissionError, match="read-only"):
        write_atomic(path, b"newer\n")
    os.chmod(path, 0o644)
    with pytest.raises(FileChanged):
        write_atomic(path, b"newer\n", expected=b"something else\n")
    assert path.read_bytes() == b"new\n"
    link = tmp_path / "link.py"
    link.symlink_to(path)
    write_atomic(link, b"through the link\n")
    assert link.is_symlink() and path.read_bytes() == b"through the link\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.py", "script.py"]


def test_write_atomic_in_a_read_only_directory_fails_cleanly(tmp_path):
    if IS_ROOT:
        pytest.skip("root writes into read-only directories")
    path = tmp_path / "sub" / "m.py"
    path.parent.mkdir()
    path.write_bytes(b"old\n")
    os.chmod(path.parent, 0o555)
    try:
        with pytest.raises(PermissionError):
            write_atomic(path, b"new\n")
    finally:
        os.chmod(path.parent, 0o755)
    assert path.read_bytes() == b"old\n"


TEMPLATES = [
    LEGACY,
    "import functools\n\nimport jax\nfrom jax import lax\n\n\n@functools.partial(jax.pmap, axis_name='i')\n"
    "def total(x):\n    return lax.psum(x, 'i')\n",
    "import jax\n\n\ndef run(xs):\n    return jax.pmap(lambda x: x + 1)(xs)\n",
]


def _ctrl_c_tree(root: Path, files: int) -> dict[Path, tuple[bytes, bytes]]:
    """``files`` modules; for each, (content before, content after `fix --unsafe-fixes`)."""
    fixed = {t: fix(t.encode()).fixed for t in TEMPLATES}
    tree = {}
    for i in range(files):
        template = TEMPLATES[i % len(TEMPLATES)]
        path = write(root, f"pkg{i % 3}/mod_{i}.py", template)
        tree[path] = (template.encode(), fixed[template])
    return tree


def test_ctrl_c_at_any_moment_leaves_each_file_old_or_new(tmp_path):
    """`fix` in a subprocess over a tree of files, interrupted (SIGINT to its process group, as a
    terminal's Ctrl-C) at random moments, most of them while files are being written."""
    rng = random.Random(8)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for trial in range(3):
        root = tmp_path / f"trial{trial}"
        tree = _ctrl_c_tree(root, 24)  # PARALLEL_THRESHOLD files: the process pool is used
        process = subprocess.Popen([sys.executable, "-m", "pmap_migrate", "fix", "--no-cache", "--unsafe-fixes", "."],
                                   cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
        if trial == 0:
            # While the files are being fixed, before any write: the whole run takes about 2 s on a
            # 2-core machine (a slower one only moves the moment earlier in the run).
            time.sleep(0.5 + 0.5 * rng.random())
        else:
            # As soon as the first file is written, after a random part of the write phase.
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and process.poll() is None:
                if any(path.read_bytes() != old for path, (old, _) in tree.items()):
                    break
                time.sleep(0.0005)
            time.sleep(rng.random() * 0.02)
        try:
            os.killpg(process.pid, signal.SIGINT)
        except ProcessLookupError:
            pass  # it had finished
        out, err = process.communicate(timeout=120)
        assert process.returncode in (0, 1, 130), (process.returncode, out.decode(), err.decode())
        assert b"Traceback" not in out + err, (out + err).decode()
        if process.returncode == 130:
            assert err.decode().strip().splitlines()[-1] == "pmap-migrate: interrupted"
        states = []
        for path, (old, new) in tree.items():
            now = path.read_bytes()
            assert now in (old, new), f"{path} is neither the old nor the new content"
            states.append(now == new)
        leftovers = [p for p in root.rglob("*") if p.name.endswith(".pmap-migrate")]
        assert leftovers == []


# --------------------------------------------------------------------------- syntax up to 3.13
MODERN = '''import jax

type Vector[T] = list[T]                      # PEP 695 (3.12)


def first[T: (int, float), *Ts, **P](x: T, /, *rest: *Ts) -> T:
    return x


class Box[T = int]:                            # PEP 696 defaults (3.13)
    def get[S](self, s: S) -> S:
        return s


def describe(command, width=10):
    match command:                              # 3.10
        case {"name": str(name), **rest} if rest:
            return f"{f'{f"{name!r:>{width}}"}'}"   # PEP 701 nesting (3.12)
        case [1, *tail] | (2, *tail):
            return tail
        case Box() as box:
            return box
        case _:
            return None


async def gather(xs):
    return [x async for x in xs if (y := x)]


try:
    pass
except* ValueError as group:                   # 3.11
    pass

@jax.pmap
def step[T](x: T) -> T:
    return x * 2
'''


def test_python_3_13_syntax_is_parsed_and_kept():
    outcome = fix(MODERN.encode())
    assert outcome.error is None and outcome.changed
    fixed = outcome.fixed.decode()
    head, _, _ = MODERN.partition("@jax.pmap")
    # the original text up to the site is there, line for line, after the added imports and helper
    assert head.split("import jax\n", 1)[1] in fixed
    assert "@jax.jit\n@_shard_mapped\ndef step[T](x: T) -> T:" in fixed and "jax.shard_map(" in fixed
    assert not fix(outcome.fixed).changed
    python = _working_interpreter("3.13")
    if python is None:
        pytest.skip("no Python 3.13 to compile the output with")
    check = subprocess.run([python, "-c", "import sys; compile(sys.stdin.buffer.read(), 'fixed.py', 'exec')"],
                           input=outcome.fixed, capture_output=True)
    assert check.returncode == 0, check.stderr.decode()


# --------------------------------------------------------------------------- size and depth
def test_a_big_file_is_fixed():
    """10k lines with one site at the end. (A 100k-line file is fixed the same way, in minutes:
    every libcst pass is linear in the file, and a fix makes about ten of them.)"""
    lines = [f"value_{i} = {i}  # line {i}\n" for i in range(10_000)]
    original = ("import jax\n" + "".join(lines) + SITE + "\n").encode()
    outcome = fix(original)
    assert outcome.error is None and outcome.changed
    assert outcome.fixed.count(b"\n") > 10_000
    kept_outside(original, outcome.fixed)


@pytest.mark.parametrize("kind, code", [
    ("parens", "y = " + "(" * 5000 + "1" + ")" * 5000 + "\n"),
    ("lists", "y = " + "[" * 1500 + "]" * 1500 + "\n"),
    ("indentation", "".join(" " * i + "if x:\n" for i in range(120)) + " " * 120 + "pass\n"),
])
def test_deeply_nested_code_is_a_syntax_error_not_a_crash(kind, code):
    data = ("import jax\n" + SITE + "\n" + code).encode()
    for result in (fix(data), lint_bytes(data, "m.py", RULES)):
        assert result.error is not None and result.error.code == "PM000", result.error


def test_brackets_in_strings_do_not_count_as_nesting():
    data = ("import jax\n" + SITE + "\ntext = '" + "(" * 500 + "'\n").encode()
    outcome = fix(data)
    assert outcome.error is None and outcome.changed


def test_deep_expressions_are_analysed_on_a_deep_stack():
    data = ("import jax\n" + SITE + "\n" + deep_sum(800)).encode()  # RecursionError on a default stack
    outcome = fix(data)
    assert outcome.error is None and outcome.changed


def _check_with_startup_hook(tmp_path: Path, hook: str) -> subprocess.CompletedProcess:
    """`python -m codemod check legacy.py` on a legacy module, with ``hook`` run at start-up
    (a `sitecustomize` module) to interrupt the run at a chosen moment."""
    write(tmp_path, "legacy.py", LEGACY)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(hook)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), str(REPO)])}
    return subprocess.run([sys.executable, "-m", "pmap_migrate", "check", "legacy.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_python_dash_m_exits_130_after_an_interrupt_inside_a_string_exec(tmp_path):
    """Ctrl-C landing while a dataclass is made (a string `exec`) still ends `python -m codemod` with
    exit code 130, not a death by SIGINT (CPython marks such an interrupt unhandled even when caught)."""
    done = _check_with_startup_hook(tmp_path, (
        "import pmap_migrate.session\n\n"
        "def check(*args, **kwargs):\n"
        "    exec('raise KeyboardInterrupt', {})\n\n"
        "pmap_migrate.session.Session.check = check\n"))
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert done.stderr.strip() == "pmap-migrate: interrupted"


def test_ctrl_c_while_interrupts_are_being_ignored_is_ignored(tmp_path):
    """An interrupt landing just as the run, done and reported, starts ignoring them (it surfaces in
    `signal.signal`, seen once in CI) neither prints a traceback nor replaces the exit code."""
    done = _check_with_startup_hook(tmp_path, (
        "import os, signal\n\n"
        "_signal = signal.signal\n"
        "_sent = []\n\n"
        "def interrupting(number, handler):\n"
        "    if number == signal.SIGINT and handler is signal.SIG_IGN and not _sent:\n"
        "        _sent.append(True)\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        for _ in range(1000):  # the interrupt surfaces here, before SIGINT is ignored\n"
        "            pass\n"
        "    return _signal(number, handler)\n\n"
        "signal.signal = interrupting\n"))
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "legacy.py:3:8: PM101" in done.stdout and done.stderr == ""


def test_ctrl_c_while_python_shuts_down_is_ignored(tmp_path):
    """The work done and reported, an interrupt during Python's shutdown neither prints a traceback
    nor replaces the exit code (1: findings)."""
    done = _check_with_startup_hook(tmp_path, (
        "import atexit, os, signal, time\n\n"
        "def interrupt():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)\n\n"
        "atexit.register(interrupt)\n"))
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "legacy.py:3:8: PM101" in done.stdout and done.stderr == ""
