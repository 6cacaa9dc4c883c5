"""Running ``--check``'s two programs, never in the user's folder.

For each original file, one after the other: its folder (the program's
working folder) is copied to a temporary folder and the original runs there
under ``pmapkit run --route-pmap``; that copy is removed; a fresh copy is made
at the same path with every migrated file of this migrate run in place of its
original, and the migrated program runs there on plain Python (pmapkit not
importable, DeprecationWarnings as errors). So both runs see the same paths,
neither sees what the other wrote, and nothing they write under their folder
reaches the user's. Both read stdin from /dev/null (or the ``--stdin`` file,
opened anew for each), start in a new session, and are killed with every
process they started when they pass ``--timeout`` and when they end.

What is copied: the folder holding the original file, recursively: folders,
regular files with their permission bits, symbolic links as links (one
leading out of the folder made absolute: it still reaches what it reached).
Left out: version-control and cache folders (``SKIPPED_FOLDERS``), virtual
environments (a folder holding ``pyvenv.cfg``), sockets, pipes and devices.
The files copied may hold ``--copy-limit`` MiB in all; a larger folder is
refused (``CannotCopy``) before anything runs. Writes outside the folder (an
absolute path, through a link leading out) are not isolated.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

from pmapkit.tools.migrate import check

#: Folders a copy leaves out: never part of what a program reads or writes.
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn", "__pycache__", ".mypy_cache",
                             ".pytest_cache", ".tox", ".nox", "node_modules"})

# Runs the migrated script as ``python script.py`` would, but any import of
# pmapkit fails: the migrated program must stand on plain JAX.
GUARD = r"""
import os, runpy, sys
class _NoPmapkit:
    def find_spec(self, name, path=None, target=None):
        if name == "pmapkit" or name.startswith("pmapkit."):
            raise ModuleNotFoundError(
                f"pmapkit migrate --check: the migrated program imports {name}", name=name)
        return None
