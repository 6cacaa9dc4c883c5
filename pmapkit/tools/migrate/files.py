"""Reading and writing the user's files so that none is ever lost.

A source is read as bytes and decoded as Python decodes it (a UTF-8 BOM, a
``# -*- coding: ... -*-`` line), keeping its line endings; it is written back
in the same encoding. Every write goes to a temporary file in the target's
folder, is flushed to disk, then renamed over the target (``os.replace``
is atomic on one file system): a kill at any moment leaves the old content
or the new one, never an empty or partial file.

What a write keeps of the file it replaces: a symbolic link stays a link
(its target is written); the owner and group (``os.chown``, where the
system permits it); the permission bits (the source's). A file with more
than one hard link is never replaced (a rename would leave its other names
with the old text), nor one whose owner could not be kept: ``write_problem``
says why before anything is written, and ``write_atomic`` refuses it too.
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


class Unwritable(Exception):
    """A target that cannot be written keeping what a write keeps."""


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


# Permissions as the kernel checks them (a set-user-ID process's own).
_EFFECTIVE_IDS = os.access in os.supports_effective_ids


def _existing_folder(folder):
    """``folder``, or its nearest ancestor that exists (where it would be made)."""
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def _new_file_owner(folder):
    """(uid, gid) a file made in ``folder`` gets (a set-group-ID folder gives its group)."""
    info = os.stat(folder)
    return os.geteuid(), (info.st_gid if info.st_mode & stat.S_ISGID else os.getegid())


def _may_give(uid, gid):
    """Whether this process may make a file of its own belong to ``uid``:``gid``."""
    return os.geteuid() == 0 or (uid == os.geteuid()
                                 and gid in {os.getegid(), *os.getgroups()})


def write_problem(path):
    """Why ``path`` cannot be written as ``write_atomic`` promises, or None."""
    target = os.path.realpath(path)
    folder = _existing_folder(os.path.dirname(target))
    shown = repr(path) if target == os.path.abspath(path) else f"{path!r} (-> {target!r})"
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=_EFFECTIVE_IDS):
        return (f"cannot write {shown}: no permission to write in the folder {folder!r} "
                "(each file is written beside its target, then renamed over it)")
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot write {shown}: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"cannot write {shown}: not a regular file"
    if info.st_nlink > 1:
        return (f"refusing to write {shown}: it has {info.st_nlink} hard links, and "
                "replacing it would leave the other names with the old text (write a "
                "copy with -o, or break the links first)")
    if (info.st_uid, info.st_gid) != _new_file_owner(os.path.dirname(target)) \
            and not _may_give(info.st_uid, info.st_gid):
        return (f"refusing to write {shown}: it belongs to uid {info.st_uid} gid "
                f"{info.st_gid}, which this user cannot give the new file (write a copy "
                "with -o, or run as its owner)")
    return None


def write_atomic(path, data, mode=None):
    """Writes ``data`` (bytes) to ``path`` (a link: its target) through a
    temporary file in its folder, fsynced, then renamed in, with the replaced
    file's owner; ``mode``: the permission bits (else the umask's).
    ``Unwritable`` (nothing written) where ``write_problem`` finds one."""
    problem = write_problem(path)
    if problem:
        raise Unwritable(problem)
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    try:
        info = os.stat(target)
        owner = info.st_uid, info.st_gid
    except FileNotFoundError:
        owner = None
    with _interrupts_held():
        _write_atomic(target, folder, data, mode, owner)


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


def _write_atomic(path, folder, data, mode, owner):
    fd, temporary = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if owner is not None and owner != (os.fstat(f.fileno()).st_uid,
                                               os.fstat(f.fileno()).st_gid):
                os.fchown(f.fileno(), *owner)    # before the bits: chown clears set-ID
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
    """Marks ``folder`` as one migrate wrote (only one it created: a user's
    own folder is never marked, so its sources are never skipped later)."""
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
