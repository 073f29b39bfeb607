"""Cached virtual environments holding specific jax releases, for differential tests.

The legacy pmap only exists in jax <= 0.7.2 (Python 3.11 wheels); the newest jax needs
Python >= 3.12. Tests run programs in these interpreters with the repository on PYTHONPATH,
so nothing from this project is installed into them.

Environments live under ``$PMAP_MIGRATE_VENV_CACHE`` (default ``~/.cache/pmap-migrate/venvs``)
and are built once; a marker file records a finished build, a lock serialises builders.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PMAP_MIGRATE_VENV_CACHE", Path.home() / ".cache" / "pmap-migrate" / "venvs"))
EIGHT_DEVICES = "--xla_force_host_platform_device_count=8"


@dataclass(frozen=True)
class JaxEnv:
    name: str
    python_minor: str  # "3.11"
    requirements: tuple[str, ...]
    # Installed after ``requirements`` with ``pip install --no-deps``: a package whose declared
    # dependencies are far heavier than what the tests import from it (flax -> orbax, tensorstore).
    # Its imports' real needs must then be listed in ``requirements``.
    no_deps: tuple[str, ...] = ()


LEGACY = JaxEnv("jax-0.7.2-py3.11", "3.11", ("jax==0.7.2", "jaxlib==0.7.2"))
NEW_311 = JaxEnv("jax-0.10.2-py3.11", "3.11", ("jax==0.10.2", "jaxlib==0.10.2"))
NEWEST = JaxEnv("jax-0.12-py3.12", "3.12", ("jax>=0.12", "jaxlib>=0.12"))

# The legacy jax with flax, for programs using flax's pmap-era helpers (PM303). flax 0.12.0 is the
# last release admitting jax 0.7.2 (it requires jax>=0.7.1; 0.12.1 requires jax>=0.8.1); its
# `replicate` is still `jax.device_put_replicated` (until 0.12.3). Only `flax.jax_utils` and
# `flax.training.common_utils` are used: flax goes in without its declared dependencies (optax,
# orbax-checkpoint, tensorstore, treescope), with just what `import flax` needs.
FLAX_IMPORT_NEEDS = ("msgpack", "typing_extensions", "absl-py", "rich", "PyYAML")
LEGACY_FLAX = JaxEnv("jax-0.7.2-flax-0.12.0-py3.11", "3.11", ("jax==0.7.2", "jaxlib==0.7.2", *FLAX_IMPORT_NEEDS),
                     no_deps=("flax==0.12.0",))


class EnvUnavailable(RuntimeError):
    pass


def find_interpreter(minor: str) -> str | None:
    """A working interpreter of Python ``minor``: this one, ``python3.X`` on PATH, or pyenv's.
    Each candidate is run first: a pyenv shim is on PATH for every installed version but fails
    ("command not found") for one that is not selected."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == minor:
        return sys.executable
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        root = str(Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{minor}"), *sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python"))[::-1]]
    for candidate in candidates:
        if candidate and _runs_as(candidate, minor):
            return candidate
    return None


def _runs_as(python: str, minor: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == minor


def python_for(env: JaxEnv) -> Path:
    """Return the interpreter of ``env``, building the venv first if needed."""
    target = CACHE / env.name
    python = target / "bin" / "python"
    marker = target / ".complete"
    if marker.exists():
        return python
    base = find_interpreter(env.python_minor)
    if base is None:
        raise EnvUnavailable(f"no Python {env.python_minor} interpreter for {env.name}")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python
        if target.exists():
            shutil.rmtree(target)
        subprocess.run([base, "-m", "venv", str(target)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *env.requirements], check=True)
        if env.no_deps:
            subprocess.run([*pip, "--no-deps", *env.no_deps], check=True)
        marker.write_text(" ".join(env.requirements) + (" --no-deps " + " ".join(env.no_deps) if env.no_deps else "")
                          + "\n")
    return python


def run_program(python: Path | str, script: Path | str, *args: str, devices: int = 8,
                timeout: float = 600, extra_env: dict[str, str] | None = None,
                cwd: Path | str | None = None, repo_on_path: bool = True) -> subprocess.CompletedProcess:
    """Run ``script`` under ``python`` with ``devices`` CPU devices and the repo importable
    (``repo_on_path=False``: no entry of ``PYTHONPATH`` is the repository or inside it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    paths = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p]
    if repo_on_path:
        paths.insert(0, str(REPO))
    else:
        paths = [p for p in paths if not Path(p).resolve().is_relative_to(REPO)]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONHASHSEED"] = "0"
    if extra_env:
        env.update(extra_env)
    return subprocess.run([str(python), str(script), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)
