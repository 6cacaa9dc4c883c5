"""Runs a script or a module as ``__main__``, the way ``python`` would.

Used two ways:

* imported (``pmapkit run``): ``run_script`` / ``run_module`` set
  ``sys.argv`` and ``sys.path[0]`` as ``python script.py`` / ``python -m``
  would and let the script's ``SystemExit`` propagate;
* run as a file by ``pmapkit launch`` (each rank is
  ``python .../pmapkit/tools/run.py script.py args`` or ``... -m module args``).
  It imports only the standard library, so the script still imports JAX
  first (JAX reads its environment variables at import). There a rank that
  ends with a non-zero status after joining ``jax.distributed`` leaves at
  once: a normal interpreter exit would run JAX's shutdown, whose barrier
  waits for peers that may be blocked in a collective waiting for this rank,
  and the launcher would only see the failure at its timeout.
"""
import os
import sys

if __name__ == "__main__" and len(sys.argv) > 1 and sys.path and sys.path[0] == \
        os.path.dirname(os.path.abspath(__file__)):
    # Run as a file, python put pmapkit/ itself first on sys.path, where its
    # modules would shadow top-level names: the entry becomes the script's
    # (run_* below set it again) before anything more is imported.
    sys.path[0] = (os.getcwd() if sys.argv[1] == "-m"
                   else os.path.dirname(os.path.abspath(sys.argv[1])))

import atexit  # noqa: E402
import builtins  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import types  # noqa: E402

_THIS_FILE = os.path.abspath(__file__)
#: Frames of these files are the runner's, left out of a program's traceback.
_RUNNER_FILES = (_THIS_FILE, os.path.join(os.path.dirname(_THIS_FILE), "notebook.py"))


def run_script(path, args=()):
    """Runs the file ``path`` as ``__main__``, as ``python path args`` does:
    ``sys.argv = [path, *args]`` with ``path`` as typed, ``__file__``
    absolute (the current directory joined, not normalised) and the
    script's directory as ``sys.path[0]``. A folder or zip file runs its
    ``__main__`` module with itself (absolute) as ``sys.path[0]``, and fails
    as python does without one. A pipe or a device (``<(...)``,
    ``/dev/fd/N``, ``/dev/null``) is read once, as a file. (runpy.run_path
    would set ``sys.argv[0]`` to the path it is given: the absolute one.)"""
    sys.argv[:] = [path, *args]
    where = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    if os.path.isdir(path) or (os.path.isfile(path) and _is_zip(path)):
        set_first_path_entry(where)
        spec = importlib.machinery.PathFinder.find_spec("__main__", [where])
        if spec is None:
            print(f"{sys.executable}: can't find '__main__' module in {where!r}",
                  file=sys.stderr)
            raise SystemExit(1)
        names = dict(__file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader,
                     __spec__=spec, __package__="")
        code = lambda: spec.loader.get_code("__main__")  # noqa: E731
    else:
        set_first_path_entry(os.path.dirname(os.path.abspath(path)))
        data = _read_once(where)
        compiled = data[:len(importlib.util.MAGIC_NUMBER)] == importlib.util.MAGIC_NUMBER
        loader = (importlib.machinery.SourcelessFileLoader if compiled
                  else importlib.machinery.SourceFileLoader)("__main__", where)
        names = dict(__file__=where, __cached__=None, __spec__=None, __package__=None,
                     __loader__=loader)
        code = lambda: _code_of(data, where)  # noqa: E731
    _run_with_short_tracebacks(lambda: _exec_as_main(code(), names))


def _read_once(filename):
    """The bytes of a script: read in one pass, as a pipe allows only one."""
    with io.open_code(filename) as f:
        return f.read()


def _code_of(data, filename):
    """The code of a script's bytes: compiled (``python script.pyc``) or source."""
    if data[:len(importlib.util.MAGIC_NUMBER)] == importlib.util.MAGIC_NUMBER:
        import marshal
        return marshal.loads(memoryview(data)[16:])
    return compile(data, filename, "exec", dont_inherit=True)


def run_code(source, args=()):
    """Runs ``source`` as ``__main__``, as ``python -c source args`` does:
    ``sys.argv[0]`` is ``"-c"``, the current directory is ``sys.path[0]``
    (none under ``-P``), the code is named ``<string>`` and has no
    ``__file__``."""
    sys.argv[:] = ["-c", *args]
    set_first_path_entry("")
    names = dict(__spec__=None, __loader__=importlib.machinery.BuiltinImporter,
                 __package__=None)
    _run_with_short_tracebacks(
        lambda: _exec_as_main(compile(source, "<string>", "exec"), names))


def _exec_as_main(code, names):
    """Executes ``code`` in a fresh ``__main__`` module (``_in_main``)."""
    _in_main(lambda main: exec(code, main.__dict__), names)


def _in_main(body, names):
    """Runs ``body(main)`` with ``main`` a fresh ``__main__`` module holding
    ``names``, in sys.modules while it runs (pickle and spawned workers find
    the program's functions there), as python runs a program."""
    main = types.ModuleType("__main__")
    # python's __main__ starts with an empty __annotations__ (3.11-3.13)
    main.__dict__.update(__builtins__=builtins, __annotations__={}, **names)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        body(main)
    finally:
        sys.modules["__main__"] = saved


