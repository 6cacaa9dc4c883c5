"""Running ``--check``'s two programs, never in the user's folder.

For each original file, one after the other: its folder (the program's
working folder) is copied to a temporary folder and the original runs there
under ``pmapkit run --route-pmap``; that copy is removed; a fresh copy is made
at the same path with every migrated file of this migrate run in place of its
original, and the migrated program runs there on plain Python as ``python
script.py`` runs it (pmapkit not importable, JAX's own DeprecationWarnings as
errors). So both runs see the same paths, neither sees what the other wrote,
and nothing they write under their folder reaches the user's. Both get the
same ``PYTHONHASHSEED``, read stdin from /dev/null (or the ``--stdin`` file,
opened anew for each), and run under a child subreaper that kills every
process they started, detached or not, when they end or pass ``--timeout``.

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
import random
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

# Runs the migrated script as ``python script.py`` would (a fresh ``__main__``
# with the same ``__file__``, ``__loader__``, ``__spec__``, ``__cached__`` and
# ``__package__``), but any import of pmapkit fails: the migrated program must
# stand on plain JAX. A DeprecationWarning that JAX itself issues (the frame
# calling ``warnings.warn`` is in ``jax``/``jaxlib``) is raised as an error,
# wherever it is attributed: the migrated program must not lean on what JAX
# is removing. Any other DeprecationWarning (the program's own, a library's)
# is shown once per place, as Python's default would, and never fails the run.
GUARD = r"""
import builtins, importlib.machinery, io, os, sys, types, warnings
class _NoPmapkit:
    def find_spec(self, name, path=None, target=None):
        if name == "pmapkit" or name.startswith("pmapkit."):
            raise ModuleNotFoundError(
                f"pmapkit migrate --check: the migrated program imports {name}", name=name)
        return None
sys.meta_path.insert(0, _NoPmapkit())
def _issued_by_jax():
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == "warnings":
        frame = frame.f_back
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name.partition(".")[0] in ("jax", "jaxlib")
_shown, _show = set(), warnings.showwarning
def _deprecation_policy(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, DeprecationWarning):
        if _issued_by_jax():
            raise message if isinstance(message, Warning) else category(message)
        if (str(message), category, filename, lineno) in _shown:
            return
        _shown.add((str(message), category, filename, lineno))
    _show(message, category, filename, lineno, file, line)
warnings.showwarning = _deprecation_policy
warnings.filterwarnings("always", category=DeprecationWarning)
script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
with io.open_code(script) as f:
    code = compile(f.read(), script, "exec", dont_inherit=True)
main = types.ModuleType("__main__")
main.__dict__.update(__builtins__=builtins, __file__=script, __cached__=None, __spec__=None,
                     __package__=None,
                     __loader__=importlib.machinery.SourceFileLoader("__main__", script))
sys.modules["__main__"] = main
exec(code, main.__dict__)
"""

# Runs ``sys.argv[1:]`` as its child and is a child subreaper
# (``PR_SET_CHILD_SUBREAPER``): a process the run starts that leaves it
# (double fork, ``setsid``: a background server) is still this one's
# descendant. When the child ends, or on SIGTERM (``--timeout``), or when
# the checker dies (``PR_SET_PDEATHSIG``), every descendant is killed and
# reaped, so the run's output pipe closes; nothing else is touched. It exits
# as its child did (killed by the same signal, or with its status).
REAPER = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
class Stop(Exception):
    pass
def stop(signum, frame):
    raise Stop
signal.signal(signal.SIGTERM, stop)
libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
checker = int(os.environ.pop("PMAPKIT_CHECK_PARENT", "0"))
if checker and os.getppid() != checker:
    sys.exit(125)
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("pmapkit migrate --check: cannot become a child subreaper (prctl)")
def descendants():
    parent, alive = {}, set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            parent[int(name)] = int(fields[1])
            if fields[0] != "Z":
                alive.add(int(name))
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, q in parent.items() if q in frontier and p not in found}
        found |= frontier
    return found & alive
def kill_all():
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = descendants()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            if not left:
                return
        time.sleep(0.01)
status = None
try:
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execvp(sys.argv[1], sys.argv[1:])
        finally:
            os._exit(127)
    status = os.waitpid(child, 0)[1]
except Stop:
    pass
signal.signal(signal.SIGTERM, signal.SIG_IGN)
kill_all()
code = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
if code < 0:
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
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
    scripts: tuple | None = None   # a notebook's: (original, migrated) code cells as scripts


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
    return [sys.executable, "-P", "-c", GUARD, script, *args]


def reaped(command):
    """``command`` run under the subreaper (``REAPER``): a bare Python,
    isolated from the environment and site packages, around it."""
    return [sys.executable, "-I", "-S", "-c", REAPER, *command]


def hash_seed():
    """The ``PYTHONHASHSEED`` both runs get: the user's if set, else one
    drawn for this check (the same for both: a printed set or dict built
    from strings keeps its order between them)."""
    seed = os.environ.get("PYTHONHASHSEED", "random")
    return seed if seed != "random" else str(random.randrange(1, 2 ** 32))


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


#: Seconds the subreaper may take to kill what a run left, after the run
#: ended or passed ``--timeout``, before it is killed with its process group.
REAP_S = 60


def run(command, cwd, options, env=None):
    """A ``Run`` of ``command`` in ``cwd`` under the subreaper: stdin from
    ``options.stdin`` or /dev/null, stopped after ``options.timeout`` s; every
    process it started is killed when it ends or is stopped."""
    env = dict(os.environ if env is None else env, PMAPKIT_CHECK_PARENT=str(os.getpid()))
    given = open(options.stdin, "rb") if options.stdin else None
    try:
        process = subprocess.Popen(reaped(command), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stdin=given if given is not None else subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True)
        timed_out = False
        try:
            out, err = process.communicate(timeout=options.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            process.terminate()         # the subreaper kills the run and all it started
            try:
                out, err = process.communicate(timeout=REAP_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)   # not reaped yet: still its group
                out, err = process.communicate()
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
    env = dict(os.environ, PYTHONHASHSEED=hash_seed())
    for program in programs:
        root = os.path.dirname(os.path.abspath(program.original))
        plan = folder_plans[root]
        script = os.path.basename(program.original)
        first = second = ()
        if program.scripts is not None:     # a notebook: its code cells run as a script
            script = f".{script}.pmapkit-check.py"
            first = [(script, program.scripts[0], 0o644)]
            second = [(script, program.scripts[1], 0o644)]
        scratch = tempfile.mkdtemp(prefix="pmapkit-check-")
        where = os.path.join(scratch, os.path.basename(root) or "root")
        try:
            _make_copy(plan, where, first)
            ran_original = run(original_command(os.path.join(where, script), args),
                               where, options, env)
            _remove(where)
            _make_copy(plan, where, _overlay(programs, root) + list(second))
            ran_migrated = run(migrated_command(os.path.join(where, script), args),
                               where, options, env)
        finally:
            _remove(scratch)
        yield check.compare(program.original, program.migrated, ran_original, ran_migrated,
                            options)
