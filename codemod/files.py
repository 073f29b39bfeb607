"""Writing files safely: atomic replace, same mode, never a half-written file."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat as stat_module
import tempfile
from pathlib import Path

TEMPORARY_SUFFIX = ".pmap-migrate"  # not `.py`: a leftover can never be discovered as a module
# Signals whose default action ends the process: held back while a file is being replaced, so the
# replacement finishes (and its temporary file is gone) before they take effect.
_DEFERRED_SIGNALS = frozenset(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                              if hasattr(signal, name))


class FileChanged(OSError):
    """The file on disk is no longer the content the fix was computed from."""


@contextlib.contextmanager
def _signals_deferred():
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a pending Ctrl-C is raised here


def write_atomic(path: Path, data: bytes, *, expected: bytes | None = None, create: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory (fsync, rename),
    keeping the file's permission bits (and owner, where allowed). Ctrl-C and termination signals
    are held back until the replacement is complete, so an interruption at any moment leaves
    either the old or the new file and no temporary file.

    A file without any write permission bit is read-only by its owner's decision and is refused
    (even for root, and although a rename could replace it). With ``expected``, the file must
    still hold those bytes (it was not edited since it was read), or ``FileChanged`` is raised.

    With ``create``, the file must not exist yet (else ``FileChanged``): it gets the mode a new file
    of this process gets (0o666 less the umask), and is linked in place only if nothing appeared
    there meanwhile."""
    target = Path(os.path.realpath(path))  # write through a symlink, never replace the link itself
    with _signals_deferred():
        if create:
            info = None
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        else:
            info = target.stat()
            mode = stat_module.S_IMODE(info.st_mode)
            if not mode & 0o222 or not os.access(target, os.W_OK):
                raise PermissionError(errno.EACCES, "file is read-only", str(path))
            if expected is not None and target.read_bytes() != expected:
                raise FileChanged(errno.EAGAIN, "file changed while it was being fixed", str(path))
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, mode)
            if info is None:
                try:
                    os.link(temporary, target)  # fails if the file appeared meanwhile: never replaced
                except FileExistsError:
                    raise FileChanged(errno.EEXIST, "file created meanwhile", str(path)) from None
                os.unlink(temporary)
            else:
                if hasattr(os, "chown") and (info.st_uid, info.st_gid) != _owner(temporary):
                    with contextlib.suppress(OSError):  # only root may give a file away
                        os.chown(temporary, info.st_uid, info.st_gid)
                os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        _fsync_directory(target.parent)


def _owner(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_uid, info.st_gid


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a failure here loses nothing already written."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