def run_in_main(body, names):
    """``body(main)`` run as a program in a fresh ``__main__`` holding
    ``names``: an uncaught exception is printed from the program's first
    frame and ends the process with status 1 (``pmapkit run`` of a notebook)."""
    _run_with_short_tracebacks(lambda: _in_main(body, names), source_in_memory=True)


def run_stdin(args=()):
    """Runs the program read from standard input as ``__main__``, as
    ``python - args`` does: ``sys.argv[0]`` is ``"-"``, the current directory
    is ``sys.path[0]``, its code is named ``<stdin>``."""
    sys.argv[:] = ["-", *args]
    set_first_path_entry("")
    source = sys.stdin.read()
    names = dict(__file__="<stdin>", __cached__=None, __spec__=None, __package__=None,
                 __loader__=importlib.machinery.BuiltinImporter)
    _run_with_short_tracebacks(
        lambda: _exec_as_main(compile(source, "<stdin>", "exec"), names))


def is_python_script(path):
    """Whether ``path`` holds Python source to run in this interpreter: a
    ``.py`` file, or a file whose ``#!`` line names a python (console
    scripts such as ``pytest``)."""
    if path.endswith((".py", ".pyw")):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def run_command(path, argv):
    """Runs the program at ``path`` (``argv`` as given) as a child that
    inherits the environment, and so the activation; its exit status is
    this run's (a signal that ended it, 128 + its number, as a shell says)."""
    import subprocess
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        status = subprocess.call(argv, executable=path)
    except KeyboardInterrupt:
        status = 130
    raise SystemExit(128 - status if status < 0 else status)


def _is_zip(path):
    import zipfile
    return zipfile.is_zipfile(path)


def run_module(name, args=()):
    """Runs module ``name`` as ``__main__`` (``python -m name args``): the
    current directory is ``sys.path[0]``; a module that cannot be found is
    reported as python reports it, with status 1."""
    sys.argv[:] = [name, *args]    # runpy replaces argv[0] by the module's file
    set_first_path_entry(os.getcwd())
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:     # a package above it is missing
        found = False
    if not found:
        print(f"{sys.executable}: No module named {name}", file=sys.stderr)
        raise SystemExit(1)
    _run_with_short_tracebacks(
        lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def set_first_path_entry(entry):
    """``sys.path[0]`` is the script's entry, replacing the one python gave the
    command that runs it (its own directory or the current one); with
    ``-P`` (safe path) python gives none, and none is added."""
    if not sys.flags.safe_path:
        sys.path[0] = entry


def _run_with_short_tracebacks(run, source_in_memory=False):
    """Runs ``run()``; an uncaught exception's traceback starts at the user's
    code, as under ``python script.py`` (runpy's and this module's frames are
    dropped), and the process exits with status 1 after it is printed."""
    try:
        run()
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        # As python: the script's frames, then the process ends by SIGINT
        # (status -2 to a parent, 130 in a shell) once exit handlers ran.
        _print_from_user_code(exc, source_in_memory)
        _die_by_sigint()
    except BaseException as exc:
        _print_from_user_code(exc, source_in_memory)
        raise SystemExit(1) from None


def _print_from_user_code(exc, source_in_memory=False):
    """Print ``exc``'s traceback from the user's first frame on (runpy's, and
    pmapkit's own frames above the script dropped)."""
    tb = exc.__traceback__
    while tb is not None and _is_runner_frame(tb.tb_frame):
        tb = tb.tb_next
    exc.__traceback__ = tb   # what the hook prints, whatever tb it is passed
    hook = sys.excepthook
    if source_in_memory and hook is sys.__excepthook__:
        # The interpreter's own hook reads source lines from files; code
        # whose source lives in linecache (a notebook's cells) needs the
        # traceback module, which prints the same form from there.
        import traceback
        hook = traceback.print_exception
    hook(type(exc), exc, tb)


def _die_by_sigint():
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(130)  # where the signal cannot end the process


def _is_runner_frame(frame):
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return filename in (*_RUNNER_FILES, runpy.__file__) or filename == "<frozen runpy>"


def exit_status(code):
    """The process status for ``SystemExit(code)``, as the interpreter makes it
    (``None`` is 0, an int is itself, anything else is printed and is 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _joined_distributed_run():
    jax = sys.modules.get("jax")
    try:
        return jax is not None and bool(jax.distributed.is_initialized())
    except Exception:   # a half-imported or unusual jax: no barrier to skip
        return False


def _rank_main(argv):
    """``run.py [-m MODULE | SCRIPT] ARGS``: one rank of ``pmapkit launch``."""
    try:
        if argv[0] == "-m":
            run_module(argv[1], argv[2:])
        else:
            run_script(argv[0], argv[1:])
    except SystemExit as exc:
        if not _joined_distributed_run():
            raise
        status = exit_status(exc.code)
        if status == 0:
            raise      # a clean exit: JAX's shutdown barrier is wanted
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


if __name__ == "__main__":
    _rank_main(sys.argv[1:])
