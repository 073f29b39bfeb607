"""Writing files safely: atomic replace, same mode, never a half-written file."""

from __future__ import annotations

import os
import stat as stat_module
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory (fsync, rename),
    keeping the file's permission bits; an interruption leaves either the old or the new file."""
    target = Path(os.path.realpath(path))  # write through a symlink, never replace the link itself
    mode = stat_module.S_IMODE(target.stat().st_mode)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".pmap-migrate")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
