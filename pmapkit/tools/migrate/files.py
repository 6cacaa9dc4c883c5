"""Reading and writing the user's files so that none is ever lost.

A source is read as bytes and decoded as Python decodes it (a UTF-8 BOM, a
``# -*- coding: ... -*-`` line), keeping its line endings; it is written back
in the same encoding. Every write goes to a temporary file in the target's
folder, is flushed to disk, then renamed over the target (``os.replace``
is atomic on one file system): a kill at any moment leaves the old content
or the new one, never an empty or partial file.
"""
from __future__ import annotations

import dataclasses
import io
import contextlib
import os
import signal
import stat
import tempfile
import tokenize

#: Names temporary files start and end with (never ``.py``: never migrated).
TEMP_PREFIX, TEMP_SUFFIX = ".pmapkit-migrate-", ".tmp"
#: Written into an output folder: a later run over a tree holding it skips it.
MARKER = ".pmapkit-migrate-output"
MARKER_TEXT = ("This folder was written by pmapkit migrate; a migrate run over a "
               "folder holding it does not migrate its files again.\n")


class Unreadable(Exception):
    """A source file that cannot be read or decoded."""


@dataclasses.dataclass(frozen=True)
class Source:
    text: str          # decoded, line endings as in the file
    encoding: str      # as Python reads it: "utf-8", "utf-8-sig" (a BOM), "iso-8859-1", ...
    mode: int          # the file's permission bits


def read_source(path):
    """The ``Source`` of a file, or ``Unreadable`` saying why."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        raise Unreadable(f"cannot read {path!r}: {exc.strerror}") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise Unreadable(f"cannot decode {path!r} as Python does: {exc}") from None
    return Source(text, encoding, mode)


def encode(text, encoding, path):
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise Unreadable(f"the migrated {path!r} cannot be written in its encoding "
                         f"{encoding}: {exc}") from None


def _default_mode():
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path, data, mode=None):
    """Writes ``data`` (bytes) to ``path`` through a temporary file in its folder,
    fsynced, then renamed in; ``mode``: the permission bits (else the umask's)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with _interrupts_held():
        _write_atomic(path, folder, data, mode)


@contextlib.contextmanager
def _interrupts_held():
    """SIGINT/SIGTERM wait until one file is written (then raise as usual):
    a write is all or nothing, with no temporary file left behind."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, ValueError, OSError):   # no sigmask on this system
        before = None
    try:
        yield
    finally:
        if before is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _write_atomic(path, folder, data, mode):
    fd, temporary = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, _default_mode() if mode is None else mode)
        os.replace(temporary, path)
    except BaseException:       # an interrupt too: no temporary file left behind
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _sync_folder(folder)


def _sync_folder(folder):
    """Makes the rename itself durable (where the system allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def mark_output_folder(folder):
    path = os.path.join(folder, MARKER)
    if not os.path.exists(path):
        write_atomic(path, MARKER_TEXT.encode())


def is_output_folder(folder):
    return os.path.isfile(os.path.join(folder, MARKER))


def same_path(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def inside(path, folder):
    """Whether ``path`` is ``folder`` or lies under it (real paths)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