sys.meta_path.insert(0, _NoPmapkit())
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
"""


# Permissions as the kernel checks them (a set-user-ID process's own).
_EFFECTIVE_IDS = os.access in os.supports_effective_ids


class CannotCopy(Exception):
    """A program folder ``--check`` will not copy (too large, unreadable)."""


@dataclasses.dataclass(frozen=True)
class Program:
    """An original file and what migrate made of it."""
    original: str      # the path as the user gave it
    migrated: str      # where the result is written (or a description)
    data: bytes        # the migrated file, encoded as it is written
    mode: int          # its permission bits


@dataclasses.dataclass(frozen=True)
class FolderPlan:
    """What a copy of ``root`` holds (paths relative to it)."""
    root: str
    folders: tuple
    files: tuple
    links: tuple       # (path, link text)
    size: int


def original_command(script, args):
    return [sys.executable, "-m", "pmapkit", "run", "--route-pmap", script, *args]


def migrated_command(script, args):
    return [sys.executable, "-P", "-W", "error::DeprecationWarning", "-c", GUARD, script,
            *args]


def _escapes(relative_link, text):
    """Whether a relative link at ``relative_link`` leads out of the folder."""
    where = os.path.normpath(os.path.join(os.path.dirname(relative_link), text))
    return where == os.pardir or where.startswith(os.pardir + os.sep)


def _link(root, relative):
    text = os.readlink(os.path.join(root, relative))
    if not os.path.isabs(text) and _escapes(relative, text):
        text = os.path.realpath(os.path.join(root, relative))
    return relative, text


def plan_folder(root, limit_mib):
    """The ``FolderPlan`` of ``root``, or ``CannotCopy`` saying why not."""
    root = os.path.abspath(root)
    limit = int(limit_mib * 2 ** 20)
    folders, files, links, size = [], [], [], 0

    def unreadable(exc):
        raise CannotCopy(f"--check cannot read {exc.filename!r} to copy the program's "
                         f"folder {root!r}: {exc.strerror}")
    for here, dirs, names in os.walk(root, onerror=unreadable):
        keep = []
        for name in sorted(dirs):
            full = os.path.join(here, name)
            relative = os.path.relpath(full, root)
            if os.path.islink(full):
                links.append(_link(root, relative))
            elif not (name in SKIPPED_FOLDERS
                      or os.path.isfile(os.path.join(full, "pyvenv.cfg"))):
                keep.append(name)
                folders.append(relative)
        dirs[:] = keep
        for name in sorted(names):
            full = os.path.join(here, name)
            relative = os.path.relpath(full, root)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                links.append(_link(root, relative))
            elif stat.S_ISREG(info.st_mode):
                if not os.access(full, os.R_OK, effective_ids=_EFFECTIVE_IDS):
                    unreadable(PermissionError(13, "Permission denied", full))
                files.append(relative)
                size += info.st_size
                if size > limit:
                    raise CannotCopy(
                        f"--check runs each program in a copy of its folder, and {root!r} "
                        f"holds more than {limit_mib:g} MiB of files (--copy-limit); nothing "
                        "was run: move the program to a smaller folder, or raise "
                        "--copy-limit")
    return FolderPlan(root, tuple(folders), tuple(files), tuple(links), size)


def _make_copy(plan, where, overlay=()):
    """A copy of ``plan``'s folder at ``where``; ``overlay``: (relative path,
    bytes, mode) written over what the copy holds there."""
    try:
        _copy(plan, where, overlay)
    except OSError as exc:
        raise CannotCopy(f"--check cannot copy the program's folder {plan.root!r} to "
                         f"{where!r}: {exc}") from None


def _copy(plan, where, overlay):
    os.makedirs(where)
    for relative in plan.folders:
        os.makedirs(os.path.join(where, relative), exist_ok=True)
    for relative in plan.files:
        source, target = os.path.join(plan.root, relative), os.path.join(where, relative)
        shutil.copyfile(source, target, follow_symlinks=False)
        shutil.copymode(source, target)
    for relative, text in plan.links:
        os.symlink(text, os.path.join(where, relative))
    for relative, data, mode in overlay:
        target = os.path.join(where, relative)
        if os.path.lexists(target):
            os.unlink(target)
        with open(target, "wb") as f:
            f.write(data)
        os.chmod(target, mode)


def _remove(where):
    """Removes a copy, whatever its run left read-only in it."""
    for here, dirs, _names in os.walk(where):
        for name in dirs:
            full = os.path.join(here, name)
            if not os.path.islink(full):
                try:
                    os.chmod(full, 0o700)
                except OSError:
                    pass
    shutil.rmtree(where, ignore_errors=True)


def _stop(process):
    """Kills ``process`` and whatever it started (its session)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(command, cwd, options):
    """A ``Run`` of ``command`` in ``cwd``: stdin from ``options.stdin`` or
    /dev/null, killed (with what it started) after ``options.timeout`` s."""
    given = open(options.stdin, "rb") if options.stdin else None
    try:
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                                   stdin=given if given is not None else subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = process.communicate(timeout=options.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(process)
            out, err = process.communicate()
            timed_out = True
        finally:
            _stop(process)      # what it left running must not outlive its copy
            process.wait()
    finally:
        if given is not None:
            given.close()
    return check.Run(process.returncode, out, err, timed_out)


def _overlay(programs, root):
    """(relative path, bytes, mode) of each migrated file whose original lies in ``root``."""
    out = []
    for program in programs:
        relative = os.path.relpath(os.path.abspath(program.original), root)
        if not (relative == os.pardir or relative.startswith(os.pardir + os.sep)):
            out.append((relative, program.data, program.mode))
    return out


def plans(programs, options):
    """{folder: FolderPlan} of every program's folder, or ``CannotCopy``."""
    out = {}
    for program in programs:
        root = os.path.dirname(os.path.abspath(program.original))
        if root not in out:
            out[root] = plan_folder(root, options.copy_limit_mib)
    return out


def check_each(programs, args, options, folder_plans=None):
    """Yields the Verdict of each of ``programs`` (``Program``), run one at a
    time with ``args``, as each is reached."""
    folder_plans = folder_plans or plans(programs, options)
    for program in programs:
        root = os.path.dirname(os.path.abspath(program.original))
        plan = folder_plans[root]
        script = os.path.basename(program.original)
        scratch = tempfile.mkdtemp(prefix="pmapkit-check-")
        where = os.path.join(scratch, os.path.basename(root) or "root")
        try:
            _make_copy(plan, where)
            ran_original = run(original_command(os.path.join(where, script), args),
                               where, options)
            _remove(where)
            _make_copy(plan, where, _overlay(programs, root))
            ran_migrated = run(migrated_command(os.path.join(where, script), args),
                               where, options)
        finally:
            _remove(scratch)
        yield check.compare(program.original, program.migrated, ran_original, ran_migrated,
                            options)
